"""Numbers from the Python formulas that the explainer page must reproduce.

The page (``web/src/math.ts``) recomputes every formula it shows in
TypeScript: the position schemes' (their cases are in
:mod:`octlm.model.positions.parity`), cosine similarity and the labels it
gives tokens. :func:`parity_fixtures` evaluates the Python implementations of
the same formulas (:mod:`octlm.model.positions`, :mod:`octlm.inspect.diagnostics`) on a
fixed set of cases; the page's Vitest test reads the result from
``web/test/fixtures/parity.json`` and checks its own numbers to 1e-5, and
``tests/test_parity_fixtures.py`` fails when that committed file no longer
matches what Python computes.

Regenerate with ``python -m octlm.export.parity web/test/fixtures/parity.json``.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F

from octlm.data.token_display import visible_token
from octlm.export.first_layer_parity import first_layer_fixtures
from octlm.export.gate_parity import gate_fixtures
from octlm.fileio import atomic_write
from octlm.inspect.diagnostics import cosine_neighbours
from octlm.model.blocks import window_keys
from octlm.model.positions.parity import float_lists, scheme_fixtures
from octlm.model.positions.waves import rope_inverse_frequencies

#: Token texts whose labels the page must show as the terminal does: spaces, line ends, C0, DEL and
#: C1 controls, a no-break space and a zero-width space (both kept), a split UTF-8 byte, non-BMP text.
TOKEN_LABEL_CASES = [
    " the",
    "\n\n",
    "\t\r\n",
    "\x00\x02\x1b[0m",
    "\x7f\x80\x9f",
    "a\xa0b",
    "\u200b",
    "\\xe4",
    "é",
    " 👑",
    "<|endoftext|>",
]

#: (rows, cols, seed, query row, k)
COSINE_CASES = [(10, 8, 0, 3, 4), (24, 16, 1, 0, 5), (5, 3, 2, 1, 4)]


def _cosine() -> list[dict]:
    cases = []
    for rows, cols, seed, index, k in COSINE_CASES:
        table = torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed))
        if rows > 4:
            table[rows - 1] = -2.5 * table[index]  # an exactly opposite row: similarity -1
        similarity = F.cosine_similarity(table.unsqueeze(1), table.unsqueeze(0), dim=-1)
        neighbours = cosine_neighbours(table, index, k)
        cases.append(
            {
                "table": float_lists(table),
                "similarity": float_lists(similarity),
                "index": index,
                "k": k,
                "neighbours": [{"index": i, "score": s} for i, s in neighbours],
            }
        )
    return cases


#: (head_dim, rope_theta, training length T, positions shown): the page's default (64, 10000, T = 64, 4T), a small
#: theta whose pairs turn fast, a T so short every pair is slow, and one where every pair turns.
ROPE_REACH_CASES = [(64, 10000.0, 64, 256), (16, 500.0, 20, 80), (8, 10000.0, 4, 16), (8, 4.0, 200, 300)]


def rope_reach_distance(inv_freq: float, train_length: int, position: int) -> float:
    """Radians from ``position``'s angle (``position * inv_freq``) to the nearest angle a training position ``m <
    train_length`` gave the same pair, round the circle; ``0`` for a training position."""
    return min(abs(math.remainder((position - m) * inv_freq, 2 * math.pi)) for m in range(train_length))


def _rope_reach() -> list[dict]:
    """Which angles RoPE's training positions show each pair, and which positions past T reach others.

    Computed by search, not by the page's arc formula: a position past T is "seen" (1) when some training angle lies
    within half a step (``inv_freq / 2``) of its own, "unseen" (2) when none does; training positions are 0. The first
    pair that never completes a turn, from ``T * theta_i < 2 pi`` solved for ``i``.
    """
    cases = []
    for head_dim, theta, T, positions in ROPE_REACH_CASES:
        inv_freq = rope_inverse_frequencies(head_dim, theta).tolist()
        cells = [
            "".join("0" if p < T else "1" if rope_reach_distance(w, T, p) <= w / 2 else "2" for p in range(positions))
            for w in inv_freq
        ]
        # T theta^(-2i/d) < 2 pi  <=>  i > d ln(T / 2 pi) / (2 ln theta)
        first_slow = min(
            head_dim // 2, max(0, math.floor(head_dim * math.log(T / (2 * math.pi)) / (2 * math.log(theta))) + 1)
        )
        cases.append(
            {
                "head_dim": head_dim,
                "theta": theta,
                "train_length": T,
                "positions": positions,
                "inv_freq": inv_freq,
                "turns": [T * w / (2 * math.pi) for w in inv_freq],
                "first_slow_pair": first_slow,
                "cells": cells,
            }
        )
    return cases


#: (length, positions per pooled cell, window or None for global): unpooled, a last block cut short, a window of one
#: token, a window as long as the text, and a window narrower than a cell.
WINDOW_CASES = [(8, 1, 3), (10, 3, 4), (33, 4, 5), (20, 3, 1), (16, 2, 16), (12, 5, None), (40, 8, 3)]


def _windows() -> list[dict]:
    """Which keys a layout's window layer lets queries see, from the model's own mask
    (:func:`octlm.model.blocks.window_keys`, or the causal one for global): the keys the last query sees (first,
    count), and which cells of a map pooled ``block`` positions a side hold any visible (query, key) pair ("1")."""
    cases = []
    for length, block, window in WINDOW_CASES:
        mask = (
            torch.ones(length, length, dtype=torch.bool).tril()
            if window is None
            else window_keys(length, length, window)
        )
        last = mask[-1].nonzero().flatten().tolist()
        side = -(-length // block)
        padded = F.pad(mask, (0, side * block - length, 0, side * block - length))
        cells = padded.reshape(side, block, side, block).any(dim=3).any(dim=1)
        cases.append(
            {
                "length": length,
                "block": block,
                "window": window,
                "last_query_keys": [last[0], len(last)],
                "cells": ["".join("1" if v else "0" for v in row) for row in cells.tolist()],
            }
        )
    return cases


def parity_fixtures() -> dict:
    """Every case the page's parity test checks, as a JSON-ready dict.

    Keys: ``sinusoidal``, ``rope``, ``alibi``, ``t5``, ``fire``, ``xpos``, ``prope``, ``kerple``, ``cope``, ``cosine``,
    ``rope_reach`` (which angles RoPE's training positions show each channel pair), ``windows`` (which keys a
    window layer's queries see, and which cells of a pooled map), ``gates`` (FoX's and stick-breaking's weights,
    :mod:`octlm.export.gate_parity`), ``first_layer`` (the bigram rows, value gates and Canon output of playground
    11, :mod:`octlm.export.first_layer_parity`), ``token_labels``
    (:func:`octlm.data.token_display.visible_token`); each case carries
    its inputs next to Python's outputs. Deterministic: the random inputs come
    from fixed seeds.
    """
    return {
        "about": "Written by `python -m octlm.export.parity`; read by web/test/parity.test.ts. Do not edit by hand.",
        **scheme_fixtures(),
        "cosine": _cosine(),
        "rope_reach": _rope_reach(),
        "windows": _windows(),
        "gates": gate_fixtures(),
        "first_layer": first_layer_fixtures(),
        "token_labels": [{"text": t, "label": visible_token(t)} for t in TOKEN_LABEL_CASES],
    }


def fixtures_json() -> str:
    """:func:`parity_fixtures` as the text of the committed fixture file."""
    return json.dumps(parity_fixtures(), indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m octlm.export.parity", description="Write the page's parity fixtures."
    )
    parser.add_argument("out", type=Path, help="where to write the JSON, e.g. web/test/fixtures/parity.json")
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(args.out, fixtures_json())
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
