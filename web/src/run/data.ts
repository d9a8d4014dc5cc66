// The data of a trained run, as `octlm serve` and `octlm export-web` hand it to the page
// (window.OCTLM_RUN, set by run-data.js; written by octlm.inspect.embeddings.run_view).
import type { RunAttention } from "../attention/data";
import type { LayerView } from "../layout/data";
import type { Matrix } from "../math";

export interface PackedMatrix {
  rows: number;
  cols: number;
  /** float32 little-endian, row-major, base64. */
  float32_base64: string;
}

export interface RunData {
  format: number;
  name: string;
  model: { vocab_size: number; d_model: number; context_length: number; n_heads: number; n_layers: number; position: string; [key: string]: unknown };
  summary: { steps: number | null; val_loss: number | null; val_bpb: number | null };
  tokens: string[];
  counts: number[] | null;
  embedding: PackedMatrix;
  pca: { x: number[]; y: number[]; explained: [number, number] };
  positions: (PackedMatrix & { source: "learned" | "computed"; description: string }) | null;
  positions_note: string;
  loss: { train: Array<[number, number]>; eval: Array<[number, number, number]> };
  /** The run's attention on its validation text (absent from pages exported before it, null without a validation split). */
  attention?: RunAttention | null;
  /** Each layer's scheme and window for a run with a layer layout (--layers); null or absent without one. */
  layout?: LayerView[] | null;
}

declare global {
  interface Window {
    OCTLM_RUN?: RunData;
  }
}

/** Float32 little-endian bytes in base64 -> a float64 matrix. */
export function unpack(p: PackedMatrix): Matrix {
  const bin = atob(p.float32_base64);
  const view = new DataView(new ArrayBuffer(bin.length));
  for (let i = 0; i < bin.length; i++) view.setUint8(i, bin.charCodeAt(i));
  const n = p.rows * p.cols;
  if (bin.length !== 4 * n) throw new Error(`run data: expected ${n} float32 values, got ${bin.length} bytes`);
  const data = new Float64Array(n);
  for (let i = 0; i < n; i++) data[i] = view.getFloat32(4 * i, true);
  return { rows: p.rows, cols: p.cols, data };
}

/**
 * A token's text with its invisible characters shown: a space as ␣, a newline as ↵, a tab as ⇥,
 * a carriage return as ⇤, other control characters (C0, DEL and C1) as \xNN; the same labels as
 * Python's octlm.tokenizer.visible_token (the parity fixtures hold both to it).
 */
export function showToken(text: string): string {
  return text
    .replace(/ /g, "␣")
    .replace(/\n/g, "↵")
    .replace(/\t/g, "⇥")
    .replace(/\r/g, "⇤")
    .replace(/[\u0000-\u001f\u007f-\u009f]/g, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, "0")}`);
}

export type Lookup = { id: number; how: string } | { id: null; suggestions: number[]; message: string };

/**
 * Find the token the user means, comparing shown forms (so "␣the" and " the" are the same):
 * "#123" is an ID; otherwise the text itself when it is one token, else the text with a
 * leading space (byte-level BPE keeps the space in front of a word), else suggestions
 * of tokens that start with it.
 */
export function lookupToken(query: string, tokens: string[], shown: string[] = tokens.map(showToken)): Lookup {
  const idMatch = /^#(\d+)$/.exec(query.trim());
  if (idMatch) {
    const id = Number(idMatch[1]);
    if (id < tokens.length) return { id, how: "by ID" };
    return { id: null, suggestions: [], message: `ID ${id} is outside the vocabulary (0 to ${tokens.length - 1}).` };
  }
  const typed = showToken(query);
  if (typed.length === 0) return { id: null, suggestions: [], message: "Type a token, or #ID." };
  const exact = shown.indexOf(typed);
  if (exact >= 0) return { id: exact, how: "as typed" };
  if (!typed.startsWith("␣")) {
    const spaced = shown.indexOf(`␣${typed}`);
    if (spaced >= 0) return { id: spaced, how: "with its leading space" };
  }
  const starts = shown
    .map((t, i) => [t, i] as const)
    .filter(([t]) => t.startsWith(typed) || t.startsWith(`␣${typed}`))
    .sort((a, b) => a[0].length - b[0].length || a[1] - b[1])
    .slice(0, 8)
    .map(([, i]) => i);
  return {
    id: null,
    suggestions: starts,
    message: `“${typed}” is not one token of this vocabulary${starts.length ? "; tokens that start with it:" : "."}`,
  };
}
