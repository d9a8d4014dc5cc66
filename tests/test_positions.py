"""Position schemes against the formulas of their papers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from octlm import Decoder, DecoderConfig, sinusoidal_positions
from octlm.model.positions import SCHEMES, RotaryPositions, rope_inverse_frequencies

# results depend on float rounding: scripts/test.sh runs them again under other CPU kernels and threads
pytestmark = pytest.mark.rounding


def formula_table(length, width, offset=0, base=10000.0):
    """Vaswani et al. 2017 §3.5 written out with Python floats, one entry at a time."""
    table = np.zeros((length, width))
    for t in range(length):
        for col in range(width):
            i2 = col - col % 2
            angle = (t + offset) / base ** (i2 / width)
            table[t, col] = math.sin(angle) if col % 2 == 0 else math.cos(angle)
    return table


@pytest.mark.parametrize("length,width", [(1, 2), (16, 8), (128, 128), (300, 64), (4096, 6), (50, 7)])
def test_sinusoidal_matches_formula(length, width):
    got = sinusoidal_positions(length, width)
    assert got.dtype == torch.float32 and got.shape == (length, width)
    np.testing.assert_allclose(got.numpy(), formula_table(length, width), rtol=0, atol=1e-6)


@given(
    length=st.integers(1, 40),
    width=st.integers(1, 40),
    offset=st.integers(0, 5000),
    base=st.sampled_from([100.0, 10000.0, 5e5]),
)
def test_sinusoidal_offset_and_base_match_formula(length, width, offset, base):
    got = sinusoidal_positions(length, width, offset=offset, base=base)
    np.testing.assert_allclose(got.numpy(), formula_table(length, width, offset, base), rtol=0, atol=1e-6)


def test_sinusoidal_columns_fast_left_slow_right():
    table = sinusoidal_positions(128, 128)
    step = (table[1:] - table[:-1]).abs().mean(dim=0)
    assert step[0] > 100 * step[-2]  # left pairs change every row, right pairs barely


@pytest.mark.parametrize("width", [16, 64, 128])
def test_sinusoidal_gram_depends_only_on_distance(width):
    table = sinusoidal_positions(200, width).double()
    gram = table @ table.T
    for d in range(-20, 21, 5):
        diagonal = torch.diagonal(gram, offset=d)
        assert torch.allclose(diagonal, diagonal[0].expand_as(diagonal), atol=1e-4)
    # ...and equals the closed form sum_i cos(w_i (t - s)) for the sin/cos pairs
    t, s = 150, 37
    w = 10000.0 ** (-np.arange(0, width, 2) / width)
    assert gram[t, s].item() == pytest.approx(np.cos(w * (t - s)).sum(), abs=1e-4)


def test_sinusoidal_rejects_bad_arguments():
    for kwargs in ({"length": -1, "width": 4}, {"length": 4, "width": 0}, {"length": 4, "width": 4, "offset": -2}):
        with pytest.raises(ValueError, match="sinusoidal_positions"):
            sinusoidal_positions(**kwargs)


def test_learned_positions_raise_past_the_table():
    model = Decoder(DecoderConfig(context_length=128))
    model(torch.zeros(1, 128, dtype=torch.long))  # the last row exists
    with pytest.raises(ValueError) as err:
        model(torch.zeros(1, 129, dtype=torch.long))
    message = str(err.value)
    assert "129" in message and "128" in message
    for scheme in ("sinusoidal", "rope"):
        assert scheme in message
    with pytest.raises(ValueError, match="positions 120..130"):
        model(torch.zeros(1, 11, dtype=torch.long), offset=120)


@pytest.mark.parametrize("position", ["learned", "sinusoidal", "rope"])
def test_embedding_with_offset_equals_later_rows(position):
    torch.manual_seed(0)
    model = Decoder(DecoderConfig(position=position, context_length=64))
    ids = torch.randint(0, 1024, (2, 64))
    full = model._embed(ids)
    for k in (1, 17, 63):
        torch.testing.assert_close(model._embed(ids[:, k:], offset=k), full[:, k:], rtol=0, atol=1e-6)


def test_sinusoidal_embedding_adds_the_formula_rows():
    # Vaswani et al. 2017 §3.4: token vectors times sqrt(d_model), plus the §3.5 rows.
    model = Decoder(DecoderConfig(position="sinusoidal"))
    assert model.position_embedding is None
    ids = torch.randint(0, 1024, (1, 50))
    added = model._embed(ids) - math.sqrt(128) * model.token_embedding(ids)
    np.testing.assert_allclose(added[0].detach().numpy(), formula_table(50, 128), atol=1e-6)


def test_rope_adds_nothing_to_the_embedding():
    model = Decoder(DecoderConfig(position="rope"))
    assert model.position_embedding is None
    ids = torch.randint(0, 1024, (1, 9))
    torch.testing.assert_close(model._embed(ids), model.token_embedding(ids))


def rotate_by_hand(x, position, theta=10000.0):
    """Su et al. 2021 eq. 34: pair (2i, 2i+1) rotated by position * theta^(-2i/d), in float64."""
    d = x.shape[-1]
    out = x.clone().double()
    for i in range(d // 2):
        angle = position * theta ** (-2 * i / d)
        a, b = x[..., 2 * i].double(), x[..., 2 * i + 1].double()
        out[..., 2 * i] = a * math.cos(angle) - b * math.sin(angle)
        out[..., 2 * i + 1] = a * math.sin(angle) + b * math.cos(angle)
    return out


def rope(head_dim=16, theta=10000.0):
    return RotaryPositions(DecoderConfig(d_model=head_dim * 2, n_heads=2, position="rope", rope_theta=theta))


@given(seed=st.integers(0, 2**16), offset=st.integers(0, 3000))
def test_rope_matches_hand_rotation_and_keeps_norms(seed, offset):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 2, 5, 16, generator=g)
    k = torch.randn(1, 2, 5, 16, generator=g)
    rq, rk = rope().rotate(q, k, offset)
    for t in range(5):
        torch.testing.assert_close(rq[:, :, t].double(), rotate_by_hand(q[:, :, t], offset + t), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rq.norm(dim=-1), q.norm(dim=-1), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rk.norm(dim=-1), k.norm(dim=-1), atol=1e-5, rtol=1e-5)


@given(seed=st.integers(0, 2**16), t=st.integers(0, 500), s=st.integers(0, 500), shift=st.integers(0, 2000))
def test_rope_score_depends_only_on_distance(seed, t, s, shift):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(16, generator=g), torch.randn(16, generator=g)
    scheme = rope()

    def score(tq, tk):
        rq, _ = scheme.rotate(q.view(1, 1, 1, 16), q.view(1, 1, 1, 16), tq)
        _, rk = scheme.rotate(k.view(1, 1, 1, 16), k.view(1, 1, 1, 16), tk)
        return (rq * rk).sum().item()

    assert score(t, s) == pytest.approx(score(t + shift, s + shift), abs=2e-4)


def test_rope_inverse_frequencies_formula():
    inv = rope_inverse_frequencies(8, 500.0)
    assert inv.tolist() == pytest.approx([500.0 ** (-i / 8) for i in (0, 2, 4, 6)])


def test_every_scheme_is_registered_and_runs():
    assert {"learned", "sinusoidal", "rope", "alibi", "none"} <= set(SCHEMES)
    for name in SCHEMES:
        model = Decoder(DecoderConfig(position=name, context_length=16, d_model=32, n_heads=4, n_layers=1))
        assert model(torch.zeros(2, 16, dtype=torch.long)).shape == (2, 16, 1024)


def test_concatenated_layout_is_the_interleaved_table_permuted():
    for width in (8, 9, 128):
        inter = sinusoidal_positions(40, width)
        concat = sinusoidal_positions(40, width, layout="concatenated")
        order = list(range(0, width, 2)) + list(range(1, width, 2))
        torch.testing.assert_close(concat, inter[:, order], rtol=0, atol=0)
    with pytest.raises(ValueError, match="layout"):
        sinusoidal_positions(4, 4, layout="zigzag")


def test_half_split_rope_is_interleaved_rope_on_permuted_channels():
    # Pairing (i, i + d/2) instead of (2i, 2i+1) is the same rotation after a channel permutation.
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 1, 7, 16, generator=g), torch.randn(1, 1, 7, 16, generator=g)
    inter = RotaryPositions(DecoderConfig(d_model=32, n_heads=2, position="rope"))
    half = RotaryPositions(DecoderConfig(d_model=32, n_heads=2, position="rope", rope_layout="half"))
    order = [c for i in range(8) for c in (i, i + 8)]  # half-layout channel feeding interleaved slot
    inverse = torch.argsort(torch.tensor(order))
    rq_half, _ = half.rotate(q, k, 5)
    rq_inter, _ = inter.rotate(q[..., order], k[..., order], 5)
    torch.testing.assert_close(rq_half, rq_inter[..., inverse])


def test_partial_rotary_leaves_the_tail_alone():
    scheme = RotaryPositions(DecoderConfig(d_model=32, n_heads=2, position="rope", partial_rotary_factor=0.5))
    q = torch.randn(1, 1, 6, 16)
    rq, _ = scheme.rotate(q, q, 3)
    torch.testing.assert_close(rq[..., 8:], q[..., 8:], rtol=0, atol=0)
    assert not torch.allclose(rq[..., :8], q[..., :8])


def reference_alibi_slopes(n):
    """Press et al. 2022 reference algorithm, written independently with fractions of powers of two."""

    def pow2(n):
        return [2 ** (-8 * (i + 1) / n) for i in range(n)]

    if math.log2(n).is_integer():
        return pow2(n)
    p = 2 ** int(math.log2(n))
    return pow2(p) + reference_alibi_slopes(2 * p)[0::2][: n - p]


@pytest.mark.parametrize("n_heads", range(1, 17))
def test_alibi_slopes_match_the_paper(n_heads):
    from octlm import alibi_slopes

    assert alibi_slopes(n_heads).tolist() == pytest.approx(reference_alibi_slopes(n_heads), rel=1e-6)


def test_alibi_bias_is_minus_slope_times_distance():
    from octlm.model.positions import ALiBiPositions

    scheme = ALiBiPositions(DecoderConfig(n_heads=4, position="alibi"))
    bias = scheme.score_bias(5, 5)
    slopes = reference_alibi_slopes(4)
    for h in range(4):
        for i in range(5):
            for j in range(i + 1):
                assert bias[h, i, j].item() == pytest.approx(-slopes[h] * (i - j))
    # a cached step: one query at position 9 over keys 0..9
    step = scheme.score_bias(1, 10, offset=9)
    assert step[0, 0].tolist() == pytest.approx([-slopes[0] * (9 - j) for j in range(10)])


def test_nope_embedding_is_the_token_row():
    model = Decoder(DecoderConfig(position="none"))
    ids = torch.randint(0, 1024, (2, 300))
    torch.testing.assert_close(model._embed(ids), model.token_embedding(ids), rtol=0, atol=0)
    assert model.max_length is None and model.position_embedding is None


def test_tables_list_the_schemes_in_the_order_given_as_data_not_in_import_order():
    """The imports of octlm.model.positions are sorted; TABLE_ORDER, not them, orders SCHEMES (and so every table),
    and a scheme it does not name keeps the order it registered in, after those it does."""
    from octlm.model.positions import TABLE_ORDER, put_in_table_order
    from octlm.model.scheme_catalog import SCHEMES, _Registry

    assert list(dict.keys(SCHEMES))[: len(TABLE_ORDER)] == list(TABLE_ORDER)
    assert list(TABLE_ORDER).index("rope") < list(TABLE_ORDER).index("alibi")  # rotary imports after attention_bias
    registry = _Registry()
    for name in ("mine", "rope", "theirs", "learned"):
        registry[name] = object
    registry.put_first(["learned", "rope"])
    assert list(dict.keys(registry)) == ["learned", "rope", "mine", "theirs"]
    with pytest.raises(ValueError, match=r"names \['nosuch'\], which no scheme registered"):
        put_in_table_order(["nosuch"])
