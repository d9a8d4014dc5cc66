"""p-RoPE, KERPLE and CoPE against formulas written from their papers, and exact under cached decoding.

References are computed entry by entry with Python floats from the papers'
equations: Barbero et al. 2024 §6 (p-RoPE), Chi et al. 2022 (KERPLE's log
kernel), Golovneva et al. 2024 §3 (CoPE), not from octlm's code.
"""

from __future__ import annotations

import contextlib
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from octlm import Decoder, DecoderConfig
from octlm.cli import main
from octlm.model import KVCache
from octlm.model.attention_maps import record_attention
from octlm.model.positions import SCHEMES, ContextualPositions, KERPLEBias, PartialFrequencyRoPE

# results depend on float rounding: scripts/test.sh runs them again under other CPU kernels and threads
pytestmark = pytest.mark.rounding


def dot(a, b):
    return sum(x * y for x, y in zip(a, b, strict=True))


# ---- p-RoPE ----------------------------------------------------------------------------------


def prope_by_hand(x, t, d, theta, fraction, layout):
    """Barbero et al. 2024 §6: pair i turns by t * theta^(-2i/d) for the first floor(fraction * d/2) pairs, the rest not
    at all."""
    kept = math.floor(fraction * d / 2 + 1e-9)
    out = list(x)
    for i in range(d // 2):
        angle = t * theta ** (-2 * i / d) if i < kept else 0.0
        a, b = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + d // 2)
        out[a] = x[a] * math.cos(angle) - x[b] * math.sin(angle)
        out[b] = x[a] * math.sin(angle) + x[b] * math.cos(angle)
    return out


@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("fraction", [0.75, 0.5, 0.3, 1.0, 0.0])
def test_prope_turns_the_fastest_pairs_by_ropes_angles_and_leaves_the_rest(layout, fraction):
    config = DecoderConfig(
        position="prope", d_model=64, n_heads=2, rope_layout=layout, rope_fraction=fraction, rope_theta=500.0
    )
    scheme = PartialFrequencyRoPE(config)
    q, k = torch.randn(1, 1, 5, 32, dtype=torch.float32), torch.randn(1, 1, 5, 32)
    rq, rk = scheme.rotate(q, k, offset=1000)
    for t in range(5):
        expected = prope_by_hand(q[0, 0, t].tolist(), 1000 + t, 32, 500.0, fraction, layout)
        assert rq[0, 0, t].tolist() == pytest.approx(expected, abs=2e-5)
        expected = prope_by_hand(k[0, 0, t].tolist(), 1000 + t, 32, 500.0, fraction, layout)
        assert rk[0, 0, t].tolist() == pytest.approx(expected, abs=2e-5)


def test_prope_is_not_partial_rotary():
    # GPT-NeoX's partial rotary spaces its frequencies over the rotated channels: its slowest pair is as slow as RoPE's.
    # p-RoPE keeps RoPE's fastest frequencies as they are and drops the slow ones.
    prope = PartialFrequencyRoPE(DecoderConfig(position="prope", d_model=64, n_heads=2, rope_fraction=0.5))
    partial = SCHEMES["rope"](DecoderConfig(position="rope", d_model=64, n_heads=2, partial_rotary_factor=0.5))
    kept = prope.frequencies(16)[0].tolist()
    assert kept == pytest.approx([10000.0 ** (-2 * i / 32) for i in range(8)] + [0.0] * 8, rel=1e-12)
    assert partial.frequencies(16)[0].tolist() == pytest.approx([10000.0 ** (-2 * i / 16) for i in range(8)], rel=1e-12)


def test_prope_at_fraction_1_is_rope_and_at_0_is_nope():
    ids = torch.randint(0, 50, (2, 20))
    for fraction, twin in ((1.0, "rope"), (0.0, "none")):
        torch.manual_seed(0)
        model = Decoder(
            DecoderConfig(position="prope", rope_fraction=fraction, vocab_size=50, d_model=32, n_heads=2)
        ).eval()
        other = Decoder(DecoderConfig(position=twin, vocab_size=50, d_model=32, n_heads=2)).eval()
        other.load_state_dict(model.state_dict())
        with torch.no_grad():
            torch.testing.assert_close(model(ids), other(ids), rtol=0, atol=1e-5)


def test_prope_takes_ropes_scalings_and_keeps_the_dropped_pairs_still():
    scheme = PartialFrequencyRoPE(DecoderConfig(position="prope", d_model=64, n_heads=2))
    from octlm.model.positions import RopeScaling

    for method in scheme.scalings():
        scheme.set_rope_scaling(RopeScaling(method, 4.0, 128))
        inv_freq, _ = scheme.frequencies(512)
        assert inv_freq[12:].abs().max() == 0 and (inv_freq[:12] > 0).all(), method


def test_rope_fraction_is_checked_and_refused_for_other_schemes(tmp_path, capsys):
    with pytest.raises(ValueError, match="rope_fraction must be in \\[0, 1\\]"):
        DecoderConfig(position="prope", rope_fraction=1.5)
    assert (
        main(
            ["train", "--position", "rope", "--rope-fraction", "0.5", "--max-steps", "1", "--out", str(tmp_path / "r")]
        )
        == 1
    )
    assert "--rope-fraction 0.5 means nothing for --position rope: only prope reads it" in capsys.readouterr().err


# ---- KERPLE ----------------------------------------------------------------------------------


def kerple_by_hand(r1, r2, i, j):
    """Chi et al. 2022, the logarithmic kernel: -r1 log(1 + r2 |i - j|)."""
    return -r1 * math.log(1 + r2 * abs(i - j))


@pytest.mark.parametrize("q_len,k_len,offset", [(12, 12, 0), (1, 30, 29), (4, 10, 6), (3, 3, 5000)])
def test_kerple_bias_is_the_log_kernel_of_each_layer_and_head(q_len, k_len, offset):
    torch.manual_seed(0)
    scheme = KERPLEBias(DecoderConfig(position="kerple", n_heads=4, n_layers=3))
    r1, r2 = scheme.r1.view(3, 4).tolist(), scheme.r2.view(3, 4).tolist()
    q, k = torch.zeros(1, 4, q_len, 8), torch.zeros(1, 4, k_len, 8)
    for layer in range(3):
        bias = scheme.attention_bias(q, k, offset, layer)
        assert bias.shape == (4, q_len, k_len)
        for i in range(q_len):
            for j in range(k_len):
                qi, kj = offset + i, offset + q_len - k_len + j
                if kj <= qi:
                    expected = [
                        kerple_by_hand(max(r1[layer][h], 0.01), max(r2[layer][h], 0.01), qi, kj) for h in range(4)
                    ]
                    assert bias[:, i, j].tolist() == pytest.approx(expected, rel=1e-5, abs=1e-6)


def test_kerple_starts_as_its_code_does_and_stays_positive():
    torch.manual_seed(0)
    model = Decoder(DecoderConfig(position="kerple", n_heads=4, n_layers=2, vocab_size=50, d_model=32))
    r1, r2 = model.positions.r1, model.positions.r2
    assert r1.shape == r2.shape == (8,) and 0 <= r1.min() and r1.max() <= 2 and 0 <= r2.min() and r2.max() <= 1
    with torch.no_grad():
        r1.fill_(-1.0)
        r2[0] = -3.0
    model.eval()(torch.randint(0, 50, (1, 8)))
    assert r1.min().item() == -1.0  # evaluation reads them clamped and leaves them as they are
    model.train()(torch.randint(0, 50, (1, 8)))
    # a training pass projects them back
    assert r1.min().item() == pytest.approx(0.01) and r2.min().item() == pytest.approx(0.01)


def test_kerple_bias_falls_with_distance():
    scheme = KERPLEBias(DecoderConfig(position="kerple", n_heads=2))
    bias = scheme.attention_bias(torch.zeros(1, 2, 40, 4), torch.zeros(1, 2, 40, 4), 0, 0)
    last = bias[:, -1, :]  # the last query on keys 0 .. 39: distances 39 .. 0
    assert (last[:, -1] == 0).all() and (last[:, :-1] < 0).all() and (last.diff(dim=-1) > 0).all()


# ---- randomized positions --------------------------------------------------------------------


@pytest.mark.parametrize("position", ["alibi", "t5", "fire", "kerple", "prope"])
def test_relative_schemes_read_distances_between_drawn_positions(position):
    torch.manual_seed(0)
    model = Decoder(
        DecoderConfig(position=position, context_length=8, d_model=32, n_heads=2, n_layers=1, randomize_positions=10)
    ).train()
    model.positions.draw_positions(8)
    drawn = model.positions.drawn.tolist()
    q, k = torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16)
    if position == "prope":
        rq, _ = model.positions.rotate(q, k, 0)
        for t, p in enumerate(drawn):
            assert rq[0, 0, t].tolist() == pytest.approx(
                prope_by_hand(q[0, 0, t].tolist(), p, 16, 10000.0, 0.75, "interleaved"), abs=1e-4
            )
        return
    bias = model.positions.attention_bias(q, k, 0, 0)
    model.positions.end_pass()  # then the same scheme at 0, 1, 2, ... gives the bias of each distance
    plain = model.positions.attention_bias(torch.randn(1, 2, 80, 16), torch.randn(1, 2, 80, 16), 0, 0)
    for i in range(8):
        for j in range(i + 1):
            assert bias[:, i, j].tolist() == pytest.approx(
                plain[:, 79, 79 - (drawn[i] - drawn[j])].tolist(), abs=1e-6
            ), (i, j)


# ---- CoPE ------------------------------------------------------------------------------------


def cope_by_hand(q_i, keys, table, j):
    """Golovneva et al. 2024 §3: p_ij = sum over keys t = j .. i of sigmoid(q_i . k_t / sqrt(d)), ``keys`` ending at the
    query's own;
    e(p) interpolated between e[floor p] and e[ceil p] (p clamped to npos - 1); the bias is q_i . e(p)."""
    d = len(q_i)
    p = sum(1 / (1 + math.exp(-dot(q_i, k_t) / math.sqrt(d))) for k_t in keys[j:])
    p = min(p, len(table[0]) - 1)
    low, high = math.floor(p), math.ceil(p)
    w = p - low
    e = [(1 - w) * row[low] + w * row[high] for row in table]  # table is [d, npos]
    return dot(q_i, e)


@pytest.mark.parametrize("q_len,k_len,npos", [(9, 9, 16), (9, 9, 4), (1, 12, 16), (3, 7, 8)])
def test_cope_bias_counts_gates_and_interpolates_embeddings(q_len, k_len, npos):
    torch.manual_seed(1)
    scheme = ContextualPositions(DecoderConfig(position="cope", n_heads=2, d_model=16, n_layers=2, cope_npos_max=npos))
    torch.nn.init.normal_(scheme.embeddings)
    q, k = torch.randn(2, 2, q_len, 8) * 2, torch.randn(2, 2, k_len, 8) * 2
    bias = scheme.attention_bias(q, k, offset=40, layer=1)
    assert bias.shape == (2, 2, q_len, k_len)
    table = scheme.embeddings[1].tolist()
    for b in range(2):
        for h in range(2):
            for i in range(q_len):
                own = k_len - q_len + i  # keys end where the queries end: query i sits at key own's position
                keys = k[b, h, : own + 1].tolist()
                for j in range(own + 1):
                    expected = cope_by_hand(q[b, h, i].tolist(), keys, table, j)
                    assert bias[b, h, i, j].item() == pytest.approx(expected, rel=1e-4, abs=1e-4), (b, h, i, j)


def cope_model(**extra):
    torch.manual_seed(0)
    model = Decoder(
        DecoderConfig(
            position="cope",
            vocab_size=50,
            context_length=12,
            d_model=32,
            n_heads=4,
            n_layers=2,
            cope_npos_max=6,
            **extra,
        )
    ).eval()
    for p in model.parameters():  # the generic cache tests leave CoPE's zero-initialised table at 0: give it values
        p.data.normal_(0, 0.5) if p is model.positions.embeddings else p.data.mul_(10 if p.dim() >= 2 else 1)
    return model


@pytest.mark.parametrize("prompt_length", [1, 5])
def test_cope_cached_logits_equal_a_full_recompute(prompt_length):
    model = cope_model()
    g = torch.Generator().manual_seed(prompt_length)
    ids = torch.randint(0, 50, (2, prompt_length), generator=g)
    cache = KVCache(2)
    for step in range(30):
        torch.testing.assert_close(
            model.next_token_logits(ids, cache),
            model(ids)[:, -1, :],
            rtol=0,
            atol=1e-5,
            msg=lambda m, step=step: f"step {step}: {m}",
        )
        ids = torch.cat((ids, torch.randint(0, 50, (2, 1), generator=g)), dim=1)
    chunk = KVCache(2)
    model(ids[:, :7], cache=chunk)
    torch.testing.assert_close(model(ids[:, 7:], offset=7, cache=chunk), model(ids)[:, 7:], rtol=0, atol=1e-5)
    prompt = torch.tensor([[3, 4]])
    assert torch.equal(model.generate(prompt, 25), model.generate(prompt, 25, use_cache=False))


@settings(max_examples=30)  # one small model, two passes per example
@given(offset=st.integers(1, 10**6), split=st.integers(1, 11))
def test_cope_with_values_in_its_table_reads_no_offset(offset, split):
    """CoPE counts positions from the gates alone: its logits at any offset are those at 0, and a chunk after a cache
    (its queries at offset ``split``) gives the full pass's logits, with a table that is not zero."""
    model = cope_model()
    assert model.positions.embeddings.abs().min() > 0  # a zero table would hide any use of the offset
    ids = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(offset))
    cache = KVCache(2)
    with torch.no_grad():
        full = model(ids)
        # the same operations on the same numbers, so at most a kernel's thread split apart; a chunk's scores run over
        # other key counts, whose float32 sums round differently: ~1e-6 on logits of a few units
        torch.testing.assert_close(model(ids, offset=offset), full, rtol=0, atol=1e-5)
        model(ids[:, :split], cache=cache)
        torch.testing.assert_close(model(ids[:, split:], offset=split, cache=cache), full[:, split:], rtol=0, atol=1e-5)


def test_cope_changes_the_output_and_learns():
    model = cope_model()
    ids = torch.randint(0, 50, (2, 12))
    with torch.no_grad():
        before = model(ids)
        model.positions.embeddings.zero_()
        assert not torch.allclose(model(ids), before)
    model.train()
    model(ids).sum().backward()
    assert model.positions.embeddings.grad.abs().sum() > 0


def test_the_new_schemes_are_refused_by_export_hf_by_name():
    from octlm.export.hf import mapper_for
    from octlm.export.hf_common import InteropError

    # prope exports as GPT-NeoX partial rotary over its turning pairs (tests/test_hf_neox.py)
    for name, reason in (("kerple", "KERPLE"), ("cope", "CoPE")):
        with pytest.raises(InteropError, match=f"position='{name}' has no transformers form: .*{reason}"):
            mapper_for(DecoderConfig(position=name))


# ---- which layer reads which parameters ------------------------------------------------------
# KERPLE's r1, r2 and CoPE's tables are per layer; attention takes `layer=0` by default, so a decoder that stopped
# passing each block its index would run every block on layer 0's parameters. The tests below read the bias each block
# of a running model applies and compare it with the formula for that block's own parameters.


@contextlib.contextmanager
def applied_biases(model):
    """Per forward pass, the (q, k, bias) each block hands SDPA, in block order (the attention layers' ``record``)."""
    seen = []
    for i, block in enumerate(model.blocks):
        block.attn.record = lambda q, k, bias, offset, i=i: seen.append((i, q.detach(), k.detach(), bias.detach()))
    try:
        yield seen
    finally:
        for block in model.blocks:
            block.attn.record = None


@settings(max_examples=25)  # each example is a model and two passes; 25 draws of 12 parameters are plenty
@given(
    r=st.lists(st.floats(0.01, 3.0), min_size=12, max_size=12),
    seed=st.integers(0, 2**16),
    prompt=st.integers(1, 6),
)
def test_each_kerple_block_applies_its_own_layers_r1_and_r2(r, seed, prompt):
    """Block l's recorded attention logits, with q = 0, are -r1[l, h] log(1 + r2[l, h] (i - j)) on visible keys, in a
    full pass and in a cached step at an offset."""
    n_layers, n_heads = 3, 2
    torch.manual_seed(seed)
    model = Decoder(
        DecoderConfig(position="kerple", vocab_size=64, d_model=16, n_heads=n_heads, n_layers=n_layers)
    ).eval()
    with torch.no_grad():
        model.positions.r1.copy_(torch.tensor(r[:6]))
        model.positions.r2.copy_(torch.tensor(r[6:]))
        for block in model.blocks:  # zero queries: the logits are the bias alone, nothing of the content
            block.attn.qkv.weight[:16].zero_()
            block.attn.qkv.bias[:16].zero_()
    r1, r2 = ([r[at + n_heads * layer : at + n_heads * (layer + 1)] for layer in range(n_layers)] for at in (0, 6))
    ids = torch.randint(0, 64, (1, 8), generator=torch.Generator().manual_seed(seed))
    cache = KVCache(n_layers)
    with torch.no_grad():
        model(ids[:, :prompt], cache=cache)
        for offset, chunk, kwargs in ((0, ids, {}), (prompt, ids[:, prompt:], {"cache": cache})):
            with record_attention(model) as maps:
                model(chunk, offset=offset, **kwargs)
            for layer in range(n_layers):
                logits = maps.logits[layer][0]  # [H, T, S]: queries at offset.., keys 0 .. S - 1
                expected = [
                    kerple_by_hand(r1[layer][h], r2[layer][h], offset + i, j) if j <= offset + i else -math.inf
                    for h in range(n_heads)
                    for i in range(logits.shape[1])
                    for j in range(logits.shape[2])
                ]
                # float32 log1p and products: relative error ~1e-7 on values up to ~11 (r1 3, distance 13)
                torch.testing.assert_close(
                    logits, torch.tensor(expected).view(logits.shape), rtol=1e-5, atol=1e-6, msg=f"layer {layer}"
                )


@pytest.mark.parametrize("offset", [0, 5])
def test_each_cope_block_applies_its_own_layers_table(offset):
    """The bias block l hands attention is q_i . e_l(p_ij) with layer l's table e_l (Golovneva et al. 2024 §3), in a
    full pass and in a cached step; the layers' tables differ, so another layer's table would not fit."""
    model = cope_model()  # 2 layers, 4 heads of 8 channels, npos 6, every table drawn apart
    ids = torch.randint(0, 50, (1, 9))
    cache = KVCache(2)
    with torch.no_grad():
        if offset:
            model(ids[:, :offset], cache=cache)
        with applied_biases(model) as seen:
            model(ids[:, offset:], offset=offset, cache=cache if offset else None)
    assert [layer for layer, *_ in seen] == [0, 1]
    tables = [model.positions.embeddings[layer].tolist() for layer in range(2)]
    for layer, q, k, bias in seen:
        apart = 0.0  # how far the other layer's table would put the bias: the test must be able to tell them apart
        for h in range(4):
            for i in range(q.shape[2]):
                keys = k[0, h, : offset + i + 1].tolist()  # the query's own key is the last it sees
                for j in range(offset + i + 1):
                    want, other = (cope_by_hand(q[0, h, i].tolist(), keys, tables[n], j) for n in (layer, 1 - layer))
                    # float32 scores, sigmoids and a cumulative sum of <= 9 gates: ~1e-6 relative to values ~10
                    assert bias[0, h, i, j].item() == pytest.approx(want, rel=1e-4, abs=1e-4), (layer, h, i, j)
                    apart = max(apart, abs(want - other))
        assert apart > 0.1, layer
