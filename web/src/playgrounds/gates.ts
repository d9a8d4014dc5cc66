// Playground 10: attention that forgets. FoX's forget gates and stick-breaking's allocation, beside plain softmax.
import { foxWeights, stickBreakingWeights } from "../gates";
import { matrix } from "../math";
import { lineChart } from "../plot";
import { el, fmt, section, slider } from "../ui";

/** The last query's weights over keys 0..n-1 under each scheme, for one score everywhere plus a needle key. */
export function lastQueryWeights(n: number, score: number, needleBack: number, boost: number, gate: number, forgetAt: number, forgetGate: number) {
  const needle = n - 1 - Math.min(needleBack, n - 1);
  const scores = matrix(n, n);
  for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) scores.data[i * n + j] = score + (j === needle ? boost : 0);
  const gates = Array.from({ length: n }, (_, t) => (t === forgetAt ? forgetGate : gate));
  const last = (m: { data: Float64Array }) => Array.from(m.data.subarray((n - 1) * n, n * n));
  return {
    needle,
    softmax: last(foxWeights(scores, new Array(n).fill(1))),
    fox: last(foxWeights(scores, gates)),
    stick: last(stickBreakingWeights(scores)),
  };
}

export function gatesPlayground(): HTMLElement {
  const { root, controls, body } = section("gates", "10 · FoX and stick-breaking: attention that forgets", [
    "Neither adds a position signal to the tokens. FoX (Lin et al. 2025) gives every token a forget gate f in (0, 1], ",
    "computed from the token, and subtracts from the logit of key j the sum of −log f over every token after it: ",
    "a key fades by f per later token, and one token with a small gate hides everything before it. ",
    "Stick-breaking (Tan et al. 2025) drops softmax: the query walks back from its nearest key, each key taking ",
    "sigmoid(score) of what is left of a unit stick, so a far key gets weight only if the nearer ones let it through; ",
    "what no key took goes to the query's own token, as the authors' code does. ",
    "The chart is the last token's attention; one key (the needle) scores higher than the rest.",
  ]);
  const s = { n: 24, score: -2, back: 12, boost: 3, gate: 0.95, forgetAt: 6, forgetGate: 0.2 };
  const chart = el("div", { "data-testid": "gates-chart" });
  const readout = el("dl", { class: "scores" });
  const render = () => {
    const w = lastQueryWeights(s.n, s.score, s.back, s.boost, s.gate, s.forgetAt, s.forgetGate);
    const keys = (ws: number[]) => ws.map((v, j) => [j, v] as [number, number]);
    chart.replaceChildren(lineChart([
      { name: "softmax, no positions", color: "#7f7f7f", dash: "5 4", points: keys(w.softmax) },
      { name: "FoX", color: "#1f77b4", dots: true, points: keys(w.fox) },
      { name: "stick-breaking", color: "#d62728", dots: true, points: keys(w.stick) },
    ], {
      title: "The last token's attention over keys", xLabel: "key j (the query is the last token)", yLabel: "attention weight",
      legendBelow: true, markers: [{ x: w.needle, label: "needle" }], pointTitle: (series, x, y) => `${series.name}, key ${x}: ${fmt(y, 4)}`,
    }));
    readout.replaceChildren(
      el("dt", {}, "on the needle: softmax"), el("dd", { "data-testid": "gates-needle-softmax" }, fmt(w.softmax[w.needle], 4)),
      el("dt", {}, "FoX"), el("dd", { "data-testid": "gates-needle-fox" }, fmt(w.fox[w.needle], 4)),
      el("dt", {}, "stick-breaking"), el("dd", { "data-testid": "gates-needle-stick" }, fmt(w.stick[w.needle], 4)),
      el("dt", {}, "stick-breaking's rest, on the query itself"), el("dd", { "data-testid": "gates-rest" }, fmt(w.stick[s.n - 1], 4)),
    );
  };
  const on = (key: keyof typeof s) => (v: number) => { s[key] = v; render(); };
  controls.append(
    slider("Tokens", 4, 64, 1, s.n, on("n"), String, "gates-length").root,
    slider("Score of every key", -4, 4, 0.1, s.score, on("score"), (v) => fmt(v, 1), "gates-score").root,
    slider("Needle: tokens back", 1, 63, 1, s.back, on("back"), String, "gates-back").root,
    slider("Needle: extra score", 0, 10, 0.1, s.boost, on("boost"), (v) => fmt(v, 1), "gates-boost").root,
    slider("FoX: every token's gate f", 0.5, 1, 0.005, s.gate, on("gate"), (v) => fmt(v, 3), "gates-gate").root,
    slider("FoX: a token that forgets, at", 0, 63, 1, s.forgetAt, on("forgetAt"), String, "gates-forget-at").root,
    slider("FoX: that token's gate", 0.01, 1, 0.01, s.forgetGate, on("forgetGate"), (v) => fmt(v, 2), "gates-forget-gate").root,
  );
  body.append(chart, el("div", { class: "readout" }, readout,
    el("p", { class: "note" }, "A needle further back than the sequence sits on the first token; a forgetting token past the end does nothing. ",
      "Every formula is checked against octlm.export.gate_parity's term-by-term Python.")));
  render();
  return root;
}
