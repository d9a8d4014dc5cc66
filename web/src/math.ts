// The formulas the page computes. Each mirrors a function of the Python
// package (named in its comment); test/parity.test.ts checks them against
// numbers that Python exported, to 1e-5.

/** A row-major matrix: `data[r * cols + c]`. */
export interface Matrix {
  rows: number;
  cols: number;
  data: Float64Array;
}

export function matrix(rows: number, cols: number): Matrix {
  return { rows, cols, data: new Float64Array(rows * cols) };
}

export function row(m: Matrix, r: number): Float64Array {
  return m.data.subarray(r * m.cols, (r + 1) * m.cols);
}

export function toRows(m: Matrix): number[][] {
  return Array.from({ length: m.rows }, (_, r) => Array.from(row(m, r)));
}

export type SinusoidalLayout = "interleaved" | "concatenated";
export type RopeLayout = "interleaved" | "half";

/**
 * The sinusoidal position table of Vaswani et al. 2017 §3.5, [length, width]
 * (octlm.positions.sinusoidal_positions): P[t, 2i] = sin(t / base^(2i/width)),
 * P[t, 2i+1] = cos(...). An odd width ends with a sine column. The
 * "concatenated" layout puts every sine column first, then every cosine.
 */
export function sinusoidal(length: number, width: number, offset = 0, base = 10000, layout: SinusoidalLayout = "interleaved"): Matrix {
  if (!(length >= 0 && width >= 1 && offset >= 0 && base > 0)) {
    throw new RangeError(`sinusoidal: need length >= 0, width >= 1, offset >= 0, base > 0; got ${length}, ${width}, ${offset}, ${base}`);
  }
  const out = matrix(length, width);
  const pairs = Math.ceil(width / 2);
  const sines = pairs;
  for (let t = 0; t < length; t++) {
    for (let i = 0; i < pairs; i++) {
      const angle = (offset + t) * Math.pow(base, (-2 * i) / width);
      const hasCos = 2 * i + 1 < width;
      if (layout === "interleaved") {
        out.data[t * width + 2 * i] = Math.sin(angle);
        if (hasCos) out.data[t * width + 2 * i + 1] = Math.cos(angle);
      } else {
        out.data[t * width + i] = Math.sin(angle);
        if (hasCos) out.data[t * width + sines + i] = Math.cos(angle);
      }
    }
  }
  return out;
}

/** RoPE's rotation speed of each channel pair, theta^(-2i/headDim), radians per position (Su et al. 2021). */
export function ropeInverseFrequencies(headDim: number, theta = 10000): Float64Array {
  if (headDim < 2 || headDim % 2) throw new RangeError(`RoPE: head_dim must be even and >= 2, got ${headDim}`);
  const out = new Float64Array(headDim / 2);
  for (let i = 0; i < out.length; i++) out[i] = Math.pow(theta, (-2 * i) / headDim);
  return out;
}

/** cos and sin of the rotation angle of every pair at positions offset..offset+length-1, each [length, headDim/2]. */
export function ropeAngles(length: number, offset: number, invFreq: Float64Array): { cos: Matrix; sin: Matrix } {
  const cos = matrix(length, invFreq.length);
  const sin = matrix(length, invFreq.length);
  for (let t = 0; t < length; t++) {
    for (let i = 0; i < invFreq.length; i++) {
      const angle = (offset + t) * invFreq[i];
      cos.data[t * invFreq.length + i] = Math.cos(angle);
      sin.data[t * invFreq.length + i] = Math.sin(angle);
    }
  }
  return { cos, sin };
}

/** Which two channels pair i rotates: (2i, 2i+1) interleaved, (i, i + d/2) half (GPT-NeoX's rotate_half). */
export function ropePair(i: number, headDim: number, layout: RopeLayout): [number, number] {
  return layout === "interleaved" ? [2 * i, 2 * i + 1] : [i, i + headDim / 2];
}

/**
 * Rotate every row t of x [T, headDim] by the angles of row t (the query or key
 * at that position); the RotaryPositions.rotate of octlm.positions.
 */
export function ropeRotate(x: Matrix, cos: Matrix, sin: Matrix, layout: RopeLayout): Matrix {
  const d = x.cols;
  const out = matrix(x.rows, d);
  for (let t = 0; t < x.rows; t++) {
    for (let i = 0; i < d / 2; i++) {
      const [p, q] = ropePair(i, d, layout);
      const a = x.data[t * d + p];
      const b = x.data[t * d + q];
      const c = cos.data[t * cos.cols + i];
      const s = sin.data[t * sin.cols + i];
      out.data[t * d + p] = a * c - b * s;
      out.data[t * d + q] = a * s + b * c;
    }
  }
  return out;
}

/** One vector rotated to a single position: ropeRotate of a one-row matrix. */
export function ropeRotateVector(v: ArrayLike<number>, position: number, theta: number, layout: RopeLayout): Float64Array {
  const x: Matrix = { rows: 1, cols: v.length, data: Float64Array.from(v) };
  const { cos, sin } = ropeAngles(1, position, ropeInverseFrequencies(v.length, theta));
  return ropeRotate(x, cos, sin, layout).data;
}

/**
 * ALiBi slopes m_h for any head count (Press et al. 2022 §3; octlm.positions.alibi_slopes):
 * for a power of two n, 2^(-8/n), 2^(-16/n), ...; otherwise the slopes of the largest
 * power of two p below n, then every other slope of 2p heads.
 */
export function alibiSlopes(nHeads: number): Float64Array {
  if (!(nHeads >= 1)) throw new RangeError(`ALiBi: n_heads must be >= 1, got ${nHeads}`);
  const powerOfTwo = (n: number) => Array.from({ length: n }, (_, i) => Math.pow(Math.pow(2, -8 / n), i + 1));
  const p = Math.pow(2, Math.floor(Math.log2(nHeads)));
  const slopes = powerOfTwo(p);
  if (p < nHeads) slopes.push(...powerOfTwo(2 * p).filter((_, i) => i % 2 === 0).slice(0, nHeads - p));
  return Float64Array.from(slopes);
}

/**
 * ALiBi bias of one head, [qLen, kLen]: -m (i - j) for query position i and key j
 * (queries at offset.., keys ending where the queries end; ALiBiPositions.score_bias).
 * Entries for future keys (j > i) are positive; attention masks them out.
 */
export function alibiBias(slope: number, qLen: number, kLen: number, offset = 0): Matrix {
  const out = matrix(qLen, kLen);
  for (let r = 0; r < qLen; r++) {
    for (let c = 0; c < kLen; c++) {
      const i = offset + r;
      const j = offset + qLen - kLen + c;
      out.data[r * kLen + c] = -slope * (i - j);
    }
  }
  return out;
}

/**
 * T5's bucket of a causal distance n = i - j (Raffel et al. 2020 §2.1; octlm.biases.t5_buckets):
 * distances below numBuckets/2 get a bucket each, longer ones logarithmically wider buckets up to
 * maxDistance, and every distance from maxDistance on the last bucket. Negative (future) distances
 * fall into bucket 0. The model learns one bias per head and bucket; the picture shows the buckets.
 */
export function t5Bucket(distance: number, numBuckets: number, maxDistance: number): number {
  const exact = Math.floor(numBuckets / 2);
  if (!(numBuckets >= 2 && maxDistance > exact)) {
    throw new RangeError(`T5: need numBuckets >= 2 and maxDistance > numBuckets / 2, got ${numBuckets} and ${maxDistance}`);
  }
  const n = Math.max(0, distance);
  if (n < exact) return n;
  const wide = Math.floor((Math.log(n / exact) / Math.log(maxDistance / exact)) * (numBuckets - exact));
  return Math.min(numBuckets - 1, exact + wide);
}

/** T5 buckets of every query i and key j (keys ending where the queries end: a distance needs no offset), [qLen, kLen] (T5RelativeBias.score_bias). */
export function t5Buckets(qLen: number, kLen: number, numBuckets: number, maxDistance: number): Matrix {
  const out = matrix(qLen, kLen);
  for (let r = 0; r < qLen; r++) {
    for (let c = 0; c < kLen; c++) out.data[r * kLen + c] = t5Bucket(r - (qLen - kLen + c), numBuckets, maxDistance);
  }
  return out;
}

/**
 * FIRE's interpolated distance, the input of its learned MLP (Li et al. 2023 §3.2, eq. 4;
 * FIREBias.interpolated): psi(i - j) / psi(max(threshold, i)) with psi(x) = log(|c| x + 1),
 * [qLen, kLen] for queries at offset.. and keys ending where the queries end. Every entry lies in
 * [0, 1] at any length; future keys get distance 0.
 */
export function fireInterpolated(qLen: number, kLen: number, c: number, threshold: number, offset = 0): Matrix {
  const psi = (x: number) => Math.log1p(Math.abs(c) * x);
  const out = matrix(qLen, kLen);
  for (let r = 0; r < qLen; r++) {
    const i = offset + r;
    const scale = psi(Math.max(i, threshold));
    for (let col = 0; col < kLen; col++) {
      const j = offset + qLen - kLen + col;
      out.data[r * kLen + col] = psi(Math.max(0, i - j)) / scale;
    }
  }
  return out;
}

/**
 * p-RoPE's inverse frequencies (Barbero et al. 2024 §6; octlm's PartialFrequencyRoPE): RoPE's
 * theta^(-2i/headDim), [headDim / 2], with all but the first floor(fraction * headDim / 2) pairs (the
 * fastest) set to 0, so those pairs never turn. Rotate with ropeAngles and ropeRotate as RoPE.
 */
export function propeInverseFrequencies(headDim: number, theta: number, fraction: number): Float64Array {
  const freq = ropeInverseFrequencies(headDim, theta);
  const kept = Math.floor(fraction * (headDim / 2) + 1e-9);
  return freq.map((f, i) => (i < kept ? f : 0));
}

/**
 * KERPLE's logarithmic bias (Chi et al. 2022; octlm's KERPLEBias) of one head: -r1 log(1 + r2 (i - j)),
 * [qLen, kLen] for keys ending where the queries end (it reads distances only); future keys get distance 0.
 */
export function kerpleBias(r1: number, r2: number, qLen: number, kLen: number): Matrix {
  const out = matrix(qLen, kLen);
  for (let r = 0; r < qLen; r++) {
    for (let c = 0; c < kLen; c++) out.data[r * kLen + c] = -r1 * Math.log1p(r2 * Math.max(0, r - (qLen - kLen + c)));
  }
  return out;
}

/**
 * CoPE (Golovneva et al. 2024 §3; octlm's ContextualPositions) for one head: queries q [qLen, D], keys
 * k [kLen, D] ending where the queries end, the layer's embeddings e [D, npos] (columns). Returns the
 * counted positions p_ij = sum over keys t = j..i of sigmoid(q_i . k_t / sqrt(D)) and the bias
 * q_i . e(p_ij), e interpolated between columns floor(p) and ceil(p) (p clamped to npos - 1); both
 * [qLen, kLen], 0 and q_i . e[0] on future keys.
 */
export function cope(q: Matrix, k: Matrix, e: Matrix): { positions: Matrix; bias: Matrix } {
  const positions = matrix(q.rows, k.rows);
  const bias = matrix(q.rows, k.rows);
  const scale = 1 / Math.sqrt(q.cols);
  for (let r = 0; r < q.rows; r++) {
    const qi = row(q, r);
    const own = k.rows - q.rows + r;
    const scores = Array.from({ length: e.cols }, (_, n) => {
      let sum = 0;
      for (let ch = 0; ch < q.cols; ch++) sum += qi[ch] * e.data[ch * e.cols + n];
      return sum;
    });
    let count = 0;
    for (let c = k.rows - 1; c >= 0; c--) {
      if (c <= own) count += 1 / (1 + Math.exp(-dot(qi, row(k, c)) * scale));
      const p = c <= own ? Math.min(count, e.cols - 1) : 0;
      const low = Math.floor(p), w = p - low;
      positions.data[r * k.rows + c] = c <= own ? count : 0;
      bias.data[r * k.rows + c] = (1 - w) * scores[low] + w * scores[Math.ceil(p)];
    }
  }
  return { positions, bias };
}

/** xPos's constants (Sun et al. 2023 §3.2; octlm.positions.XPosRotation): gamma and the scale base (tokens). */
export const XPOS_GAMMA = 0.4;
export const XPOS_SCALE_BASE = 512;

/** xPos's decay base of each channel pair, zeta_i = (i / (d/2) + gamma) / (1 + gamma), [headDim / 2]. */
export function xposZeta(headDim: number): Float64Array {
  if (headDim < 2 || headDim % 2) throw new RangeError(`xPos: head_dim must be even and >= 2, got ${headDim}`);
  return Float64Array.from({ length: headDim / 2 }, (_, i) => (i / (headDim / 2) + XPOS_GAMMA) / (1 + XPOS_GAMMA));
}

/**
 * xPos on queries or keys x [T, headDim] at positions offset..: RoPE's rotation, then channel pair i
 * of row t multiplied by zeta_i^(+-(offset + t - reference) / scaleBase) (sign +1 for queries, -1 for
 * keys), so a query at n and a key at m score with the factor zeta_i^((n - m) / scaleBase) whatever the
 * reference; octlm takes it inside the sequence so the factors stay finite far out (XPosRotation.reference).
 */
export function xposRotate(x: Matrix, offset: number, theta: number, layout: RopeLayout, sign: 1 | -1, reference = 0): Matrix {
  const { cos, sin } = ropeAngles(x.rows, offset, ropeInverseFrequencies(x.cols, theta));
  const out = ropeRotate(x, cos, sin, layout);
  const zeta = xposZeta(x.cols);
  for (let t = 0; t < x.rows; t++) {
    for (let i = 0; i < zeta.length; i++) {
      const factor = Math.pow(zeta[i], (sign * (offset + t - reference)) / XPOS_SCALE_BASE);
      for (const ch of ropePair(i, x.cols, layout)) out.data[t * x.cols + ch] *= factor;
    }
  }
  return out;
}

export function dot(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i] * b[i];
  return s;
}

export function norm(a: ArrayLike<number>): number {
  return Math.sqrt(dot(a, a));
}

/** Below this norm a vector counts as zero, as in torch.nn.functional.cosine_similarity. */
export const COSINE_EPS = 1e-8;

/** Cosine similarity a·b / (|a| |b|) in [-1, 1]; each norm is clamped to COSINE_EPS like torch's. */
export function cosine(a: ArrayLike<number>, b: ArrayLike<number>): number {
  return dot(a, b) / (Math.max(norm(a), COSINE_EPS) * Math.max(norm(b), COSINE_EPS));
}

/** Cosine similarity between every pair of rows of m, [rows, rows]. */
export function cosineMatrix(m: Matrix): Matrix {
  const norms = Array.from({ length: m.rows }, (_, r) => Math.max(norm(row(m, r)), COSINE_EPS));
  const out = matrix(m.rows, m.rows);
  for (let a = 0; a < m.rows; a++) {
    const ra = row(m, a);
    for (let b = a; b < m.rows; b++) {
      const v = dot(ra, row(m, b)) / (norms[a] * norms[b]);
      out.data[a * m.rows + b] = v;
      out.data[b * m.rows + a] = v;
    }
  }
  return out;
}

export interface Neighbour {
  index: number;
  score: number;
}

/** The k rows of `table` most cosine-similar to row `index`, itself excluded, best first (diagnostics.cosine_neighbours). */
export function nearest(table: Matrix, index: number, k: number): Neighbour[] {
  if (!(index >= 0 && index < table.rows)) throw new RangeError(`row ${index} is outside the table's ${table.rows} rows`);
  const query = row(table, index);
  const qn = Math.max(norm(query), COSINE_EPS);
  const scored: Neighbour[] = [];
  for (let r = 0; r < table.rows; r++) {
    if (r === index) continue;
    const other = row(table, r);
    scored.push({ index: r, score: dot(query, other) / (qn * Math.max(norm(other), COSINE_EPS)) });
  }
  scored.sort((a, b) => b.score - a.score || a.index - b.index);
  return scored.slice(0, Math.min(k, scored.length));
}

/** Product of a row vector [n] and a matrix [n, cols]: how a one-hot vector picks a row. */
export function vecMat(v: ArrayLike<number>, m: Matrix): Float64Array {
  const out = new Float64Array(m.cols);
  for (let r = 0; r < m.rows; r++) {
    if (v[r] === 0) continue;
    for (let c = 0; c < m.cols; c++) out[c] += v[r] * m.data[r * m.cols + c];
  }
  return out;
}

/** A small seeded generator (mulberry32) so the page's random tables are the same on every load. */
export function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A [rows, cols] table of N(0, std^2) draws (Box-Muller), as at initialisation. */
export function gaussianMatrix(rows: number, cols: number, std: number, seed: number): Matrix {
  const next = rng(seed);
  const out = matrix(rows, cols);
  for (let i = 0; i < out.data.length; i++) {
    const u = Math.max(next(), 1e-12);
    const v = next();
    out.data[i] = std * Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
  }
  return out;
}
