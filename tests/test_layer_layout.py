"""Layer layouts (``--layers``): per-layer schemes, sliding windows, the Llama block and QK-norm.

The references here are written out independently of octlm's attention: a
numpy loop over queries and keys with the window written as ``i - W < j <= i``,
RMSNorm and SwiGLU from their formulas, and the full recompute for cached decoding.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from octlm import Decoder, DecoderConfig
from octlm.model.block_recipes import swiglu_hidden
from octlm.model.blocks import LayerPass
from octlm.model.kvcache import KVCache
from octlm.model.layout import describe, layout_text, per_layer_schemes
from tests.conftest import TINY_MODEL

SMALL = dict(vocab_size=40, context_length=16, d_model=16, n_heads=2)


def small(**changes) -> Decoder:
    torch.manual_seed(0)
    return Decoder(DecoderConfig(**{**SMALL, **changes})).eval()


def reference_attention(model: Decoder, x: torch.Tensor, window: int | None) -> np.ndarray:
    """One NoPE layer's attention output for x [T, C], by loops in float64: query i sees keys i - W < j <= i."""
    attn = model.blocks[0].attn
    w = attn.qkv.weight.detach().double().numpy()
    b = attn.qkv.bias.detach().double().numpy()
    qkv = x.detach().double().numpy() @ w.T + b
    T, C = x.shape
    H, D = attn.n_heads, C // attn.n_heads
    q, k, v = (qkv[:, i * C : (i + 1) * C].reshape(T, H, D) for i in range(3))
    out = np.zeros((T, H, D))
    for h in range(H):
        for i in range(T):
            keys = [j for j in range(T) if j <= i and (window is None or j > i - window)]
            scores = np.array([q[i, h] @ k[j, h] / math.sqrt(D) for j in keys])
            weights = np.exp(scores - scores.max())
            weights /= weights.sum()
            out[i, h] = sum(wt * v[j, h] for wt, j in zip(weights, keys, strict=True))
    proj = attn.proj.weight.detach().double().numpy()
    return out.reshape(T, C) @ proj.T + attn.proj.bias.detach().double().numpy()


@pytest.mark.parametrize("window", [1, 3, 7, 16])
def test_a_window_layer_attends_to_its_last_w_keys(window):
    model = small(n_layers=1, position="none", layers=f"none/w{window}")
    x = torch.randn(12, SMALL["d_model"])
    with torch.no_grad():
        got = model.blocks[0].attn(x[None], LayerPass(model.positions.for_layer(0)))[0].detach().double().numpy()
    np.testing.assert_allclose(got, reference_attention(model, x, window), atol=1e-5)


def test_a_global_layer_is_the_reference_without_a_window():
    model = small(n_layers=1, position="none", layers="none")
    x = torch.randn(12, SMALL["d_model"])
    with torch.no_grad():
        got = model.blocks[0].attn(x[None], LayerPass(model.positions.for_layer(0)))[0].detach().double().numpy()
    np.testing.assert_allclose(got, reference_attention(model, x, None), atol=1e-5)


def test_a_layout_of_one_global_scheme_is_the_one_scheme_model():
    """Same seed, same weights (RoPE has none of its own): "rope*2" computes what position=rope does."""
    plain, laid = small(n_layers=2, position="rope"), small(n_layers=2, position="rope", layers="rope*2")
    ids = torch.randint(0, 40, (2, 20))
    with torch.no_grad():
        torch.testing.assert_close(plain(ids), laid(ids), rtol=0, atol=1e-6)


layout_entries = st.tuples(
    st.sampled_from(per_layer_schemes()), st.one_of(st.none(), st.integers(1, SMALL["context_length"]))
).map(lambda e: e[0] + ("" if e[1] is None else f"/w{e[1]}"))


@settings(max_examples=25, deadline=None)
@given(entries=st.lists(layout_entries, min_size=1, max_size=3), prefill=st.integers(1, 9), step=st.integers(1, 4))
def test_cached_decoding_equals_the_full_recompute_for_any_layout(entries, prefill, step):
    model = small(n_layers=len(entries), position="rope", layers=" ".join(entries))
    ids = torch.randint(0, 40, (1, 3 * SMALL["context_length"]), generator=torch.Generator().manual_seed(prefill))
    cache = KVCache(len(entries))
    with torch.no_grad():
        full = model(ids)
        parts = [model(ids[:, :prefill], 0, cache)]
        for start in range(prefill, ids.shape[1], step):
            parts.append(model(ids[:, start : start + step], start, cache))
    torch.testing.assert_close(torch.cat(parts, 1), full, rtol=0, atol=1e-5)


def test_a_window_layers_cache_holds_at_most_w_minus_1_keys_however_long_the_sequence():
    model = small(n_layers=3, position="rope", layers="w4 w9 none")
    cache = KVCache(3)
    with torch.no_grad():
        model(torch.randint(0, 40, (1, 5)), 0, cache)
        for n in range(5, 200):
            model(torch.randint(0, 40, (1, 1)), n, cache)
            assert cache.layers[0].keys.shape[-2] <= 3 and cache.layers[1].keys.shape[-2] <= 8
    assert cache.layers[2].held == cache.length == 200  # the global layer keeps everything


def test_generate_with_windows_matches_without_cache():
    model = small(n_layers=2, position="rope", layers="alibi/w5 rope/w3")
    prompt = torch.randint(0, 40, (2, 4))
    cached = model.generate(prompt, 60, use_cache=True)
    plain = model.generate(prompt, 60, use_cache=False)
    assert torch.equal(cached, plain)


def test_a_layer_theta_is_that_layers_rope_base():
    model = small(n_layers=2, position="rope", layers="rope rope/theta1e6")
    first, second = model.positions.for_layer(0), model.positions.for_layer(1)
    assert first.theta == 10000.0 and second.theta == 1e6
    assert model.positions.for_layer(0) is not second


def test_logn_scales_only_its_own_layer():
    """A logn layer's logits at 1-based query position n are the plain ones times max(1, log n / log T); the layer
    without logn is untouched."""
    from octlm.model.attention_maps import record_attention

    plain = small(n_layers=2, position="rope", layers="rope none")
    scaled = small(n_layers=2, position="rope", layers="rope none/logn")
    ids = torch.randint(0, 40, (1, 3 * SMALL["context_length"]))
    with torch.no_grad(), record_attention(plain) as a, record_attention(scaled) as b:
        plain(ids), scaled(ids)
    n = torch.arange(1, ids.shape[1] + 1, dtype=torch.float64)
    factor = torch.clamp(torch.log(n) / math.log(SMALL["context_length"]), min=1.0).float()[:, None]
    torch.testing.assert_close(b.logits[0], a.logits[0], rtol=0, atol=0)
    visible = torch.isfinite(a.logits[1])
    expected = (a.logits[1] * factor)[visible]
    torch.testing.assert_close(b.logits[1][visible], expected, rtol=1e-5, atol=1e-6)
    assert factor.max() > 1.2  # the sequence reaches past T, where the factor is not 1


def test_qk_norm_is_rmsnorm_over_head_dim_before_the_rotation():
    model = small(n_layers=1, position="none", qk_norm=True)
    attn = model.blocks[0].attn
    with torch.no_grad():
        attn.q_norm.weight.uniform_(0.5, 1.5)
        attn.k_norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(1, 6, SMALL["d_model"])
    q = attn.qkv(x)[..., : SMALL["d_model"]].view(1, 6, 2, 8).double()
    expected = q / torch.sqrt((q**2).mean(-1, keepdim=True) + 1e-6) * attn.q_norm.weight.double()
    torch.testing.assert_close(attn.q_norm(q.float()).double(), expected, rtol=0, atol=1e-6)


def test_the_llama_block_is_rmsnorm_swiglu_and_no_biases():
    model = small(n_layers=1, block="llama")
    block = model.blocks[0]
    assert all(not hasattr(m, "bias") or m.bias is None for m in block.modules() if isinstance(m, torch.nn.Linear))
    assert isinstance(block.ln_attn, torch.nn.RMSNorm) and isinstance(model.ln_final, torch.nn.RMSNorm)
    assert block.mlp.gate.out_features == swiglu_hidden(16) == 48  # ceil(8 * 16 / 3 / 8) * 8
    assert swiglu_hidden(128) == 344
    x = torch.randn(3, 16)
    gate, up, down = (block.mlp.gate.weight, block.mlp.up.weight, block.mlp.down.weight)
    silu = (x @ gate.T) * torch.sigmoid(x @ gate.T)
    torch.testing.assert_close(block.mlp(x), (silu * (x @ up.T)) @ down.T, rtol=0, atol=1e-6)


def test_describe_says_each_layer():
    config = DecoderConfig(**SMALL, n_layers=4, position="rope", layers="w8*3 none/logn/noqknorm")
    assert describe(config.layers) == [
        "rope, window 8",
        "rope, window 8",
        "rope, window 8",
        "none, global, log-scaled queries, no QK-norm",
    ]


BAD = [
    ("rope/w0*3 none", "layer 1 ('rope/w0'): a window of 0 tokens sees nothing; give w1 or more, or global"),
    ("rope/w129 none", "layer 1 ('rope/w129'): a window of 129 tokens is wider than the 128 tokens"),
    ("rope learned", "layer 2 ('learned'): learned adds its signal to the embedding, not inside one layer"),
    ("rope", "gives 1 layer(s) but --n-layers is 2"),
    ("rope*3", "entry rope*3 reaches past --n-layers 2; give one entry per layer"),
    ("rope/w8/wide none", "layer 1 ('rope/w8/wide'): 'wide' is not a scheme or key here; schemes are alibi, cope"),
    ("bogus none", "layer 1 ('bogus'): 'bogus' is not a scheme or key here; schemes are alibi, cope, fire, fox,"),
    ("rope/w-4 none", "layer 1 ('rope/w-4'): 'w-4': a window is wN, N a whole number of tokens (w64, w1e2), or global"),
    ("rope/w4.5 none", "layer 1 ('rope/w4.5'): 'w4.5': a window is wN, N a whole number of tokens"),
    ("w8 none", "layer 1 ('w8'): learned (--position, taken by an entry without a scheme) adds its signal"),
    ("alibi/theta500 none", "layer 1 ('alibi/theta500'): alibi has no RoPE base; theta goes with rope"),
    ("none rope/theta0", "layer 2 ('rope/theta0'): a RoPE base must be a positive number"),
    ("none/w8 none*0", "entry none*0: a repeat must be at least 1"),
    ("none/w8/alibi none", "layer 1 ('none/w8/alibi'): 'alibi' is not a scheme or key here; a scheme comes first"),
    ("rope*-1 none", "entry rope*-1: a repeat must be at least 1"),
    ("rope*99999999999999999999", "entry rope*99999999999999999999 reaches past --n-layers 2"),
    ("rope/theta-1 none", "layer 1 ('rope/theta-1'): a RoPE base must be a positive number, got -1"),
    ("rope/thetanan none", "layer 1 ('rope/thetanan'): a RoPE base must be a positive number, got nan"),
    ("rope/thetainf none", "layer 1 ('rope/thetainf'): a RoPE base must be a positive number, got inf"),
    ("/w8 none", "layer 1 ('/w8'): an empty part between '/'"),
    ("rope/ none", "layer 1 ('rope/'): an empty part between '/'"),
    ("rope/w\uff13\uff12 none", "layer 1 ('rope/w\uff13\uff12'): 'w\uff13\uff12' is not a scheme or key here"),
]


@pytest.mark.parametrize("layers", [5, None, ["rope", "none"]])
def test_a_layout_that_is_not_a_string_is_a_value_error_naming_the_field(layers):
    with pytest.raises(ValueError, match=r"DecoderConfig.layers=.* must be a string such as"):
        DecoderConfig(**SMALL, n_layers=2, position="rope", layers=layers)


@pytest.mark.parametrize(("layout", "message"), BAD)
def test_a_bad_layout_is_one_line_naming_the_layer_and_writes_nothing(layout, message, tmp_path, capsys):
    from octlm.cli import main

    out = tmp_path / "run"
    code = main(
        ["train", "--text", "tinyshakespeare", *TINY_MODEL, "--n-layers", "2", "--layers", layout, "--out", str(out)]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert f"--layers {message}" in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_randomized_positions_with_a_layout_are_refused():
    with pytest.raises(ValueError, match=r"layers with --randomize-positions 4: each layer would draw"):
        DecoderConfig(**SMALL, n_layers=2, position="rope", layers="rope none", randomize_positions=4)


def test_a_layout_run_trains_saves_and_loads(tmp_path):
    from safetensors import safe_open

    from octlm.cli import main
    from octlm.run.load import load_run

    out = tmp_path / "run"
    args = [*TINY_MODEL, "--n-layers", "3", "--block", "llama", "--qk-norm", "--position", "rope"]
    assert main(["train", "--text", "tinyshakespeare", *args, "--layers", "w16*2 none/logn", "--out", str(out)]) == 0
    model, _ = load_run(out)  # loads the weights strictly: every key of the layout's model is in the file
    assert layout_text(model.config.layers) == "rope/w16*2 none/logn" and model.config.block == "llama"
    assert [block.attn.window for block in model.blocks] == [16, 16, None]
    with safe_open(out / "model.safetensors", "pt") as f:
        keys = set(f.keys())
    assert "blocks.2.attn.q_norm.weight" in keys and "blocks.0.mlp.gate.weight" in keys
    assert not any(key.endswith(".bias") for key in keys)
