"""Hugging Face interop: octlm runs as transformers GPT-2 checkpoints and back.

The reference is transformers' own GPT2LMHeadModel, loaded from the files on
disk; nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

from octlm.cli import main
from octlm.data.tokenizer import Tokenizer
from octlm.export.hf import InteropError, export_hf, import_hf
from octlm.run.load import load_run

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything here is read from local folders
from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel  # noqa: E402  (in the test extra)

# results depend on float rounding: scripts/test.sh runs them again under other CPU kernels and threads
pytestmark = pytest.mark.rounding

TEXT = "ROMEO:\nBut, soft! what light through yonder window breaks?\r\n  Çà et là 1234"


def max_logit_gap(octlm_model, hf_model, ids: torch.Tensor) -> float:
    with torch.no_grad():
        ours = octlm_model(ids)
        theirs = hf_model(ids).logits
    assert ours.shape == theirs.shape
    return float((ours - theirs).abs().max())


@pytest.fixture(scope="module")
def exported(trained_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("hf") / "export"
    export_hf(trained_run, out)
    return out


def test_export_loads_in_transformers_with_equal_logits(trained_run, exported):
    model, tokenizer = load_run(trained_run)
    hf = GPT2LMHeadModel.from_pretrained(exported).eval()
    assert hf.lm_head.weight.data_ptr() == hf.transformer.wte.weight.data_ptr()  # the head stays tied
    ids = torch.randint(
        0, model.config.vocab_size, (3, model.config.context_length), generator=torch.Generator().manual_seed(0)
    )
    assert max_logit_gap(model, hf, ids) < 1e-5
    # the logits are not trivially small: the comparison has something to compare
    with torch.no_grad():
        assert float(model(ids).std()) > 0.1


def test_export_tokenizer_gives_the_same_ids(trained_run, exported):
    _, tokenizer = load_run(trained_run)
    hf_tokenizer = AutoTokenizer.from_pretrained(exported)
    assert hf_tokenizer(TEXT, add_special_tokens=False)["input_ids"] == tokenizer.encode(TEXT)
    assert hf_tokenizer.eos_token_id == tokenizer.eot_id
    # the marker written as text is text to every reader, as it is to octlm
    for text in ["a<|endoftext|>b", "<|endoftext|>", " <|endoftext|><|endoftext|>\n"]:
        assert hf_tokenizer(text, add_special_tokens=False)["input_ids"] == tokenizer.encode(text)
        assert tokenizer.eot_id not in tokenizer.encode(text)
    config = json.loads((exported / "config.json").read_text())
    assert config["activation_function"] == "gelu" and config["n_positions"] == 32 and config["tie_word_embeddings"]


def test_export_then_import_gives_back_the_same_weights(trained_run, exported, tmp_path):
    import_hf(exported, tmp_path / "back")
    ours, _ = load_run(trained_run)
    back, _ = load_run(tmp_path / "back")
    for (name, a), (_, b) in zip(ours.state_dict().items(), back.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("position", ["rope", "alibi", "sinusoidal", "none"])
def test_gpt2_refuses_positions_it_lacks(position):
    from octlm.export.hf import gpt2_config
    from octlm.model import DecoderConfig

    with pytest.raises(InteropError) as err:
        gpt2_config(DecoderConfig(vocab_size=64, d_model=16, n_heads=2, position=position), 0)
    assert f"position='{position}' has no GPT-2 form" in str(err.value) and "--position learned" in str(err.value)


@pytest.mark.parametrize("position", ["alibi", "sinusoidal"])
def test_export_refuses_positions_transformers_lacks(trained_run, tmp_path, capsys, position):
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    config = json.loads((run / "config.json").read_text())
    config["model"]["position"] = position
    (run / "config.json").write_text(json.dumps(config))
    assert main(["export-hf", str(run), str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert (
        f"position='{position}' has no transformers form" in err
        and "--position learned or none or prope or rope" in err
    )
    assert not (tmp_path / "out").exists()


def test_export_cli_json_and_no_clobber(trained_run, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["export-hf", str(trained_run), str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= set(result["files"])
    assert main(["export-hf", str(trained_run), str(out)]) == 1
    assert "--overwrite" in capsys.readouterr().err
    assert main(["export-hf", str(trained_run), str(out), "--overwrite"]) == 0


@pytest.fixture(scope="module")
def gpt2_tokenizer(shakespeare) -> Tokenizer:
    return Tokenizer.train([shakespeare.read_text(encoding="utf-8")[:100_000]], vocab_size=300)


def save_random_gpt2(folder, tokenizer: Tokenizer, tokenizer_files: str = "json", **overrides):
    """A randomly initialised transformers GPT-2 and its tokenizer, saved the way transformers saves them."""
    settings = dict(
        vocab_size=tokenizer.vocab_size,
        n_positions=24,
        n_embd=32,
        n_layer=2,
        n_head=4,
        activation_function="gelu",
        initializer_range=0.2,
        bos_token_id=tokenizer.eot_id,
        eos_token_id=tokenizer.eot_id,
    )
    settings.update(overrides)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(**settings)).eval()
    with torch.no_grad():  # random, non-zero biases and LayerNorm parameters, so every tensor's mapping is tested
        for name, p in model.named_parameters():
            if name.endswith("bias") or ".ln_" in name:
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(folder)
    if tokenizer_files == "json":
        tokenizer.save(folder / "tokenizer.json")
    else:
        tokenizer.hf.model.save(str(folder))  # vocab.json and merges.txt only
    return model


def test_an_untied_gpt2_imports_and_exports_with_equal_logits(gpt2_tokenizer, tmp_path):
    hf = save_random_gpt2(tmp_path / "gpt2", gpt2_tokenizer, tie_word_embeddings=False)
    assert hf.lm_head.weight.data_ptr() != hf.transformer.wte.weight.data_ptr()
    assert main(["import-hf", str(tmp_path / "gpt2"), str(tmp_path / "run"), "--quiet"]) == 0
    model, _ = load_run(tmp_path / "run")
    assert model.config.untied_head and model.lm_head.weight is not model.token_embedding.weight
    torch.testing.assert_close(model.lm_head.weight, hf.lm_head.weight, rtol=0, atol=0)
    ids = torch.randint(0, gpt2_tokenizer.vocab_size, (2, 24), generator=torch.Generator().manual_seed(1))
    assert max_logit_gap(model, hf, ids) < 1e-5
    # and back: transformers reads octlm's export as untied, with the same logits
    assert main(["export-hf", str(tmp_path / "run"), str(tmp_path / "back"), "--quiet"]) == 0
    again = GPT2LMHeadModel.from_pretrained(tmp_path / "back").eval()
    assert not again.config.tie_word_embeddings
    assert again.lm_head.weight.data_ptr() != again.transformer.wte.weight.data_ptr()
    assert max_logit_gap(model, again, ids) < 1e-5


@pytest.mark.parametrize("activation", ["gelu", "gelu_new", "gelu_pytorch_tanh"])
def test_import_random_gpt2_with_equal_logits(gpt2_tokenizer, tmp_path, activation):
    hf = save_random_gpt2(tmp_path / "gpt2", gpt2_tokenizer, activation_function=activation)
    assert main(["import-hf", str(tmp_path / "gpt2"), str(tmp_path / "run"), "--quiet"]) == 0
    model, tokenizer = load_run(tmp_path / "run")
    assert model.lm_head.weight is model.token_embedding.weight
    assert tokenizer.encode(TEXT) == gpt2_tokenizer.encode(TEXT)
    ids = torch.randint(0, gpt2_tokenizer.vocab_size, (2, 24), generator=torch.Generator().manual_seed(1))
    assert max_logit_gap(model, hf, ids) < 1e-5
    with torch.no_grad():
        assert float(model(ids).std()) > 0.1
    # octlm's own tools work on the imported run
    assert main(["sample", "--run", str(tmp_path / "run"), "--max-new-tokens", "30", "--json"]) == 0


def test_import_reads_vocab_and_merges(gpt2_tokenizer, tmp_path):
    save_random_gpt2(tmp_path / "gpt2", gpt2_tokenizer, tokenizer_files="vocab+merges")
    import_hf(tmp_path / "gpt2", tmp_path / "run")
    _, tokenizer = load_run(tmp_path / "run")
    assert tokenizer.encode(TEXT) == gpt2_tokenizer.encode(TEXT)


@pytest.mark.parametrize(
    "change,match",
    [
        ({"activation_function": "relu"}, "activation_function='relu'"),
        ({"n_inner": 100}, "n_inner=100"),
        ({"layer_norm_epsilon": 1e-6}, "layer_norm_epsilon=1e-06"),
        ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx=True"),
        # untied in config.json after a tied save: transformers stored no head
        ({"tie_word_embeddings": False}, "tie_word_embeddings is false but the checkpoint stores no lm_head.weight"),
        ({"model_type": "llama"}, "model_type='llama'"),
        # fewer rows than tokens (more rows are padding, dropped: tests/test_interop_faults.py)
        ({"vocab_size": 299}, "tokenizer has 300 tokens but config.json says vocab_size=299"),
    ],
)
def test_import_refuses_what_octlm_cannot_represent(gpt2_tokenizer, tmp_path, capsys, change, match):
    folder = tmp_path / "gpt2"
    save_random_gpt2(folder, gpt2_tokenizer)
    config = json.loads((folder / "config.json").read_text())
    config.update(change)
    (folder / "config.json").write_text(json.dumps(config))
    if "vocab_size" in change:  # make the weights agree with the config, so only the tokenizer differs
        save_random_gpt2(tmp_path / "smaller", gpt2_tokenizer, vocab_size=299)
        shutil.copy(tmp_path / "smaller" / "model.safetensors", folder / "model.safetensors")
    assert main(["import-hf", str(folder), str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert match in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("problem", ["pickle-only", "no-tokenizer", "truncated", "untied-head"])
def test_import_refuses_unsafe_or_broken_files(gpt2_tokenizer, tmp_path, problem):
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "gpt2"
    save_random_gpt2(folder, gpt2_tokenizer)
    weights = folder / "model.safetensors"
    if problem == "pickle-only":
        weights.rename(folder / "pytorch_model.bin")
        match = "a pickle, which octlm never loads"
    elif problem == "no-tokenizer":
        (folder / "tokenizer.json").unlink()
        match = "no tokenizer.json"
    elif problem == "truncated":
        weights.write_bytes(weights.read_bytes()[:1000])
        match = "model.safetensors: cannot read weights"
    else:
        state = load_file(str(weights))
        state["lm_head.weight"] = state["transformer.wte.weight"] + 1
        save_file(state, str(weights), metadata={"format": "pt"})
        match = "lm_head.weight differs from the token table"
    with pytest.raises(InteropError, match=match):
        import_hf(folder, tmp_path / "run")


@pytest.mark.parametrize("command", ["export-hf", "import-hf"])
def test_commands_have_help_and_json(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "--json" in out and "--overwrite" in out


def test_overwrite_never_destroys_a_run_or_the_input(trained_run, gpt2_tokenizer, tmp_path, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    before = sorted(p.name for p in run.iterdir())
    # exporting a run onto itself (or onto any octlm run) would have deleted the run
    assert main(["export-hf", str(run), str(run), "--overwrite"]) == 1
    assert "holds an octlm run, which export-hf never replaces" in capsys.readouterr().err
    assert sorted(p.name for p in run.iterdir()) == before
    # importing a checkpoint onto itself would have replaced what it reads
    hf = tmp_path / "hf"
    save_random_gpt2(hf, gpt2_tokenizer)
    hf_files = sorted(p.name for p in hf.iterdir())
    assert main(["import-hf", str(hf), str(hf), "--overwrite"]) == 1
    assert "RUN_DIR" in capsys.readouterr().err and sorted(p.name for p in hf.iterdir()) == hf_files
    # a transformers checkpoint is not an octlm run: train --overwrite leaves it alone
    assert main(["train", "--out", str(hf), "--overwrite", "--max-steps", "1"]) == 1
    assert "not an octlm run" in capsys.readouterr().err and sorted(p.name for p in hf.iterdir()) == hf_files
    # an import's config.json that is not an object
    (hf / "config.json").write_text("[1, 2]")
    assert main(["import-hf", str(hf), str(tmp_path / "imported")]) == 1
    assert "holds a JSON list, not the object of a transformers config" in capsys.readouterr().err
