// An SVG line chart with labelled axes, ticks, markers and a legend.
import { el, fmt } from "../ui";
import { niceStep } from "./canvas";

export interface Series {
  name: string;
  points: Array<[number, number]>;
  color: string;
  dots?: boolean;
  /** SVG stroke-dasharray, e.g. "5 4" for a reference line. */
  dash?: string;
  /** Dots alone, no line through them: points that are not a curve (RoPE pairs that do not turn, drawn apart). */
  noLine?: boolean;
}

export interface LineChartOptions {
  title: string;
  xLabel: string;
  yLabel: string;
  /** Ticks at these x values with these labels, instead of round numbers (e.g. lengths on a log axis). */
  xTicks?: Array<[number, string]>;
  /** Dashed vertical lines, each with a label at its top (e.g. the training length). */
  markers?: Array<{ x: number; label: string }>;
  /** A dot's hover text; default "series, step x: y". */
  pointTitle?: (series: Series, x: number, y: number) => string;
  /** Text for an empty chart. */
  empty?: string;
  /** The legend as a list under the chart rather than inside it (many series). */
  legendBelow?: boolean;
  /** What the list under the chart names instead of every series (many series of a few kinds); with legendBelow. */
  legend?: Array<Pick<Series, "name" | "color" | "dash" | "noLine">>;
}

type Add = (tag: string, attrs: Record<string, string | number>, text?: string) => SVGElement;
interface Frame {
  W: number;
  H: number;
  m: { left: number; right: number; top: number; bottom: number };
  sx: (x: number) => number;
  sy: (y: number) => number;
  x: [number, number];
  y: [number, number];
}

/** The plot's box, x ticks (round or given), markers, y grid lines and both axis titles. */
function drawAxes(add: Add, f: Frame, opts: LineChartOptions): void {
  const { W, H, m, sx, sy } = f;
  const [[x0, x1], [y0, y1]] = [f.x, f.y];
  add("rect", { x: m.left, y: m.top, width: W - m.left - m.right, height: H - m.top - m.bottom, fill: "none", stroke: "#bbb" });
  const xStep = niceStep(x1 - x0, Math.max(2, Math.floor((W - m.left - m.right) / 70)));
  const ticks: Array<[number, string]> = opts.xTicks ?? [];
  if (!opts.xTicks) for (let x = Math.ceil(x0 / xStep) * xStep; x <= x1; x += xStep) ticks.push([x, String(Math.round(x))]);
  for (const [x, label] of ticks) {
    add("line", { x1: sx(x), x2: sx(x), y1: H - m.bottom, y2: H - m.bottom + 5, stroke: "#666" });
    add("text", { x: sx(x), y: H - m.bottom + 18, "text-anchor": "middle", class: "tick" }, label);
  }
  for (const marker of opts.markers ?? []) {
    add("line", { x1: sx(marker.x), x2: sx(marker.x), y1: m.top, y2: H - m.bottom, stroke: "#555", "stroke-dasharray": "4 4" });
    add("text", { x: sx(marker.x) + 4, y: m.top + 12, class: "tick" }, marker.label);
  }
  const yStep = niceStep(y1 - y0, 5);
  for (let y = Math.ceil(y0 / yStep) * yStep; y <= y1; y += yStep) {
    add("line", { x1: m.left, x2: W - m.right, y1: sy(y), y2: sy(y), stroke: "#eee" });
    add("text", { x: m.left - 6, y: sy(y) + 4, "text-anchor": "end", class: "tick" }, fmt(y, Math.min(4, Math.max(1, -Math.floor(Math.log10(yStep))))));
  }
  add("text", { x: (m.left + W - m.right) / 2, y: H - 8, "text-anchor": "middle", class: "axis" }, opts.xLabel);
  const cy = (m.top + H - m.bottom) / 2;
  add("text", { x: 14, y: cy, "text-anchor": "middle", transform: `rotate(-90 14 ${cy})`, class: "axis" }, opts.yLabel);
}

/** One series: its line, its dots with their hover titles, and its legend entry inside the plot (unless below). */
function drawSeries(add: Add, f: Frame, s: Series, n: number, opts: LineChartOptions): void {
  const { W, m, sx, sy } = f;
  if (s.points.length === 0) return;
  if (!s.noLine) add("polyline", { points: s.points.map(([x, y]) => `${sx(x)},${sy(y)}`).join(" "), fill: "none", stroke: s.color, "stroke-width": 2, ...(s.dash ? { "stroke-dasharray": s.dash } : {}) });
  if (s.dots || s.noLine) {
    for (const [x, y] of s.points) {
      const dot = add("circle", { cx: sx(x), cy: sy(y), r: 3.5, fill: s.color });
      const title = document.createElementNS(NS, "title");
      title.textContent = opts.pointTitle ? opts.pointTitle(s, x, y) : `${s.name}, step ${x}: ${fmt(y, 3)}`;
      dot.appendChild(title);
    }
  }
  if (opts.legendBelow) return;
  const ly = m.top + 16 + n * 18;
  if (s.noLine) add("circle", { cx: W - m.right - 128, cy: ly - 4, r: 3.5, fill: s.color });
  else add("line", { x1: W - m.right - 140, x2: W - m.right - 116, y1: ly - 4, y2: ly - 4, stroke: s.color, "stroke-width": 3, ...(s.dash ? { "stroke-dasharray": s.dash } : {}) });
  add("text", { x: W - m.right - 110, y: ly, class: "legend" }, s.name);
}

/** The legend as a list under the chart: a swatch (line, dashed line or dot) and a name for each entry. */
function legendList(entries: Array<Pick<Series, "name" | "color" | "dash" | "noLine">>): HTMLElement {
  return el("figcaption", { class: "legend-below" }, ...entries.map((s) => {
    const swatch = el("span", { class: "swatch", "aria-hidden": "true" });
    if (s.noLine) {
      swatch.classList.add("dot");
      swatch.textContent = "●";
      swatch.style.color = s.color;
    } else swatch.style.borderTop = `3px ${s.dash ? "dashed" : "solid"} ${s.color}`;
    return el("span", { class: "legend-item" }, swatch, s.name);
  }));
}

const NS = "http://www.w3.org/2000/svg";

/** A line chart in SVG with labelled axes, ticks and a legend, drawn at its box's width so text keeps its size. */
export function lineChart(series: Series[], opts: LineChartOptions): HTMLElement {
  const all = series.flatMap((s) => s.points);
  const figure = el("figure", { class: "plot" });
  if (all.length === 0) {
    figure.appendChild(el("p", { class: "note" }, opts.empty ?? "This run has no loss records (metrics.jsonl is empty)."));
    return figure;
  }
  const xs = [...all.map((p) => p[0]), ...(opts.xTicks ?? []).map((t) => t[0]), ...(opts.markers ?? []).map((m) => m.x)];
  const [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  const [yMin, yMax] = [Math.min(...all.map((p) => p[1])), Math.max(...all.map((p) => p[1]))];
  const pad = (yMax - yMin) * 0.05 || 0.5;
  const [y0, y1] = [yMin - pad, yMax + pad];
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", opts.title);
  figure.appendChild(svg);

  const render = () => {
    const W = Math.max(260, Math.round(figure.clientWidth || 640));
    const H = Math.round(Math.min(340, Math.max(220, W * 0.55)));
    const m = { left: 58, right: 14, top: 14, bottom: 46 };
    const sx = (x: number) => m.left + ((x - x0) / (x1 - x0 || 1)) * (W - m.left - m.right);
    const sy = (y: number) => m.top + (1 - (y - y0) / (y1 - y0 || 1)) * (H - m.top - m.bottom);
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
    svg.setAttribute("width", String(W));
    svg.setAttribute("height", String(H));
    const add: Add = (tag, attrs, text) => {
      const node = document.createElementNS(NS, tag);
      for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
      if (text !== undefined) node.textContent = text;
      svg.appendChild(node);
      return node;
    };
    const frame: Frame = { W, H, m, sx, sy, x: [x0, x1], y: [y0, y1] };
    drawAxes(add, frame, opts);
    series.forEach((s, n) => drawSeries(add, frame, s, n, opts));
  };
  new ResizeObserver(() => render()).observe(figure);
  render();
  if (opts.legendBelow) figure.appendChild(legendList(opts.legend ?? series));
  return figure;
}
