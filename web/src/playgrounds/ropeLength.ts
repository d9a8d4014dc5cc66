// Playground 4, second half: why plain RoPE breaks past its training length T. For every channel pair, which angles
// training showed it and which angles positions past T reach that training never did.
import { heatmap, type Heatmap } from "../plot";
import { ropeReach, slowPairsLine, TRAINED, UNSEEN, type RopeReach } from "../ropeReach";
import { el, fmt, select, slider } from "../ui";

const COLORS: Array<[number, string, string]> = [
  [TRAINED, "rgb(253,231,37)", "training positions (0 to T − 1)"],
  [1, "rgb(39,127,142)", "past T, at an angle training saw"],
  [UNSEEN, "rgb(68,1,84)", "past T, at an angle training never saw"],
];

/** The legend of {@link reachChart}'s three kinds of cell. */
export function reachLegend(): HTMLElement {
  return el("p", { class: "legend-below" }, ...COLORS.map(([, color, text]) => {
    const swatch = el("span", { class: "swatch", "aria-hidden": "true" });
    swatch.style.borderTop = `10px solid ${color}`;
    return el("span", { class: "legend-item" }, swatch, text);
  }));
}

/** Draw `r` on `map`: one row per channel pair, one column per position up to r.positions. */
export function drawReach(map: Heatmap, r: RopeReach): void {
  const pairs = r.cells.length;
  const data = Float64Array.from(r.cells.flat());
  const cover = (w: number) => Math.min(2 * Math.PI, r.trainLength * w);
  map.draw({ rows: pairs, cols: r.positions, data }, {
    scale: { kind: "sequential", min: 0, max: 2 }, xLabel: "position p (or distance m − n)", yLabel: "channel pair i",
    aspect: Math.min(0.5, Math.max(0.15, 0.03 * pairs)), // rows tall enough to read, however few the pairs
    describe: (i, p, v) => {
      const w = r.invFreq[i];
      const angle = `${fmt((p * w) % (2 * Math.PI), 3)} rad (mod 2π)`;
      const kind = v === TRAINED ? "a training position" : v === UNSEEN ? "an angle training never saw" : "an angle training saw";
      return `pair ${i} (θ = ${fmt(w, 5)} rad/position, ${fmt(r.turns[i], 2)} turns within T), position ${p}: ${angle}, ${kind}; training covered ${fmt(cover(w), 3)} rad`;
    },
  });
}

/** The controls, the count line and the chart of pairs × positions 0 .. 4T − 1, with the never-seen region marked. */
export function ropeLengthPanel(): HTMLElement {
  const state = { T: 64, headDim: 64, theta: 10000 };
  const map = heatmap("channel pairs against positions up to 4T: which angles training saw");
  map.canvas.id = "rope-reach-map";
  const line = el("p", { class: "note", "data-testid": "rope-slow-pairs" });
  const draw = () => {
    const r = ropeReach(state.headDim, state.theta, state.T);
    drawReach(map, r);
    line.textContent = slowPairsLine(r);
    map.canvas.dataset.firstSlowPair = String(r.firstSlowPair);
  };
  const controls = el("div", { class: "controls" },
    slider("Training length T", 8, 256, 8, state.T, (v) => { state.T = v; draw(); }, String, "rope-train-length").root,
    select("Head dimension d", ["16", "32", "64", "128"].map((d) => [d, `${d} (${Number(d) / 2} pairs)`] as [string, string]), String(state.headDim), (v) => { state.headDim = Number(v); draw(); }, "rope-head-dim").root,
    select("rope_theta", [["10000", "10000 (the paper's, octlm's default)"], ["500000", "500000 (Llama 3)"], ["500", "500"]], String(state.theta), (v) => { state.theta = Number(v); draw(); }, "rope-theta").root,
  );
  draw();
  return el("div", { class: "panel", id: "rope-length" },
    el("h3", {}, "Why RoPE breaks past T"),
    el("p", { class: "caption" },
      "Pair i turns θᵢ = rope_theta^(−2i/d) radians per position, so a query at m and a key at n meet at the angle (m − n)·θᵢ. ",
      "Training at length T shows each pair only the angles m·θᵢ for m < T. A fast pair (T·θᵢ ≥ 2π) goes round the circle within T, so every angle it meets later is one training saw. ",
      "A slow pair never completes a turn in training: past T it turns on into angles the model never saw (dark), until it wraps round after 2π/θᵢ positions. ",
      "The heads' weights were fitted only to the angles training showed; at the others their scores are untested, and a model trained at T often attends badly past it. ",
      "RoPE's scalings (linear, NTK, YaRN) slow the slow pairs down so that longer inputs stay inside the angles training saw."),
    controls, line, el("div", {}, map.root), reachLegend(),
    el("p", { class: "note" }, "A cell past T counts as seen when its angle lies within half a step (θᵢ/2) of an angle some training position gave the same pair."),
  );
}
