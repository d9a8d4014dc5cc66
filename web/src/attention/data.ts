// A model's attention as octlm.inspect.attention_view hands it to the page: per length, every
// layer's and head's map on the first L validation tokens, pooled to at most 128 x 128 cells,
// one byte per cell on the square-root scale, cells on and below the diagonal only.
import type { Matrix } from "../math";

export interface AttentionStatistics {
  /** [layer][head], nats. */
  mean_entropy: number[][];
  /** [layer][head], tokens. */
  mean_distance: number[][];
  /** [layer][head], probability on the first token. */
  sink_mass: number[][];
  /** [layer][head], nats. */
  max_logit: Array<Array<number | null>>;
  /** [layer][head][cell]: mean entropy of the queries of each block (nats). */
  entropy: number[][][];
  /** [cell]: uniform attention's entropy, ln(i + 1), averaged the same way. */
  uniform_entropy: number[];
}

/**
 * Which RoPE frequencies one layer's heads use on the tokens of a map set: octlm.inspect.frequencies.frequency_usage,
 * as `octlm attention` computes it (Barbero et al. 2024, arXiv 2410.06205), 4 significant digits. P pairs, H heads.
 */
export interface FrequencyUsage {
  /** The layer (0-based); only layers whose scheme turns channel pairs have an entry. */
  layer: number;
  /** [pair]: how far the pair turns per token (radians); 0 for a p-RoPE pair that does not turn. */
  frequency: number[];
  /** [head][pair]: mean length of the pair over the tokens' queries (the queries' own units; a turn keeps it). */
  query_norm: number[][];
  /** [head][pair]: the same for the keys. */
  key_norm: number[][];
  /** [head]: share (0..1) of sum_i |q_i| |k_i| in the slowest quarter of the pairs (those that do not turn among them); null for a head whose pairs all have length 0. */
  slowest_quarter: Array<number | null>;
  /** [head]: the same for the fastest quarter. */
  fastest_quarter: Array<number | null>;
}

/** The maps of one model at one length, or why there are none. */
export interface MapSet {
  length: number;
  multiplier?: number;
  /** Why there is nothing to show at this length (then the other fields are absent). */
  note?: string;
  /** Positions per cell. */
  block?: number;
  /** Cells a side. */
  side?: number;
  /** base64 of bytes [layer][head][row r][col c <= r]: round(255 sqrt(p)). */
  maps?: string;
  statistics?: AttentionStatistics;
  /** Per layer that turns channel pairs, its frequency probe on these L tokens; absent for a model without such a layer (and in pages made before the probe). */
  frequencies?: FrequencyUsage[];
}

/** The attention of one run (`octlm serve --run`): its maps at 1x, 2x and 4x its training length. */
export interface RunAttention {
  format: number;
  train_length: number;
  max_length: number | null;
  label: string;
  /** The first window's tokens (up to 128), for hover labels. */
  tokens: string[];
  lengths: MapSet[];
}

export function hasMaps(m: MapSet): m is MapSet & Required<Pick<MapSet, "block" | "side" | "maps" | "statistics">> {
  return m.note === undefined && m.maps !== undefined && m.side !== undefined && m.block !== undefined && m.statistics !== undefined;
}

/**
 * The maps of a MapSet as [layer][head] matrices of probabilities, side x side, 0 above the
 * diagonal: each stored byte q comes back as (q / 255)^2.
 */
export function unpackMaps(m: MapSet, layers: number, heads: number): Matrix[][] {
  if (!hasMaps(m)) throw new Error(`attention data: no maps at ${m.length} tokens`);
  const n = m.side;
  const cells = (n * (n + 1)) / 2;
  const bin = atob(m.maps);
  if (bin.length !== layers * heads * cells) {
    throw new Error(`attention data: expected ${layers} x ${heads} maps of ${cells} cells, got ${bin.length} bytes`);
  }
  const out: Matrix[][] = [];
  let o = 0;
  for (let l = 0; l < layers; l++) {
    const row: Matrix[] = [];
    for (let h = 0; h < heads; h++) {
      const data = new Float64Array(n * n);
      for (let r = 0; r < n; r++) {
        for (let c = 0; c <= r; c++) {
          const q = bin.charCodeAt(o++) / 255;
          data[r * n + c] = q * q;
        }
      }
      row.push({ rows: n, cols: n, data });
    }
    out.push(row);
  }
  return out;
}

/** The first and last position (inclusive) of cell `index` of a map of `length` positions pooled by `block`. */
export function cellRange(index: number, block: number, length: number): [number, number] {
  return [index * block, Math.min(length, (index + 1) * block) - 1];
}

/** The multiple of the training length a length is, as the page writes it ("2×", "0.5×"). */
export function times(length: number, trainLength: number): string {
  const m = length / trainLength;
  return `${Number.isInteger(m) ? m : m.toFixed(2)}×`;
}

/** Every head's mean entropy at each length a model has maps for, with uniform attention's for comparison. */
export interface EntropyByLength {
  /** Lengths with maps, in the order given. */
  lengths: number[];
  /** One per layer and head ("layer l head h"): its mean entropy over the queries (nats) at each length. */
  heads: Array<{ label: string; entropy: number[] }>;
  /** Uniform attention's mean entropy at each length: the mean of ln(i + 1) over the map's cells (nats). */
  uniform: number[];
}

/**
 * How spread out each head's attention is at each length: the statistics `octlm serve --run` records at 1x, 2x and 4x
 * T (lengths without maps are left out). A head whose entropy climbs with length like uniform attention's is spreading
 * its attention over more keys.
 */
export function entropyByLength(sets: MapSet[]): EntropyByLength {
  const shown = sets.filter(hasMaps);
  const first = shown[0]?.statistics.mean_entropy ?? [];
  const heads = first.flatMap((layer, l) => layer.map((_, h) => ({
    label: `layer ${l} head ${h}`,
    entropy: shown.map((s) => s.statistics.mean_entropy[l][h]),
  })));
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  return { lengths: shown.map((s) => s.length), heads, uniform: shown.map((s) => mean(s.statistics.uniform_entropy)) };
}
