// The page's formulas against the numbers Python exported (python -m octlm.export.parity).
import { describe, expect, it } from "vitest";
import fixtures from "./fixtures/parity.json";
import {
  alibiBias,
  alibiSlopes,
  cope,
  cosine,
  cosineMatrix,
  fireInterpolated,
  kerpleBias,
  nearest,
  propeInverseFrequencies,
  ropeAngles,
  ropeInverseFrequencies,
  ropeRotate,
  sinusoidal,
  t5Bucket,
  t5Buckets,
  toRows,
  xposRotate,
  type Matrix,
  type RopeLayout,
  type SinusoidalLayout,
} from "../src/math";
import { cellVisible, lastQueryKeys } from "../src/layout/data";
import { ropeReach } from "../src/ropeReach";
import { showToken } from "../src/run/data";

const TOL = 1e-5;

function fromRows(rows: number[][]): Matrix {
  const cols = rows[0]?.length ?? 0;
  return { rows: rows.length, cols, data: Float64Array.from(rows.flat()) };
}

/** Largest absolute difference between two equally shaped nested arrays; throws on a shape mismatch. */
function maxDiff(a: number[] | number[][], b: number[] | number[][]): number {
  const fa = (a as number[]).flat(2) as number[];
  const fb = (b as number[]).flat(2) as number[];
  expect(fa.length).toBe(fb.length);
  expect(fa.length).toBeGreaterThan(0);
  return Math.max(...fa.map((v, i) => Math.abs(v - fb[i])));
}

/** maxDiff relative to the size of Python's numbers (at least 1): float32 keeps 7 digits of xPos's large far-key factors. */
function relDiff(a: number[][], b: number[][]): number {
  const scaled = (m: number[][], ref: number[][]) => m.map((r, i) => r.map((v, j) => v / Math.max(1, Math.abs(ref[i][j]))));
  return maxDiff(scaled(a, b), scaled(b, b));
}

describe("sinusoidal table (Vaswani et al. 2017 §3.5)", () => {
  for (const c of fixtures.sinusoidal) {
    it(`${c.length}x${c.width} from ${c.offset}, base ${c.base}, ${c.layout}`, () => {
      const ts = sinusoidal(c.length, c.width, c.offset, c.base, c.layout as SinusoidalLayout);
      expect([ts.rows, ts.cols]).toEqual([c.length, c.width]);
      expect(maxDiff(toRows(ts), c.table)).toBeLessThan(TOL);
    });
  }
});

describe("RoPE (Su et al. 2021)", () => {
  for (const c of fixtures.rope) {
    const name = `head_dim ${c.head_dim}, theta ${c.theta}, ${c.layout}, ${c.length} positions from ${c.offset}`;
    it(`inverse frequencies and angles: ${name}`, () => {
      const inv = ropeInverseFrequencies(c.head_dim, c.theta);
      expect(maxDiff(Array.from(inv), c.inv_freq)).toBeLessThan(TOL);
      const { cos, sin } = ropeAngles(c.length, c.offset, inv);
      expect(maxDiff(toRows(cos), c.cos)).toBeLessThan(TOL);
      expect(maxDiff(toRows(sin), c.sin)).toBeLessThan(TOL);
    });
    it(`rotation of queries and keys: ${name}`, () => {
      const { cos, sin } = ropeAngles(c.length, c.offset, ropeInverseFrequencies(c.head_dim, c.theta));
      const layout = c.layout as RopeLayout;
      expect(maxDiff(toRows(ropeRotate(fromRows(c.q), cos, sin, layout)), c.q_rotated)).toBeLessThan(TOL);
      expect(maxDiff(toRows(ropeRotate(fromRows(c.k), cos, sin, layout)), c.k_rotated)).toBeLessThan(TOL);
    });
  }
});

describe("ALiBi (Press et al. 2022)", () => {
  for (const c of fixtures.alibi.slopes) {
    it(`slopes for ${c.n_heads} heads`, () => {
      expect(maxDiff(Array.from(alibiSlopes(c.n_heads)), c.slopes)).toBeLessThan(TOL);
    });
  }
  for (const c of fixtures.alibi.biases) {
    it(`biases: ${c.n_heads} heads, ${c.q_len} queries from ${c.offset}, ${c.k_len} keys`, () => {
      const slopes = alibiSlopes(c.n_heads);
      const ts = Array.from(slopes, (m) => toRows(alibiBias(m, c.q_len, c.k_len, c.offset)));
      expect(maxDiff(ts.flat(), (c.bias as number[][][]).flat())).toBeLessThan(TOL);
    });
  }
});

describe("T5 relative buckets (Raffel et al. 2020 §2.1)", () => {
  for (const c of fixtures.t5) {
    it(`${c.num_buckets} buckets up to distance ${c.max_distance}`, () => {
      // Bucket ids are integers: they must agree exactly, bin edges included.
      expect(c.distances.map((d) => t5Bucket(d, c.num_buckets, c.max_distance))).toEqual(c.buckets);
      const grid = t5Buckets(6, 6, c.num_buckets, c.max_distance);
      expect(grid.data[5 * 6]).toBe(t5Bucket(5, c.num_buckets, c.max_distance));
    });
  }
});

describe("FIRE's interpolated distance (Li et al. 2023 §3.2)", () => {
  for (const c of fixtures.fire) {
    it(`${c.q_len} queries from ${c.offset}, ${c.k_len} keys, c ${c.c}, threshold ${c.threshold}`, () => {
      expect(maxDiff(toRows(fireInterpolated(c.q_len, c.k_len, c.c, c.threshold, c.offset)), c.interpolated)).toBeLessThan(TOL);
    });
  }
});

describe("xPos (Sun et al. 2023 §3.2)", () => {
  for (const c of fixtures.xpos) {
    it(`head_dim ${c.head_dim}, ${c.layout}, ${c.length} positions from ${c.offset}`, () => {
      const layout = c.layout as RopeLayout;
      expect(relDiff(toRows(xposRotate(fromRows(c.q), c.offset, c.theta, layout, 1, c.reference)), c.q_rotated)).toBeLessThan(TOL);
      expect(relDiff(toRows(xposRotate(fromRows(c.k), c.offset, c.theta, layout, -1, c.reference)), c.k_rotated)).toBeLessThan(TOL);
    });
  }
});

describe("p-RoPE (Barbero et al. 2024 §6)", () => {
  for (const c of fixtures.prope) {
    it(`head_dim ${c.head_dim}, fraction ${c.fraction}, ${c.layout}, ${c.length} positions from ${c.offset}`, () => {
      const invFreq = propeInverseFrequencies(c.head_dim, c.theta, c.fraction);
      expect(maxDiff(Array.from(invFreq), c.inv_freq)).toBeLessThan(1e-12);
      const { cos, sin } = ropeAngles(c.length, c.offset, invFreq);
      const layout = c.layout as RopeLayout;
      expect(maxDiff(toRows(ropeRotate(fromRows(c.q), cos, sin, layout)), c.q_rotated)).toBeLessThan(TOL);
      expect(maxDiff(toRows(ropeRotate(fromRows(c.k), cos, sin, layout)), c.k_rotated)).toBeLessThan(TOL);
    });
  }
});

describe("KERPLE's logarithmic bias (Chi et al. 2022)", () => {
  for (const c of fixtures.kerple) {
    it(`${c.q_len} queries, ${c.k_len} keys, r1 ${c.r1.toFixed(3)}, r2 ${c.r2.toFixed(3)}`, () => {
      expect(maxDiff(toRows(kerpleBias(c.r1, c.r2, c.q_len, c.k_len)), c.bias)).toBeLessThan(TOL);
    });
  }
});

describe("CoPE (Golovneva et al. 2024 §3)", () => {
  for (const [n, c] of fixtures.cope.entries()) {
    it(`counted positions and bias, case ${n}: ${c.q.length} queries, ${c.k.length} keys, ${c.embeddings[0].length} embeddings`, () => {
      const { positions, bias } = cope(fromRows(c.q), fromRows(c.k), fromRows(c.embeddings));
      expect(maxDiff(toRows(positions), c.positions)).toBeLessThan(TOL);
      expect(maxDiff(toRows(bias), c.bias)).toBeLessThan(TOL);
    });
  }
});

describe("cosine similarity", () => {
  for (const [n, c] of fixtures.cosine.entries()) {
    it(`every pair of rows, case ${n}`, () => {
      const table = fromRows(c.table);
      expect(maxDiff(toRows(cosineMatrix(table)), c.similarity)).toBeLessThan(TOL);
      expect(Math.abs(cosine(c.table[0], c.table[1]) - c.similarity[0][1])).toBeLessThan(TOL);
    });
    it(`nearest rows, case ${n}`, () => {
      const ts = nearest(fromRows(c.table), c.index, c.k);
      expect(ts.map((x) => x.index)).toEqual(c.neighbours.map((x) => x.index));
      expect(maxDiff(ts.map((x) => x.score), c.neighbours.map((x) => x.score))).toBeLessThan(TOL);
    });
  }
});

describe("token labels (octlm.tokenizer.visible_token)", () => {
  for (const c of fixtures.token_labels) {
    it(`labels ${JSON.stringify(c.text)} as the terminal does`, () => expect(showToken(c.text)).toBe(c.label));
  }
});

describe("RoPE past the training length: which angles training saw (octlm.export.parity, by search)", () => {
  for (const c of fixtures.rope_reach) {
    it(`head_dim ${c.head_dim}, theta ${c.theta}, T ${c.train_length}, ${c.positions} positions`, () => {
      const r = ropeReach(c.head_dim, c.theta, c.train_length, c.positions);
      expect(maxDiff(Array.from(r.invFreq), c.inv_freq)).toBeLessThan(TOL);
      expect(maxDiff(r.turns, c.turns)).toBeLessThan(TOL);
      expect(r.firstSlowPair).toBe(c.first_slow_pair);
      expect(r.cells.map((row) => row.join(""))).toEqual(c.cells);
      expect(r.unseen).toEqual(c.cells.map((row) => [...row].filter((x) => x === "2").length));
    });
  }
});

describe("a layout's window layers: which keys a query sees (octlm.model.blocks.window_keys)", () => {
  for (const c of fixtures.windows) {
    it(`${c.length} positions, ${c.block} a cell, ${c.window === null ? "global" : `window ${c.window}`}`, () => {
      expect(lastQueryKeys(c.length, c.window)).toEqual(c.last_query_keys);
      const side = c.cells.length;
      const cells = Array.from({ length: side }, (_, r) => Array.from({ length: side }, (_, k) => (cellVisible(r, k, c.block, c.length, c.window) ? "1" : "0")).join(""));
      expect(cells).toEqual(c.cells);
    });
  }
});
