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
from pathlib import Path

import torch
import torch.nn.functional as F

from octlm.data.token_display import visible_token
from octlm.fileio import atomic_write
from octlm.inspect.diagnostics import cosine_neighbours
from octlm.model.positions.parity import float_lists, scheme_fixtures

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


def parity_fixtures() -> dict:
    """Every case the page's parity test checks, as a JSON-ready dict.

    Keys: ``sinusoidal``, ``rope``, ``alibi``, ``t5``, ``fire``, ``xpos``, ``prope``, ``kerple``, ``cope``, ``cosine``,
    ``token_labels``
    (:func:`octlm.data.token_display.visible_token`); each case carries
    its inputs next to Python's outputs. Deterministic: the random inputs come
    from fixed seeds.
    """
    return {
        "about": "Written by `python -m octlm.export.parity`; read by web/test/parity.test.ts. Do not edit by hand.",
        **scheme_fixtures(),
        "cosine": _cosine(),
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
