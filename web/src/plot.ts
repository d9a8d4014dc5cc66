// Canvas heatmaps, a scatter plot and an SVG line chart, with axes and hover labels.
import type { Matrix } from "./math";
import { el, fmt, hideTooltip, showTooltip } from "./ui";

type RGB = [number, number, number];

// Blue for negative, white for zero, red for positive (the stops of ColorBrewer's RdBu).
const DIVERGING: RGB[] = [
  [5, 48, 97], [33, 102, 172], [67, 147, 195], [146, 197, 222], [209, 229, 240], [247, 247, 247],
  [253, 219, 199], [244, 165, 130], [214, 96, 77], [178, 24, 43], [103, 0, 31],
];
// Light to dark for one-signed values (viridis, reversed so large is dark).
const SEQUENTIAL: RGB[] = [
  [253, 231, 37], [160, 218, 57], [74, 193, 109], [31, 161, 135], [39, 127, 142], [54, 92, 141], [70, 50, 126], [68, 1, 84],
];

function lerpStops(stops: RGB[], x: number): RGB {
  const t = Math.min(1, Math.max(0, Number.isFinite(x) ? x : 0)) * (stops.length - 1);
  const i = Math.min(stops.length - 2, Math.floor(t));
  const f = t - i;
  const [a, b] = [stops[i], stops[i + 1]];
  return [a[0] + (b[0] - a[0]) * f, a[1] + (b[1] - a[1]) * f, a[2] + (b[2] - a[2]) * f];
}

/** Diverging: blue below zero, red above, symmetric around 0. Sequential: min light, max dark (or the other way with `reverse`). */
export type Scale = { kind: "diverging"; max: number } | { kind: "sequential"; min: number; max: number; reverse?: boolean };

export function colorOf(v: number, scale: Scale): RGB {
  if (scale.kind === "diverging") return lerpStops(DIVERGING, 0.5 + v / (2 * (scale.max || 1)));
  const t = (v - scale.min) / (scale.max - scale.min || 1);
  return lerpStops(SEQUENTIAL, scale.reverse ? 1 - t : t);
}

export function cssColor(v: number, scale: Scale): string {
  const [r, g, b] = colorOf(v, scale);
  return `rgb(${r | 0},${g | 0},${b | 0})`;
}

/** A horizontal colour bar with its end and middle values. */
export function colorBar(scale: Scale, label: string): HTMLElement {
  const stops = scale.kind === "diverging" ? DIVERGING : scale.reverse ? [...SEQUENTIAL].reverse() : SEQUENTIAL;
  const bar = el("div", { class: "colorbar-bar", "aria-hidden": "true" });
  bar.style.background = `linear-gradient(to right, ${stops.map(([r, g, b]) => `rgb(${r},${g},${b})`).join(", ")})`;
  const [lo, hi] = scale.kind === "diverging" ? [-scale.max, scale.max] : [scale.min, scale.max];
  return el(
    "div",
    { class: "colorbar" },
    el("span", { class: "colorbar-label" }, label),
    el("span", {}, fmt(lo, 2)),
    bar,
    el("span", {}, fmt(hi, 2)),
  );
}

function niceStep(span: number, target: number): number {
  const raw = span / Math.max(1, target);
  const mag = Math.pow(10, Math.floor(Math.log10(raw || 1)));
  for (const m of [1, 2, 5, 10]) if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

/** Canvas sized to its box in device pixels; returns the drawing context in CSS pixels. */
function fit(canvas: HTMLCanvasElement, cssWidth: number, cssHeight: number): CanvasRenderingContext2D {
  const dpr = window.devicePixelRatio || 1;
  canvas.width = Math.round(cssWidth * dpr);
  canvas.height = Math.round(cssHeight * dpr);
  canvas.style.height = `${cssHeight}px`;
  const ctx = canvas.getContext("2d")!;
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  return ctx;
}

function cssFont(size: number): string {
  return `${size}px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif`;
}

/** The x title under the plot area and the y title turned a quarter left of it. */
function axisTitles(
  ctx: CanvasRenderingContext2D,
  labels: { xLabel: string; yLabel: string },
  area: { left: number; top: number; width: number; height: number; bottom: number },
  inset: number,
): void {
  ctx.font = cssFont(12);
  ctx.textAlign = "center";
  ctx.textBaseline = "bottom";
  ctx.fillText(labels.xLabel, area.left + area.width / 2, area.top + area.height + area.bottom - inset);
  ctx.save();
  ctx.translate(10 + inset, area.top + area.height / 2);
  ctx.rotate(-Math.PI / 2);
  ctx.textBaseline = "middle";
  ctx.fillText(labels.yLabel, 0, 0);
  ctx.restore();
}

export interface HeatmapOptions {
  scale: Scale;
  xLabel: string;
  yLabel: string;
  /** What one cell means, for the hover label: (row, col, value) -> text. */
  describe: (r: number, c: number, v: number) => string;
  /** Cells to draw grey (masked), e.g. future keys. */
  masked?: (r: number, c: number) => boolean;
  /** Height over width of the plotting area; default rows/cols, clamped. */
  aspect?: number;
  maxHeight?: number;
  /** Positions per cell (a pooled map): ticks then mark round positions, not cell indices. Default 1. */
  cellSize?: number;
}

export interface Heatmap {
  root: HTMLElement;
  canvas: HTMLCanvasElement;
  draw(m: Matrix, opts: HeatmapOptions): void;
  /** Stop following the box's size (before the heatmap is thrown away). */
  dispose(): void;
}

/**
 * A heatmap of a matrix on a canvas with axis ticks and names, redrawn when
 * its box is resized. `data-renders` counts draws and `data-shape` says the
 * matrix shape, so a test can see that it re-rendered.
 */
export function heatmap(title: string): Heatmap {
  const canvas = el("canvas", { class: "heatmap", role: "img", "aria-label": title, "data-renders": 0 });
  const root = el("figure", { class: "plot" }, canvas);
  let last: { m: Matrix; opts: HeatmapOptions } | null = null;
  let geometry = { left: 0, top: 0, cw: 1, ch: 1 };

  const render = () => {
    if (!last) return;
    const { m, opts } = last;
    const width = Math.max(160, canvas.clientWidth || root.clientWidth || 320);
    // Room for the widest row label (positions of a long pooled map run to four digits) beside the axis title.
    const measure = canvas.getContext("2d")!;
    measure.font = cssFont(11);
    const widest = measure.measureText(String(Math.max(m.rows * (opts.cellSize ?? 1) - 1, 0))).width;
    const margin = { left: Math.max(44, Math.ceil(widest) + 30), right: 8, top: 8, bottom: 38 };
    const plotW = width - margin.left - margin.right;
    const aspect = opts.aspect ?? Math.min(1.6, Math.max(0.3, m.rows / Math.max(1, m.cols)));
    const plotH = Math.min(opts.maxHeight ?? 560, Math.max(60, plotW * aspect));
    const ctx = fit(canvas, width, plotH + margin.top + margin.bottom);
    ctx.clearRect(0, 0, width, plotH + margin.top + margin.bottom);
    // Draw cells into a [rows x cols] bitmap, then scale it up without smoothing.
    const image = new ImageData(Math.max(1, m.cols), Math.max(1, m.rows));
    for (let r = 0; r < m.rows; r++) {
      for (let c = 0; c < m.cols; c++) {
        const o = 4 * (r * m.cols + c);
        const [cr, cg, cb] = opts.masked?.(r, c) ? [215, 215, 215] : colorOf(m.data[r * m.cols + c], opts.scale);
        image.data[o] = cr;
        image.data[o + 1] = cg;
        image.data[o + 2] = cb;
        image.data[o + 3] = 255;
      }
    }
    const bitmap = document.createElement("canvas");
    bitmap.width = image.width;
    bitmap.height = image.height;
    bitmap.getContext("2d")!.putImageData(image, 0, 0);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(bitmap, margin.left, margin.top, plotW, plotH);
    geometry = { left: margin.left, top: margin.top, cw: plotW / Math.max(1, m.cols), ch: plotH / Math.max(1, m.rows) };
    // Ticks at round indices, labels in the margins.
    ctx.fillStyle = "#333";
    ctx.strokeStyle = "#666";
    ctx.font = cssFont(11);
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    const size = opts.cellSize ?? 1;
    const xs = Math.max(1, niceStep(m.cols * size, Math.max(2, Math.floor(plotW / 48)))); // cells are whole positions
    for (let p = 0; p < m.cols * size; p += xs) {
      const x = margin.left + (p / size + 0.5) * geometry.cw;
      ctx.beginPath();
      ctx.moveTo(x, margin.top + plotH);
      ctx.lineTo(x, margin.top + plotH + 4);
      ctx.stroke();
      ctx.fillText(String(p), x, margin.top + plotH + 5);
    }
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    const ys = Math.max(1, niceStep(m.rows * size, Math.max(2, Math.floor(plotH / 28))));
    for (let p = 0; p < m.rows * size; p += ys) {
      const y = margin.top + (p / size + 0.5) * geometry.ch;
      ctx.beginPath();
      ctx.moveTo(margin.left - 4, y);
      ctx.lineTo(margin.left, y);
      ctx.stroke();
      ctx.fillText(String(p), margin.left - 6, y);
    }
    axisTitles(ctx, opts, { left: margin.left, top: margin.top, width: plotW, height: plotH, bottom: margin.bottom }, 2);
    canvas.dataset.renders = String(Number(canvas.dataset.renders) + 1);
    canvas.dataset.shape = `${m.rows}x${m.cols}`;
  };

  canvas.addEventListener("mousemove", (e) => {
    if (!last) return;
    const box = canvas.getBoundingClientRect();
    const c = Math.floor((e.clientX - box.left - geometry.left) / geometry.cw);
    const r = Math.floor((e.clientY - box.top - geometry.top) / geometry.ch);
    if (r < 0 || c < 0 || r >= last.m.rows || c >= last.m.cols) return hideTooltip();
    showTooltip(last.opts.describe(r, c, last.m.data[r * last.m.cols + c]), e.clientX, e.clientY);
  });
  canvas.addEventListener("mouseleave", hideTooltip);
  const observer = new ResizeObserver(() => render());
  observer.observe(root);

  return {
    root,
    canvas,
    draw(m, opts) {
      last = { m, opts };
      render();
    },
    dispose: () => observer.disconnect(),
  };
}

export interface ScatterPoint {
  x: number;
  y: number;
  label: string;
  value: number;
}

export interface Scatter {
  root: HTMLElement;
  canvas: HTMLCanvasElement;
  /** Ring and label these points (by index), e.g. a token and its neighbours. */
  highlight(indices: number[]): void;
}

/** A scatter plot of labelled points, coloured by `value` on a sequential scale; hover shows the label. */
export function scatter(points: ScatterPoint[], opts: { title: string; xLabel: string; yLabel: string; valueLabel: string; scale: Scale; describe: (i: number) => string }): Scatter {
  const canvas = el("canvas", { class: "scatter", role: "img", "aria-label": opts.title });
  const root = el("figure", { class: "plot" }, canvas);
  let marked: number[] = [];
  const margin = { left: 44, right: 12, top: 10, bottom: 40 };
  let project = (_p: ScatterPoint): [number, number] => [0, 0];
  const xs = points.map((p) => p.x);
  const ys = points.map((p) => p.y);
  const [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  const [y0, y1] = [Math.min(...ys), Math.max(...ys)];

  const render = () => {
    const width = Math.max(200, canvas.clientWidth || root.clientWidth || 320);
    const plotW = width - margin.left - margin.right;
    const plotH = Math.min(520, Math.max(200, plotW * 0.75));
    const ctx = fit(canvas, width, plotH + margin.top + margin.bottom);
    const sx = plotW / (x1 - x0 || 1);
    const sy = plotH / (y1 - y0 || 1);
    project = (p) => [margin.left + (p.x - x0) * sx, margin.top + plotH - (p.y - y0) * sy];
    ctx.clearRect(0, 0, width, plotH + margin.top + margin.bottom);
    ctx.strokeStyle = "#999";
    ctx.strokeRect(margin.left, margin.top, plotW, plotH);
    // Frequent tokens last, so they stay on top.
    const order = points.map((_, i) => i).sort((a, b) => points[a].value - points[b].value);
    for (const i of order) {
      const [px, py] = project(points[i]);
      ctx.fillStyle = cssColor(points[i].value, opts.scale);
      ctx.globalAlpha = 0.85;
      ctx.beginPath();
      ctx.arc(px, py, 3, 0, 2 * Math.PI);
      ctx.fill();
    }
    ctx.globalAlpha = 1;
    for (const [n, i] of [...marked.entries()].reverse()) {
      const [px, py] = project(points[i]);
      ctx.strokeStyle = n === 0 ? "#d62728" : "#111";
      ctx.lineWidth = n === 0 ? 2.5 : 1.5;
      ctx.beginPath();
      ctx.arc(px, py, n === 0 ? 7 : 5, 0, 2 * Math.PI);
      ctx.stroke();
    }
    // Labels, the asked-for token first; one that would cover a placed label is left to the hover.
    const placed: Array<[number, number, number, number]> = [];
    for (const [n, i] of marked.entries()) {
      ctx.font = n === 0 ? `bold ${cssFont(13)}` : cssFont(12);
      const [px, py] = project(points[i]);
      const w = ctx.measureText(points[i].label).width;
      const h = 14;
      const spots: Array<[number, number]> = [[px + 8, py - 4], [px + 8, py + h + 2], [px - 8 - w, py - 4], [px - 8 - w, py + h + 2], [px - w / 2, py - 10]];
      const spot = spots.find(([x, y]) =>
        x >= margin.left && x + w <= margin.left + plotW && y - h >= margin.top && y <= margin.top + plotH &&
        !placed.some(([a, b, c, d]) => x < c && a < x + w && y - h < d && b < y));
      if (!spot) continue;
      const [x, y] = spot;
      placed.push([x, y - h, x + w, y]);
      ctx.textAlign = "left";
      ctx.textBaseline = "bottom";
      ctx.lineWidth = 3;
      ctx.strokeStyle = "rgba(255,255,255,0.9)";
      ctx.strokeText(points[i].label, x, y);
      ctx.fillStyle = n === 0 ? "#d62728" : "#111";
      ctx.fillText(points[i].label, x, y);
    }
    ctx.lineWidth = 1;
    ctx.fillStyle = "#333";
    axisTitles(ctx, opts, { left: margin.left, top: margin.top, width: plotW, height: plotH, bottom: margin.bottom }, 4);
    canvas.dataset.renders = String(Number(canvas.dataset.renders ?? 0) + 1);
  };

  canvas.addEventListener("mousemove", (e) => {
    const box = canvas.getBoundingClientRect();
    const [mx, my] = [e.clientX - box.left, e.clientY - box.top];
    let best = -1;
    let bestD = 64; // within 8 px
    points.forEach((p, i) => {
      const [px, py] = project(p);
      const d = (px - mx) ** 2 + (py - my) ** 2;
      if (d < bestD) [best, bestD] = [i, d];
    });
    if (best < 0) return hideTooltip();
    showTooltip(opts.describe(best), e.clientX, e.clientY);
  });
  canvas.addEventListener("mouseleave", hideTooltip);
  new ResizeObserver(() => render()).observe(root);
  return {
    root,
    canvas,
    highlight(indices) {
      marked = indices;
      render();
    },
  };
}

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

/** A line chart in SVG with labelled axes, ticks and a legend, drawn at its box's width so text keeps its size. */
export function lineChart(series: Series[], opts: LineChartOptions): HTMLElement {
  const NS = "http://www.w3.org/2000/svg";
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
    const add = (tag: string, attrs: Record<string, string | number>, text?: string) => {
      const node = document.createElementNS(NS, tag);
      for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
      if (text !== undefined) node.textContent = text;
      svg.appendChild(node);
      return node;
    };
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
    series.forEach((s, n) => {
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
    });
  };
  new ResizeObserver(() => render()).observe(figure);
  render();
  if (opts.legendBelow) {
    figure.appendChild(el("figcaption", { class: "legend-below" }, ...(opts.legend ?? series).map((s) => {
      const swatch = el("span", { class: "swatch", "aria-hidden": "true" });
      if (s.noLine) {
        swatch.classList.add("dot");
        swatch.textContent = "●";
        swatch.style.color = s.color;
      } else swatch.style.borderTop = `3px ${s.dash ? "dashed" : "solid"} ${s.color}`;
      return el("span", { class: "legend-item" }, swatch, s.name);
    })));
  }
  return figure;
}
