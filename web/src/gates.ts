// Attention that forgets: FoX's forget gates and stick-breaking's allocation, for playground 10.
// Both are computed in log space from prefix sums (one pass per query), not by the term-by-term loops of
// octlm.export.gate_parity, whose numbers test/gates.test.ts checks these against to 1e-5.
import { matrix, type Matrix } from "./math";

/**
 * FoX (Lin et al. 2025 §2) weights [T, T] (query i, key j; 0 above the diagonal) from scores z [T, T] and forget
 * gates f [T] in (0, 1]: softmax over j <= i of z_ij + sum_{l=j+1..i} log f_l. With every gate 1 it is causal softmax.
 */
export function foxWeights(scores: Matrix, gates: ArrayLike<number>): Matrix {
  const n = gates.length;
  if (scores.rows !== n || scores.cols !== n) throw new RangeError(`foxWeights: scores must be ${n}x${n}, got ${scores.rows}x${scores.cols}`);
  // c[t] = sum_{l<=t} log f_l, so the decay from key j to query i is c[i] - c[j].
  const c = new Float64Array(n);
  for (let t = 0; t < n; t++) c[t] = (t > 0 ? c[t - 1] : 0) + Math.log(gates[t]);
  const out = matrix(n, n);
  for (let i = 0; i < n; i++) {
    let top = -Infinity;
    for (let j = 0; j <= i; j++) top = Math.max(top, scores.data[i * n + j] + c[i] - c[j]);
    let total = 0;
    for (let j = 0; j <= i; j++) total += (out.data[i * n + j] = Math.exp(scores.data[i * n + j] + c[i] - c[j] - top));
    for (let j = 0; j <= i; j++) out.data[i * n + j] /= total;
  }
  return out;
}

/** log sigmoid(z), without overflow at large |z|. */
function logSigmoid(z: number): number {
  return z >= 0 ? -Math.log1p(Math.exp(-z)) : z - Math.log1p(Math.exp(z));
}

/**
 * Stick-breaking attention (Tan et al. 2025 §2) weights [T, T] (query i, key j; 0 above the diagonal) from scores
 * z [T, T]: A_ij = sigmoid(z_ij) prod_{j<k<i} (1 - sigmoid(z_ik)) for j < i. The query walks back from its nearest
 * key, each key taking its share of what is left; what is left at the end goes to the query's own token (A_ii), as
 * the authors' code does, so a row sums to 1. log(1 - sigmoid(z)) = log sigmoid(-z).
 */
export function stickBreakingWeights(scores: Matrix): Matrix {
  const n = scores.rows;
  const out = matrix(n, n);
  for (let i = 0; i < n; i++) {
    let logLeft = 0;
    for (let j = i - 1; j >= 0; j--) {
      const z = scores.data[i * n + j];
      out.data[i * n + j] = Math.exp(logSigmoid(z) + logLeft);
      logLeft += logSigmoid(-z);
    }
    out.data[i * n + i] = Math.exp(logLeft);
  }
  return out;
}
