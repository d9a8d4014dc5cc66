// The numbers of the per-layer probe panel, from what a MapSet carries: each layer's mean first-token mass over its
// heads, and the query and key norm per channel pair of a RoPE layer against the pair's frequency, for the chart.
import type { FrequencyUsage } from "./data";

/** Which heads the frequency chart draws: their mean, every head apart, or one head. */
export type HeadChoice = "mean" | "every" | number;

/** The mean over heads of a [head][x] table: [x]. An empty table gives an empty row. */
export function meanOverHeads(rows: number[][]): number[] {
  if (!rows.length) return [];
  return rows[0].map((_, i) => rows.reduce((sum, row) => sum + row[i], 0) / rows.length);
}

/** Each layer's first-token mass averaged over its heads: sink_mass [layer][head] -> [layer] (probability, 0..1). */
export function layerSinkMass(sinkMass: number[][]): number[] {
  return sinkMass.map((heads) => heads.reduce((sum, v) => sum + v, 0) / heads.length);
}

/**
 * The first-token mass uniform attention gives over the first `length` tokens: query i shares its attention among
 * i + 1 keys, so the mean over queries is (1 + 1/2 + ... + 1/L) / L (probability). The yardstick a sink stands out from.
 */
export function uniformSinkMass(length: number): number {
  let sum = 0;
  for (let i = 1; i <= length; i++) sum += 1 / i;
  return length > 0 ? sum / length : 0;
}

/** One curve of the chart: its label, and its points [log10 frequency, norm] for the pairs that turn and those that do not. */
export interface NormCurve {
  label: string;
  /** "query" or "key": which norm. */
  of: "query" | "key";
  /** The head it belongs to, or null for the mean over heads. */
  head: number | null;
  /** [log10(radians per token), mean pair length], slowest pair first. */
  turning: Array<[number, number]>;
  /** [still x, mean pair length] of each pair that does not turn (p-RoPE), drawn apart at `stillX`. */
  still: Array<[number, number]>;
}

/** The chart's curves for one layer and a head choice, and where the pairs that do not turn are drawn. */
export interface NormChart {
  curves: NormCurve[];
  /** log10 of half the slowest turning frequency: the x of the pairs that do not turn (they have no log). */
  stillX: number | null;
  /** Decade ticks [log10 f, label] over the turning pairs' range, and "0" at stillX when there are still pairs. */
  ticks: Array<[number, string]>;
}

const SUPERSCRIPT: Record<string, string> = { "-": "⁻", 0: "⁰", 1: "¹", 2: "²", 3: "³", 4: "⁴", 5: "⁵", 6: "⁶", 7: "⁷", 8: "⁸", 9: "⁹" };

/** A power of ten as the chart labels it: "1", "0.1", "0.01", then 10⁻³ and smaller. */
export function decadeLabel(k: number): string {
  if (k >= -2) return String(Number((10 ** k).toFixed(Math.max(0, -k))));
  return `10${String(k).replace(/./g, (c) => SUPERSCRIPT[c] ?? c)}`;
}

/**
 * The curves of one layer's query and key norm per pair against the pair's frequency (log10 of radians per token),
 * slowest first: the mean over heads (two curves), every head (two per head) or one head (two).
 */
export function normChart(usage: FrequencyUsage, heads: HeadChoice): NormChart {
  const order = usage.frequency.map((f, i) => [f, i] as const).sort((a, b) => a[0] - b[0]).map(([, i]) => i);
  const turning = order.filter((i) => usage.frequency[i] > 0);
  const still = order.filter((i) => !(usage.frequency[i] > 0));
  const slowest = turning.length ? usage.frequency[turning[0]] : null;
  const stillX = still.length ? Math.log10(slowest === null ? 1e-6 : slowest / 2) : null;
  const curve = (label: string, of: "query" | "key", head: number | null, norms: number[]): NormCurve => ({
    label, of, head,
    turning: turning.map((i) => [Math.log10(usage.frequency[i]), norms[i]] as [number, number]),
    still: still.map((i) => [stillX!, norms[i]] as [number, number]),
  });
  const pair = (name: string, head: number | null, q: number[], k: number[]) => [curve(`queries, ${name}`, "query", head, q), curve(`keys, ${name}`, "key", head, k)];
  const curves = heads === "mean"
    ? pair("mean over heads", null, meanOverHeads(usage.query_norm), meanOverHeads(usage.key_norm))
    : (heads === "every" ? usage.query_norm.map((_, h) => h) : [heads]).flatMap((h) => pair(`head ${h}`, h, usage.query_norm[h], usage.key_norm[h]));
  const xs = turning.map((i) => Math.log10(usage.frequency[i]));
  const ticks: Array<[number, string]> = [];
  if (xs.length) for (let k = Math.ceil(Math.min(...xs) - 1e-9); k <= Math.floor(Math.max(...xs) + 1e-9); k++) ticks.push([k, decadeLabel(k)]);
  if (stillX !== null) ticks.unshift([stillX, "0"]);
  return { curves, stillX, ticks };
}
