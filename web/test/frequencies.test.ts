// The per-layer probe panel's numbers (web/src/attention/frequencies.ts) against values worked out by hand.
import { describe, expect, it } from "vitest";
import type { FrequencyUsage } from "../src/attention/data";
import { decadeLabel, layerSinkMass, meanOverHeads, normChart, uniformSinkMass } from "../src/attention/frequencies";

// Two heads, four pairs given out of order: 0.01, 1 and 0.1 radians per token, and one p-RoPE pair that does not turn.
const usage: FrequencyUsage = {
  layer: 1,
  frequency: [0.01, 1, 0, 0.1],
  query_norm: [[1, 2, 3, 4], [3, 4, 5, 6]],
  key_norm: [[10, 20, 30, 40], [0, 0, 10, 20]],
  slowest_quarter: [0.25, 0.5],
  fastest_quarter: [0.1, 0.2],
};

describe("meanOverHeads", () => {
  it("averages each pair over the heads, not each head over the pairs", () => {
    expect(meanOverHeads([[1, 2, 3], [3, 6, 9]])).toEqual([2, 4, 6]);
    expect(meanOverHeads([])).toEqual([]);
  });
});

describe("layerSinkMass", () => {
  it("is each layer's mean over its heads", () => {
    // layer 0: (0.9 + 0.1) / 2; layer 1: (0.2 + 0.4) / 2 (the mean over layers would be 0.55 and 0.25)
    const [l0, l1] = layerSinkMass([[0.9, 0.1], [0.2, 0.4]]);
    expect(l0).toBeCloseTo(0.5, 12);
    expect(l1).toBeCloseTo(0.3, 12);
  });
});

describe("uniformSinkMass", () => {
  it("is the mean over queries of 1 / (i + 1)", () => {
    expect(uniformSinkMass(1)).toBe(1);
    expect(uniformSinkMass(2)).toBeCloseTo(0.75, 12); // (1 + 1/2) / 2
    expect(uniformSinkMass(4)).toBeCloseTo(25 / 48, 12); // (1 + 1/2 + 1/3 + 1/4) / 4
  });
});

describe("decadeLabel", () => {
  it("writes 1, 0.1 and 0.01 as numbers and smaller powers of ten with a superscript", () => {
    expect([1, 0, -1, -2, -3, -12].map(decadeLabel)).toEqual(["10", "1", "0.1", "0.01", "10⁻³", "10⁻¹²"]);
  });
});

describe("normChart", () => {
  it("draws the mean over heads of the queries and of the keys, slowest turning pair first, the still pair apart", () => {
    const chart = normChart(usage, "mean");
    const stillX = Math.log10(0.01 / 2); // half the slowest turning frequency
    expect(chart.stillX).toBeCloseTo(stillX, 12);
    const [queries, keys] = chart.curves;
    expect(chart.curves).toHaveLength(2);
    expect([queries.label, queries.of, queries.head]).toEqual(["queries, mean over heads", "query", null]);
    expect([keys.label, keys.of]).toEqual(["keys, mean over heads", "key"]);
    // pairs in frequency order: 0.01 (pair 0), 0.1 (pair 3), 1 (pair 1); x = log10 of the frequency
    expect(queries.turning.map(([x]) => x)).toEqual([-2, -1, 0]);
    expect(queries.turning.map(([, y]) => y)).toEqual([2, 5, 3]); // (1 + 3) / 2, (4 + 6) / 2, (2 + 4) / 2
    expect(keys.turning.map(([, y]) => y)).toEqual([5, 30, 10]); // (10 + 0) / 2, (40 + 20) / 2, (20 + 0) / 2
    expect(queries.still).toEqual([[chart.stillX, 4]]); // pair 2: (3 + 5) / 2
    expect(keys.still).toEqual([[chart.stillX, 20]]); // (30 + 10) / 2
    expect(chart.ticks).toEqual([[chart.stillX, "0"], [-2, "0.01"], [-1, "0.1"], [0, "1"]]);
  });

  it("draws one head's own norms, or every head's", () => {
    const one = normChart(usage, 1);
    expect(one.curves.map((c) => [c.label, c.head])).toEqual([["queries, head 1", 1], ["keys, head 1", 1]]);
    expect(one.curves[0].turning.map(([, y]) => y)).toEqual([3, 6, 4]);
    expect(one.curves[1].turning.map(([, y]) => y)).toEqual([0, 20, 0]);
    const every = normChart(usage, "every");
    expect(every.curves.map((c) => c.label)).toEqual(["queries, head 0", "keys, head 0", "queries, head 1", "keys, head 1"]);
    expect(every.curves[1].turning.map(([, y]) => y)).toEqual([10, 40, 20]);
  });

  it("has no still x when every pair turns", () => {
    const rope = normChart({ ...usage, frequency: [0.01, 1, 0.001, 0.1] }, "mean");
    expect(rope.stillX).toBeNull();
    expect(rope.curves[0].still).toEqual([]);
    expect(rope.curves[0].turning.map(([x]) => x)).toEqual([-3, -2, -1, 0]);
    expect(rope.ticks.map(([, label]) => label)).toEqual(["10⁻³", "0.01", "0.1", "1"]);
  });
});
