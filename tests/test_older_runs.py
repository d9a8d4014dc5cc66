"""A run folder written by octlm before the wings layout still loads, samples, resumes and exports.

``tests/fixtures/run-75b88c6`` was made by main at commit 75b88c6, before
``TrainOptions`` nested the model's options: its ``config.json`` keeps the
model's shape both in its ``model`` section and again in ``train``, the way
that octlm wrote it. It was made with::

    octlm train --text small.txt --out run-main --vocab-size 280 --context-length 16 --d-model 16 --n-heads 2 \\
        --n-layers 1 --batch-size 4 --max-steps 6 --eval-interval 3 --save-every 3 --sample-tokens 0 --position rope
        --threads 1

(``small.txt``: the first 30,000 bytes of tinyshakespeare; ``.lock`` and ``loss.png`` left out.)
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors import safe_open

from octlm.cli import main
from octlm.run.load import load_run
from tests.conftest import REPO

OLD_RUN = REPO / "tests" / "fixtures" / "run-75b88c6"


@pytest.fixture
def old_run(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(OLD_RUN, run)
    return run


def test_the_fixture_is_in_the_old_layout():
    config = json.loads((OLD_RUN / "config.json").read_text())
    # the shape written twice, as octlm wrote it then
    assert config["train"]["d_model"] == config["model"]["d_model"] == 16


def test_an_older_run_loads_and_samples(old_run, capsys):
    model, tokenizer = load_run(old_run)
    assert model.config.position == "rope" and model.config.d_model == 16 and tokenizer.vocab_size == 280
    ids = torch.tensor([tokenizer.encode("ROMEO:")])
    assert torch.isfinite(model(ids)).all()
    assert main(["sample", "--run", str(old_run), "--prompt", "ROMEO:", "--max-new-tokens", "5", "--threads", "1"]) == 0


def test_an_older_run_resumes_and_its_config_then_holds_the_shape_once(old_run, capsys):
    assert main(["train", "--resume", str(old_run), "--max-steps", "8", "--threads", "1", "--quiet"]) == 0
    config = json.loads((old_run / "config.json").read_text())
    assert config["model"]["d_model"] == 16 and "d_model" not in config["train"] and config["train"]["max_steps"] == 8
    # and the rewritten run resumes again
    assert main(["train", "--resume", str(old_run), "--max-steps", "9", "--threads", "1", "--quiet"]) == 0
    assert [json.loads(line)["step"] for line in (old_run / "metrics.jsonl").read_text().splitlines()][-1] == 9


def test_an_older_run_resumes_with_adamw_as_it_trained(old_run, capsys):
    """Its config.json predates --optimizer (AdamW then): Muon, octlm train's default since, must not take over on
    resume."""
    assert "optimizer" not in json.loads((OLD_RUN / "config.json").read_text())["train"]
    assert (
        main(
            ["train", "--resume", str(old_run), "--optimizer", "muon", "--max-steps", "8", "--threads", "1", "--quiet"]
        )
        == 1
    )
    assert "--optimizer muon contradicts the run being resumed, which has optimizer='adamw'" in capsys.readouterr().err
    assert main(["train", "--resume", str(old_run), "--max-steps", "8", "--threads", "1", "--quiet"]) == 0
    assert json.loads((old_run / "config.json").read_text())["train"]["optimizer"] == "adamw"
    state = {
        key.rsplit(".", 1)[1]
        for key in safe_open(str(old_run / "checkpoint.safetensors"), "pt").keys()
        if key.startswith("optimizer.")
    }
    assert state == {"step", "exp_avg", "exp_avg_sq"}  # AdamW's moments on every parameter, no Muon momentum buffer


def test_an_older_run_refuses_a_contradicting_shape_on_resume(old_run, capsys):
    assert main(["train", "--resume", str(old_run), "--d-model", "32", "--max-steps", "8"]) == 1
    assert "--d-model 32 contradicts the run being resumed, which has d_model=16" in capsys.readouterr().err


def test_an_older_run_exports_to_transformers(old_run, tmp_path, capsys):
    out = tmp_path / "hf"
    assert main(["export-hf", str(old_run), str(out), "--threads", "1"]) == 0
    assert json.loads((out / "config.json").read_text())["model_type"] == "gpt_neox"
