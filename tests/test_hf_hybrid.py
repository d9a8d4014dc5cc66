"""export-hf of Llama-block runs and layer layouts: to Llama, SmolLM3 and Qwen3, and what none carries.

The reference is transformers itself: each exported run is loaded with
``AutoModelForCausalLM`` and must give octlm's logits (1e-5) on 40 tokens,
past every window and past the 16 tokens it was built for, and the same 30
greedy tokens (transformers' own cache, sliding layers included). The models
are random, with every gain and matrix moved off its initial value, so each
tensor's place and order counts.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
from packaging.version import Version  # noqa: E402  (a transformers dependency)

from octlm.cli import main  # noqa: E402
from octlm.data.tokenizer import Tokenizer  # noqa: E402
from octlm.export.hf import InteropError, export_hf, import_hf, mapper_for  # noqa: E402
from octlm.export.hf_llama import SINCE  # noqa: E402
from octlm.model import Decoder, DecoderConfig  # noqa: E402
from octlm.model.weights import save_weights  # noqa: E402
from octlm.run.folder import RunFolder  # noqa: E402

pytestmark = [
    pytest.mark.rounding,
    pytest.mark.skipif(
        Version(transformers.__version__) < Version(SINCE["smollm3"]),
        reason=f"SmolLM3 and Qwen3's layer_types arrived in transformers {SINCE['smollm3']}",
    ),
]

SHAPE = dict(context_length=16, d_model=32, n_heads=4, n_layers=2, block="llama")
LENGTH, NEW_TOKENS = 40, 30

# (name, octlm config fields, run-time RoPE scaling or None, transformers class)
CASES = [
    ("llama-interleaved", dict(position="rope"), None, "LlamaForCausalLM"),
    ("llama-half-base", dict(position="rope", rope_layout="half", rope_theta=500.0), None, "LlamaForCausalLM"),
    ("llama-yarn", dict(position="rope", rope_layout="half"), ("yarn", 4.0), "LlamaForCausalLM"),
    ("llama-untied", dict(position="rope", untied_head=True), None, "LlamaForCausalLM"),
    ("smollm3-nope", dict(position="none"), None, "SmolLM3ForCausalLM"),
    ("smollm3-windows-nope", dict(n_layers=3, layers="rope/w4*2 none"), None, "SmolLM3ForCausalLM"),
    (
        "smollm3-rope-windows-base",
        dict(n_layers=3, layers="rope/w6/theta500*2 rope/theta500", rope_layout="half"),
        None,
        "SmolLM3ForCausalLM",
    ),
    # a global RoPE layer: octlm leaves window layers unscaled, which SmolLM3 would scale (refused on export)
    ("smollm3-linear", dict(position="rope", layers="rope none"), ("linear", 4.0), "SmolLM3ForCausalLM"),
    ("qwen3", dict(position="rope", qk_norm=True), None, "Qwen3ForCausalLM"),
    ("qwen3-windows", dict(n_layers=3, qk_norm=True, layers="rope rope/w5 rope"), None, "Qwen3ForCausalLM"),
    ("qwen3-ntk", dict(position="rope", qk_norm=True, rope_layout="half"), ("ntk", 4.0), "Qwen3ForCausalLM"),
]


@pytest.fixture(scope="module")
def tokenizer(shakespeare) -> Tokenizer:
    return Tokenizer.train([shakespeare.read_text(encoding="utf-8")[:30_000]], vocab_size=300)


def make_run(folder, tokenizer: Tokenizer, **fields) -> Decoder:
    """A random octlm run folder: norm gains spread around 1, every matrix moved, so no tensor is left at its init."""
    torch.manual_seed(0)
    model = Decoder(DecoderConfig(vocab_size=tokenizer.vocab_size, **{**SHAPE, **fields})).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * (0.3 if p.dim() == 1 else 0.2))
    folder.mkdir(parents=True)
    save_weights(folder / "model.safetensors", model)
    tokenizer.save(folder / "tokenizer.json")
    RunFolder(folder).write_config(model.config, {})
    return model


def token_ids(model: Decoder) -> torch.Tensor:
    return torch.randint(0, model.config.vocab_size, (2, LENGTH), generator=torch.Generator().manual_seed(0))


def logits_gap(ours: Decoder, folder) -> float:
    theirs = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    ids = token_ids(ours)
    with torch.no_grad():
        a, b = ours(ids), theirs(ids).logits
    assert float(a.std()) > 0.1  # something to compare
    return float((a - b).abs().max())


@pytest.fixture(scope="module", params=CASES, ids=[case[0] for case in CASES])
def exported(request, tokenizer, tmp_path_factory):
    name, fields, scaling, architecture = request.param
    folder = tmp_path_factory.mktemp(name)
    model = make_run(folder / "run", tokenizer, **fields)
    method, factor = scaling or (None, None)
    result = export_hf(folder / "run", folder / "hf", rope_scaling=method, rope_factor=factor)
    assert result["architecture"] == architecture
    if scaling:
        model.set_rope_scaling(method, factor)
    return model, folder / "hf", architecture


def test_export_loads_in_transformers_with_equal_logits(exported):
    model, folder, architecture = exported
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    assert type(hf).__name__ == architecture
    shared = hf.get_output_embeddings().weight.data_ptr() == hf.get_input_embeddings().weight.data_ptr()
    assert shared == (not model.config.untied_head) == hf.config.tie_word_embeddings
    assert logits_gap(model, folder) < 1e-5


def test_greedy_generation_is_the_same(exported, tokenizer):
    model, folder, _ = exported
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    prompt = torch.tensor([tokenizer.encode("ROMEO:\nBut, soft! what light")[:6]])
    ours = model.generate(prompt, NEW_TOKENS, temperature=0.0)
    theirs = hf.generate(
        prompt, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=tokenizer.eot_id
    )
    assert ours.tolist() == theirs.tolist()


#: The RoPE keys each transformers major version reads: version 4 (4.53 to 4.57) knows no rope_parameters.
SPELLINGS = {"transformers 4": ("rope_theta", "rope_scaling"), "transformers 5": ("rope_parameters",)}


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_each_transformers_version_reads_the_same_rope_from_the_export(exported, tmp_path, spelling):
    """Either spelling alone carries the rotation and its scaling (version 5 still reads version 4's keys)."""
    model, folder, _ = exported
    if spelling == "transformers 5" and Version(transformers.__version__) < Version("5"):
        pytest.skip("transformers 4 does not read rope_parameters")
    config = json.loads((folder / "config.json").read_text())
    others = {key for name, keys in SPELLINGS.items() if name != spelling for key in keys}
    shutil.copytree(folder, tmp_path / "hf")
    (tmp_path / "hf" / "config.json").write_text(json.dumps({k: v for k, v in config.items() if k not in others}))
    assert logits_gap(model, tmp_path / "hf") < 1e-5


@pytest.mark.parametrize("shift", [-1, 1])
def test_a_window_one_key_wider_or_narrower_gives_other_logits(tokenizer, tmp_path, shift):
    """octlm's w4 is transformers' sliding_window 4 (query i sees keys i - 4 < j <= i): off by one, the test sees it."""
    model = make_run(tmp_path / "run", tokenizer, n_layers=3, layers="rope/w4*2 none")
    export_hf(tmp_path / "run", tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["sliding_window"] == 4 and config["layer_types"][2] == "full_attention"
    config["sliding_window"] += shift
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    assert logits_gap(model, tmp_path / "hf") > 1e-3


def test_smollm3_export_names_each_layers_scheme_and_window(tokenizer, tmp_path):
    make_run(tmp_path / "run", tokenizer, n_layers=4, layers="rope/w8*3 none")
    export_hf(tmp_path / "run", tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["model_type"] == "smollm3" and config["no_rope_layers"] == [1, 1, 1, 0]
    assert config["layer_types"] == ["sliding_attention"] * 3 + ["full_attention"] and config["use_sliding_window"]
    assert config["intermediate_size"] == 88 and config["rms_norm_eps"] == 1e-6  # ceil(32 / 3) * 8


@pytest.mark.parametrize(
    "fields,match",
    [
        (dict(layers="rope/theta1e4 rope/theta1e6"), "RoPE bases that differ by layer .*Gemma 3 has two"),
        (dict(layers="rope none/logn"), "logn on layer 2: .*Llama 4"),
        (dict(n_layers=3, layers="rope/w4 rope/w8 none"), "windows of more than one size .*4 tokens on layer 1"),
        (dict(layers="rope alibi"), "layer 2 of layers='rope alibi': alibi in Llama's block"),
        (dict(position="learned"), "position='learned' in Llama's block"),
        (dict(position="rope", partial_rotary_factor=0.5), "rope with partial_rotary_factor=0.5 turns 4 of the 8"),
        (dict(position="prope"), "prope with partial_rotary_factor=1.0 turns 6 of the 8 channels"),
        (dict(layers="rope/qknorm rope"), "QK-norm on layer 1 only: Qwen3 normalizes .* every layer"),
        (dict(qk_norm=True, layers="rope none"), "QK-norm with NoPE on layer 2: Qwen3 .* turns every layer"),
        (dict(block="gpt2", layers="rope none"), "layers='rope none' with GPT-2's block"),
        (dict(block="gpt2", position="rope", qk_norm=True), "qk_norm=True with GPT-2's block"),
        (dict(position="rope", attention_scale="log"), "attention_scale='log': transformers"),
    ],
)
def test_export_refuses_what_no_architecture_carries_by_name(fields, match):
    config = DecoderConfig(vocab_size=50, **{**SHAPE, "position": "rope", **fields})
    with pytest.raises(InteropError, match=match):
        mapper_for(config)


def test_export_refuses_dynamic_ntk_for_llama_by_name(tokenizer, tmp_path, capsys):
    make_run(tmp_path / "run", tokenizer, position="rope")
    argv = ["export-hf", str(tmp_path / "run"), str(tmp_path / "hf"), "--rope-scaling", "dynamic-ntk", "--threads", "1"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "RoPE scaling 'dynamic-ntk' has no Llama form" in err and "keeps the keys it cached" in err
    assert not (tmp_path / "hf").exists()


def test_a_refused_layout_is_said_on_the_command_line_before_anything_is_written(tokenizer, tmp_path, capsys):
    make_run(tmp_path / "run", tokenizer, n_layers=3, layers="rope/w4 rope/w8 none")
    assert main(["export-hf", str(tmp_path / "run"), str(tmp_path / "hf"), "--threads", "1"]) == 1
    err = capsys.readouterr().err
    assert "windows of more than one size" in err and "sliding_window is one size" in err
    assert not (tmp_path / "hf").exists()


def test_import_of_an_export_says_it_is_written_only(tokenizer, tmp_path):
    make_run(tmp_path / "run", tokenizer, n_layers=3, layers="rope/w4*2 none")
    export_hf(tmp_path / "run", tmp_path / "hf")
    with pytest.raises(InteropError, match="export-hf writes smollm3 .* but import-hf does not read it back"):
        import_hf(tmp_path / "hf", tmp_path / "back")
