// "Why RoPE breaks past T" on the run itself (a RoPE run): which of its pairs never complete a turn within its T, and
// its own heads' entropy at 1x, 2x and 4x T from the attention the page already carries.
import { entropyByLength, times, type RunAttention } from "../attention/data";
import { drawReach, reachLegend } from "../playgrounds/ropeLength";
import { heatmap, lineChart, type Series } from "../plot";
import { ropeReach, slowPairsLine } from "../ropeReach";
import { el, fmt } from "../ui";
import type { RunData } from "./data";

const DILUTION = "Softmax gives each query one unit of attention to share: with more keys in reach, a head that does not sharpen spreads it thinner (dilution), " +
  "and its entropy climbs towards uniform attention's (dashed). Past T, RoPE adds the angles above that the heads never trained on.";

/** The panel for a run trained with RoPE; null for any other scheme. */
export function ropeRunPanel(run: RunData): HTMLElement | null {
  const m = run.model;
  if (m.position !== "rope") return null;
  const T = m.context_length;
  const headDim = m.d_model / m.n_heads;
  const theta = typeof m.rope_theta === "number" ? m.rope_theta : 10000;
  const r = ropeReach(headDim, theta, T);
  const map = heatmap(`this run's ${headDim / 2} channel pairs against positions up to 4T`);
  map.canvas.id = "run-rope-reach-map";
  drawReach(map, r);
  return el("div", { class: "panel", id: "run-rope" },
    el("h3", {}, "Why RoPE breaks past T, on this run"),
    el("p", { class: "caption" }, `This run turns each of its ${headDim / 2} channel pairs by rope_theta^(−2i/${headDim}) radians per position (rope_theta ${theta}) and trained at T = ${T}: the RoPE playground's chart at its own size.`),
    el("p", { class: "note", "data-testid": "run-rope-slow-pairs" }, slowPairsLine(r)),
    el("div", {}, map.root), reachLegend(),
    entropyPanel(run.attention, T),
  );
}

function entropyPanel(attention: RunAttention | null | undefined, T: number): HTMLElement {
  const found = attention ? entropyByLength(attention.lengths) : null;
  if (!found || found.lengths.length < 2) {
    return el("p", { class: "note", "data-testid": "run-rope-entropy-none" },
      "The page has this run's attention at fewer than two lengths, so there is no entropy against length to show: it needs the run's validation text (val.bin) and a page made by this octlm.");
  }
  const x = (length: number) => Math.log2(length / T);
  const palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"];
  const series: Series[] = found.heads.map((h, i) => ({
    name: h.label, color: palette[i % palette.length], dots: true, points: h.entropy.map((e, j) => [x(found.lengths[j]), e] as [number, number]),
  }));
  series.push({ name: "uniform attention", color: "#555", dash: "5 4", points: found.uniform.map((u, j) => [x(found.lengths[j]), u] as [number, number]) });
  return el("div", { "data-testid": "run-rope-entropy" },
    el("p", { class: "caption" }, DILUTION),
    el("div", { class: "narrow", id: "run-rope-entropy" }, lineChart(series, {
      title: "each head's mean attention entropy against length", xLabel: `length of validation text (× T = ${T} tokens, log scale)`, yLabel: "mean entropy (nats)",
      xTicks: found.lengths.map((L) => [x(L), times(L, T)]), legendBelow: true,
      pointTitle: (s, px, y) => `${s.name} at ${Math.round(T * 2 ** px)} tokens: ${fmt(y, 3)} nats`,
    })),
  );
}
