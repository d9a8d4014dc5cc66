"""State files a run or study reads back, damaged (issue 52, point 1: drt-hub/drt #47, PyAutoFit PR 1480).

The rule for every one: a record that is not complete is named and its work done again, or the command refuses
in one line naming the file and the fix; no traceback, and nothing else lost.
"""

from __future__ import annotations

import json
import shutil

import pytest

from octlm.cli import main
from tests.conftest import SMALL_RUN, flags
from tests.fixtures.study_stops.stops import install
from tests.test_study_continue import LENGTH, NOT_COMPARED, with_value


def _kept(record: dict) -> dict:
    return {k: v for k, v in record["result"].items() if k not in NOT_COMPARED}


@pytest.mark.slow
def test_a_study_record_cut_in_half_is_named_and_its_unit_done_again(tmp_path, monkeypatch, capsys, small_corpus):
    out = tmp_path / "study"
    args = [*with_value(LENGTH, "--extend-to", "0"), "--text", str(small_corpus), "--out", str(out)]
    install("unit:2:INT", monkeypatch.setattr)  # the model trained and scored, no tables yet
    assert main(args) == 130
    monkeypatch.undo()
    damaged = out / "progress" / "train-alibi-seed1337.json"
    whole = damaged.read_text()
    damaged.write_text(whole[: len(whole) // 2])
    scored = (out / "progress" / "score-alibi-seed1337.json").read_text()
    capsys.readouterr()
    assert main(args) == 0
    said = "".join(capsys.readouterr())
    assert f"{damaged} is not a complete record" in said and "train-alibi-seed1337 will be done again" in said
    assert "Traceback" not in said and " alibi at " not in said  # the scored unit was kept, not scored again
    rows = [json.loads(line) for line in (out / "length.jsonl").read_text().splitlines()]
    trained = next(r for r in rows if r.get("record") == "train")
    before = _kept(json.loads(whole))
    common = sorted(set(before) & set(trained))
    assert len(common) >= 2 and {k: trained[k] for k in common} == {k: before[k] for k in common}  # same model again
    assert json.loads(scored)  # the scored record, untouched, is what the tables were written from


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_a_run_json_file_that_is_no_object_is_one_line_naming_it(trained_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    (run / "manifest.json").write_text("[1, 2]")  # valid JSON, not what octlm writes: an AttributeError before
    assert main(["train", "--resume", str(run), "--max-steps", "40", "--quiet"]) == 1
    err = _one_error_line(capsys)
    assert f"{run / 'manifest.json'}: holds a JSON list" in err and "restore it" in err


def test_a_damaged_metrics_line_on_resume_with_a_tracker_is_one_line_naming_it(tmp_path, capsys, small_corpus):
    pytest.importorskip("torch.utils.tensorboard")
    run = tmp_path / "run"
    args = ["train", "--text", str(small_corpus), "--out", str(run), *flags(**SMALL_RUN, max_steps=4, save_every=2)]
    assert main([*args, "--quiet"]) == 0
    metrics = run / "metrics.jsonl"
    lines = metrics.read_bytes().split(b"\n")
    lines[0] = lines[0][:9].ljust(len(lines[0]))  # the same length: the checkpoint's place in the file still holds
    metrics.write_bytes(b"\n".join(lines))
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--max-steps", "6", "--log-to", "tensorboard", "--quiet"]) == 1
    err = capsys.readouterr().err.splitlines()[-1]  # after the warning that the limit moved
    assert f"{metrics} line 1 is not a whole metrics record" in err and "resume without --log-to" in err
