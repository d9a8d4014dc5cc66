// A canvas scatter plot of labelled points coloured by value, with highlighted points and a hover label.
import { el, hideTooltip, showTooltip } from "../ui";
import { axisTitles, cssFont, fit } from "./canvas";
import { cssColor, type Scale } from "./colors";

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

/** The points coloured by value, frequent (high-value) ones last so they stay on top, then rings round the marked
 * ones (the asked-for one red and larger). */
function drawPoints(ctx: CanvasRenderingContext2D, at: Array<[number, number]>, points: ScatterPoint[], marked: number[], scale: Scale): void {
  const order = points.map((_, i) => i).sort((a, b) => points[a].value - points[b].value);
  for (const i of order) {
    const [px, py] = at[i];
    ctx.fillStyle = cssColor(points[i].value, scale);
    ctx.globalAlpha = 0.85;
    ctx.beginPath();
    ctx.arc(px, py, 3, 0, 2 * Math.PI);
    ctx.fill();
  }
  ctx.globalAlpha = 1;
  for (const [n, i] of [...marked.entries()].reverse()) {
    const [px, py] = at[i];
    ctx.strokeStyle = n === 0 ? "#d62728" : "#111";
    ctx.lineWidth = n === 0 ? 2.5 : 1.5;
    ctx.beginPath();
    ctx.arc(px, py, n === 0 ? 7 : 5, 0, 2 * Math.PI);
    ctx.stroke();
  }
}

/**
 * Labels of the marked points, the asked-for one first (bold, red): each at the first of five spots beside its point
 * that stays inside the plot and covers no label placed before it; one with no such spot is left to the hover.
 */
function drawLabels(
  ctx: CanvasRenderingContext2D,
  marks: Array<[string, number, number]>,
  area: { left: number; top: number; width: number; height: number },
): void {
  const placed: Array<[number, number, number, number]> = [];
  for (const [n, [label, px, py]] of marks.entries()) {
    ctx.font = n === 0 ? `bold ${cssFont(13)}` : cssFont(12);
    const w = ctx.measureText(label).width;
    const h = 14;
    const spots: Array<[number, number]> = [[px + 8, py - 4], [px + 8, py + h + 2], [px - 8 - w, py - 4], [px - 8 - w, py + h + 2], [px - w / 2, py - 10]];
    const spot = spots.find(([x, y]) =>
      x >= area.left && x + w <= area.left + area.width && y - h >= area.top && y <= area.top + area.height &&
      !placed.some(([a, b, c, d]) => x < c && a < x + w && y - h < d && b < y));
    if (!spot) continue;
    const [x, y] = spot;
    placed.push([x, y - h, x + w, y]);
    ctx.textAlign = "left";
    ctx.textBaseline = "bottom";
    ctx.lineWidth = 3;
    ctx.strokeStyle = "rgba(255,255,255,0.9)";
    ctx.strokeText(label, x, y);
    ctx.fillStyle = n === 0 ? "#d62728" : "#111";
    ctx.fillText(label, x, y);
  }
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
    drawPoints(ctx, points.map(project), points, marked, opts.scale);
    drawLabels(ctx, marked.map((i) => [points[i].label, ...project(points[i])]), { left: margin.left, top: margin.top, width: plotW, height: plotH });
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
