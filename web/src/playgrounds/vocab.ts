// The toy vocabulary and random tables the playgrounds share.
import { gaussianMatrix } from "../math";

export const WORDS = ["the", "cat", "sat", "on", "mat", "dog", "a", "ran"];
export const TOY_WIDTH = 6;
/** The page's random tables are drawn with this spread, larger than octlm's N(0, 0.02) so the colours show. */
export const TOY_STD = 0.5;
export const tokenTable = gaussianMatrix(WORDS.length, TOY_WIDTH, TOY_STD, 2024);

export function colLabels(n: number): string[] {
  return Array.from({ length: n }, (_, i) => `c${i}`);
}
