"""RoPE context extension and the half-split layout, against the papers' formulas and transformers.

The hand formulas below are written from the papers (Chen et al. 2023 eq. 4;
Peng et al. 2023 §3.1-3.4); transformers' ``ROPE_INIT_FUNCTIONS`` and LLaMA's
rotary embedding are a second, independent implementation.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

from octlm import Decoder, DecoderConfig
from octlm.model import KVCache
from octlm.model.positions import ROPE_SCALINGS, RopeScaling, RotaryPositions

# results depend on float rounding: scripts/test.sh runs them again under other CPU kernels and threads
pytestmark = pytest.mark.rounding

FACTORS = [1.0, 2.0, 4.0, 8.0, 16.0]
DIMS = [4, 16, 32, 64]


def plain(d, theta):
    """Su et al. 2021: theta_i = theta^(-2i/d), i = 0 .. d/2 - 1, one Python float at a time."""
    return [theta ** (-2 * i / d) for i in range(d // 2)]


def hand_linear(d, theta, s):
    # Chen et al. 2023: f'(x, m) = f(x, m / s), so every angle m * theta_i becomes m * theta_i / s.
    return [w / s for w in plain(d, theta)]


def hand_ntk(d, theta, s):
    # Change the base so the slowest pair (i = d/2 - 1) turns s times slower: b'^(-(d-2)/d) = b^(-(d-2)/d) / s.
    new_base = theta * s ** (d / (d - 2))
    return plain(d, new_base)


def hand_dynamic(d, theta, alpha, length, seq_len):
    scale = max(1.0, alpha * seq_len / length - (alpha - 1.0))
    return plain(d, theta * scale ** (d / (d - 2)))


def hand_yarn(d, theta, s, length, beta_fast=32.0, beta_slow=1.0):
    """NTK-by-parts as the YaRN reference code does it, from wavelengths.

    Pair i has wavelength 2 pi theta^(2i/d) and so turns r(i) = length / wavelength
    times over the training length. Solving r(x) = beta for a fractional pair index
    x gives the ends of the ramp; they are rounded outwards, and pairs below the
    fast end keep their frequency, pairs above the slow end are divided by s.
    """

    def index_turning(rotations):
        # length / (2 pi theta^(2x/d)) = rotations  <=>  x = (d/2) * log_theta(length / (2 pi rotations))
        return (d / 2) * math.log(length / (2 * math.pi * rotations), theta)

    low = max(math.floor(index_turning(beta_fast)), 0)
    high = min(math.ceil(index_turning(beta_slow)), d - 1)
    if high == low:
        high += 0.001
    out = []
    for i, w in enumerate(plain(d, theta)):
        mix = min(max((i - low) / (high - low), 0.0), 1.0)  # 0: keep, 1: interpolate
        out.append(w * (1 - mix) + (w / s) * mix)
    attention = 0.1 * math.log(s) + 1.0 if s > 1 else 1.0
    return out, attention


def hand_llama3(d, theta, s, length, low=1.0, high=4.0):
    """Llama 3.1's release: wavelength 2 pi / w per pair; short ones (< length / high) stay, long ones (> length / low)
    are
    divided by s, and in between the two mix with weight (length / wavelength - low) / (high - low) on the unscaled
    one."""
    out = []
    for w in plain(d, theta):
        wavelength = 2 * math.pi / w
        if wavelength < length / high:
            out.append(w)
        elif wavelength > length / low:
            out.append(w / s)
        else:
            smooth = (length / wavelength - low) / (high - low)
            out.append((1 - smooth) * w / s + smooth * w)
    return out


def ours(method, d, theta, s, length, seq_len=None):
    inv, attention = RopeScaling(method, s, length).frequencies(d, theta, seq_len or length)
    assert inv.dtype == torch.float64 and inv.shape == (d // 2,)
    return inv.tolist(), attention


@pytest.mark.parametrize("d", DIMS)
@pytest.mark.parametrize("s", FACTORS)
@pytest.mark.parametrize("theta", [10000.0, 500.0])
def test_linear_and_ntk_match_the_formulas(d, s, theta):
    inv, attention = ours("linear", d, theta, s, 128)
    assert inv == pytest.approx(hand_linear(d, theta, s), rel=1e-12) and attention == 1.0
    inv, attention = ours("ntk", d, theta, s, 128)
    assert inv == pytest.approx(hand_ntk(d, theta, s), rel=1e-12) and attention == 1.0
    # NTK's defining property: the fastest pair is untouched, the slowest is slowed by exactly s.
    assert inv[0] == 1.0 and inv[-1] == pytest.approx(plain(d, theta)[-1] / s, rel=1e-12)


@pytest.mark.parametrize("d", DIMS)
@pytest.mark.parametrize("alpha", [1.0, 2.0, 8.0])
@pytest.mark.parametrize("seq_len", [1, 100, 128, 129, 512, 2048])
def test_dynamic_ntk_matches_the_formula(d, alpha, seq_len):
    inv, attention = ours("dynamic-ntk", d, 10000.0, alpha, 128, seq_len)
    assert inv == pytest.approx(hand_dynamic(d, 10000.0, alpha, 128, seq_len), rel=1e-12) and attention == 1.0
    if seq_len <= 128:
        assert inv == pytest.approx(plain(d, 10000.0), rel=1e-12)  # within the training length: plain RoPE


@pytest.mark.parametrize("d", DIMS)
@pytest.mark.parametrize("s", FACTORS)
@pytest.mark.parametrize("length", [16, 128, 2048])
def test_yarn_matches_the_formula(d, s, length):
    inv, attention = ours("yarn", d, 10000.0, s, length)
    want, want_attention = hand_yarn(d, 10000.0, s, length)
    assert inv == pytest.approx(want, rel=1e-12)
    assert attention == pytest.approx(want_attention, rel=1e-15)


@pytest.mark.parametrize("d", DIMS)
@pytest.mark.parametrize("s", FACTORS)
@pytest.mark.parametrize("length,theta", [(16, 10000.0), (128, 10000.0), (8192, 500000.0)])
@pytest.mark.parametrize("low,high", [(1.0, 4.0), (2.0, 8.0)])
def test_llama3_matches_the_formula(d, s, length, theta, low, high):
    inv, attention = RopeScaling("llama3", s, length, low_freq_factor=low, high_freq_factor=high).frequencies(
        d, theta, length
    )
    assert inv.tolist() == pytest.approx(hand_llama3(d, theta, s, length, low, high), rel=1e-12) and attention == 1.0
    # the fastest pair (wavelength 2 pi, under length / high here) is never touched
    assert inv[0] == 1.0 or length / high <= 2 * math.pi


def llama_config(d, theta, rope_type="default", length=128, partial=1.0, **params):
    return LlamaConfig(
        hidden_size=2 * d,
        num_attention_heads=2,
        max_position_embeddings=length,
        rope_parameters={"rope_type": rope_type, "rope_theta": theta, "partial_rotary_factor": partial, **params},
    )


@pytest.mark.parametrize("d", [8, 16, 32])
@pytest.mark.parametrize("s", [2.0, 4.0, 16.0])
@pytest.mark.parametrize("partial", [1.0, 0.5])
def test_scalings_match_transformers_rope_init_functions(d, s, partial):
    length, rd = 128, int(d * partial)
    cases = [
        ("linear", "linear", {"factor": s}, None),
        ("dynamic-ntk", "dynamic", {"factor": s}, 700),
        ("yarn", "yarn", {"factor": s, "original_max_position_embeddings": length}, None),
        (
            "llama3",
            "llama3",
            {"factor": s, "original_max_position_embeddings": length, "low_freq_factor": 1.0, "high_freq_factor": 4.0},
            None,
        ),
    ]
    for method, rope_type, params, seq_len in cases:
        config = llama_config(d, 10000.0, rope_type, length, partial, **params)
        kwargs = {} if seq_len is None else {"seq_len": seq_len}
        want, want_attention = ROPE_INIT_FUNCTIONS[rope_type](config, "cpu", **kwargs)
        inv, attention = ours(method, rd, 10000.0, s, length, seq_len)
        assert inv == pytest.approx(want.tolist(), rel=2e-6), method
        assert attention == pytest.approx(want_attention, rel=1e-6), method
    # transformers has no static NTK; its dynamic form with alpha = 1 at seq_len = s * T is the same base.
    config = llama_config(d, 10000.0, "dynamic", length, partial, factor=1.0)
    want, _ = ROPE_INIT_FUNCTIONS["dynamic"](config, "cpu", seq_len=int(s * length))
    assert ours("ntk", rd, 10000.0, s, length)[0] == pytest.approx(want.tolist(), rel=2e-6)


def half_rope(d, theta=10000.0, scaling=None):
    scheme = RotaryPositions(
        DecoderConfig(d_model=2 * d, n_heads=2, position="rope", rope_theta=theta, rope_layout="half")
    )
    scheme.set_rope_scaling(scaling)
    return scheme


def llama_rotate(config, q, k, offset):
    rotary = LlamaRotaryEmbedding(config)
    positions = torch.arange(offset, offset + q.shape[-2]).unsqueeze(0)
    cos, sin = rotary(q, positions)
    return apply_rotary_pos_emb(q, k, cos, sin)


@given(
    seed=st.integers(0, 2**16),
    offset=st.integers(0, 200),
    theta=st.sampled_from([10000.0, 500000.0, 100.0]),
    d=st.sampled_from([8, 16, 64]),
)
def test_half_split_rope_equals_llama_rotary_embedding(seed, offset, theta, d):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, 2, 9, d, generator=g), torch.randn(2, 2, 9, d, generator=g)
    want_q, want_k = llama_rotate(llama_config(d, theta), q, k, offset)
    got_q, got_k = half_rope(d, theta).rotate(q, k, offset)
    # transformers forms the angles in float32, octlm in float64: they differ by float32 rounding of angles ~ 200.
    torch.testing.assert_close(got_q, want_q, atol=5e-5, rtol=1e-5)
    torch.testing.assert_close(got_k, want_k, atol=5e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "method,rope_type,params",
    [
        ("linear", "linear", {"factor": 4.0}),
        ("yarn", "yarn", {"factor": 4.0, "original_max_position_embeddings": 32}),
        ("dynamic-ntk", "dynamic", {"factor": 2.0}),
        (
            "llama3",
            "llama3",
            {"factor": 4.0, "original_max_position_embeddings": 32, "low_freq_factor": 1.0, "high_freq_factor": 4.0},
        ),
    ],
)
def test_scaled_half_rope_equals_llama_scaled_rotary(method, rope_type, params):
    d, length = 16, 32
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(1, 2, 100, d, generator=g), torch.randn(1, 2, 100, d, generator=g)
    config = llama_config(d, 10000.0, rope_type, length, **params)
    want_q, want_k = llama_rotate(config, q, k, 0)  # positions 0..99: dynamic NTK sees seq_len 100
    got_q, got_k = half_rope(d, scaling=RopeScaling(method, params["factor"], length)).rotate(q, k, 0)
    torch.testing.assert_close(got_q, want_q, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(got_k, want_k, atol=2e-5, rtol=1e-5)


@given(seed=st.integers(0, 2**16), t=st.integers(0, 300), s=st.sampled_from([2, 4, 8]))
def test_linear_interpolation_reads_position_t_as_t_over_s(seed, t, s):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 1, 1, 16, generator=g)
    scaled = RotaryPositions(DecoderConfig(d_model=32, n_heads=2, position="rope"))
    scaled.set_rope_scaling(RopeScaling("linear", float(s), 128))
    unscaled = RotaryPositions(DecoderConfig(d_model=32, n_heads=2, position="rope"))
    torch.testing.assert_close(scaled.rotate(x, x, s * t)[0], unscaled.rotate(x, x, t)[0], atol=1e-5, rtol=1e-5)


def test_yarn_temperature_scales_both_q_and_k():
    scheme = half_rope(16, scaling=RopeScaling("yarn", 8.0, 128))
    q = torch.randn(1, 1, 5, 16)
    rq, rk = scheme.rotate(q, q, 3)
    factor = 0.1 * math.log(8.0) + 1.0
    torch.testing.assert_close(rq.norm(dim=-1), factor * q.norm(dim=-1), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rk.norm(dim=-1), factor * q.norm(dim=-1), atol=1e-5, rtol=1e-5)


def tiny(position="rope", context_length=16, **kw):
    torch.manual_seed(0)
    return Decoder(
        DecoderConfig(
            position=position, context_length=context_length, d_model=32, n_heads=4, n_layers=2, vocab_size=64, **kw
        )
    ).eval()


def test_dynamic_ntk_keeps_no_stale_state():
    model = tiny()
    model.set_rope_scaling("dynamic-ntk", 1.0)
    short = torch.randint(0, 64, (1, 10))
    long = torch.randint(0, 64, (1, 200))
    before = model(short)
    model(long)  # a long sequence in between must not change what a short one sees
    after = model(short)
    torch.testing.assert_close(after, before, rtol=0, atol=0)
    # ...and within the training length dynamic NTK is plain RoPE
    model.set_rope_scaling(None)
    torch.testing.assert_close(model(short), before, rtol=0, atol=0)
    # the same through cached decoding: a long cached run, then a fresh short one
    model.set_rope_scaling("dynamic-ntk", 1.0)
    cache = KVCache(2)
    model.next_token_logits(long, cache)
    fresh = KVCache(2)
    torch.testing.assert_close(model.next_token_logits(short, fresh), before[:, -1].float(), rtol=0, atol=1e-6)


@pytest.mark.parametrize("method", sorted(ROPE_SCALINGS))
def test_every_scaling_runs_far_past_the_training_length(method):
    model = tiny(context_length=8)
    model.set_rope_scaling(method, 16.0)
    logits = model(torch.randint(0, 64, (1, 16 * 8)))
    assert torch.isfinite(logits).all()


def test_scaling_bad_input():
    with pytest.raises(ValueError, match="needs position='rope'"):
        tiny("alibi").set_rope_scaling("linear", 2.0)
    with pytest.raises(ValueError, match=">= 1"):
        tiny().set_rope_scaling("linear", 0.5)
    with pytest.raises(ValueError, match="unknown; choose one of: linear, ntk, dynamic-ntk, yarn, llama3"):
        tiny().set_rope_scaling("xpos", 2.0)
    with pytest.raises(ValueError, match="0 < low_freq_factor < high_freq_factor"):
        RopeScaling("llama3", 2.0, 128, low_freq_factor=4.0, high_freq_factor=1.0)
    with pytest.raises(ValueError, match="rope_theta > 1"):
        Decoder(DecoderConfig(position="rope", rope_theta=1.0, d_model=32, n_heads=2)).set_rope_scaling("yarn", 2.0)


def hand_scaled(method, d, theta, s, length, seq_len):
    """The frequencies and attention factor of each method, from the hand formulas above."""
    if method == "yarn":
        return hand_yarn(d, theta, s, length)
    return {
        "linear": lambda: hand_linear(d, theta, s),
        "ntk": lambda: hand_ntk(d, theta, s),
        "dynamic-ntk": lambda: hand_dynamic(d, theta, s, length, seq_len),
        "llama3": lambda: hand_llama3(d, theta, s, length),
    }[method](), 1.0


def turn_pairs_by_hand(x, angles, layout, factor):
    """Pair i of ``x`` (interleaved: 2i, 2i+1; half: i, i + d/2) turned by ``angles[i]``, times ``factor``."""
    d, out = len(x), list(x)
    for i, angle in enumerate(angles):
        a, b = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + d // 2)
        out[a] = factor * (x[a] * math.cos(angle) - x[b] * math.sin(angle))
        out[b] = factor * (x[a] * math.sin(angle) + x[b] * math.cos(angle))
    return out


@pytest.mark.parametrize("method", sorted(ROPE_SCALINGS))
@pytest.mark.parametrize("layout", ["interleaved", "half"])
@settings(max_examples=20)  # 10 cases, each a model and a few positions: enough to reach every pair and factor
@given(
    factor=st.sampled_from([2.0, 4.0, 8.0]),
    fraction=st.sampled_from([0.25, 0.5, 0.75]),
    offset=st.integers(0, 400),
    seed=st.integers(0, 2**16),
)
def test_prope_under_each_scaling_turns_its_kept_pairs_by_the_scaled_frequencies(
    method, layout, factor, fraction, offset, seed
):
    """p-RoPE under a scaling: the first floor(fraction d/2) pairs turn by the scaled RoPE frequency of their index (the
    hand formulas above, over the whole rotary dimension), the rest not at all, and YaRN's factor multiplies every pair
    (Peng et al. 2023 §3.4 scales q and k as a whole)."""
    d, length, theta = 16, 32, 10000.0
    model = Decoder(
        DecoderConfig(
            position="prope",
            context_length=length,
            d_model=2 * d,
            n_heads=2,
            n_layers=1,
            vocab_size=64,
            rope_fraction=fraction,
            rope_layout=layout,
        )
    )
    model.set_rope_scaling(method, factor)
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(1, 1, 3, d, generator=g), torch.randn(1, 1, 5, d, generator=g)
    rq, rk = model.positions.rotate(q, k, offset + 2)  # keys from offset, queries from offset + 2, ending together
    end = offset + 5
    frequencies, attention = hand_scaled(method, d, theta, factor, length, end)
    kept = math.floor(fraction * d / 2)
    for x, rotated in ((q, rq), (k, rk)):
        first = end - x.shape[2]
        for n in range(x.shape[2]):
            angles = [(first + n) * w if i < kept else 0.0 for i, w in enumerate(frequencies)]
            want = turn_pairs_by_hand(x[0, 0, n].tolist(), angles, layout, attention)
            # float64 angles up to ~400 rad cast to float32 cos and sin, float32 products of entries ~4: ~1e-6
            assert rotated[0, 0, n].tolist() == pytest.approx(want, abs=2e-5), (n, first + n)
