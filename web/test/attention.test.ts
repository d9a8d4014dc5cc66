// Reading the attention maps octlm.inspect.attention_view packs: one byte per cell on the
// square-root scale, the cells on and below the diagonal, row by row, head by head, layer by layer.
import { describe, expect, it } from "vitest";
import { cellRange, entropyByLength, hasMaps, times, unpackMaps, type MapSet } from "../src/attention/data";

const b64 = (bytes: number[]) => btoa(String.fromCharCode(...bytes));
const stats = { mean_entropy: [[0]], mean_distance: [[0]], sink_mass: [[0]], max_logit: [[0]], entropy: [[[0]]], uniform_entropy: [0] };

describe("unpackMaps", () => {
  it("reads q as (q / 255)^2, lower triangle row by row, zeros above the diagonal", () => {
    // One layer, two heads, 2 x 2 cells: head 0 = [[1, 0], [0.25, 0.75]] in sqrt bytes, head 1 all on key 0.
    const q = (p: number) => Math.round(255 * Math.sqrt(p));
    const set: MapSet = { length: 2, block: 1, side: 2, maps: b64([q(1), q(0.25), q(0.75), 255, 255, 0]), statistics: stats };
    const [[h0, h1]] = unpackMaps(set, 1, 2);
    expect([h0.rows, h0.cols]).toEqual([2, 2]);
    expect(h0.data[0]).toBe(1);
    expect(h0.data[1]).toBe(0); // above the diagonal: the future, never stored
    expect(h0.data[2]).toBeCloseTo(0.25, 2);
    expect(h0.data[3]).toBeCloseTo(0.75, 2);
    expect(Array.from(h1.data)).toEqual([1, 0, 1, 0]);
  });

  it("keeps layers and heads apart", () => {
    // 2 layers x 3 heads of 3 x 3 cells (6 stored each): every cell of map k holds byte k.
    const bytes = Array.from({ length: 6 }, (_, k) => Array(6).fill(k)).flat();
    const maps = unpackMaps({ length: 6, block: 2, side: 3, maps: b64(bytes), statistics: stats }, 2, 3);
    maps.forEach((layer, l) => layer.forEach((m, h) => {
      const k = 3 * l + h;
      for (let r = 0; r < 3; r++) for (let c = 0; c < 3; c++) expect(m.data[r * 3 + c]).toBe(c <= r ? (k / 255) ** 2 : 0);
    }));
  });

  it("refuses a wrong size and a set without maps", () => {
    expect(() => unpackMaps({ length: 2, block: 1, side: 2, maps: b64([1, 2]), statistics: stats }, 1, 1)).toThrow(/expected 1 x 1 maps of 3 cells, got 2 bytes/);
    expect(() => unpackMaps({ length: 256, note: "no rows past T" }, 1, 1)).toThrow(/no maps at 256/);
  });
});

describe("hasMaps", () => {
  it("is false for a length with a note", () => {
    expect(hasMaps({ length: 256, note: "the learned table has 128 rows" })).toBe(false);
    expect(hasMaps({ length: 2, block: 1, side: 2, maps: "", statistics: stats })).toBe(true);
  });
});

describe("cellRange", () => {
  it("gives each cell its block of positions, the last one cut at the length", () => {
    expect(cellRange(0, 16, 2048)).toEqual([0, 15]);
    expect(cellRange(127, 16, 2048)).toEqual([2032, 2047]);
    // 200 positions in blocks of 2: 100 cells; 300 in blocks of 3; 130 in blocks of 2 (65 cells).
    expect(cellRange(64, 2, 130)).toEqual([128, 129]);
    expect(cellRange(3, 7, 24)).toEqual([21, 23]);
  });
});

describe("times", () => {
  it("writes a length as a multiple of T", () => {
    expect(times(256, 128)).toBe("2×");
    expect(times(64, 128)).toBe("0.50×");
  });
});

describe("entropyByLength", () => {
  const at = (length: number, entropy: number[][], uniform: number[]): MapSet => ({
    length, block: 1, side: 1, maps: "", statistics: { ...stats, mean_entropy: entropy, uniform_entropy: uniform },
  });
  it("gives every layer and head its mean entropy at each length with maps, and uniform attention's beside it", () => {
    const found = entropyByLength([
      at(8, [[1, 2], [0.5, 0.25]], [0, Math.log(2), Math.log(3), Math.log(4)]),
      { length: 16, note: "over 1 GiB" },
      at(32, [[1.5, 2.5], [1, 0.5]], [Math.log(2), Math.log(4)]),
    ]);
    expect(found.lengths).toEqual([8, 32]);
    expect(found.heads.map((h) => h.label)).toEqual(["layer 0 head 0", "layer 0 head 1", "layer 1 head 0", "layer 1 head 1"]);
    expect(found.heads.map((h) => h.entropy)).toEqual([[1, 1.5], [2, 2.5], [0.5, 1], [0.25, 0.5]]);
    expect(found.uniform[0]).toBeCloseTo(Math.log(24) / 4, 12); // the mean of ln(i + 1) over the cells
    expect(found.uniform[1]).toBeCloseTo(Math.log(8) / 2, 12);
  });
  it("is empty without lengths that have maps", () => {
    expect(entropyByLength([{ length: 16, note: "no rows" }])).toEqual({ lengths: [], heads: [], uniform: [] });
  });
});
