"""``--canon``: Canon layers (Allen-Zhu 2025) against their formula, at the points the paper places them."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from octlm import Decoder, DecoderConfig
from octlm.cli import main
from octlm.model.canon import CanonConv
from octlm.train.optim import muon_parameters

# results depend on float rounding: scripts/test.sh runs them again under other CPU kernels and threads
pytestmark = pytest.mark.rounding

C = 16


def by_formula(h: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """h_t + sum_j w_j h_{t-j}, channel by channel, with nothing before the sequence: the paper's definition."""
    B, T, W = h.shape
    K = weight.shape[-1]
    out = h.clone()
    for t in range(T):
        for j in range(K):
            if t - j >= 0:
                out[:, t] += weight[:, 0, K - 1 - j] * h[:, t - j]
    return out


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 3), st.integers(1, 9), st.integers(1, 6), st.integers(0, 2**16))
def test_the_layer_is_the_residual_plus_a_causal_sum_of_the_last_four(batch, length, width, seed):
    torch.manual_seed(seed)
    layer = CanonConv(width, "A")
    h = torch.randn(batch, length, width, dtype=torch.float64)
    layer = layer.double()
    torch.testing.assert_close(layer(h), by_formula(h, layer.weight.detach()), rtol=0, atol=1e-12)


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 8), st.integers(1, 8), st.integers(0, 2**16))
def test_two_passes_with_a_state_equal_one_pass(first, second, seed):
    torch.manual_seed(seed)
    layer = CanonConv(3, "B").double()
    h = torch.randn(2, first + second, 3, dtype=torch.float64)
    state: dict = {}
    parts = torch.cat((layer(h[:, :first], state), layer(h[:, first:], state)), dim=1)
    torch.testing.assert_close(parts, layer(h), rtol=0, atol=1e-12)
    assert state["B"].shape == (2, 3, 3)


def _hooked(block: str):
    torch.manual_seed(0)
    config = DecoderConfig(vocab_size=40, context_length=12, d_model=C, n_heads=2, n_layers=2, position="none",
                           canon="ABCD", block=block)  # fmt: skip
    model = Decoder(config).eval()
    seen: dict[str, torch.Tensor] = {}

    def keep(name, what):
        def hook(module, args, output):
            seen[name] = (args[0] if what == "in" else output).detach()

        return hook

    layer = model.blocks[1]
    for name, module, what in (
        ("ln_attn", layer.ln_attn, "out"), ("attn_in", layer.attn, "in"), ("qkv", layer.attn.qkv, "out"),
        ("canon_b_in", layer.attn.canon_b, "in"), ("ln_mlp", layer.ln_mlp, "out"), ("mlp_in", layer.mlp, "in"),
        ("canon_d_in", layer.mlp.canon_d, "in"),
    ):  # fmt: skip
        module.register_forward_hook(keep(name, what))
    if block == "gpt2":
        layer.mlp.up.register_forward_hook(keep("up", "out"))
    else:
        layer.mlp.gate.register_forward_hook(keep("gate", "out"))
        layer.mlp.up.register_forward_hook(keep("up", "out"))
    model(torch.randint(0, 40, (2, 9)))
    return layer, seen


@pytest.mark.parametrize("block", ["gpt2", "llama"])
def test_each_point_reads_what_the_paper_says(block):
    """A: the attention's input is its norm's output through Canon; B: Canon reads the q/k/v projection; C: the
    MLP's input is its norm's output through Canon; D: Canon reads the MLP's first projection(s)."""
    layer, seen = _hooked(block)
    torch.testing.assert_close(seen["attn_in"], by_formula(seen["ln_attn"], layer.canon_a.weight.detach()))
    torch.testing.assert_close(seen["canon_b_in"], seen["qkv"], rtol=0, atol=0)
    torch.testing.assert_close(seen["mlp_in"], by_formula(seen["ln_mlp"], layer.canon_c.weight.detach()))
    first = seen["up"] if block == "gpt2" else torch.cat((seen["gate"], seen["up"]), dim=-1)
    torch.testing.assert_close(seen["canon_d_in"], first, rtol=0, atol=0)


@pytest.mark.parametrize("block,mlp_width", [("gpt2", 4 * C), ("llama", 2 * 48)])
def test_the_points_add_a_kernel_of_four_per_channel(block, mlp_width):
    """Per layer 4 x (C + 3C + C + the MLP's first width) parameters; none of them is a matrix for Muon."""
    shape = {"vocab_size": 40, "context_length": 12, "d_model": C, "n_heads": 2, "n_layers": 3, "block": block}
    plain, canon = Decoder(DecoderConfig(**shape)), Decoder(DecoderConfig(**shape, canon="ABCD"))
    assert canon.num_parameters() - plain.num_parameters() == 3 * 4 * (C + 3 * C + C + mlp_width)
    assert not [n for n in muon_parameters(canon) if "canon" in n]


def test_zero_kernels_are_the_plain_decoder():
    torch.manual_seed(0)
    shape = {"vocab_size": 40, "context_length": 12, "d_model": C, "n_heads": 2, "n_layers": 2}
    plain = Decoder(DecoderConfig(**shape)).eval()
    canon = Decoder(DecoderConfig(**shape, canon="ABCD")).eval()
    canon.load_state_dict(plain.state_dict(), strict=False)
    ids = torch.randint(0, 40, (2, 10))
    with torch.no_grad():
        assert not torch.allclose(canon(ids), plain(ids), atol=1e-4)
        for name, p in canon.named_parameters():
            if "canon" in name:
                p.zero_()
        torch.testing.assert_close(canon(ids), plain(ids), rtol=0, atol=0)


@pytest.mark.parametrize(
    "value,expected", [("E", "give some of the letters ABCD"), ("AA", "each once"), ("a", "give some of the letters")]
)
def test_a_bad_canon_is_refused_in_one_line(value, expected, tmp_path, capsys):
    with pytest.raises(ValueError, match=expected):
        DecoderConfig(canon=value)
    assert main(["train", "--canon", value, "--out", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--canon" in err and expected in err and not (tmp_path / "run").exists()


def test_canon_with_the_document_mask_and_export_are_refused_by_name():
    """(export_hf itself refusing a Canon run: tests/test_token_vectors.py's loop over the first layer's options.)"""
    with pytest.raises(ValueError, match="canon='A' with document_mask.*drop --canon or --document-mask"):
        DecoderConfig(canon="A", document_mask=True)
    from octlm.export.hf_common import recipe_refusal

    assert "canon='ABCD': no transformers architecture has Canon layers" in recipe_refusal(DecoderConfig(canon="ABCD"))


def test_a_length_study_trains_every_model_with_canon_and_the_first_layer_options(small_corpus, tmp_path):
    import json

    out = tmp_path / "study"
    shape = "--train-length 16 --d-model 16 --n-heads 2 --n-layers 1 --vocab-size 280 --batch-size 2 --threads 1"
    argv = ["length", "--text", str(small_corpus), "--out", str(out), "--schemes", "none", "alibi", *shape.split()]
    argv += ["--max-steps", "2", "--multipliers", "1", "2", "--extend-to", "0", "--quiet"]
    assert main([*argv, "--canon", "AC", "--smear-gate", "--x0-skips", "--embedding-norm", "l2"]) == 0
    for scheme in ("none", "alibi"):
        model = json.loads((out / "runs" / scheme / "config.json").read_text())["model"]
        assert (model["canon"], model["smear_gate"], model["x0_skips"], model["embedding_norm"]) == ("AC", 1, 1, "l2")
    assert (
        (out / "length.md")
        .read_text()
        .startswith(
            "Every model of this study has Canon layers at AC (--canon) and a smear gate (--smear-gate) and the "
            "embedding added back before each block (--x0-skips) and token rows through --embedding-norm l2."
        )
    )
    # the table's norm's companions, on a study of their own (sinusoidal refuses the scale; one scheme suffices)
    argv[argv.index("--schemes") + 1 : argv.index("--schemes") + 3] = ["none"]
    assert main([*argv, "--overwrite", "--embedding-scale", "sqrt-d", "--embedding-lr", "0.01"]) == 0
    run = json.loads((out / "runs" / "none" / "config.json").read_text())
    assert (run["model"]["embedding_scale"], run["train"]["embedding_lr"]) == ("sqrt-d", 0.01)
    assert (
        (out / "length.md")
        .read_text()
        .startswith(
            "Every model of this study has token rows scaled by --embedding-scale sqrt-d and a token table trained at "
            "its own peak rate 0.01 (--embedding-lr)."
        )
    )
