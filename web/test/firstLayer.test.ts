// Playground 11's formulas against the term-by-term Python of octlm.export.first_layer_parity (through the parity
// fixtures), and the properties the playground shows: the first token's bigram row, gates of one, the residual.
import { describe, expect, it } from "vitest";
import fixtures from "./fixtures/parity.json";
import { addValueRows, bigramRows, canon, lookup, sharedKernel, valueGates } from "../src/firstLayer";
import { gaussianMatrix, row, toRows, type Matrix } from "../src/math";
import { bigramTable, collisions, firstLayerNumbers, repeatedToken } from "../src/playgrounds/firstLayer";
import { tokenTable } from "../src/playgrounds/vocab";

const TOL = 1e-5;
const cases = fixtures.first_layer;

function fromRows(rows: number[][]): Matrix {
  return { rows: rows.length, cols: rows[0]?.length ?? 0, data: Float64Array.from(rows.flat()) };
}

function maxDiff(a: number[][], b: number[][]): number {
  expect(a.flat().length).toBe(b.flat().length);
  expect(a.flat().length).toBeGreaterThan(0);
  return Math.max(...a.flat().map((v, i) => Math.abs(v - b.flat()[i])));
}

describe("the hashed bigram row (Huang et al. 2025; octlm's --bigram-rows)", () => {
  for (const c of cases.bigram) {
    it(`${c.ids.length} ids up to ${Math.max(...c.ids)}, ${c.rows} rows${c.before === null ? "" : ", after a cached token"}`, () => {
      expect(bigramRows(c.ids, c.rows, c.before)).toEqual(c.read);
    });
  }
  it("includes ids whose product with the multiplier a float64 would round", () => {
    expect(cases.bigram.some((c) => Math.max(...c.ids, c.before ?? 0) * 1_000_003 > 2 ** 53)).toBe(true);
  });
  it("agrees with modular arithmetic kept below 2^53, for ids up to GPT-2's and a 200k vocabulary", () => {
    const next = (() => { let s = 12345; return () => (s = (s * 1103515245 + 12345) % 2 ** 31) / 2 ** 31; })();
    for (const vocab of [50257, 200_019]) {
      for (const rows of [2, 3, 97, 5 * vocab, 1_000_000]) {
        const ids = Array.from({ length: 40 }, () => Math.floor(next() * vocab)).concat([vocab - 1, vocab - 1, 0]);
        const m = rows - 1;
        // (p * P + c) mod m = ((p mod m) (P mod m) + c) mod m, each product below m^2 < 2^53
        const expected = ids.map((c, t) => (t === 0 ? m : ((ids[t - 1] % m) * (1_000_003 % m) + c) % m));
        expect(bigramRows(ids, rows)).toEqual(expected);
      }
    }
  });
  it("gives the first token the reserved last row, which no pair reaches, and refuses a table of one row", () => {
    const read = bigramRows(Array.from({ length: 120 }, (_, i) => i % 37), 7);
    expect(read[0]).toBe(6);
    expect(read.slice(1).every((r) => r >= 0 && r < 6)).toBe(true);
    expect(() => bigramRows([1, 2], 1)).toThrow(RangeError);
  });
  it("puts a zero row at the playground's first position, and equal pairs on equal rows", () => {
    const n = firstLayerNumbers([0, 1, 2, 0, 1, 5], 40, 1, [0, 1, 0.5, 0.25]);
    expect(Array.from(row(n.bigram, 0))).toEqual(new Array(6).fill(0));
    expect(Array.from(row(n.input, 0))).toEqual(Array.from(row(n.tokens, 0)));
    expect(n.read[1]).toBe(n.read[4]); // "the cat" twice
    expect(Array.from(row(n.bigram, 1))).toEqual(Array.from(row(bigramTable(40), n.read[1])));
  });
  it("names different pairs that collide, not a repeated pair", () => {
    // (the, cat) at 1 and 4 is one pair, so no collision; (cat, sat) at 2 shares its row with both
    expect(collisions([0, 1, 2, 0, 1], [9, 3, 3, 5, 3])).toEqual([[1, 2], [2, 4]]);
  });
});

describe("the value embedding (Zhou et al. 2024; octlm's --value-embeddings)", () => {
  for (const c of cases.value) {
    it(`${c.ids.length} tokens, ${c.table[0].length} channels, ${c.gate_weights.length} heads`, () => {
      const [u, w] = [fromRows(c.inputs), fromRows(c.gate_weights)];
      expect(maxDiff(toRows(valueGates(u, w)), c.gates)).toBeLessThan(TOL);
      expect(maxDiff(toRows(addValueRows(fromRows(c.values), u, fromRows(c.table), w, c.ids)), c.out)).toBeLessThan(TOL);
    });
  }
  it("starts every gate at 1, so the row is added whole", () => {
    const n = firstLayerNumbers([3, 1, 4, 1, 5, 2], 11, 0, [0, 0, 0, 0]);
    expect(Array.from(n.gates.data)).toEqual(new Array(12).fill(1));
    const sum = n.values.data.map((v, i) => v + n.valueRows.data[i]);
    expect(maxDiff(toRows(n.valuesAfter), toRows({ ...n.values, data: sum }))).toBeLessThan(1e-12);
  });
  it("reads only the first 32 channels of a wider input", () => {
    const u = gaussianMatrix(3, 40, 1, 5);
    const changed = { ...u, data: u.data.map((v, i) => (i % 40 >= 32 ? v + 100 : v)) };
    const w = gaussianMatrix(2, 32, 1, 6);
    expect(Array.from(valueGates(changed, w).data)).toEqual(Array.from(valueGates(u, w).data));
    expect(() => valueGates(u, gaussianMatrix(2, 40, 1, 6))).toThrow(RangeError);
  });
});

describe("the Canon layer (Allen-Zhu 2025; octlm's --canon)", () => {
  for (const c of cases.canon) {
    it(`${c.hidden.length} tokens x ${c.hidden[0].length} channels, ${c.pattern} kernel`, () => {
      expect(maxDiff(toRows(canon(fromRows(c.hidden), fromRows(c.kernel))), c.out)).toBeLessThan(TOL);
    });
  }
  it("gives the input back with a zero kernel (the residual)", () => {
    const h = gaussianMatrix(9, 5, 1, 3);
    expect(Array.from(canon(h, sharedKernel([0, 0, 0, 0], 5)).data)).toEqual(Array.from(h.data));
  });
  it("reads only the token and the three before it, each channel its own", () => {
    const h = gaussianMatrix(8, 3, 1, 4);
    const out = canon(h, sharedKernel([0, 0, 0, 1], 3)); // adds the row three back, zeros before the sequence
    for (let t = 0; t < 8; t++) {
      for (let c = 0; c < 3; c++) expect(out.data[t * 3 + c]).toBeCloseTo(h.data[t * 3 + c] + (t >= 3 ? h.data[(t - 3) * 3 + c] : 0), 12);
    }
  });
  it("gives a token different vectors after different neighbours, and the same after the same three", () => {
    const ids = [0, 1, 2, 3, 0, 4, 1, 2, 3, 0];
    const n = firstLayerNumbers(ids, 40, 1, [0, 1, 0.5, 0.25]);
    const gap = (a: number, b: number) => Math.max(...Array.from(row(n.canonOut, a), (v, c) => Math.abs(v - row(n.canonOut, b)[c])));
    expect(repeatedToken(ids)).toEqual([0, 4]);
    expect(gap(0, 4)).toBeGreaterThan(0.1); // "the" at the start, and after "cat sat on"
    expect(gap(4, 9)).toBeLessThan(1e-12); // "the" after "cat sat on" at 4 and at 9: the kernel sees no further
  });
  it("is the plain table lookup when the kernel is zero, whatever the sequence", () => {
    const ids = [5, 5, 5, 2, 7, 0];
    const n = firstLayerNumbers(ids, 40, 1, [0, 0, 0, 0]);
    expect(Array.from(n.canonOut.data)).toEqual(Array.from(n.tokens.data));
    expect(Array.from(n.tokens.data)).toEqual(Array.from(lookup(tokenTable, ids).data));
  });
});
