"""The position formulas' numbers that the explainer page must reproduce: one place that names the schemes it draws.

The page (``web/src/math.ts``) recomputes in TypeScript the sinusoidal table
in both layouts (Vaswani et al. 2017 §3.5), RoPE's inverse frequencies,
angles and rotation in both layouts (Su et al. 2021), ALiBi's slopes and
biases (Press et al. 2022 §3), T5's distance buckets (Raffel et al. 2020
§2.1), FIRE's interpolated distance (Li et al. 2023 §3.2) and xPos's decayed
rotation (Sun et al. 2023 §3.2), p-RoPE's frequencies (Barbero et al. 2024 §6),
KERPLE's bias (Chi et al. 2022) and CoPE's counted positions and bias
(Golovneva et al. 2024 §3). :func:`scheme_fixtures` evaluates the Python
implementations on fixed cases; :mod:`octlm.export.parity` adds the page's
other formulas and writes the fixture file.
"""

from __future__ import annotations

import torch

from octlm.model.config import DecoderConfig
from octlm.model.positions.attention_bias import FIRE_THRESHOLD, ALiBiPositions, FIREBias, KERPLEBias
from octlm.model.positions.contextual import ContextualPositions, contextual_positions
from octlm.model.positions.distances import alibi_slopes, t5_buckets
from octlm.model.positions.prope import PartialFrequencyRoPE
from octlm.model.positions.rotary import RotaryPositions
from octlm.model.positions.waves import rope_inverse_frequencies, sinusoidal_positions
from octlm.model.positions.xpos import XPosRotation

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
XPOS_CASES = [
    (16, 2, "interleaved", 6, 0),
    (16, 2, "half", 6, 0),
    (8, 1, "interleaved", 4, 3000),
    (8, 1, "half", 4, 1_000_000),
]

#: (d_model, n_heads, rope_theta, rope_fraction, rope_layout, length, offset): the paper's 0.75, a fraction that rounds
#: down, both layouts.
PROPE_CASES = [
    (16, 2, 10000.0, 0.75, "interleaved", 6, 0),
    (24, 2, 500.0, 0.6, "half", 5, 3000),
    (32, 2, 10000.0, 0.0, "half", 3, 9),
]
#: (q_len, k_len, seed): a full pass and a cached step; r1, r2 drawn as KERPLE starts them.
KERPLE_CASES = [(6, 6, 0), (2, 9, 1)]
#: (q_len, k_len, npos_max, seed): positions clamped (npos 3) or not, and a cached step.
COPE_CASES = [(6, 6, 16, 0), (6, 6, 3, 1), (2, 7, 8, 2)]


def float_lists(tensor: torch.Tensor) -> list:
    """A tensor as nested lists of Python floats (float32 values widened exactly)."""
    return tensor.detach().to(torch.float64).tolist()


def _sinusoidal() -> list[dict]:
    cases = []
    for length, width, offset, base, layout in SINUSOIDAL_CASES:
        table = sinusoidal_positions(length, width, offset=offset, base=base, layout=layout)
        cases.append(
            {
                "length": length,
                "width": width,
                "offset": offset,
                "base": base,
                "layout": layout,
                "table": float_lists(table),
            }
        )
    return cases


def _rope() -> list[dict]:
    cases = []
    generator = torch.Generator().manual_seed(7)
    for d_model, n_heads, theta, layout, length, offset in ROPE_CASES:
        config = DecoderConfig(
            vocab_size=300, d_model=d_model, n_heads=n_heads, position="rope", rope_theta=theta, rope_layout=layout
        )
        rope = RotaryPositions(config)
        head_dim = config.head_dim
        cos, sin = rope.angles(length, offset, torch.device("cpu"))
        q = torch.randn(1, 1, length, head_dim, generator=generator)
        k = torch.randn(1, 1, length, head_dim, generator=generator)
        q_rot, k_rot = rope.rotate(q, k, offset)
        cases.append(
            {
                "head_dim": head_dim,
                "theta": theta,
                "layout": layout,
                "length": length,
                "offset": offset,
                "inv_freq": float_lists(rope_inverse_frequencies(head_dim, theta)),
                "cos": float_lists(cos),
                "sin": float_lists(sin),
                "q": float_lists(q[0, 0]),
                "k": float_lists(k[0, 0]),
                "q_rotated": float_lists(q_rot[0, 0]),
                "k_rotated": float_lists(k_rot[0, 0]),
            }
        )
    return cases


def _alibi() -> dict:
    slopes = [{"n_heads": n, "slopes": float_lists(alibi_slopes(n))} for n in ALIBI_HEADS]
    biases = []
    for n_heads, q_len, k_len, offset in ALIBI_BIAS_CASES:
        config = DecoderConfig(vocab_size=300, d_model=8 * n_heads, n_heads=n_heads, position="alibi")
        bias = ALiBiPositions(config).score_bias(q_len, k_len, offset)
        biases.append({"n_heads": n_heads, "q_len": q_len, "k_len": k_len, "offset": offset, "bias": float_lists(bias)})
    return {"slopes": slopes, "biases": biases}


def _relative() -> dict:
    """T5 buckets of distances -3 .. 300, FIRE's interpolated distances and xPos rotations."""
    distances = torch.arange(-3, 301)
    t5 = [
        {
            "num_buckets": n,
            "max_distance": m,
            "distances": distances.tolist(),
            "buckets": t5_buckets(distances, n, m).tolist(),
        }
        for n, m in T5_CASES
    ]
    fire = []
    for q_len, k_len, offset, c, scale in FIRE_CASES:
        module = FIREBias(DecoderConfig(vocab_size=300, d_model=16, n_heads=2, position="fire"))
        with torch.no_grad():
            module.c.fill_(c)
            module.threshold_scale.fill_(scale)
        fire.append(
            {
                "q_len": q_len,
                "k_len": k_len,
                "offset": offset,
                "c": c,
                "threshold": scale * FIRE_THRESHOLD,
                "interpolated": float_lists(module.interpolated(q_len, k_len, offset)),
            }
        )
    xpos = []
    generator = torch.Generator().manual_seed(11)
    for d_model, n_heads, layout, length, offset in XPOS_CASES:
        config = DecoderConfig(vocab_size=300, d_model=d_model, n_heads=n_heads, position="xpos", rope_layout=layout)
        q, k = (torch.randn(1, 1, length, config.head_dim, generator=generator) for _ in range(2))
        scheme = XPosRotation(config)
        q_rot, k_rot = scheme.rotate(q, k, offset)
        reference = int(scheme.reference(torch.arange(offset, offset + length), offset + length))
        xpos.append(
            {
                "head_dim": config.head_dim,
                "theta": config.rope_theta,
                "layout": layout,
                "length": length,
                "offset": offset,
                "reference": reference,
                "q": float_lists(q[0, 0]),
                "k": float_lists(k[0, 0]),
                "q_rotated": float_lists(q_rot[0, 0]),
                "k_rotated": float_lists(k_rot[0, 0]),
            }
        )
    return {"t5": t5, "fire": fire, "xpos": xpos}


def _newer() -> dict:
    """p-RoPE's inverse frequencies and rotations, KERPLE's bias of one head, CoPE's positions and bias of one head."""
    return {"prope": _prope(), "kerple": _kerple(), "cope": _cope()}


def _prope() -> list[dict]:
    """p-RoPE's inverse frequencies and its rotation of random queries and keys, one entry per :data:`PROPE_CASES`."""
    prope, generator = [], torch.Generator().manual_seed(13)
    for d_model, n_heads, theta, fraction, layout, length, offset in PROPE_CASES:
        config = DecoderConfig(
            vocab_size=300,
            d_model=d_model,
            n_heads=n_heads,
            position="prope",
            rope_theta=theta,
            rope_fraction=fraction,
            rope_layout=layout,
        )
        scheme, (q, k) = (
            PartialFrequencyRoPE(config),
            (torch.randn(1, 1, length, config.head_dim, generator=generator) for _ in range(2)),
        )
        q_rot, k_rot = scheme.rotate(q, k, offset)
        prope.append(
            {
                "head_dim": config.head_dim,
                "theta": theta,
                "fraction": fraction,
                "layout": layout,
                "length": length,
                "offset": offset,
                "inv_freq": float_lists(scheme.inv_freq),
                "q": float_lists(q[0, 0]),
                "k": float_lists(k[0, 0]),
                "q_rotated": float_lists(q_rot[0, 0]),
                "k_rotated": float_lists(k_rot[0, 0]),
            }
        )
    return prope


def _kerple() -> list[dict]:
    """KERPLE's freshly initialised ``r1, r2`` and the bias of its one head, one entry per :data:`KERPLE_CASES`.

    Seeds torch's global generator, which the scheme's initialisation draws from.
    """
    kerple = []
    for q_len, k_len, seed in KERPLE_CASES:
        torch.manual_seed(seed)
        scheme = KERPLEBias(DecoderConfig(vocab_size=300, d_model=16, n_heads=1, n_layers=1, position="kerple"))
        bias = scheme.attention_bias(torch.zeros(1, 1, q_len, 16), torch.zeros(1, 1, k_len, 16))
        kerple.append(
            {
                "q_len": q_len,
                "k_len": k_len,
                "r1": scheme.r1.item(),
                "r2": scheme.r2.item(),
                "bias": float_lists(bias[0]),
            }
        )
    return kerple


def _cope() -> list[dict]:
    """CoPE's counted positions and bias of one head over random queries, keys and table, one entry per
    :data:`COPE_CASES`."""
    cope = []
    for q_len, k_len, npos, seed in COPE_CASES:
        generator = torch.Generator().manual_seed(seed)
        scheme = ContextualPositions(
            DecoderConfig(vocab_size=300, d_model=8, n_heads=1, n_layers=1, position="cope", cope_npos_max=npos)
        )
        # The table starts at zero, which would leave every bias 0: random rows make the fixture test the lookup.
        with torch.no_grad():
            scheme.embeddings.copy_(torch.randn(scheme.embeddings.shape, generator=generator))
        q, k = (torch.randn(1, 1, n, 8, generator=generator) * 2 for n in (q_len, k_len))
        visible = torch.ones(q_len, k_len, dtype=torch.bool).tril(k_len - q_len)
        cope.append(
            {
                "q": float_lists(q[0, 0]),
                "k": float_lists(k[0, 0]),
                "embeddings": float_lists(scheme.embeddings[0]),
                "positions": float_lists(contextual_positions(q, k, visible)[0, 0]),
                "bias": float_lists(scheme.attention_bias(q, k)[0, 0]),
            }
        )
    return cope


def scheme_fixtures() -> dict:
    """The cases of every formula above, keyed ``sinusoidal``, ``rope``, ``alibi``, ``t5``, ``fire``, ``xpos``,
    ``prope``, ``kerple``, ``cope``, each with its inputs and Python's outputs."""
    return {"sinusoidal": _sinusoidal(), "rope": _rope(), "alibi": _alibi(), **_relative(), **_newer()}


__all__ = ["float_lists", "scheme_fixtures"]
