"""export-hf of Llama-block runs with learned sinks to transformers' GPT-OSS, checked against transformers itself.

Each exported run is loaded with ``AutoModelForCausalLM`` (eager attention,
the sinks' reference implementation) and must give octlm's logits on 40
tokens, past the window and the 16 tokens it was built for, and the same
greedy tokens. The models are random, every tensor moved off its initial
value, so each tensor's place and order counts.
"""

from __future__ import annotations

import json
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
pytest.importorskip("transformers.models.gpt_oss")

from octlm.data.tokenizer import Tokenizer  # noqa: E402
from octlm.export.hf import export_hf  # noqa: E402
from octlm.model import Decoder, DecoderConfig  # noqa: E402
from octlm.model.weights import save_weights  # noqa: E402
from octlm.run.folder import RunFolder  # noqa: E402

pytestmark = pytest.mark.rounding
SHAPE = dict(context_length=16, d_model=32, n_heads=4, n_layers=2, block="llama", attention_sinks=True)
CASES = {
    "global-interleaved": dict(position="rope"),
    "windows-half-base": dict(position="rope", layers="rope/w5 rope", rope_layout="half", rope_theta=500.0),
    "untied": dict(position="rope", untied_head=True),
}


@pytest.fixture(scope="module")
def tokenizer(shakespeare) -> Tokenizer:
    return Tokenizer.train([shakespeare.read_text(encoding="utf-8")[:30_000]], vocab_size=300)


@pytest.fixture(scope="module", params=list(CASES))
def exported(request, tokenizer, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    torch.manual_seed(0)
    model = Decoder(DecoderConfig(vocab_size=tokenizer.vocab_size, **SHAPE, **CASES[request.param])).eval()
    with torch.no_grad():
        for p in model.parameters():  # gains around 1, sinks of both signs, every matrix moved
            p.add_(torch.randn_like(p) * (1.0 if p.dim() == 1 and p.numel() == 4 else 0.3 if p.dim() == 1 else 0.2))
    (folder / "run").mkdir()
    save_weights(folder / "run" / "model.safetensors", model)
    tokenizer.save(folder / "run" / "tokenizer.json")
    RunFolder(folder / "run").write_config(model.config, {})
    result = export_hf(folder / "run", folder / "hf")
    assert result["architecture"] == "GptOssForCausalLM"
    theirs = transformers.AutoModelForCausalLM.from_pretrained(folder / "hf", attn_implementation="eager").eval()
    return model, theirs, folder / "hf"


def test_gpt_oss_gives_octlms_logits(exported):
    ours, theirs, _ = exported
    ids = torch.randint(0, ours.config.vocab_size, (2, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        a, b = ours(ids), theirs(ids).logits
    assert float(a.std()) > 0.1
    torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)
    # the sinks count: GPT-OSS with its sinks pushed to -inf is another model
    with torch.no_grad():
        for layer in theirs.model.layers:
            layer.self_attn.sinks.fill_(-1e4)
        assert float((theirs(ids).logits - a).abs().max()) > 1e-2
        for layer, block in zip(theirs.model.layers, ours.blocks, strict=True):
            layer.self_attn.sinks.copy_(block.attn.sinks)


def test_greedy_generation_is_the_same(exported):
    ours, theirs, _ = exported
    prompt = torch.tensor([[5, 17, 42, 8]])
    with torch.no_grad():
        mine = ours.generate(prompt, max_new_tokens=24, temperature=0.0)
        hf = theirs.generate(prompt, max_new_tokens=24, do_sample=False, pad_token_id=0)
    assert mine[0].tolist() == hf[0].tolist()


def test_the_config_says_one_expert_and_the_layers(exported):
    ours, _, folder = exported
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "gpt_oss" and config["num_local_experts"] == config["num_experts_per_tok"] == 1
    windowed = [spec.window is not None for spec in ours.config.layers] or [False, False]
    assert config["layer_types"] == ["sliding_attention" if w else "full_attention" for w in windowed]
