"""``--embedding-norm``, ``--embedding-scale``, ``--smear-gate`` and ``--x0-skips``: the first layer's options.

Each is checked against its formula written out here (LayerNorm and RMSNorm by their definitions, the L2 norm,
sqrt(d_model), the gated predecessor, each block's input as the mix of the last block's output and the embedding),
with the position
scheme's signal added after the rows' norm and scale; cached decoding in tests/test_generate.py.
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
        ({"x0_skips": True}, "x0_skips=True"),
        ({"smear_gate": True}, "smear_gate=True"),
        ({"canon": "AC"}, "canon='AC'"),
        ({"key_offset": True, "partial_rotary_factor": 0.5}, "key_offset=True"),
        ({"value_embeddings": True}, "value_embeddings=True"),
        ({"bigram_rows": 64}, "bigram_rows=64"),
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
        with pytest.raises(
            OctlmError,
            match=f"{name}: .*train without --(embedding-|x0-skips|smear-gate|canon|key-offset|value-|bigram-)",
        ):
            export_hf(run, tmp_path / f"hf-{run.name}")


def test_each_block_reads_its_mix_of_the_last_output_and_the_embedding():
    torch.manual_seed(0)
    config = DecoderConfig(vocab_size=40, context_length=12, d_model=C, n_heads=2, n_layers=3, position="rope")
    plain = Decoder(config).eval()
    skips = Decoder(DecoderConfig(**{**config.to_dict(), "x0_skips": True})).eval()
    skips.load_state_dict(plain.state_dict(), strict=False)
    ids = torch.randint(0, 40, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(skips(ids), plain(ids), rtol=0, atol=0)  # 1 and 0 at the start: the plain model
        skips.x0_skips.lambdas.copy_(torch.tensor([0.5, 1.5, -0.7]))
        skips.x0_skips.mus.copy_(torch.tensor([0.3, -1.2, 2.0]))
        inputs, outputs = [], []
        for block in skips.blocks:
            block.register_forward_pre_hook(lambda module, args: inputs.append(args[0]))
            block.register_forward_hook(lambda module, args, out: outputs.append(out))
        moved = skips(ids)
        x0 = skips._embed(ids)
    lam, mu = [0.5, 1.5, -0.7], [0.3, -1.2, 2.0]
    for i in range(3):
        last = x0 if i == 0 else outputs[i - 1]
        torch.testing.assert_close(inputs[i], lam[i] * last + mu[i] * x0, rtol=1e-6, atol=1e-6)
    assert float((moved - plain(ids)).abs().max()) > 1e-3


def test_each_row_takes_in_its_gated_predecessor():
    torch.manual_seed(0)
    shape = dict(vocab_size=40, context_length=12, d_model=32, n_heads=2, n_layers=1, position="none")
    plain = Decoder(DecoderConfig(**shape)).eval()
    smear = Decoder(DecoderConfig(**shape, smear_gate=True)).eval()
    smear.load_state_dict(plain.state_dict(), strict=False)
    ids = torch.randint(0, 40, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(smear(ids), plain(ids), rtol=0, atol=0)  # strength 0 at the start: plain
        smear.smear.strength.fill_(0.7)
        w = torch.randn(1, 24, generator=torch.Generator().manual_seed(2))  # 24 of the 32 channels
        smear.smear.gate.weight.copy_(w)
        smear.smear.gate.bias.fill_(-0.3)
        rows = smear.token_embedding.weight[ids]
        got = smear._embed(ids)
    for t in range(12):
        gate = torch.sigmoid(rows[:, t, :24] @ w[0] - 0.3)[:, None]
        before = rows[:, t - 1] if t > 0 else torch.zeros_like(rows[:, 0])
        torch.testing.assert_close(got[:, t], rows[:, t] + 0.7 * gate * before, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="smear_gate=True with document_mask: .* drop --smear-gate or --document-mask"):
        DecoderConfig(**shape, smear_gate=True, document_mask=True)
