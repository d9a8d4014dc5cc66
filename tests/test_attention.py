"""Attention you can read: the recorded maps against the model's own SDPA output, and the statistics' formulas.

Every registered scheme (read from the registry, so a new scheme is covered
without a line here) is checked, with and without a cache, by multiplying
the recorded probabilities by the values and comparing with what the
attention layer handed its output projection. Weights are drawn wider than
octlm's N(0, 0.02) so that attention is far from uniform: a wrong rotation,
bias or offset would then move the output.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from octlm import Decoder, DecoderConfig, KVCache, record_attention
from octlm.inspect.attention_statistics import (
    attention_distance,
    attention_entropy,
    attention_statistics,
    key_distances,
    max_logit,
    sink_mass,
    uniform_attention,
)
from octlm.model.positions import SCHEMES

# results depend on float rounding: scripts/test.sh runs them again under other CPU kernels and threads
pytestmark = pytest.mark.rounding

VOCAB, HEADS = 40, 2


def sharp_model(position: str, seed: int = 0, **extra) -> Decoder:
    """A small decoder whose attention is peaked: every matrix, table and bias drawn N(0, 0.5), LayerNorms as made; eval
    mode."""
    torch.manual_seed(seed)
    model = Decoder(
        DecoderConfig(
            vocab_size=VOCAB, context_length=32, d_model=16, n_heads=HEADS, n_layers=2, position=position, **extra
        )
    )
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if ".ln_" not in name and not name.startswith("ln_"):
                parameter.normal_(0.0, 0.5)
    return model.eval()


class LayerTaps:
    """What each attention layer computed: the values it made, and what it handed its output projection ([B, H, T,
    D])."""

    def __init__(self, model: Decoder) -> None:
        self.values, self.outputs, self.handles = [], [], []
        for block in model.blocks:
            self.handles.append(block.attn.qkv.register_forward_hook(self._qkv))
            self.handles.append(block.attn.proj.register_forward_pre_hook(self._proj))

    def _qkv(self, module, args, out) -> None:
        B, T, _ = out.shape
        self.values.append(out.view(B, T, 3, HEADS, -1)[:, :, 2].transpose(1, 2))

    def _proj(self, module, args) -> None:
        B, T, C = args[0].shape
        self.outputs.append(args[0].view(B, T, HEADS, C // HEADS).transpose(1, 2))

    def clear(self) -> None:
        self.values.clear()
        self.outputs.clear()

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def check_against_output(maps, taps: LayerTaps, values: list[torch.Tensor]) -> None:
    for layer, (p, v, y) in enumerate(zip(maps.probabilities, values, taps.outputs, strict=True)):
        assert p.dtype == torch.float32 and p.shape[-1] == v.shape[-2], layer
        torch.testing.assert_close(p @ v, y, atol=1e-5, rtol=1e-5, msg=lambda m, layer=layer: f"layer {layer}: {m}")


@pytest.mark.parametrize("position", sorted(SCHEMES))
def test_probabilities_times_values_are_the_models_attention_output(position):
    model = sharp_model(position)
    ids = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(1))
    plain = model(ids)
    taps = LayerTaps(model)
    with record_attention(model) as maps:
        recorded = model(ids)
    assert torch.equal(recorded, plain), "recording changed the model's output"
    assert len(maps.probabilities) == len(maps.logits) == 2 and maps.offset == 0
    assert maps.probabilities[0].shape == (2, HEADS, 12, 12)
    check_against_output(maps, taps, taps.values)
    # far from uniform, so a wrong map would show in the product
    uniform = torch.log(torch.arange(1, 13, dtype=torch.float32)).mean()
    for p in maps.probabilities:
        assert attention_entropy(p).mean() < 0.8 * uniform


@pytest.mark.parametrize("position", sorted(SCHEMES))
@pytest.mark.parametrize("new_tokens", [3, 1])
def test_a_cached_step_records_its_queries_against_every_cached_key(position, new_tokens):
    model = sharp_model(position, seed=2)
    ids = torch.randint(0, VOCAB, (2, 9 + new_tokens), generator=torch.Generator().manual_seed(3))
    cache = KVCache(len(model.blocks))
    model(ids[:, :9], cache=cache)
    taps = LayerTaps(model)
    with record_attention(model) as maps:
        model(ids[:, 9:], offset=9, cache=cache)
    assert maps.offset == 9 and maps.probabilities[0].shape == (2, HEADS, new_tokens, 9 + new_tokens)
    values = [layer.values[..., : cache.length, :] for layer in cache.layers]
    check_against_output(maps, taps, values)
    # the step's rows are the last rows of a full pass's maps
    with record_attention(model) as full:
        model(ids)
    for step, whole in zip(maps.probabilities, full.probabilities, strict=True):
        torch.testing.assert_close(step, whole[:, :, 9:], atol=1e-5, rtol=1e-5)


def test_rows_sum_to_one_and_hidden_keys_are_zero_and_minus_infinity():
    model = sharp_model("alibi")
    cache = KVCache(2)
    ids = torch.randint(0, VOCAB, (1, 10), generator=torch.Generator().manual_seed(4))
    model(ids[:, :6], cache=cache)
    with record_attention(model) as maps:
        model(ids[:, 6:], offset=6, cache=cache)
    for p, s in zip(maps.probabilities, maps.logits, strict=True):
        torch.testing.assert_close(p.sum(-1), torch.ones(p.shape[:-1]))
        for i in range(4):  # query i (at position 6 + i) sees keys 0 .. 6 + i
            assert (p[..., i, 7 + i :] == 0).all() and (s[..., i, 7 + i :] == -math.inf).all()
            assert torch.isfinite(s[..., i, : 7 + i]).all() and (p[..., i, : 7 + i] > 0).all()


def rope_by_hand(x: np.ndarray, position: int, theta: float = 10000.0) -> np.ndarray:
    """RoPE as Su et al. 2021 write it (eq. 34): channel pair (2i, 2i+1) as a complex number times e^(i t
    theta^(-2i/d))."""
    d = x.shape[-1]
    z = x[0::2] + 1j * x[1::2]
    return z * np.exp(1j * position * theta ** (-np.arange(d // 2) * 2.0 / d))


def test_one_rope_head_recomputed_by_hand_from_its_queries_and_keys():
    model = sharp_model("rope", seed=5)
    ids = torch.randint(0, VOCAB, (1, 8), generator=torch.Generator().manual_seed(6))
    raw = []  # the layer's unrotated queries, keys and values: the prefill's 5 tokens, then the step's 3
    model.blocks[1].attn.qkv.register_forward_hook(
        lambda m, a, out: raw.append(out.detach().double()[0].view(-1, 3, HEADS, 8).numpy())
    )
    cache = KVCache(2)
    model(ids[:, :5], cache=cache)
    with record_attention(model) as maps:
        model(ids[:, 5:], offset=5, cache=cache)
    head, D = 1, 8
    q, k = raw[1][:, 0, head], np.concatenate((raw[0][:, 1, head], raw[1][:, 1, head]))
    keys = [rope_by_hand(k[j], j) for j in range(8)]
    for i in range(3):  # query i sits at position 5 + i and sees keys 0 .. 5 + i
        query = rope_by_hand(q[i], 5 + i)
        scores = np.array([np.real(np.sum(query * np.conj(key))) for key in keys[: 6 + i]]) / math.sqrt(D)
        expected = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
        np.testing.assert_allclose(maps.logits[1][0, head, i, : 6 + i].double().numpy(), scores, rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(maps.probabilities[1][0, head, i, : 6 + i].double().numpy(), expected, atol=1e-5)
        assert (maps.probabilities[1][0, head, i, 6 + i :] == 0).all()


def test_recording_ends_with_the_block_and_refuses_training_with_dropout():
    model = sharp_model("rope")
    with record_attention(model):
        with pytest.raises(ValueError, match="already recording"):
            with record_attention(model):
                pass
    assert all(block.attn.record is None for block in model.blocks)
    with pytest.raises(RuntimeError):
        with record_attention(model):
            raise RuntimeError("stopped")
    assert all(block.attn.record is None for block in model.blocks)
    dropped = Decoder(DecoderConfig(vocab_size=VOCAB, context_length=16, d_model=16, n_heads=2, dropout=0.1))
    with pytest.raises(ValueError, match=r"eval mode.*model\.eval\(\)"):
        with record_attention(dropped):
            pass
    with record_attention(dropped.eval()) as maps:
        dropped(torch.zeros(1, 4, dtype=torch.long))
    assert len(maps.probabilities) == 2


# -- the statistics against their formulas ---------------------------------------------------------------


def causal_uniform(T: int, S: int) -> torch.Tensor:
    """Uniform attention over each query's visible keys, [T, S]."""
    visible = (key_distances(T, S) >= 0).float()
    return visible / visible.sum(-1, keepdim=True)


@given(st.integers(1, 40), st.integers(0, 20))
def test_uniform_attention_has_entropy_ln_n_and_distance_n_minus_1_over_2(T, cached):
    p = causal_uniform(T, T + cached)
    n = torch.arange(1, T + 1, dtype=torch.float32) + cached  # keys query i sees
    torch.testing.assert_close(attention_entropy(p), torch.log(n))
    torch.testing.assert_close(attention_distance(p), (n - 1) / 2)
    torch.testing.assert_close(sink_mass(p), 1 / n)


@given(st.integers(1, 30), st.data())
def test_attention_on_one_key_has_entropy_0_and_its_distance(T, data):
    j = [data.draw(st.integers(0, i)) for i in range(T)]
    p = torch.zeros(T, T)
    p[torch.arange(T), torch.tensor(j)] = 1.0
    assert (attention_entropy(p) == 0).all()
    assert attention_distance(p).tolist() == [float(i - k) for i, k in enumerate(j)]
    assert sink_mass(p).tolist() == [float(k == 0) for k in j]


def test_uniform_attention_by_hand():
    third, half = 1 / 3, 1 / 2
    torch.testing.assert_close(uniform_attention(2, 3), torch.tensor([[half, half, 0.0], [third, third, third]]))


def test_key_distances_and_max_logit_by_hand():
    assert key_distances(2, 4).tolist() == [[2, 1, 0, -1], [3, 2, 1, 0]]
    logits = torch.tensor([[[0.5, -math.inf], [2.0, -3.0]], [[-1.0, -math.inf], [-2.0, -0.5]]])
    assert max_logit(logits).tolist() == [2.0, -0.5]


def test_statistics_per_layer_and_head():
    # layer 0: uniform; layer 1: head 0 on its own token, head 1 on the first token
    T = 5
    uniform = causal_uniform(T, T).expand(2, 2, T, T)
    own = torch.eye(T)
    first = torch.zeros(T, T)
    first[:, 0] = 1
    layer1 = torch.stack((own, first))[None].expand(2, 2, T, T)
    logits = [torch.full((2, 2, T, T), 1.5), torch.full((2, 2, T, T), -4.0)]
    logits[1][1, 0, 3, 2] = 7.0
    stats = attention_statistics([uniform, layer1], logits)
    assert stats.entropy.shape == (2, 2, T)
    torch.testing.assert_close(stats.entropy[0, 1], torch.log(torch.arange(1.0, T + 1)))
    # mean of i/2 over i < 5; 0; mean of i
    torch.testing.assert_close(stats.mean_distance, torch.tensor([[1.0, 1.0], [0.0, 2.0]]))
    torch.testing.assert_close(stats.sink_mass[1], torch.tensor([0.2, 1.0]))
    assert stats.max_logit.tolist() == [[1.5, 1.5], [7.0, -4.0]]
    result = stats.to_dict()
    assert set(result) == {"mean_entropy", "mean_distance", "sink_mass", "max_logit", "entropy"}
    assert len(result["entropy"][1][0]) == T and result["mean_distance"][1] == [0.0, 2.0]
    with pytest.raises(ValueError, match="one shape"):
        attention_statistics([uniform], [])
