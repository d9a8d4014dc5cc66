// Under a model's attention maps, one panel per model and length with two probes layer by layer: how much attention
// goes to the first token (mean over heads), and, for each layer that turns channel pairs, which of RoPE's
// frequencies its queries and keys use (Barbero et al. 2024, "Round and Round We Go!", arXiv 2410.06205).
import type { LayerView } from "../layout/data";
import { lineChart, type Series } from "../plot";
import { append, clear, el, fmt, select } from "../ui";
import { hasMaps, type FrequencyUsage, type MapSet } from "./data";
import { layerSinkMass, normChart, uniformSinkMass, type HeadChoice, type NormChart, type NormCurve } from "./frequencies";

export const HEAD_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"];

const FREQUENCY_CAPTION = "Which of RoPE's frequencies the queries and keys use on these tokens (Barbero et al. 2024, “Round and Round We Go!”, the probe of octlm attention's frequencies.png): " +
  "for each channel pair, the mean length of the queries' pair (solid) and of the keys' pair (dashed) over the tokens, against how far the pair turns per token (log scale). " +
  "A turn keeps a pair's length, so these are the lengths before RoPE turns them. What to notice: a slow pair barely turns across the window, so what it carries is content (which token), not position; " +
  "the fast pairs turn a lot from one token to the next, which is where position patterns such as attending to the previous token come from. Left of the dashed line a pair never completes a turn within the training length T. " +
  "Under each chart, each head's share of Σ|q_i||k_i| (what pair i can add to a logit at most) in the slowest and in the fastest quarter of the pairs; a p-RoPE pair that does not turn counts among the slowest and is drawn apart, at 0.";

export interface ProbePanel {
  root: HTMLElement;
  /** Show the probes of a model at one length (nothing for a length without maps); `layers`: its layout, if any. */
  show(set: MapSet | undefined, trainLength: number, layers?: LayerView[]): void;
}

/** The panel of the attention explorer `id`: its heads choice is kept from one model or length to the next. */
export function probePanel(id: string): ProbePanel {
  let heads: HeadChoice = "mean";
  const sinks = el("div", { "data-testid": `${id}-sink-layers` });
  const frequencies = el("div", { id: `${id}-frequencies` });
  const root = el("div", { class: "probes", "data-testid": `${id}-probes` },
    el("h3", {}, "Layer by layer: the first token and RoPE's frequencies"), sinks, frequencies);

  const show = (set: MapSet | undefined, trainLength: number, layers?: LayerView[]) => {
    clear(sinks);
    clear(frequencies);
    root.hidden = !set || !hasMaps(set);
    if (!set || !hasMaps(set)) return;
    sinks.append(sinkTable(set.statistics.sink_mass, set.length, layers));
    const usage = set.frequencies ?? [];
    if (!usage.length) {
      frequencies.append(el("p", { class: "note", "data-testid": `${id}-frequencies-none` },
        "No layer of this model turns channel pairs (RoPE, p-RoPE, xPos), so there is no frequency probe to show (or the page was made before it carried one)."));
      return;
    }
    const count = usage[0].query_norm.length;
    if (typeof heads === "number" && heads >= count) heads = "mean";
    const options: Array<[string, string]> = [["mean", "mean over heads"], ["every", "every head"], ...Array.from({ length: count }, (_, h) => [String(h), `head ${h}`] as [string, string])];
    const choice = select("Heads", options, String(heads), (v) => {
      heads = v === "mean" || v === "every" ? v : Number(v);
      show(set, trainLength, layers);
    }, `${id}-frequency-heads`);
    const grid = el("div", { class: "multiples charts" });
    for (const entry of usage) grid.append(layerFigure(entry, heads, set.length, trainLength, layers?.[entry.layer]));
    append(frequencies, el("h4", {}, `Which RoPE frequencies the heads use, at ${set.length} tokens`), el("p", { class: "caption" }, FREQUENCY_CAPTION),
      el("div", { class: "controls" }, choice.root), grid);
  };
  return { root, show };
}

/** Each layer's first-token mass: the mean over its heads, then each head's, with uniform attention's for scale. */
function sinkTable(sinkMass: number[][], length: number, layers?: LayerView[]): HTMLElement {
  const means = layerSinkMass(sinkMass);
  const uniform = uniformSinkMass(length);
  return el("div", { class: "grid-wrap" },
    el("table", { class: "values", "data-testid": "sink-layers" },
      el("caption", {}, `How much attention each layer puts on the first token, at ${length} tokens: the mean over its heads of each head's first-token mass (the number under each map above). `,
        `Uniform attention would put ${fmt(uniform, 3)} there (the mean over queries of 1 / (i + 1)); far above that, the layer parks its attention on the first token (a sink).`),
      el("thead", {}, el("tr", {}, ...["layer", "first token, mean over heads", "each head"].map((t) => el("th", { scope: "col" }, t)))),
      el("tbody", {}, ...means.map((mean, l) => el("tr", { "data-layer": l },
        el("th", { scope: "row" }, layers?.[l] ? `${l}: ${layers[l].description}` : String(l)),
        el("td", {}, fmt(mean, 3)),
        el("td", {}, sinkMass[l].map((v) => fmt(v, 3)).join(" · "))))),
    ));
}

/** One layer's chart of pair norms against frequency, and its heads' slowest- and fastest-quarter shares. */
function layerFigure(usage: FrequencyUsage, heads: HeadChoice, length: number, trainLength: number, view?: LayerView): HTMLElement {
  const chart = normChart(usage, heads);
  const series: Series[] = chart.curves.flatMap((c) => curveSeries(c, heads));
  const oneTurn = Math.log10((2 * Math.PI) / trainLength);
  const name = view ? `layer ${usage.layer} (${view.description})` : `layer ${usage.layer}`;
  const percent = (v: number | null) => (v === null ? "?" : `${fmt(100 * v, 0)}%`);
  return el("div", { class: "multiple", "data-layer": usage.layer },
    el("h3", {}, name),
    lineChart(series, {
      title: `mean query and key length per channel pair against its frequency, ${name}, ${length} tokens`,
      xLabel: "frequency (radians per token, log scale)", yLabel: "mean pair length", xTicks: chart.ticks,
      markers: [{ x: oneTurn, label: "one turn in T" }], legendBelow: true, legend: legendOf(chart, heads),
      pointTitle: (s, x, y) => (chart.stillX !== null && x === chart.stillX
        ? `${s.name}, a pair that does not turn: ${fmt(y, 3)}`
        : `${s.name}: ${(10 ** x).toPrecision(3)} radians per token (a turn every ${Math.round((2 * Math.PI) / 10 ** x)} tokens): ${fmt(y, 3)}`),
    }),
    el("table", { class: "values", "data-testid": "frequency-shares" },
      el("thead", {}, el("tr", {}, ...["head", "slowest quarter", "fastest quarter"].map((t) => el("th", { scope: "col" }, t)))),
      el("tbody", {}, ...usage.slowest_quarter.map((slow, h) => el("tr", {},
        el("th", { scope: "row" }, String(h)), el("td", {}, percent(slow)), el("td", {}, percent(usage.fastest_quarter[h])))))),
  );
}

/** A curve as the chart draws it: queries solid, keys dashed; the pairs that do not turn as dots apart. */
function curveSeries(c: NormCurve, heads: HeadChoice): Series[] {
  const color = heads === "mean" ? (c.of === "query" ? HEAD_COLORS[0] : HEAD_COLORS[1]) : HEAD_COLORS[(c.head ?? 0) % HEAD_COLORS.length];
  const dash = c.of === "key" ? "6 4" : undefined;
  const out: Series[] = [{ name: c.label, color, dash, dots: true, points: c.turning }];
  if (c.still.length) out.push({ name: `${c.label}, pairs that do not turn`, color, noLine: true, points: c.still });
  return out;
}

/** The chart's legend: which colour is which head (or queries and keys for the mean), solid or dashed, dots apart. */
function legendOf(chart: NormChart, heads: HeadChoice): Series[] {
  const entry = (name: string, color: string, extra: Partial<Series> = {}): Series => ({ name, color, points: [], ...extra });
  const still = chart.stillX !== null ? [entry("pairs that do not turn (at 0)", "#555", { noLine: true })] : [];
  if (heads === "mean") return [entry("queries, mean over heads", HEAD_COLORS[0]), entry("keys, mean over heads", HEAD_COLORS[1], { dash: "6 4" }), ...still];
  const shown = [...new Set(chart.curves.map((c) => c.head ?? 0))];
  return [...shown.map((h) => entry(`head ${h}`, HEAD_COLORS[h % HEAD_COLORS.length])), entry("queries", "#555"), entry("keys", "#555", { dash: "6 4" }), ...still];
}
