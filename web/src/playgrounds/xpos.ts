// Playground 8: xPos, RoPE whose query and key are scaled in opposite directions so the score fades with distance.
import { dot, gaussianMatrix, ropeRotateVector, row, xposRotate, xposZeta, XPOS_SCALE_BASE, type Matrix } from "../math";
import { lineChart } from "../plot";
import { clear, el, fmt, section, slider } from "../ui";

const HEAD_DIM = 8;
const THETA = 10000;
const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"];
const q = gaussianMatrix(1, HEAD_DIM, 1, 5);
const k = gaussianMatrix(1, HEAD_DIM, 1, 6);

function score(query: Matrix, key: Matrix, m: number, n: number): number {
  return dot(xposRotate(query, m, THETA, "interleaved", 1).data, xposRotate(key, n, THETA, "interleaved", -1).data);
}

export function xposPlayground(): HTMLElement {
  const { root, controls, body } = section("xpos", "8 · xPos: RoPE with a decay", [
    "xPos rotates queries and keys exactly as RoPE does, then multiplies channel pair i of a query at position m by ",
    `ζᵢ^(m/${XPOS_SCALE_BASE}) and of a key at n by ζᵢ^(−n/${XPOS_SCALE_BASE}). In the score the two meet as ζᵢ^((m − n)/${XPOS_SCALE_BASE}): `,
    "below 1 for every earlier key, smaller the farther back it is, and fading fastest in the fast-turning first pairs. ",
    "Like RoPE's, the score depends on the distance only: shifting both positions changes nothing.",
  ]);
  const state = { span: 2048, m: 40, n: 8, shift: 0 };
  const zeta = xposZeta(HEAD_DIM);
  const chart = el("div", { "data-testid": "xpos-decay" });
  const readout = el("dl", { class: "scores" });
  const render = () => {
    const { span, m, n, shift } = state;
    const xs = Array.from({ length: 65 }, (_, s) => Math.round((s * span) / 64));
    const series = Array.from(zeta, (z, i) => ({
      name: `pair ${i} (ζ ${fmt(z, 3)})`, color: COLORS[i % COLORS.length],
      points: xs.map((d) => [d, Math.pow(z, d / XPOS_SCALE_BASE)] as [number, number]),
    }));
    clear(chart);
    chart.append(lineChart(series, { title: "xPos decay of each channel pair against distance", xLabel: "distance m − n (tokens)", yLabel: "factor on the score" }));
    const base = score(q, k, m, n);
    const shifted = score(q, k, m + shift, n + shift);
    readout.replaceChildren(
      el("dt", {}, `score at (m, n) = (${m}, ${n})`), el("dd", { "data-testid": "xpos-score-base" }, fmt(base, 6)),
      el("dt", {}, `score at (${m + shift}, ${n + shift})`), el("dd", { "data-testid": "xpos-score-shifted" }, fmt(shifted, 6)),
      el("dt", {}, "RoPE's score at (m, n), without the decay"), el("dd", {}, fmt(dot(ropeRotateVector(row(q, 0), m, THETA, "interleaved"), ropeRotateVector(row(k, 0), n, THETA, "interleaved")), 6)),
    );
  };
  controls.append(
    slider("Distances shown", 128, 8192, 128, state.span, (v) => { state.span = v; render(); }, String, "xpos-span").root,
    slider("Query position m", 0, 2047, 1, state.m, (v) => { state.m = v; render(); }, String, "xpos-m").root,
    slider("Key position n", 0, 2047, 1, state.n, (v) => { state.n = v; render(); }, String, "xpos-n").root,
    slider("Shift both by", 0, 500, 1, state.shift, (v) => { state.shift = v; render(); }, String, "xpos-shift").root,
  );
  body.append(chart, el("div", { class: "readout" }, readout,
    el("p", { class: "note" }, `One ${HEAD_DIM}-channel head (rope_theta ${THETA}); the same query and key as the RoPE playground.`)));
  render();
  return root;
}
