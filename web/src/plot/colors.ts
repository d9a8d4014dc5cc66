// Colour scales: a diverging and a sequential ramp, a value's colour on them, and a colour bar.
import { el, fmt } from "../ui";

export type RGB = [number, number, number];

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
