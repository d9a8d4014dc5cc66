"""Run folders: files, loading, the tied head after a round trip, damaged files."""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import octlm
from octlm.errors import RunError
from octlm.run.load import load_run


def test_run_folder_holds_every_file(trained_run):
    for name in (
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "metrics.jsonl",
        "manifest.json",
        "train.bin",
        "val.bin",
    ):
        assert (trained_run / name).is_file(), name
    assert not list(trained_run.glob(".*.tmp"))


def test_manifest_hashes_match_the_files(trained_run, small_corpus):
    manifest = json.loads((trained_run / "manifest.json").read_text())
    (entry,) = manifest["files"]
    raw = small_corpus.read_bytes()
    assert entry["bytes"] == len(raw) and entry["sha256"] == hashlib.sha256(raw).hexdigest()
    for split in ("train", "val"):
        tokens = manifest["tokens"][split]
        data = (trained_run / tokens["file"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == tokens["sha256"]
        assert len(data) == tokens["count"] * np.dtype(tokens["dtype"]).itemsize


def test_head_stays_tied_after_save_and_load(trained_run):
    stored = load_file(str(trained_run / "model.safetensors"))
    assert "lm_head.weight" not in stored  # stored once
    model, tokenizer = octlm.load_run(trained_run)
    assert model.lm_head.weight is model.token_embedding.weight
    torch.testing.assert_close(model.token_embedding.weight, stored["token_embedding.weight"])
    assert not model.training and tokenizer.vocab_size == model.config.vocab_size
    # a step of training moves head and table together
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    ids = torch.randint(0, model.config.vocab_size, (2, 8))
    model(ids).logsumexp(-1).sum().backward()
    opt.step()
    assert model.lm_head.weight is model.token_embedding.weight


def test_metrics_lines_are_json_with_eval(trained_run):
    lines = [json.loads(line) for line in (trained_run / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in lines if r["kind"] == "eval"]
    assert evals and all({"val_loss", "val_bpb", "val_perplexity"} <= set(r) for r in evals)
    assert evals[-1]["step"] == 30


def test_config_records_model_and_resolved_options(trained_run):
    config = json.loads((trained_run / "config.json").read_text())
    assert config["model"]["context_length"] == 32 and config["model"]["position"] == "learned"
    assert config["train"]["max_steps"] == 30 and config["train"]["out"] == str(trained_run)
    from octlm.version import build_version

    assert config["octlm_version"] == build_version()  # the release, and the commit when run from a checkout


@pytest.mark.parametrize("damage", ["truncate", "garbage", "delete"])
def test_damaged_weights_get_a_clear_error(trained_run, tmp_path, damage):
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    weights = run / "model.safetensors"
    if damage == "truncate":
        weights.write_bytes(weights.read_bytes()[:100])
    elif damage == "garbage":
        weights.write_bytes(b"\x00" * 64)
    else:
        weights.unlink()
    with pytest.raises(RunError, match="model.safetensors"):
        load_run(run)


def test_missing_run_folder(tmp_path):
    with pytest.raises(RunError, match="no such run folder"):
        load_run(tmp_path / "nothing")
    with pytest.raises(RunError, match="config.json"):
        load_run(tmp_path)


def test_reading_a_safetensors_file_while_it_is_replaced_sees_one_whole_file(tmp_path):
    """A reader racing another process's atomic writes never pairs one file's header with another's tensors.

    safetensors.safe_open opens the path twice; against a writer process that
    showed 73 torn reads in 3,000 (a checkpoint read while training wrote the
    next one was called corrupted).
    """
    import subprocess
    import sys
    import textwrap

    from octlm.fileio import read_safetensors

    path = tmp_path / "w.safetensors"
    writer = textwrap.dedent(f"""
        import torch
        from safetensors.torch import save
        from octlm.fileio import atomic_write
        versions = [save({{"x": torch.full((20000,), float(v))}}, metadata={{"v": str(v)}}) for v in range(2)]
        atomic_write({str(path)!r}, versions[0])
        print("ready", flush=True)
        n = 0
        while True:
            n += 1
            atomic_write({str(path)!r}, versions[n % 2])
    """)
    child = subprocess.Popen([sys.executable, "-c", writer], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        for _ in range(1000):
            tensors, metadata = read_safetensors(path)
            assert torch.all(tensors["x"] == float(metadata["v"]))
    finally:
        child.kill()
        child.wait()
