// Canvas heatmaps, a scatter plot and an SVG line chart, with axes and hover labels; one module for each.
export { colorBar, colorOf, cssColor, type Scale } from "./colors";
export { heatmap, type Heatmap, type HeatmapOptions } from "./heatmap";
export { lineChart, type LineChartOptions, type Series } from "./lineChart";
export { scatter, type Scatter, type ScatterPoint } from "./scatter";
