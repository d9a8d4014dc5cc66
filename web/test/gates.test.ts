// FoX's and stick-breaking's weights against the term-by-term formulas of octlm.export.gate_parity.
import { describe, expect, it } from "vitest";
import fixtures from "./fixtures/parity.json";
import { foxWeights, stickBreakingWeights } from "../src/gates";
import { lastQueryWeights } from "../src/playgrounds/gates";
import { toRows, type Matrix } from "../src/math";

const TOL = 1e-5;

function fromRows(rows: number[][]): Matrix {
  return { rows: rows.length, cols: rows[0]?.length ?? 0, data: Float64Array.from(rows.flat()) };
}

function maxDiff(a: number[][], b: number[][]): number {
  expect(a.length).toBe(b.length);
  expect(a.flat().length).toBe(b.flat().length);
  return Math.max(0, ...a.flat().map((v, i) => Math.abs(v - b.flat()[i])));
}

describe("attention that forgets (Lin et al. 2025; Tan et al. 2025)", () => {
  for (const c of fixtures.gates) {
    it(`FoX, ${c.pattern} gates, ${c.gates.length} tokens`, () => {
      expect(maxDiff(toRows(foxWeights(fromRows(c.scores), c.gates)), c.fox_weights)).toBeLessThan(TOL);
    });
    it(`stick-breaking, ${c.pattern} scores, ${c.scores.length} tokens`, () => {
      expect(maxDiff(toRows(stickBreakingWeights(fromRows(c.scores))), c.stick_breaking_weights)).toBeLessThan(TOL);
    });
  }
  it("covers a reset gate and saturated scores", () => {
    expect(fixtures.gates.map((c) => c.pattern)).toEqual(expect.arrayContaining(["reset", "saturated", "ones"]));
  });
});

describe("playground 10's last query (lastQueryWeights)", () => {
  it("FoX with every gate 1 is softmax, and one forgetting token hides the keys before it", () => {
    const open = lastQueryWeights(16, 0.5, 5, 2, 1, 3, 1);
    expect(maxDiff([open.fox], [open.softmax])).toBeLessThan(1e-12);
    const shut = lastQueryWeights(16, 0.5, 5, 2, 1, 3, 0.01);
    const before = shut.fox.slice(0, 3).reduce((a, b) => a + b, 0);
    // keys 0..2 keep 0.01 of exp(0.5); keys 3..15 exp(0.5), the needle (key 10) exp(2.5): by hand, in units of exp(0.5)
    expect(before).toBeCloseTo(0.03 / (0.03 + 12 + Math.exp(2)), 10);
    expect(shut.fox.reduce((a, b) => a + b, 0)).toBeCloseTo(1, 12);
  });
  it("stick-breaking at score 0 halves the stick per key, from the query back, the rest on the query", () => {
    const w = lastQueryWeights(8, 0, 3, 0, 1, 0, 1);
    expect(w.stick).toEqual([1 / 128, 1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 1 / 128].map((v) => expect.closeTo(v, 12)));
  });
  it("puts the needle the asked number of tokens back, on the first token when that is too far", () => {
    expect(lastQueryWeights(10, 0, 4, 1, 1, 0, 1).needle).toBe(5);
    expect(lastQueryWeights(10, 0, 40, 1, 1, 0, 1).needle).toBe(0);
  });
});
