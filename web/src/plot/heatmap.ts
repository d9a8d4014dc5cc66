// A canvas heatmap of a matrix with axis ticks, names and a hover label.
import type { Matrix } from "../math";
import { el, hideTooltip, showTooltip } from "../ui";
import { axisTitles, cssFont, fit, niceStep } from "./canvas";
import { colorOf, type Scale } from "./colors";

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

interface Area {
  left: number;
  top: number;
  width: number;
  height: number;
}

/** The cells drawn into a [rows x cols] bitmap, then scaled up onto the plot area without smoothing. */
function paintCells(ctx: CanvasRenderingContext2D, m: Matrix, opts: HeatmapOptions, area: Area): void {
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
  ctx.drawImage(bitmap, area.left, area.top, area.width, area.height);
}

/** Ticks at round positions (cells of `size` positions each), labels in the margins. */
function drawTicks(ctx: CanvasRenderingContext2D, m: Matrix, size: number, area: Area): void {
  const [cw, ch] = [area.width / Math.max(1, m.cols), area.height / Math.max(1, m.rows)];
  const bottom = area.top + area.height;
  ctx.fillStyle = "#333";
  ctx.strokeStyle = "#666";
  ctx.font = cssFont(11);
  ctx.textAlign = "center";
  ctx.textBaseline = "top";
  const xs = Math.max(1, niceStep(m.cols * size, Math.max(2, Math.floor(area.width / 48)))); // cells are whole positions
  for (let p = 0; p < m.cols * size; p += xs) {
    const x = area.left + (p / size + 0.5) * cw;
    ctx.beginPath();
    ctx.moveTo(x, bottom);
    ctx.lineTo(x, bottom + 4);
    ctx.stroke();
    ctx.fillText(String(p), x, bottom + 5);
  }
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  const ys = Math.max(1, niceStep(m.rows * size, Math.max(2, Math.floor(area.height / 28))));
  for (let p = 0; p < m.rows * size; p += ys) {
    const y = area.top + (p / size + 0.5) * ch;
    ctx.beginPath();
    ctx.moveTo(area.left - 4, y);
    ctx.lineTo(area.left, y);
    ctx.stroke();
    ctx.fillText(String(p), area.left - 6, y);
  }
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
    paintCells(ctx, m, opts, { left: margin.left, top: margin.top, width: plotW, height: plotH });
    geometry = { left: margin.left, top: margin.top, cw: plotW / Math.max(1, m.cols), ch: plotH / Math.max(1, m.rows) };
    drawTicks(ctx, m, opts.cellSize ?? 1, { left: margin.left, top: margin.top, width: plotW, height: plotH });
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
