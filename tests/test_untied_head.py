"""``--untied-head``: the output head gets a matrix of its own (transformers' ``tie_word_embeddings`` false).

Checked against the formula (logits = final norm's output x head^T, with the head a separate matrix), against
the tied model (the same weights with the head set to the table give the same logits), through a save and a load,
and through training (the table's and the head's updates differ). Export to transformers is in tests/test_hf*.py,
cached decoding in tests/test_generate.py.
"""

from __future__ import annotations

import pytest
import torch
from safetensors import safe_open

from octlm.cli import main
from octlm.model import Decoder, DecoderConfig
from octlm.model.weights import load_weights, save_weights
from octlm.run.load import load_run
from octlm.train.optim import make_optimizer, muon_parameters
from octlm.train.options import TrainOptions
from tests.conftest import TINY_MODEL

SHAPE = dict(vocab_size=40, context_length=12, d_model=16, n_heads=2, n_layers=2, position="rope")


def models() -> tuple[Decoder, Decoder]:
    torch.manual_seed(0)
    tied = Decoder(DecoderConfig(**SHAPE)).eval()
    untied = Decoder(DecoderConfig(**SHAPE, untied_head=True)).eval()
    untied.load_state_dict({k: v for k, v in tied.state_dict().items() if k != "lm_head.weight"}, strict=False)
    return tied, untied


def test_the_logits_are_the_final_norms_output_times_the_heads_own_matrix():
    tied, untied = models()
    assert tied.lm_head.weight is tied.token_embedding.weight
    assert untied.lm_head.weight is not untied.token_embedding.weight
    ids = torch.randint(0, 40, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        untied.lm_head.weight.copy_(untied.token_embedding.weight)
        torch.testing.assert_close(untied(ids), tied(ids), rtol=0, atol=0)  # the head set to the table: tied
        head = torch.randn(40, 16, generator=torch.Generator().manual_seed(2))
        untied.lm_head.weight.copy_(head)
        normed = {}
        untied.ln_final.register_forward_hook(lambda module, args, out: normed.setdefault("out", out))
        logits = untied(ids)
    torch.testing.assert_close(logits, normed["out"] @ head.T, rtol=1e-6, atol=1e-6)
    assert not torch.allclose(untied.token_embedding.weight, head)  # the table was not moved with it
    # a vocabulary x d_model more parameters, counted with the rest (not as an embedding table)
    assert untied.num_parameters() - tied.num_parameters() == 40 * 16
    assert untied.num_parameters(exclude_embeddings=True) - tied.num_parameters(exclude_embeddings=True) == 40 * 16


def test_the_head_is_stored_and_read_back_only_when_untied(tmp_path):
    tied, untied = models()
    with torch.no_grad():
        untied.lm_head.weight.normal_()
    for model, name in ((tied, "tied"), (untied, "untied")):
        save_weights(tmp_path / f"{name}.safetensors", model)
        with safe_open(tmp_path / f"{name}.safetensors", "pt") as f:
            assert ("lm_head.weight" in f.keys()) == (name == "untied")
    fresh = Decoder(DecoderConfig(**SHAPE, untied_head=True))
    load_weights(tmp_path / "untied.safetensors", fresh)
    torch.testing.assert_close(fresh.lm_head.weight, untied.lm_head.weight, rtol=0, atol=0)
    assert fresh.lm_head.weight is not fresh.token_embedding.weight


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_the_head_trains_on_adamw_apart_from_the_table(optimizer):
    _, model = models()
    model.train()
    opts = TrainOptions.of(optimizer=optimizer, untied_head=True)
    assert "lm_head.weight" not in (muon_parameters(model) if optimizer == "muon" else [])
    opt = make_optimizer(model, opts, torch.device("cpu"))
    table, head = model.token_embedding.weight.detach().clone(), model.lm_head.weight.detach().clone()
    ids = torch.randint(0, 20, (2, 12), generator=torch.Generator().manual_seed(3))  # tokens 0..19 in, all 40 out
    model(ids).logsumexp(-1).mean().backward()
    opt.step()
    moved_table = (model.token_embedding.weight.detach() - table).abs().sum(dim=1)
    moved_head = (model.lm_head.weight.detach() - head).abs().sum(dim=1)
    assert bool((moved_head > 0).all())  # every output row has a gradient
    # rows of tokens never given as input move only by weight decay, a far smaller step than the head's
    assert float(moved_table[20:].max()) < float(moved_head[20:].min())


def test_a_run_trains_saves_samples_and_resumes_untied(small_corpus, tmp_path):
    out = tmp_path / "run"
    args = ["train", "--text", str(small_corpus), "--out", str(out), *TINY_MODEL, "--untied-head", "--quiet"]
    assert main(args) == 0
    model, _ = load_run(out)
    assert model.config.untied_head and model.lm_head.weight is not model.token_embedding.weight
    assert main(["train", "--resume", str(out), "--max-steps", "5", "--quiet"]) == 0
    assert load_run(out)[0].config.untied_head
    assert main(["sample", "--run", str(out), "--max-new-tokens", "5", "--quiet"]) == 0
