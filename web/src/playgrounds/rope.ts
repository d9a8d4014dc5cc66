// Playground 4: RoPE rotates one channel pair of a query and a key by their positions; then why it breaks past T.
import { dot, gaussianMatrix, ropeInverseFrequencies, ropePair, ropeRotateVector, row, type RopeLayout } from "../math";
import { clear, el, fmt, section, select, slider } from "../ui";
import { ropeLengthPanel } from "./ropeLength";

const HEAD_DIM = 8;
const THETA = 10000;
const q = row(gaussianMatrix(1, HEAD_DIM, 1, 5), 0);
const k = row(gaussianMatrix(1, HEAD_DIM, 1, 6), 0);

export function ropePlayground(): HTMLElement {
  const { root, controls, body } = section("rope", "4 · RoPE: rotate the query and the key by their positions", [
    "RoPE adds nothing to the embedding. Inside attention it turns each channel pair of the query by its position m times ",
    "that pair's speed, and the key's pair by the key's position n. The drawing shows one pair (faint: before turning). ",
    "The score q·k only sees the angle between them, so moving both positions by the same amount leaves it unchanged: ",
    "attention sees the distance m − n, not where the pair sits.",
  ]);
  const state = { m: 9, n: 4, shift: 0, pair: 0, layout: "interleaved" as RopeLayout };
  const inv = ropeInverseFrequencies(HEAD_DIM, THETA);
  const render = () => {
    const { m, n, shift, pair, layout } = state;
    const qr = ropeRotateVector(q, m + shift, THETA, layout);
    const kr = ropeRotateVector(k, n + shift, THETA, layout);
    const base = dot(ropeRotateVector(q, m, THETA, layout), ropeRotateVector(k, n, THETA, layout));
    const score = dot(qr, kr);
    const [a, b] = ropePair(pair, HEAD_DIM, layout);
    clear(body);
    body.append(
      el("div", { class: "pair" },
        circle([q[a], q[b]], [qr[a], qr[b]], [k[a], k[b]], [kr[a], kr[b]], `pair ${pair}: channels ${a} and ${b}`),
        el("div", { class: "readout" },
          el("p", {}, `Pair ${pair} (channels ${a} and ${b}) turns ${fmt(inv[pair], 4)} radians per position. `,
            `The query at position ${m + shift} is turned by ${fmt(((m + shift) * inv[pair]) % (2 * Math.PI), 3)} rad, the key at ${n + shift} by ${fmt(((n + shift) * inv[pair]) % (2 * Math.PI), 3)} rad (mod 2π).`),
          el("dl", { class: "scores" },
            el("dt", {}, `score at (m, n) = (${m}, ${n})`), el("dd", { "data-testid": "rope-score-base" }, fmt(base, 6)),
            el("dt", {}, `score at (m + ${shift}, n + ${shift}) = (${m + shift}, ${n + shift})`), el("dd", { "data-testid": "rope-score-shifted" }, fmt(score, 6)),
            el("dt", {}, "difference"), el("dd", {}, fmt(Math.abs(score - base), 9)),
          ),
          el("p", { class: "note" }, `The score sums all ${HEAD_DIM / 2} pairs of a ${HEAD_DIM}-channel head (rope_theta ${THETA}).`),
        ),
      ),
    );
  };
  controls.append(
    slider("Query position m", 0, 63, 1, state.m, (v) => { state.m = v; render(); }, String, "rope-m").root,
    slider("Key position n", 0, 63, 1, state.n, (v) => { state.n = v; render(); }, String, "rope-n").root,
    slider("Shift both by", 0, 500, 1, state.shift, (v) => { state.shift = v; render(); }, String, "rope-shift").root,
    select("Channel pair", Array.from(inv, (f, i) => [String(i), `pair ${i} (${fmt(f, 4)} rad/position)`] as [string, string]), "0", (v) => { state.pair = Number(v); render(); }, "rope-pair").root,
    select("Pair layout", [["interleaved", "interleaved: (2i, 2i+1)"], ["half", "half: (i, i + d/2)"]], state.layout, (v) => { state.layout = v as RopeLayout; render(); }, "rope-layout").root,
  );
  render();
  root.append(ropeLengthPanel());
  return root;
}

/** One channel pair as arrows on a circle: query and key, before (faint) and after rotation. */
function circle(q0: number[], q1: number[], k0: number[], k1: number[], title: string): Element {
  const NS = "http://www.w3.org/2000/svg";
  const size = 240;
  const c = size / 2;
  const r = Math.max(Math.hypot(q0[0], q0[1]), Math.hypot(k0[0], k0[1]), 1e-9);
  const scale = (c - 28) / r;
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("viewBox", `0 0 ${size} ${size}`);
  svg.setAttribute("class", "rope-circle");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `${title}: query and key after rotation`);
  const add = (tag: string, attrs: Record<string, string | number>, text?: string) => {
    const node = document.createElementNS(NS, tag);
    for (const [key, v] of Object.entries(attrs)) node.setAttribute(key, String(v));
    if (text) node.textContent = text;
    svg.appendChild(node);
  };
  add("circle", { cx: c, cy: c, r: c - 28, fill: "none", stroke: "#ccc" });
  add("line", { x1: 8, x2: size - 8, y1: c, y2: c, stroke: "#eee" });
  add("line", { y1: 8, y2: size - 8, x1: c, x2: c, stroke: "#eee" });
  const arrow = (v: number[], color: string, faint: boolean, label?: string) => {
    const [x, y] = [c + v[0] * scale, c - v[1] * scale];
    add("line", { x1: c, y1: c, x2: x, y2: y, stroke: color, "stroke-width": faint ? 1.5 : 3, "stroke-dasharray": faint ? "4 3" : "none", opacity: faint ? 0.5 : 1 });
    add("circle", { cx: x, cy: y, r: faint ? 2.5 : 4.5, fill: color, opacity: faint ? 0.5 : 1 });
    if (label) add("text", { x: x + (x >= c ? 6 : -6), y: y - 6, "text-anchor": x >= c ? "start" : "end", fill: color, class: "arrow-label" }, label);
  };
  arrow(q0, "#1f77b4", true);
  arrow(k0, "#d62728", true);
  arrow(q1, "#1f77b4", false, "query");
  arrow(k1, "#d62728", false, "key");
  return svg;
}
