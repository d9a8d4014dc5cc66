"""``--embedding-norm`` and ``--embedding-scale``: the token rows' norm and scale before the position scheme.

Each is checked against its formula written out here (LayerNorm and RMSNorm by their definitions, the L2 norm,
sqrt(d_model)), with the position scheme's signal added after; cached decoding in tests/test_generate.py.
"""

from __future__ import annotations

import math

import pytest
import torch

from octlm.cli import main
from octlm.errors import OctlmError
from octlm.export.hf import export_hf
from octlm.model import Decoder, DecoderConfig
from octlm.model.weights import save_weights
from octlm.run.folder import RunFolder

C = 16


def model(position="none", block="gpt2", **fields) -> Decoder:
    torch.manual_seed(0)
    config = DecoderConfig(vocab_size=40, context_length=12, d_model=C, n_heads=2, n_layers=1, position=position,
                           block=block, **fields)  # fmt: skip
    decoder = Decoder(config).eval()
    with torch.no_grad():
        for p in decoder.token_vectors.parameters():  # gains and biases away from 1 and 0, so each one counts
            p.add_(torch.randn_like(p) * 0.3)
    return decoder


def by_hand(rows: torch.Tensor, decoder: Decoder, norm: str, scale: str, block: str) -> torch.Tensor:
    if norm == "l2":
        rows = rows / rows.pow(2).sum(-1, keepdim=True).sqrt()
    elif norm == "norm" and block == "gpt2":
        mean, var = rows.mean(-1, keepdim=True), rows.var(-1, unbiased=False, keepdim=True)
        gain, bias = decoder.token_vectors.norm.weight, decoder.token_vectors.norm.bias
        rows = (rows - mean) / torch.sqrt(var + 1e-5) * gain + bias
    elif norm == "norm":
        gain = decoder.token_vectors.norm.weight
        rows = rows / torch.sqrt(rows.pow(2).mean(-1, keepdim=True) + decoder.token_vectors.norm.eps) * gain
    return rows * math.sqrt(C) if scale == "sqrt-d" else rows


@pytest.mark.parametrize("block", ["gpt2", "llama"])
@pytest.mark.parametrize("norm", ["none", "norm", "l2"])
@pytest.mark.parametrize("scale", ["none", "sqrt-d"])
def test_the_token_rows_are_normed_then_scaled_before_the_positions(block, norm, scale):
    ids = torch.randint(0, 40, (2, 12), generator=torch.Generator().manual_seed(1))
    plain = model("none", block, embedding_norm=norm, embedding_scale=scale)
    rows = plain.token_embedding.weight[ids]
    with torch.no_grad():
        want = by_hand(rows, plain, norm, scale, block)
        torch.testing.assert_close(plain._embed(ids), want, rtol=1e-5, atol=1e-6)
        # a learned table is added after, at the pass's offset
        learned = model("learned", block, embedding_norm=norm, embedding_scale=scale)
        got = learned._embed(ids[:, :8], offset=4)
        table = learned.positions.table.weight[4:12]
        want = by_hand(learned.token_embedding.weight[ids[:, :8]], learned, norm, scale, block) + table
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    extra = {"none": 0, "l2": 0, "norm": C * (2 if block == "gpt2" else 1)}[norm]
    assert plain.num_parameters() == model("none", block).num_parameters() + extra


def test_a_scale_the_scheme_already_applies_is_refused_and_no_export_carries_either(tmp_path, shakespeare):
    with pytest.raises(ValueError, match="embedding_scale='sqrt-d' with position='sinusoidal'.*already multiplies"):
        model("sinusoidal", embedding_scale="sqrt-d")
    code = main(["train", "--position", "sinusoidal", "--embedding-scale", "sqrt-d", "--out", str(tmp_path / "x")])
    assert code == 1 and not (tmp_path / "x").exists()
    from octlm.data.tokenizer import Tokenizer

    tokenizer = Tokenizer.train([shakespeare.read_text(encoding="utf-8")[:20_000]], vocab_size=280)
    cases = (
        ({"embedding_norm": "norm"}, "embedding_norm='norm'"),
        ({"embedding_scale": "sqrt-d"}, "embedding_scale='sqrt-d'"),
    )
    for fields, name in cases:
        torch.manual_seed(0)
        decoder = Decoder(DecoderConfig(vocab_size=tokenizer.vocab_size, context_length=12, d_model=C, n_heads=2,
                                        n_layers=1, position="rope", **fields))  # fmt: skip
        run = tmp_path / name.split("=")[0]
        run.mkdir()
        save_weights(run / "model.safetensors", decoder)
        tokenizer.save(run / "tokenizer.json")
        RunFolder(run).write_config(decoder.config, {})
        with pytest.raises(OctlmError, match=f"{name}: .*train without --embedding-"):
            export_hf(run, tmp_path / f"hf-{run.name}")
