// The first layer's other half, for playground 11: the hashed bigram row, the value embedding's gate and the Canon
// layer, as octlm's model computes them (octlm.model.value_embeddings, octlm.model.canon). test/firstLayer.test.ts
// holds these to the term-by-term Python of octlm.export.first_layer_parity, through the parity fixtures, to 1e-5.
import { matrix, row, type Matrix } from "./math";

/** The previous token's multiplier in octlm's bigram hash (octlm.model.value_embeddings.BIGRAM_PRIME). */
export const BIGRAM_MULTIPLIER = 1_000_003n;
/** How many of the layer input's first channels the value gate reads (octlm's GATE_WIDTH). */
export const VALUE_GATE_CHANNELS = 32;
/** Tokens a Canon layer mixes: the current one and three before it (octlm's CANON_KERNEL). */
export const CANON_TAPS = 4;

/**
 * The bigram table's row read by each token, [T] integers in 0 .. rows - 1, from token ids [T] and the table's row
 * count (2 or more): (previous * 1000003 + current) mod (rows - 1), and rows - 1 for a token with nothing before it
 * (`before`: the token before ids[0], as a cache keeps it; null at a sequence's start). Huang et al. 2025,
 * "Over-Tokenized Transformer" (arXiv 2501.16975), hash n-grams into a fixed table the same way.
 */
export function bigramRows(ids: ArrayLike<number>, rows: number, before: number | null = null): number[] {
  if (!(Number.isInteger(rows) && rows >= 2)) throw new RangeError(`bigramRows: a table needs 2 rows or more, got ${rows}`);
  // previous * 1000003 passes 2^53 once an id passes about 9e9, where a float64 product would round: BigInt is exact.
  const modulus = BigInt(rows - 1);
  const out: number[] = [];
  for (let t = 0; t < ids.length; t++) {
    const previous = t === 0 ? before : ids[t - 1];
    out.push(previous === null ? rows - 1 : Number((BigInt(previous) * BIGRAM_MULTIPLIER + BigInt(ids[t])) % modulus));
  }
  return out;
}

/** The rows of `table` [V, C] that `ids` [T] pick, [T, C]: an embedding lookup. */
export function lookup(table: Matrix, ids: ArrayLike<number>): Matrix {
  const out = matrix(ids.length, table.cols);
  for (let t = 0; t < ids.length; t++) out.data.set(row(table, ids[t]), t * table.cols);
  return out;
}

function sigmoid(z: number): number {
  return z >= 0 ? 1 / (1 + Math.exp(-z)) : Math.exp(z) / (1 + Math.exp(z));
}

/**
 * The value embedding's gate of each token and head, [T, H]: 2 sigmoid(w_h . u_t[:k]), from the layer's inputs
 * u [T, C] and the gate weights w [H, k], k = min(32, C). Weights of zero give every gate 1, as octlm starts.
 */
export function valueGates(inputs: Matrix, weights: Matrix): Matrix {
  const k = Math.min(VALUE_GATE_CHANNELS, inputs.cols);
  if (weights.cols !== k) throw new RangeError(`valueGates: the gate reads ${k} channels, the weights have ${weights.cols}`);
  const out = matrix(inputs.rows, weights.rows);
  for (let t = 0; t < inputs.rows; t++) {
    for (let h = 0; h < weights.rows; h++) {
      let z = 0;
      for (let i = 0; i < k; i++) z += weights.data[h * k + i] * inputs.data[t * inputs.cols + i];
      out.data[t * weights.rows + h] = 2 * sigmoid(z);
    }
  }
  return out;
}

/**
 * The values after the value embedding (Zhou et al. 2024, arXiv 2410.17897, in its token-table form), [T, C]: values
 * v [T, C], head h holding channels h*D .. h*D + D - 1 (D = C / H), plus g_t,h times the same channels of the table's
 * row E [V, C] for token ids[t]; g from `valueGates(inputs [T, C], weights [H, k])`.
 */
export function addValueRows(values: Matrix, inputs: Matrix, table: Matrix, weights: Matrix, ids: ArrayLike<number>): Matrix {
  const gates = valueGates(inputs, weights);
  const heads = weights.rows;
  const size = values.cols / heads;
  if (!Number.isInteger(size) || table.cols !== values.cols) throw new RangeError(`addValueRows: ${values.cols} value channels do not split into ${heads} heads of the table's ${table.cols}`);
  const out = matrix(values.rows, values.cols);
  for (let t = 0; t < values.rows; t++) {
    for (let c = 0; c < values.cols; c++) {
      const gate = gates.data[t * heads + Math.floor(c / size)];
      out.data[t * values.cols + c] = values.data[t * values.cols + c] + gate * table.data[ids[t] * table.cols + c];
    }
  }
  return out;
}

/**
 * A Canon layer (Allen-Zhu 2025, arXiv 2512.17351) as octlm runs it, [T, W]: h'_t,c = h_t,c + sum_j kernel[c][j] h_{t-j},c
 * from the hidden rows h [T, W] and the kernel [W, K], K = 4, j = 0 the token itself; rows before the sequence are
 * zeros. Each channel mixes only its own past, so no channel reads another.
 */
export function canon(hidden: Matrix, kernel: Matrix): Matrix {
  if (kernel.rows !== hidden.cols) throw new RangeError(`canon: the kernel has ${kernel.rows} channels, the rows ${hidden.cols}`);
  const width = hidden.cols;
  const out = matrix(hidden.rows, width);
  for (let t = 0; t < hidden.rows; t++) {
    for (let c = 0; c < width; c++) {
      let total = hidden.data[t * width + c];
      for (let j = 0; j < kernel.cols && j <= t; j++) total += kernel.data[c * kernel.cols + j] * hidden.data[(t - j) * width + c];
      out.data[t * width + c] = total;
    }
  }
  return out;
}

/** One kernel [K] given to every channel of a width-W layer, [W, K]: how the playground sets the Canon kernel. */
export function sharedKernel(taps: ArrayLike<number>, width: number): Matrix {
  const out = matrix(width, taps.length);
  for (let c = 0; c < width; c++) out.data.set(Array.from(taps), c * taps.length);
  return out;
}
