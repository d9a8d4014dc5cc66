// A layout's window layers on the page: the keys the last query sees, and which cells of a pooled map the window
// alone hides, against a brute-force walk over every (query, key) pair of the definition i − W < j ≤ i.
import { describe, expect, it } from "vitest";
import { cellVisible, lastQueryKeys, windowHiddenCells, windowLabel } from "../src/layout/data";

/** Whether query q may see key j in a layer with `window` (null: global), straight from the definition. */
const sees = (q: number, j: number, window: number | null) => j <= q && (window === null || q - window < j);

function visibleByWalk(r: number, c: number, block: number, length: number, window: number | null): boolean {
  for (let q = r * block; q < Math.min(length, (r + 1) * block); q++) {
    for (let j = c * block; j < Math.min(length, (c + 1) * block); j++) if (sees(q, j, window)) return true;
  }
  return false;
}

describe("lastQueryKeys", () => {
  it("keeps the last W keys, itself included, and all of a shorter sequence", () => {
    expect(lastQueryKeys(128, 32)).toEqual([96, 32]);
    expect(lastQueryKeys(20, 32)).toEqual([0, 20]);
    expect(lastQueryKeys(32, 32)).toEqual([0, 32]);
    expect(lastQueryKeys(64, 1)).toEqual([63, 1]);
    expect(lastQueryKeys(64, null)).toEqual([0, 64]);
  });

  it("counts the keys the definition lets the last query see", () => {
    for (const length of [1, 5, 17, 64]) {
      for (const window of [null, 1, 2, 7, 64, 100]) {
        const seen = Array.from({ length }, (_, j) => j).filter((j) => sees(length - 1, j, window));
        expect(lastQueryKeys(length, window)).toEqual([seen[0], seen.length]);
      }
    }
  });
});

describe("cellVisible", () => {
  it("agrees with a walk over every query and key of every cell", () => {
    for (const length of [1, 7, 12, 33]) {
      for (const block of [1, 2, 3, 5, 8]) {
        const side = Math.ceil(length / block);
        for (const window of [null, 1, 2, 4, 9, 40]) {
          for (let r = 0; r < side; r++) {
            for (let c = 0; c < side; c++) expect(cellVisible(r, c, block, length, window), `${length} ${block} ${window} (${r}, ${c})`).toBe(visibleByWalk(r, c, block, length, window));
          }
        }
      }
    }
  });

  it("leaves an unpooled window map a band W cells wide", () => {
    const row = (r: number) => Array.from({ length: 10 }, (_, c) => (cellVisible(r, c, 1, 10, 3) ? 1 : 0)).join("");
    expect([row(0), row(2), row(9)]).toEqual(["1000000000", "1110000000", "0000000111"]);
  });
});

describe("windowHiddenCells", () => {
  it("is 0 for a global layer and for a window as long as the sequence", () => {
    expect(windowHiddenCells(10, 1, 10, null)).toBe(0);
    expect(windowHiddenCells(10, 1, 10, 10)).toBe(0);
  });

  it("counts the cells on or below the diagonal that the window hides", () => {
    // 10 positions, window 3: row r hides its keys 0..r-3, so 0+0+0+1+...+7 = 28 cells.
    expect(windowHiddenCells(10, 1, 10, 3)).toBe(28);
    // Pooled 4 a cell over 16 positions, window 2: only cells two or more blocks back are empty.
    expect(windowHiddenCells(4, 4, 16, 2)).toBe(3);
  });
});

describe("windowLabel", () => {
  it("writes the window as the layout's describe() does", () => {
    expect(windowLabel(64)).toBe("window 64");
    expect(windowLabel(null)).toBe("global");
  });
});
