"""Cached decoding equals recomputing the whole sequence, for every scheme."""

from __future__ import annotations

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from octlm import Decoder, DecoderConfig
from octlm.model import KVCache, LayerCache
from octlm.model.canon import CanonConv
from octlm.model.positions import SCHEMES, RotaryPositions, SinusoidalPositions

# results depend on float rounding: scripts/test.sh runs them again under other CPU kernels and threads
pytestmark = pytest.mark.rounding

CONTEXT = 12


def variants():
    """(position, extra config, rope scaling): every registered scheme, then every layout and every scaling it takes."""
    out = [(name, {}, None) for name in SCHEMES]
    for name, cls in SCHEMES.items():
        if cls.takes_random_positions:  # trained at drawn positions, run at 0, 1, 2, ...: the table is F times longer
            out.append((name, {"randomize_positions": 3}, None))
        if issubclass(cls, SinusoidalPositions):
            out.append((name, {"sinusoidal_layout": "concatenated"}, None))
        if issubclass(cls, RotaryPositions):
            out += [(name, {"rope_layout": "half"}, None), (name, {"partial_rotary_factor": 0.5}, None)]
        out += [(name, {"rope_layout": "half"}, method) for method in sorted(cls.scalings())]
    # the head's own matrix after the cached blocks, and the token rows' norm and scale before them
    return out + [
        ("rope", {"untied_head": True}, None),
        ("rope", {"embedding_norm": "norm", "embedding_scale": "sqrt-d"}, None),
        ("learned", {"embedding_norm": "l2", "x0_skips": True}, None),
        ("none", {"smear_gate": True}, None),  # the previous token's row kept in the cache between passes
        ("learned", {"smear_gate": True}, None),  # and forgotten when the cache restarts on a cropped window
        ("none", {"canon": "ABCD"}, None),  # each Canon point's last three inputs kept in the layer's cache
        ("learned", {"canon": "ABCD", "block": "llama"}, None),  # SwiGLU's Canon-D; forgotten on a restart
        ("rope", {"canon": "BC", "layers": "w4 global"}, None),  # beside a window layer's rolling keys
        ("rope", {"key_offset": True, "partial_rotary_factor": 0.5}, None),  # the last key's unturned channels kept
        ("rope", {"key_offset": True, "partial_rotary_factor": 0.5, "layers": "w4 global"}, "yarn"),
        ("none", {"value_embeddings": True, "bigram_rows": 37}, None),  # the previous token id kept in the cache
        ("learned", {"bigram_rows": 37}, None),  # and forgotten when the cache restarts on a cropped window
    ]


VARIANTS = variants()
IDS = [f"{p}-{'-'.join(str(v) for v in extra.values()) or 'default'}-{s or 'unscaled'}" for p, extra, s in VARIANTS]


def model_for(position, extra, scaling, n_heads=4):
    torch.manual_seed(0)
    config = DecoderConfig(
        position=position, context_length=CONTEXT, d_model=32, n_heads=n_heads, n_layers=2, vocab_size=50, **extra
    )
    model = Decoder(config).eval()
    for p in model.parameters():  # larger weights than N(0, 0.02) so that logits differ visibly between positions
        p.data.mul_(10 if p.dim() >= 2 else 1)
    if model.x0_skips is not None:  # away from the plain decoder the skips start as
        model.x0_skips.mus.data.fill_(0.5)
    if model.smear is not None:  # a gate that is open, and differs from row to row
        model.smear.strength.data.fill_(0.8)
        model.smear.gate.weight.data.normal_(generator=torch.Generator().manual_seed(4))
    if model.bigram is not None:  # a table that is no longer zero
        model.bigram.table.data.normal_(generator=torch.Generator().manual_seed(5))
    for module in model.modules():  # Canon kernels at their own scale (up to 0.5): ten times over, logits reach 1e4
        if isinstance(module, CanonConv):
            module.weight.data.div_(10)
    if scaling:
        model.set_rope_scaling(scaling, 2.0)
    return model


@pytest.mark.parametrize("position,extra,scaling", VARIANTS, ids=IDS)
@pytest.mark.parametrize("prompt_length", [1, 5])
def test_cached_logits_equal_full_recompute_at_every_step(position, extra, scaling, prompt_length):
    model = model_for(position, extra, scaling)
    g = torch.Generator().manual_seed(prompt_length)
    ids = torch.randint(0, 50, (2, prompt_length), generator=g)
    cache = KVCache(len(model.blocks))
    # 3 * CONTEXT steps: past the learned table and past dynamic NTK's training length
    for step in range(3 * CONTEXT):
        cached = model.next_token_logits(ids, cache)
        window = ids if model.max_length is None else ids[:, -model.max_length :]
        full = model(window)[:, -1, :]
        torch.testing.assert_close(cached, full, rtol=0, atol=1e-5, msg=lambda m, step=step: f"step {step}: {m}")
        ids = torch.cat((ids, torch.randint(0, 50, (2, 1), generator=g)), dim=1)
    expected = ids.shape[1] - 1 if model.max_length is None else min(ids.shape[1] - 1, model.max_length)
    assert cache.length == expected


@pytest.mark.parametrize("position,extra,scaling", VARIANTS, ids=IDS)
def test_greedy_generation_is_the_same_with_and_without_the_cache(position, extra, scaling):
    model = model_for(position, extra, scaling)
    for prompt in (torch.tensor([[7]]), torch.randint(0, 50, (3, 4), generator=torch.Generator().manual_seed(3))):
        cached = model.generate(prompt, 2 * CONTEXT + 3)
        naive = model.generate(prompt, 2 * CONTEXT + 3, use_cache=False)
        assert cached.shape == (prompt.shape[0], prompt.shape[1] + 2 * CONTEXT + 3)
        assert torch.equal(cached[:, : prompt.shape[1]], prompt)
        assert torch.equal(cached, naive)


@pytest.mark.parametrize("position", [name for name, cls in SCHEMES.items() if not cls.has_table_limit])
def test_a_chunk_of_tokens_on_top_of_a_cache(position):
    # Several new tokens at once need a causal mask that is offset by the cached length.
    model = model_for(position, {}, None)
    ids = torch.randint(0, 50, (2, 11))
    cache = KVCache(2)
    first = model(ids[:, :5], cache=cache)
    second = model(ids[:, 5:9], offset=5, cache=cache)
    third = model(ids[:, 9:], offset=9, cache=cache)
    full = model(ids)
    torch.testing.assert_close(torch.cat((first, second, third), dim=1), full, rtol=0, atol=1e-5)


@pytest.mark.parametrize("n_heads", [1, 2, 3, 4, 6])
def test_alibi_cache_with_any_head_count(n_heads):
    torch.manual_seed(0)
    model = Decoder(
        DecoderConfig(position="alibi", d_model=8 * n_heads, n_heads=n_heads, n_layers=1, vocab_size=40)
    ).eval()
    ids = torch.randint(0, 40, (1, 30))
    assert torch.equal(model.generate(ids[:, :2], 20), model.generate(ids[:, :2], 20, use_cache=False))


def test_sampling_with_a_seed_is_reproducible_and_cache_independent():
    model = model_for("rope", {}, None)
    prompt = torch.tensor([[1, 2, 3]])
    runs = [
        model.generate(prompt, 30, temperature=0.9, top_k=10, use_cache=use, generator=torch.Generator().manual_seed(5))
        for use in (True, True, False)
    ]
    assert torch.equal(runs[0], runs[1]) and torch.equal(runs[0], runs[2])


def test_on_token_sees_each_new_token_and_changes_nothing():
    model = model_for("rope", {}, None)
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    seen = []
    out = model.generate(prompt, 7, 0.9, 10, generator=torch.Generator().manual_seed(5), on_token=seen.append)
    assert torch.equal(out, model.generate(prompt, 7, 0.9, 10, generator=torch.Generator().manual_seed(5)))
    assert torch.equal(torch.cat(seen, dim=1), out[:, 3:]) and len(seen) == 7


def test_generate_bad_input():
    model = model_for("rope", {}, None)
    prompt = torch.tensor([[1]])
    with pytest.raises(TypeError, match="generator="):
        model.generate(prompt, 3, 0.5, None, torch.Generator())
    with pytest.raises(ValueError, match="max_new_tokens"):
        model.generate(prompt, -1)
    with pytest.raises(ValueError, match="top_k"):
        model.generate(prompt, 2, 1.0, 0)
    assert torch.equal(model.generate(prompt, 0), prompt)
    cache = KVCache(2)
    model(torch.tensor([[1, 2, 3]]), cache=cache)
    with pytest.raises(ValueError, match="offset=cache.length"):
        model(torch.tensor([[4]]), offset=2, cache=cache)
    with pytest.raises(ValueError, match="already holds 3 tokens"):
        model.next_token_logits(torch.tensor([[1, 2, 3]]), cache)


def test_layer_cache_grows_past_its_capacity():
    layer = LayerCache(capacity=2)
    chunks = [torch.randn(1, 2, n, 4) for n in (1, 2, 5, 1)]
    for chunk in chunks:
        keys, values = layer.append(chunk, -chunk)
    torch.testing.assert_close(keys, torch.cat(chunks, dim=2), rtol=0, atol=0)
    torch.testing.assert_close(values, -torch.cat(chunks, dim=2), rtol=0, atol=0)
    assert layer.length == 9


@given(
    logits=st.lists(st.floats(-60, 60, allow_nan=False, width=32), min_size=2, max_size=40),
    temperature=st.one_of(st.sampled_from([1e-38, 1e-45, 5e-324, 1e-30, 1e-12]), st.floats(1e-300, 1e-6)),
    top_k=st.one_of(st.none(), st.integers(1, 50)),
)
def test_any_tiny_temperature_samples_the_argmax(logits, temperature, top_k):
    """Dividing logits by a temperature near 0 must not overflow: the draw becomes greedy."""
    from octlm.model import sample_next

    row = torch.tensor([logits], dtype=torch.float32)
    assume(int((row == row.max()).sum()) == 1)  # a tie has no single greedy answer
    assume(float(row.max() - row[row < row.max()].max()) > 1e-3 if len(set(logits)) > 1 else True)
    token = sample_next(row, temperature, top_k, torch.Generator().manual_seed(0))
    assert int(token) == int(row.argmax())


@pytest.mark.parametrize("temperature", [1e-38, 1e-45, 5e-324])
def test_generate_at_a_tiny_temperature_equals_greedy(temperature):
    model = model_for("rope", {}, None)
    prompt = torch.randint(0, 50, (2, 3), generator=torch.Generator().manual_seed(1))
    greedy = model.generate(prompt, 10, temperature=0.0)
    tiny = model.generate(prompt, 10, temperature=temperature, generator=torch.Generator().manual_seed(2))
    assert torch.equal(greedy, tiny)


@pytest.mark.parametrize("position", sorted(SCHEMES))
def test_forward_traces_as_one_graph_for_every_scheme(position):
    """No host sync or graph break in the forward pass: torch.compile(fullgraph=True) traces it
    (the eager backend checks the tracing without building kernels) and gives the same logits."""
    # each scheme's class recompiles Decoder.forward: more schemes than dynamo's recompile limit (8)
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Decoder(
        DecoderConfig(position=position, vocab_size=64, d_model=32, n_heads=4, n_layers=2, context_length=16)
    ).eval()
    ids = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(1))
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    with torch.no_grad():
        assert torch.allclose(compiled(ids), model(ids), atol=1e-6)
