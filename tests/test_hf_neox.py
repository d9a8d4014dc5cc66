"""RoPE and NoPE runs as transformers GPT-NeoX checkpoints, and back; what no architecture holds is refused.

Every reference is transformers' own model loaded from the files on disk;
the models are tiny and random (biases and LayerNorms too), nothing is downloaded.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import pytest
import torch

from octlm.cli import main
from octlm.data.tokenizer import Tokenizer
from octlm.export.hf import InteropError, export_hf, import_hf
from octlm.model import Decoder, DecoderConfig
from octlm.model.positions import RopeScaling, alibi_slopes
from octlm.model.positions.rope_scaling import ntk_theta
from octlm.model.weights import save_weights
from octlm.run.folder import RunFolder
from octlm.run.load import load_run

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, GPTNeoXConfig, GPTNeoXForCausalLM  # noqa: E402

# results depend on float rounding: scripts/test.sh runs them again under other CPU kernels and threads
pytestmark = pytest.mark.rounding

TEXT = "ROMEO:\nBut, soft! what light through yonder window breaks?"
SHAPE = dict(context_length=16, d_model=32, n_heads=4, n_layers=2)

# (name, octlm config fields, run-time RoPE scaling or None)
LAYOUTS = [
    ("interleaved", dict(position="rope"), None),
    ("half", dict(position="rope", rope_layout="half", rope_theta=500.0), None),
    ("partial-interleaved", dict(position="rope", partial_rotary_factor=0.5), None),
    (
        "partial-half-tanh",
        dict(position="rope", rope_layout="half", partial_rotary_factor=0.25, activation="gelu_tanh"),
        None,
    ),
    ("linear", dict(position="rope"), ("linear", 4.0)),
    ("yarn", dict(position="rope", partial_rotary_factor=0.5), ("yarn", 4.0)),
    ("ntk", dict(position="rope", rope_layout="half"), ("ntk", 4.0)),
    ("llama3", dict(position="rope", rope_layout="half"), ("llama3", 4.0)),
    ("nope", dict(position="none"), None),
    # p-RoPE as GPT-NeoX partial rotary over its turning pairs (head_dim 8): 3 of 4 pairs, then 1 of 2 over half the
    # head
    ("prope-interleaved", dict(position="prope"), None),
    (
        "prope-half-partial",
        dict(position="prope", rope_layout="half", partial_rotary_factor=0.5, rope_fraction=0.5, rope_theta=500.0),
        None,
    ),
    ("prope-linear", dict(position="prope", rope_layout="half", rope_theta=500.0), ("linear", 4.0)),
]


@pytest.fixture(scope="module")
def tokenizer(shakespeare) -> Tokenizer:
    return Tokenizer.train([shakespeare.read_text(encoding="utf-8")[:100_000]], vocab_size=300)


def make_run(folder, tokenizer: Tokenizer, **fields) -> Decoder:
    """A random octlm run folder (non-zero biases and LayerNorm parameters, so every tensor's mapping counts)."""
    torch.manual_seed(0)
    model = Decoder(DecoderConfig(vocab_size=tokenizer.vocab_size, **{**SHAPE, **fields})).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.add_(torch.randn_like(p) * (0.1 if name.endswith("bias") or "ln_" in name else 0.2))
    folder.mkdir(parents=True)
    save_weights(folder / "model.safetensors", model)
    tokenizer.save(folder / "tokenizer.json")
    RunFolder(folder).write_config(model.config, {})
    return model


def logits_gap(ours: Decoder, theirs, ids: torch.Tensor) -> float:
    with torch.no_grad():
        a, b = ours(ids), theirs(ids).logits
    assert float(a.std()) > 0.1  # something to compare
    return float((a - b).abs().max())


@pytest.fixture(scope="module", params=LAYOUTS, ids=[name for name, _, _ in LAYOUTS])
def exported(request, tokenizer, tmp_path_factory):
    name, fields, scaling = request.param
    folder = tmp_path_factory.mktemp(name)
    model = make_run(folder / "run", tokenizer, **fields)
    method, factor = scaling or (None, None)
    export_hf(folder / "run", folder / "hf", rope_scaling=method, rope_factor=factor)
    if scaling:
        model.set_rope_scaling(method, factor)
    return model, folder


def test_export_loads_in_transformers_with_equal_logits(exported):
    model, folder = exported
    hf = AutoModelForCausalLM.from_pretrained(folder / "hf").eval()
    assert isinstance(hf, GPTNeoXForCausalLM)
    # the head stays tied
    assert hf.get_output_embeddings().weight.data_ptr() == hf.get_input_embeddings().weight.data_ptr()
    # 3x past training
    ids = torch.randint(0, model.config.vocab_size, (2, 48), generator=torch.Generator().manual_seed(0))
    assert logits_gap(model, hf, ids) < 1e-5


#: What each transformers major version reads of a GPT-NeoX RoPE: version 4 (4.45 to 4.57; GPTNeoXConfig.__init__)
#: knows no rope_parameters and loads rotary_pct 0.25 and rotary_emb_base 10000 where its keys are missing.
SPELLINGS = {
    "transformers 4": ("rotary_pct", "rotary_emb_base", "rope_scaling"),
    "transformers 5": ("rope_parameters",),
}


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_each_transformers_version_reads_the_same_rope_from_the_export(exported, tmp_path, spelling):
    """The export loads with octlm's logits from either spelling of its RoPE alone.

    Transformers 5 still reads the version 4 keys with version 4's meaning and
    defaults, so loading a config.json that keeps only them shows what
    transformers 4 computes; the full parity run under the oldest allowed
    transformers 4 is scripts/test_oldest_transformers.sh.
    """
    model, folder = exported
    if spelling == "transformers 5" and int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip("transformers 4 does not read rope_parameters")
    config = json.loads((folder / "hf" / "config.json").read_text())
    others = {key for name, keys in SPELLINGS.items() if name != spelling for key in keys}
    shutil.copytree(folder / "hf", tmp_path / "hf")
    (tmp_path / "hf" / "config.json").write_text(json.dumps({k: v for k, v in config.items() if k not in others}))
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    ids = torch.randint(0, model.config.vocab_size, (2, 48), generator=torch.Generator().manual_seed(0))
    assert logits_gap(model, hf, ids) < 1e-5


def test_greedy_generation_is_the_same(exported, tokenizer):
    model, folder = exported
    hf = AutoModelForCausalLM.from_pretrained(folder / "hf").eval()
    prompt = torch.tensor([tokenizer.encode(TEXT)[:8]])
    ours = model.generate(prompt, 32, temperature=0.0)
    theirs = hf.generate(prompt, max_new_tokens=32, min_new_tokens=32, do_sample=False, pad_token_id=tokenizer.eot_id)
    assert ours.tolist() == theirs.tolist()


def test_tokenizer_gives_the_same_ids(exported, tokenizer):
    _, folder = exported
    assert AutoTokenizer.from_pretrained(folder / "hf")(TEXT, add_special_tokens=False)[
        "input_ids"
    ] == tokenizer.encode(TEXT)


def test_export_then_import_gives_the_same_run(exported, tmp_path):
    model, folder = exported
    result = import_hf(folder / "hf", tmp_path / "back")
    back, _ = load_run(tmp_path / "back")
    ours, theirs = model.state_dict(), back.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    scaling = getattr(model.positions, "scaling", None)
    if scaling is not None and scaling.method == "ntk":  # travels as a larger rope_theta: plain RoPE to transformers
        assert back.config.rope_theta == pytest.approx(
            ntk_theta(model.config.rope_theta, scaling.factor, model.positions.rotary_dim)
        )
        assert dataclasses.replace(back.config, rope_theta=model.config.rope_theta) == model.config
        return
    assert back.config == model.config
    if scaling is not None:
        assert result["rope_scaling"]["method"] == scaling.method and result["rope_scaling"]["factor"] == scaling.factor


def rope_arguments(rope: dict) -> dict:
    """GPTNeoXConfig arguments that give ``rope`` (a transformers 5 ``rope_parameters`` dict) in transformers 4 and 5.

    Version 4 takes ``rotary_pct``, ``rotary_emb_base`` and ``rope_scaling``
    and keeps ``rope_parameters`` as an attribute it never reads; version 5
    reads all four, ``rope_scaling`` over ``rope_parameters``.
    """
    scaling = {k: v for k, v in rope.items() if k not in ("rope_theta", "partial_rotary_factor")}
    return {
        "rope_parameters": rope,
        "rotary_pct": rope.get("partial_rotary_factor", 1.0),
        "rotary_emb_base": rope.get("rope_theta", 10000.0),
        "rope_scaling": scaling if scaling.get("rope_type", "default") != "default" else None,
    }


def random_neox(folder, tokenizer: Tokenizer, **overrides) -> GPTNeoXForCausalLM:
    """A random transformers GPT-NeoX in octlm's block layout, saved the way transformers saves it."""
    settings = dict(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=16,
        use_parallel_residual=False,
        tie_word_embeddings=True,
        initializer_range=0.2,
        **rope_arguments({"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}),
    )
    settings.update(rope_arguments(overrides.pop("rope_parameters")) if "rope_parameters" in overrides else {})
    settings.update(overrides)
    torch.manual_seed(1)
    model = GPTNeoXForCausalLM(GPTNeoXConfig(**settings)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "layernorm" in name or "layer_norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(folder)
    tokenizer.save(folder / "tokenizer.json")
    return model


@pytest.mark.parametrize(
    "rope",
    [
        {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.0},
        {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0, "partial_rotary_factor": 1.0},
        {
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 16,
            "rope_theta": 10000.0,
            "partial_rotary_factor": 1.0,
        },
        {
            "rope_type": "llama3",
            "factor": 4.0,
            "original_max_position_embeddings": 8,
            "low_freq_factor": 1.0,
            "high_freq_factor": 2.0,
            "rope_theta": 10000.0,
            "partial_rotary_factor": 1.0,
        },
    ],
    ids=["partial", "nope", "linear", "yarn", "llama3"],
)
def test_import_random_neox_with_equal_logits(tokenizer, tmp_path, rope):
    # A YaRN checkpoint serves factor x its original length, as real ones say: transformers 4.53 to 4.55 take the
    # factor from max_position_embeddings / original_max_position_embeddings, not from "factor".
    served = {"max_position_embeddings": 64} if rope["rope_type"] == "yarn" else {}
    hf = random_neox(tmp_path / "hf", tokenizer, rope_parameters=rope, hidden_act="gelu_pytorch_tanh", **served)
    assert main(["import-hf", str(tmp_path / "hf"), str(tmp_path / "run"), "--quiet"]) == 0
    model, _ = load_run(tmp_path / "run")
    assert model.config.position == ("none" if rope["partial_rotary_factor"] == 0 else "rope")
    recorded = json.loads((tmp_path / "run" / "config.json").read_text())["train"].get("rope_scaling")
    # a run-time setting in octlm, recorded with the run (with the method's own keys: YaRN's betas, Llama 3's factors)
    if recorded:
        model.positions.set_rope_scaling(RopeScaling(**recorded))
    ids = torch.randint(0, tokenizer.vocab_size, (2, 40), generator=torch.Generator().manual_seed(2))
    assert logits_gap(model, hf, ids) < 1e-5


@pytest.mark.parametrize(
    "change,match",
    [
        ({"use_parallel_residual": True}, "use_parallel_residual=True"),
        ({"layer_norm_eps": 1e-6}, "layer_norm_eps=1e-06"),
        ({"hidden_act": "relu"}, "hidden_act='relu'"),
        ({"intermediate_size": 100}, "intermediate_size=100"),
        (
            {
                "rope_parameters": {
                    "rope_type": "dynamic",
                    "factor": 2.0,
                    "rope_theta": 1e4,
                    "partial_rotary_factor": 1.0,
                }
            },
            "keeps the keys it cached",
        ),
        ({"rope_parameters": {"rope_type": "longrope", "factor": 2.0, "rope_theta": 1e4}}, "rope_type='longrope'"),
        (
            {
                "rope_parameters": {
                    "rope_type": "llama3",
                    "factor": 2.0,
                    "rope_theta": 1e4,
                    "original_max_position_embeddings": 16,
                    "low_freq_factor": 4.0,
                    "high_freq_factor": 1.0,
                }
            },
            "0 < low_freq_factor < high_freq_factor",
        ),
    ],
)
def test_import_refuses_what_octlm_cannot_compute(tokenizer, tmp_path, capsys, change, match):
    random_neox(tmp_path / "hf", tokenizer)
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    config.update(change)
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    assert main(["import-hf", str(tmp_path / "hf"), str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert match in err and "Traceback" not in err and not (tmp_path / "run").exists()


def test_an_untied_head_imports_with_equal_logits_and_a_tied_one_must_be_the_table(tokenizer, tmp_path):
    hf = random_neox(tmp_path / "hf", tokenizer, tie_word_embeddings=False)
    import_hf(tmp_path / "hf", tmp_path / "run")
    model, _ = load_run(tmp_path / "run")
    assert model.config.untied_head and model.lm_head.weight is not model.token_embedding.weight
    ids = torch.randint(0, tokenizer.vocab_size, (2, 16), generator=torch.Generator().manual_seed(2))
    assert logits_gap(model, hf, ids) < 1e-5
    # a head stored beside a config that ties it: transformers would drop it, so octlm refuses it
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": True}))
    with pytest.raises(InteropError, match="(lm_head|embed_out).weight differs from the token table .* set it false"):
        import_hf(tmp_path / "hf", tmp_path / "run2")


def test_an_untied_run_exports_with_equal_logits(tokenizer, tmp_path):
    model = make_run(tmp_path / "run", tokenizer, position="rope", untied_head=True)
    export_hf(tmp_path / "run", tmp_path / "hf")
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    assert not hf.config.tie_word_embeddings
    assert hf.get_output_embeddings().weight.data_ptr() != hf.get_input_embeddings().weight.data_ptr()
    ids = torch.randint(0, tokenizer.vocab_size, (2, 48), generator=torch.Generator().manual_seed(0))
    assert logits_gap(model, hf, ids) < 1e-5


def test_export_refuses_dynamic_ntk_by_name(tokenizer, tmp_path, capsys):
    make_run(tmp_path / "run", tokenizer, position="rope")
    assert main(["export-hf", str(tmp_path / "run"), str(tmp_path / "hf"), "--rope-scaling", "dynamic-ntk"]) == 1
    err = capsys.readouterr().err
    assert "RoPE scaling 'dynamic-ntk' has no GPT-NeoX form" in err and "keeps the keys it cached" in err
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize("method", ["ntk", "yarn"])
def test_export_refuses_prope_scalings_transformers_would_spread_otherwise(tokenizer, tmp_path, capsys, method):
    """p-RoPE travels as partial rotary over its turning pairs; NTK and YaRN there would see 6 channels, not 8 (Barbero
    et al. 2024 §6)."""
    make_run(tmp_path / "run", tokenizer, position="prope")
    assert (
        main(["export-hf", str(tmp_path / "run"), str(tmp_path / "hf"), "--rope-scaling", method, "--rope-factor", "2"])
        == 1
    )
    err = capsys.readouterr().err
    assert (
        f"RoPE scaling '{method}' of position='prope' has no GPT-NeoX form" in err
        and "over the 6 turning channels" in err
    )
    assert not (tmp_path / "hf").exists()


def test_prope_export_is_partial_rotary_at_a_smaller_base(tokenizer, tmp_path):
    """The written rotation, against the formula: k = floor(0.75 * 4) = 3 pairs of head_dim 8, base theta ** (6 / 8)."""
    model = make_run(tmp_path / "run", tokenizer, position="prope")
    export_hf(tmp_path / "run", tmp_path / "hf")
    rope = json.loads((tmp_path / "hf" / "config.json").read_text())["rope_parameters"]
    assert rope["partial_rotary_factor"] == 6 / 8 and rope["rope_theta"] == pytest.approx(model.config.rope_theta**0.75)


@pytest.mark.parametrize(
    "position,reason",
    [
        ("alibi", "MPT has no biases in its linear layers and LayerNorms"),
        ("sinusoidal", "no transformers architecture adds fixed sine/cosine rows"),
    ],
)
def test_export_refuses_schemes_without_an_architecture(tokenizer, tmp_path, capsys, position, reason):
    make_run(tmp_path / "run", tokenizer, position=position)
    assert main(["export-hf", str(tmp_path / "run"), str(tmp_path / "hf")]) == 1
    err = capsys.readouterr().err
    assert f"position='{position}' has no transformers form" in err and reason in err
    assert not (tmp_path / "hf").exists()


def test_alibi_refusal_is_about_the_blocks_not_the_slopes():
    """MPT's and BLOOM's slopes are octlm's for 1 to 16 heads; MPT's blocks have no biases, BLOOM normalises the token
    rows."""
    from transformers import BloomConfig, BloomForCausalLM, MptConfig, MptForCausalLM
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    for heads in range(1, 17):
        ours = alibi_slopes(heads)
        mpt = -build_mpt_alibi_tensor(heads, 2)[:, 0, 0]  # bias of the key one step back: -slope
        bloom = build_alibi_tensor(torch.ones(1, 2), heads, torch.float32)[:, 0, 1]  # key 1: slope * 1
        assert torch.allclose(ours, mpt, rtol=1e-6) and torch.allclose(ours, bloom, rtol=1e-6), heads
    mpt = MptForCausalLM(MptConfig(d_model=16, n_heads=2, n_layers=1, vocab_size=10, no_bias=False))
    assert not [n for n, _ in mpt.named_parameters() if n.endswith("bias")]
    bloom = BloomForCausalLM(BloomConfig(hidden_size=16, n_head=2, n_layer=1, vocab_size=10))
    assert hasattr(bloom.transformer, "word_embeddings_layernorm")


def test_export_summary_names_the_architecture(tokenizer, tmp_path, capsys):
    make_run(tmp_path / "run", tokenizer, position="rope")
    assert main(["export-hf", str(tmp_path / "run"), str(tmp_path / "hf"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert result["architecture"] == "GPTNeoXForCausalLM" and result["config"]["use_parallel_residual"] is False
