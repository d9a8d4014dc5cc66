// A run's layer layout as octlm.inspect.attention_view.layout_view hands it to the page (window.OCTLM_RUN.layout),
// and which keys a layer's queries see: a window layer's query i sees keys i − W < j ≤ i, a global layer's every
// j ≤ i (the model's mask is octlm.model.blocks.window_keys; the parity fixtures hold these functions to it).

/** One layer of a layout, with the defaults it runs under applied. */
export interface LayerView {
  /** 0-based. */
  layer: number;
  /** The layer's position scheme. */
  position: string;
  /** Keys each query sees, itself included (tokens); null: global (every earlier key). */
  window: number | null;
  /** The layer's RoPE base; null for a scheme without one. */
  rope_theta: number | null;
  /** Queries scaled by max(1, log n / log T) (Llama 4's NoPE layers). */
  log_scale: boolean;
  /** RMSNorm on the queries and keys. */
  qk_norm: boolean;
  /** The layout's own words for the layer ("rope, window 64"): the label of its maps. */
  description: string;
}

/**
 * The keys the last query of a `length`-token sequence sees: [first key, how many]. A window of W keeps its last W
 * (all of them when the sequence is shorter); global keeps them all.
 */
export function lastQueryKeys(length: number, window: number | null): [number, number] {
  const first = window === null ? 0 : Math.max(0, length - window);
  return [first, length - first];
}

/**
 * Whether any query of cell row `r` may see any key of cell column `c` in a map of `length` positions pooled `block`
 * a side (the last block cut at `length`): some query q and key j of the cell with 0 ≤ q − j < W (W = ∞ for global).
 * A cell where none may is empty by construction: the page draws it grey, like the future.
 */
export function cellVisible(r: number, c: number, block: number, length: number, window: number | null): boolean {
  const q0 = r * block;
  const q1 = Math.min(length, (r + 1) * block) - 1;
  const k0 = c * block;
  const k1 = Math.min(length, (c + 1) * block) - 1;
  // q − j takes every whole value from q0 − k1 to q1 − k0; it must meet [0, W − 1].
  return q1 - k0 >= 0 && (window === null || q0 - k1 <= window - 1);
}

/** Cells of a pooled map that only the window hides: visible to causal attention, outside the layer's window. */
export function windowHiddenCells(side: number, block: number, length: number, window: number | null): number {
  let hidden = 0;
  for (let r = 0; r < side; r++) {
    for (let c = 0; c <= r; c++) if (!cellVisible(r, c, block, length, window)) hidden++;
  }
  return hidden;
}

/** The window as the page writes it: "window 64" or "global". */
export function windowLabel(window: number | null): string {
  return window === null ? "global" : `window ${window}`;
}
