// Properties the page's captions promise, checked on the TypeScript formulas themselves.
import { describe, expect, it } from "vitest";
import {
  alibiBias,
  alibiSlopes,
  cosineMatrix,
  dot,
  gaussianMatrix,
  norm,
  ropeRotateVector,
  row,
  sinusoidal,
  vecMat,
  type RopeLayout,
} from "../src/math";

describe("one-hot lookup", () => {
  it("a one-hot vector times the table is the table's row", () => {
    const table = gaussianMatrix(7, 5, 1, 3);
    for (let id = 0; id < 7; id++) {
      const onehot = Array.from({ length: 7 }, (_, i) => (i === id ? 1 : 0));
      expect(Array.from(vecMat(onehot, table))).toEqual(Array.from(row(table, id)));
    }
  });
});

describe("sinusoidal similarity depends only on distance", () => {
  for (const width of [4, 16, 64]) {
    it(`width ${width}: every diagonal of the cosine map is constant`, () => {
      const sim = cosineMatrix(sinusoidal(40, width));
      for (let d = 0; d < 40; d++) {
        const first = sim.data[d];
        for (let t = 1; t + d < 40; t++) expect(Math.abs(sim.data[t * 40 + t + d] - first)).toBeLessThan(1e-9);
      }
    });
  }
  it("but not for random (learned-at-init) rows", () => {
    const sim = cosineMatrix(gaussianMatrix(20, 16, 0.02, 1));
    expect(Math.abs(sim.data[1] - sim.data[10 * 20 + 11])).toBeGreaterThan(1e-3);
  });
});

describe("RoPE", () => {
  const layouts: RopeLayout[] = ["interleaved", "half"];
  for (const layout of layouts) {
    it(`${layout}: rotation keeps the norm and the score depends on m - n only`, () => {
      const [q, k] = [row(gaussianMatrix(1, 16, 1, 11), 0), row(gaussianMatrix(1, 16, 1, 12), 0)];
      for (const [m, n, shift] of [[5, 2, 9], [0, 7, 100], [31, 31, 4000]]) {
        const qm = ropeRotateVector(q, m, 10000, layout);
        expect(Math.abs(norm(qm) - norm(q))).toBeLessThan(1e-9);
        const score = dot(qm, ropeRotateVector(k, n, 10000, layout));
        const shifted = dot(ropeRotateVector(q, m + shift, 10000, layout), ropeRotateVector(k, n + shift, 10000, layout));
        expect(Math.abs(score - shifted)).toBeLessThan(1e-9);
      }
    });
  }
});

describe("ALiBi", () => {
  it("8 heads have slopes 1/2 ... 1/256", () => {
    expect(Array.from(alibiSlopes(8))).toEqual([1, 2, 3, 4, 5, 6, 7, 8].map((i) => 2 ** -i));
  });
  it("the bias is zero on the diagonal and falls by the slope per step back", () => {
    const bias = alibiBias(0.25, 6, 6);
    for (let i = 0; i < 6; i++) {
      expect(Math.abs(bias.data[i * 6 + i])).toBe(0);
      for (let j = 0; j < i; j++) expect(bias.data[i * 6 + j]).toBeCloseTo(-0.25 * (i - j), 12);
    }
  });
});
