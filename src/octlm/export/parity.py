"""Numbers from the Python formulas that the explainer page must reproduce.

The page (``web/src/math.ts``) recomputes every formula it shows in
TypeScript: the sinusoidal table in both layouts (Vaswani et al. 2017 §3.5),
RoPE's inverse frequencies, angles and rotation in both layouts (Su et al.
2021), ALiBi's slopes and biases (Press et al. 2022 §3), T5's distance
buckets (Raffel et al. 2020 §2.1), FIRE's interpolated distance (Li et al.
2023 §3.2), xPos's decayed rotation (Sun et al. 2023 §3.2), cosine similarity
and the labels it gives tokens. :func:`parity_fixtures` evaluates the Python implementations of
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

from octlm.inspect.diagnostics import cosine_neighbours
from octlm.fileio import atomic_write
from octlm.model import DecoderConfig
from octlm.model.positions.distances import t5_buckets
from octlm.model.positions import FIRE_THRESHOLD, ALiBiPositions, FIREBias, RotaryPositions, XPosRotation, alibi_slopes, rope_inverse_frequencies, sinusoidal_positions
from octlm.data.tokenizer import visible_token

#: (length, width, offset, base, layout): odd widths, far offsets and a small base included.
SINUSOIDAL_CASES = [
    (12, 8, 0, 10000.0, "interleaved"),
    (12, 8, 0, 10000.0, "concatenated"),
    (9, 7, 3, 10000.0, "interleaved"),
    (9, 7, 3, 10000.0, "concatenated"),
    (6, 16, 5000, 10000.0, "interleaved"),
    (6, 10, 20, 100.0, "concatenated"),
]

#: (d_model, n_heads, rope_theta, rope_layout, length, offset); head_dim = d_model / n_heads.
ROPE_CASES = [
    (16, 2, 10000.0, "interleaved", 6, 0),
    (16, 2, 10000.0, "half", 6, 0),
    (12, 2, 500.0, "interleaved", 5, 7),
    (12, 2, 500.0, "half", 5, 7),
    (8, 1, 10000.0, "interleaved", 4, 3000),
]

ALIBI_HEADS = [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24]
#: (n_heads, q_len, k_len, offset)
ALIBI_BIAS_CASES = [(4, 6, 6, 0), (6, 5, 5, 0), (3, 2, 7, 5)]

#: (num_buckets, max_distance): T5's own (32, 128) and small ones whose log bins are easy to check by eye.
T5_CASES = [(32, 128), (8, 20), (2, 5), (16, 64)]
#: (q_len, k_len, offset, c, threshold scale): FIRE's defaults, a threshold the queries pass, a cached step.
FIRE_CASES = [(8, 8, 0, 0.1, 1.0), (12, 12, 0, 0.5, 0.01), (3, 9, 6, 1.0, 0.005)]
#: (d_model, n_heads, rope_layout, length, offset): both layouts, and positions far enough for the decay to show.
XPOS_CASES = [(16, 2, "interleaved", 6, 0), (16, 2, "half", 6, 0), (8, 1, "interleaved", 4, 3000), (8, 1, "half", 4, 1_000_000)]

#: Token texts whose labels the page must show as the terminal does: spaces, line ends, C0, DEL and
#: C1 controls, a no-break space and a zero-width space (both kept), a split UTF-8 byte, non-BMP text.
TOKEN_LABEL_CASES = [
    " the", "\n\n", "\t\r\n", "\x00\x02\x1b[0m", "\x7f\x80\x9f", "a\xa0b", "\u200b", "\\xe4", "é", " 👑", "<|endoftext|>",
]

#: (rows, cols, seed, query row, k)
COSINE_CASES = [(10, 8, 0, 3, 4), (24, 16, 1, 0, 5), (5, 3, 2, 1, 4)]


def _values(tensor: torch.Tensor) -> list:
    """A tensor as nested lists of Python floats (float32 values widened exactly)."""
    return tensor.detach().to(torch.float64).tolist()


def _sinusoidal() -> list[dict]:
    cases = []
    for length, width, offset, base, layout in SINUSOIDAL_CASES:
        table = sinusoidal_positions(length, width, offset=offset, base=base, layout=layout)
        cases.append({"length": length, "width": width, "offset": offset, "base": base, "layout": layout, "table": _values(table)})
    return cases


def _rope() -> list[dict]:
    cases = []
    generator = torch.Generator().manual_seed(7)
    for d_model, n_heads, theta, layout, length, offset in ROPE_CASES:
        config = DecoderConfig(vocab_size=300, d_model=d_model, n_heads=n_heads, position="rope", rope_theta=theta, rope_layout=layout)
        rope = RotaryPositions(config)
        head_dim = config.head_dim
        cos, sin = rope.angles(length, offset, torch.device("cpu"))
        q = torch.randn(1, 1, length, head_dim, generator=generator)
        k = torch.randn(1, 1, length, head_dim, generator=generator)
        q_rot, k_rot = rope.rotate(q, k, offset)
        cases.append({
            "head_dim": head_dim, "theta": theta, "layout": layout, "length": length, "offset": offset,
            "inv_freq": _values(rope_inverse_frequencies(head_dim, theta)),
            "cos": _values(cos), "sin": _values(sin),
            "q": _values(q[0, 0]), "k": _values(k[0, 0]),
            "q_rotated": _values(q_rot[0, 0]), "k_rotated": _values(k_rot[0, 0]),
        })
    return cases


def _alibi() -> dict:
    slopes = [{"n_heads": n, "slopes": _values(alibi_slopes(n))} for n in ALIBI_HEADS]
    biases = []
    for n_heads, q_len, k_len, offset in ALIBI_BIAS_CASES:
        config = DecoderConfig(vocab_size=300, d_model=8 * n_heads, n_heads=n_heads, position="alibi")
        bias = ALiBiPositions(config).score_bias(q_len, k_len, offset)
        biases.append({"n_heads": n_heads, "q_len": q_len, "k_len": k_len, "offset": offset, "bias": _values(bias)})
    return {"slopes": slopes, "biases": biases}


def _relative() -> dict:
    """T5 buckets of distances -3 .. 300, FIRE's interpolated distances and xPos rotations."""
    distances = torch.arange(-3, 301)
    t5 = [{"num_buckets": n, "max_distance": m, "distances": distances.tolist(), "buckets": t5_buckets(distances, n, m).tolist()}
          for n, m in T5_CASES]
    fire = []
    for q_len, k_len, offset, c, scale in FIRE_CASES:
        module = FIREBias(DecoderConfig(vocab_size=300, d_model=16, n_heads=2, position="fire"))
        with torch.no_grad():
            module.c.fill_(c)
            module.threshold_scale.fill_(scale)
        fire.append({"q_len": q_len, "k_len": k_len, "offset": offset, "c": c, "threshold": scale * FIRE_THRESHOLD,
                     "interpolated": _values(module.interpolated(q_len, k_len, offset))})
    xpos = []
    generator = torch.Generator().manual_seed(11)
    for d_model, n_heads, layout, length, offset in XPOS_CASES:
        config = DecoderConfig(vocab_size=300, d_model=d_model, n_heads=n_heads, position="xpos", rope_layout=layout)
        q, k = (torch.randn(1, 1, length, config.head_dim, generator=generator) for _ in range(2))
        scheme = XPosRotation(config)
        q_rot, k_rot = scheme.rotate(q, k, offset)
        reference = int(scheme.reference(torch.arange(offset, offset + length), offset + length))
        xpos.append({"head_dim": config.head_dim, "theta": config.rope_theta, "layout": layout, "length": length, "offset": offset,
                     "reference": reference,
                     "q": _values(q[0, 0]), "k": _values(k[0, 0]), "q_rotated": _values(q_rot[0, 0]), "k_rotated": _values(k_rot[0, 0])})
    return {"t5": t5, "fire": fire, "xpos": xpos}


def _cosine() -> list[dict]:
    cases = []
    for rows, cols, seed, index, k in COSINE_CASES:
        table = torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed))
        if rows > 4:
            table[rows - 1] = -2.5 * table[index]  # an exactly opposite row: similarity -1
        similarity = F.cosine_similarity(table.unsqueeze(1), table.unsqueeze(0), dim=-1)
        neighbours = cosine_neighbours(table, index, k)
        cases.append({
            "table": _values(table), "similarity": _values(similarity), "index": index, "k": k,
            "neighbours": [{"index": i, "score": s} for i, s in neighbours],
        })
    return cases


def parity_fixtures() -> dict:
    """Every case the page's parity test checks, as a JSON-ready dict.

    Keys: ``sinusoidal``, ``rope``, ``alibi``, ``t5``, ``fire``, ``xpos``, ``cosine``, ``token_labels``
    (:func:`octlm.data.tokenizer.visible_token`); each case carries
    its inputs next to Python's outputs. Deterministic: the random inputs come
    from fixed seeds.
    """
    return {
        "about": "Written by `python -m octlm.export.parity`; read by web/test/parity.test.ts. Do not edit by hand.",
        "sinusoidal": _sinusoidal(),
        "rope": _rope(),
        "alibi": _alibi(),
        **_relative(),
        "cosine": _cosine(),
        "token_labels": [{"text": t, "label": visible_token(t)} for t in TOKEN_LABEL_CASES],
    }


def fixtures_json() -> str:
    """:func:`parity_fixtures` as the text of the committed fixture file."""
    return json.dumps(parity_fixtures(), indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m octlm.export.parity", description="Write the page's parity fixtures.")
    parser.add_argument("out", type=Path, help="where to write the JSON, e.g. web/test/fixtures/parity.json")
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(args.out, fixtures_json())
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
