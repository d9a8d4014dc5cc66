// What the canvas plots share: round tick steps, a canvas fitted to its box, the font and the axis titles.

export function niceStep(span: number, target: number): number {
  const raw = span / Math.max(1, target);
  const mag = Math.pow(10, Math.floor(Math.log10(raw || 1)));
  for (const m of [1, 2, 5, 10]) if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

/** Canvas sized to its box in device pixels; returns the drawing context in CSS pixels. */
export function fit(canvas: HTMLCanvasElement, cssWidth: number, cssHeight: number): CanvasRenderingContext2D {
  const dpr = window.devicePixelRatio || 1;
  canvas.width = Math.round(cssWidth * dpr);
  canvas.height = Math.round(cssHeight * dpr);
  canvas.style.height = `${cssHeight}px`;
  const ctx = canvas.getContext("2d")!;
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  return ctx;
}

export function cssFont(size: number): string {
  return `${size}px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif`;
}

/** The x title under the plot area and the y title turned a quarter left of it. */
export function axisTitles(
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
