"""FoX and stick-breaking against their papers' definitions written out here, exact under cached decoding, and seen
by record_attention.

The references loop over queries and keys with Python floats from the papers' formulas: Lin et al. 2025 §2 (FoX:
``D_ij = sum_{l=j+1..i} log f_l``, ``f_l = sigmoid(w . x_l + b)``), Tan et al. 2025 §2 (stick-breaking:
``A_ij = beta_ij prod_{j<k<i} (1 - beta_ik)`` over the keys before the query, the remainder on the query's own
value as the authors' code adds it), not from octlm's code.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from octlm import Decoder, DecoderConfig
from octlm.model import KVCache
from octlm.model.attention_maps import record_attention
from octlm.model.blocks import visible_keys, window_keys
from octlm.model.positions import SCHEMES, ForgettingAttention, facts_of
from octlm.model.positions.recency import stick_breaking_weights

# results depend on float rounding: scripts/test.sh runs them again under other CPU kernels and threads
pytestmark = pytest.mark.rounding

SCHEMES_HERE = ["fox", "stickbreaking"]


def sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z))


def fox_by_hand(x, weight, bias, i, j):
    """``sum_{l=j+1..i} log sigmoid(w . x_l + b)`` for one head: x [T][C], weight [C], bias a float."""
    return sum(
        math.log(sigmoid(sum(w * c for w, c in zip(weight, x[t], strict=True)) + bias)) for t in range(j + 1, i + 1)
    )


def stick_by_hand(q_i, keys, visible_row, own):
    """One query's weights over its keys: each visible key before ``own`` gets ``beta_j prod_{j<k<own} (1 - beta_k)``
    over the visible keys between; key ``own`` gets what is left, ``prod_j (1 - beta_j)``."""
    d = len(q_i)
    beta = [sigmoid(sum(a * b for a, b in zip(q_i, key, strict=True)) / math.sqrt(d)) for key in keys]
    out = [0.0] * len(keys)
    for j in range(own):
        if visible_row[j]:
            out[j] = beta[j] * math.prod(1 - beta[k] for k in range(j + 1, own) if visible_row[k])
    out[own] = math.prod(1 - beta[j] for j in range(own) if visible_row[j])
    return out


def tiny(position: str, layers: str = "") -> Decoder:
    torch.manual_seed(0)
    model = Decoder(
        DecoderConfig(
            position=position, vocab_size=50, context_length=16, d_model=32, n_heads=4, n_layers=2, layers=layers
        )
    ).eval()
    for p in model.parameters():  # larger weights than N(0, 0.02), so gates and scores are far from 1/2 and 0
        p.data.mul_(10 if p.dim() >= 2 else 1).add_(0 if p.dim() >= 2 else 0.3 * torch.randn_like(p))
    return model


# ---- the formulas ----------------------------------------------------------------------------


@settings(max_examples=15, deadline=None)
@given(length=st.integers(1, 7), layer=st.integers(0, 1), seed=st.integers(0, 10**6))
def test_fox_bias_sums_the_log_forget_gates_after_each_key(length, layer, seed):
    g = torch.Generator().manual_seed(seed)
    scheme = ForgettingAttention(DecoderConfig(position="fox", d_model=8, n_heads=2, n_layers=2))
    for p in scheme.parameters():
        p.data = torch.randn(p.shape, generator=g)
    x = torch.randn(2, length, 8, generator=g)
    q = torch.zeros(2, 2, length, 4)
    bias = scheme.attention_bias(q, q, 0, layer, seen=scheme.read_input(x, layer, None))
    weight, b = scheme.gates[layer].weight.tolist(), scheme.gates[layer].bias.tolist()
    assert bias.shape == (2, 2, length, length)
    for n in range(2):
        for h in range(2):
            for i in range(length):
                for j in range(i + 1):
                    want = fox_by_hand(x[n].tolist(), weight[h], b[h], i, j)
                    assert bias[n, h, i, j].item() == pytest.approx(want, rel=1e-5, abs=1e-5), (n, h, i, j)


@settings(max_examples=20, deadline=None)
@given(
    q_len=st.integers(1, 5),
    extra=st.integers(0, 4),
    window=st.one_of(st.none(), st.integers(1, 4)),
    seed=st.integers(0, 10**6),
)
def test_stick_breaking_weights_break_the_stick_from_the_nearest_key(q_len, extra, window, seed):
    k_len = q_len + extra
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, 2, n, 4, generator=g) * 2 for n in (q_len, k_len, k_len))
    visible = visible_keys(q_len, k_len) if window is None else window_keys(q_len, k_len, window)
    weights = stick_breaking_weights(q, k, visible)
    output = weights @ v
    for h in range(2):
        for i in range(q_len):
            own = k_len - q_len + i
            want = stick_by_hand(q[0, h, i].tolist(), k[0, h].tolist(), visible[i].tolist(), own)
            assert weights[0, h, i].tolist() == pytest.approx(want, rel=1e-5, abs=1e-6), (h, i)
            assert sum(want) == pytest.approx(1.0, abs=1e-9)  # the remainder closes every row
            by_hand = [sum(w * v[0, h, j, c].item() for j, w in enumerate(want)) for c in range(4)]
            assert output[0, h, i].tolist() == pytest.approx(by_hand, rel=1e-5, abs=1e-5)


# ---- exact under cached decoding -------------------------------------------------------------


@pytest.mark.parametrize("layers", ["", "fox/w3 stickbreaking", "stickbreaking/w4 fox"])
@settings(max_examples=8, deadline=None)
@given(prompt=st.integers(1, 9), step=st.integers(1, 4), seed=st.integers(0, 10**6))
def test_cached_passes_equal_the_full_recompute(layers, prompt, step, seed):
    """Any prompt, then chunks of ``step`` tokens over a cache, give the logits of one pass over the whole sequence
    (each scheme alone, and as layers of a layout, windowed)."""
    for position in SCHEMES_HERE if not layers else ["fox"]:
        model = tiny(position, layers)
        ids = torch.randint(0, 50, (2, 16), generator=torch.Generator().manual_seed(seed))
        cache = KVCache(2)
        with torch.no_grad():
            full = model(ids)
            pieces = [model(ids[:, :prompt], cache=cache)]
            while cache.length < 16:
                end = min(cache.length + step, 16)
                pieces.append(model(ids[:, cache.length : end], offset=cache.length, cache=cache))
        torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=0, atol=1e-5)


@pytest.mark.parametrize("position", SCHEMES_HERE)
def test_generate_with_and_without_a_cache_agree(position):
    model = tiny(position)
    prompt = torch.tensor([[3, 4, 5]])
    assert torch.equal(model.generate(prompt, 12), model.generate(prompt, 12, use_cache=False))


# ---- record_attention ------------------------------------------------------------------------


def layer0_qkv(model: Decoder, ids: torch.Tensor):
    """Layer 0's queries, keys and values [B, H, T, D], and its input, formed by hand from the weights."""
    x = model.blocks[0].ln_attn(model.token_embedding(ids))
    B, T, C = x.shape
    q, k, v = (x @ model.blocks[0].attn.qkv.weight.T + model.blocks[0].attn.qkv.bias).view(B, T, 3, 4, C // 4).unbind(2)
    return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), x


def test_record_attention_gives_stick_breakings_weights_rows_of_one():
    model = tiny("stickbreaking")
    ids = torch.randint(0, 50, (1, 6))
    with torch.no_grad(), record_attention(model) as maps:
        out = model(ids)
    torch.testing.assert_close(out, model(ids).detach())  # recording changes nothing
    q, k, _, _ = layer0_qkv(model, ids)
    probabilities = maps.probabilities[0]
    torch.testing.assert_close(probabilities.sum(-1), torch.ones(1, 4, 6))
    for h in range(4):
        for i in range(6):
            want = stick_by_hand(q[0, h, i].tolist(), k[0, h].tolist(), [j <= i for j in range(6)], i)
            assert probabilities[0, h, i].tolist() == pytest.approx(want, rel=1e-4, abs=1e-6), (h, i)
    torch.testing.assert_close(torch.softmax(maps.logits[0], -1), probabilities)  # logits: their log


def test_record_attention_gives_foxs_softmax_with_the_forget_bias():
    model = tiny("fox")
    ids = torch.randint(0, 50, (1, 6))
    with torch.no_grad(), record_attention(model) as maps:
        model(ids)
        q, k, _, x = layer0_qkv(model, ids)
    gates = model.positions.gates[0]
    for h in range(4):
        for i in range(6):
            scores = [
                sum(a * b for a, b in zip(q[0, h, i].tolist(), k[0, h, j].tolist(), strict=True)) / math.sqrt(8)
                + fox_by_hand(x[0].tolist(), gates.weight[h].tolist(), gates.bias[h].item(), i, j)
                for j in range(i + 1)
            ]
            top = max(scores)
            want = [math.exp(s - top) for s in scores]
            want = [w / sum(want) for w in want] + [0.0] * (5 - i)
            assert maps.probabilities[0][0, h, i].tolist() == pytest.approx(want, rel=1e-4, abs=1e-6), (h, i)


@pytest.mark.parametrize("position", ["stickbreaking", "fox"])
def test_the_length_studys_attention_record_has_a_largest_logit_only_where_a_softmax_has_logits(position):
    """Stick-breaking's weights are its own, whose log peaks at 0 on any key that takes all: a "largest logit" of 0
    would read as a real score, so the record leaves it out (the tables show n/a); FoX keeps its softmax's."""
    import numpy as np

    from octlm.studies.length.attention import attention_record

    model = tiny(position)
    scored = np.random.default_rng(0).integers(0, 50, 9)
    record = attention_record(model, scored, 8, 8, torch.device("cpu"), {"label": position, "position": position})
    with torch.no_grad(), record_attention(model) as maps:
        model(torch.from_numpy(scored[None, :8]))
    assert maps.own_weights == [position == "stickbreaking"] * len(model.blocks)
    if position == "stickbreaking":
        assert "max_logit" not in record
    else:
        largest = torch.stack([layer[0].amax(dim=(-2, -1)) for layer in maps.logits])
        torch.testing.assert_close(torch.tensor(record["max_logit"]), largest, atol=1e-4, rtol=0)


# ---- what the rest of octlm asks -------------------------------------------------------------


def test_only_stick_breaking_and_path_replace_the_softmax_and_both_recency_schemes_are_opt_in():
    assert [name for name, cls in SCHEMES.items() if cls.attends] == ["stickbreaking", "pathattn"]
    for name in SCHEMES_HERE:
        assert not facts_of(name).in_length_study and not facts_of(name).in_task_study
    assert (facts_of("fox").label, facts_of("stickbreaking").label) == ("FoX", "stick-breaking")


def test_fox_learns_its_gates():
    model = tiny("fox")
    model.train()
    model(torch.randint(0, 50, (2, 8))).sum().backward()
    assert all(gate.weight.grad.abs().sum() > 0 for gate in model.positions.gates)


def test_fox_without_its_gates_read_says_so():
    scheme = ForgettingAttention(DecoderConfig(position="fox", d_model=8, n_heads=2))
    with pytest.raises(TypeError, match=r"layer 1 bias reads the layer's input: pass seen=read_input\(x, 1, cache\)"):
        scheme.attention_bias(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4), 0, 1)
    assert not any(isinstance(value, torch.Tensor) for value in vars(scheme).values())  # no per-pass state kept


@pytest.mark.parametrize("name", SCHEMES_HERE)
def test_export_hf_randomized_and_document_positions_refuse_them_by_name(name):
    from octlm.export.hf import mapper_for
    from octlm.export.hf_common import InteropError

    reason = "FoX" if name == "fox" else "stick-breaking"
    with pytest.raises(InteropError, match=f"position='{name}' has no transformers form: .*{reason}"):
        mapper_for(DecoderConfig(position=name))
    with pytest.raises(ValueError, match=f"not position='{name}'"):
        DecoderConfig(position=name, randomize_positions=2)
    with pytest.raises(ValueError, match=f"not position='{name}'"):
        DecoderConfig(position=name, document_mask=True)
