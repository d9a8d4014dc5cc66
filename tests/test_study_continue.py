"""An interrupted study continues: the same command on its folder gives the rows an uninterrupted study gives.

The interruptions are real signals (Ctrl-C's SIGINT and ``kill -9``) sent by
the study process to itself at a chosen point (tests/fixtures/study_stops: seams of octlm's own, patched in the
test's process or, through ``sitecustomize``, in the child's; octlm has no hook for it). The
expectation is an uninterrupted study of the same options, run in its own
folder: the same rows, and (same machine, one thread) the same numbers.
Timings and paths are left out of the comparison.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from octlm.cli import main
from tests.conftest import TINY_MODEL
from tests.fixtures.study_stops.stops import child_env, install

#: Fields that hold wall times or the study's own path, which no two studies share.
NOT_COMPARED = {"train_seconds", "tokens_per_second", "seconds", "eval_seconds", "run_dir"}

LENGTH = [
    "length",
    *TINY_MODEL,
    "--train-length",
    "16",
    "--multipliers",
    "1",
    "2",
    "--schemes",
    "alibi",
    "--rope-scalings",
    "--extend-to",
    "2",
    "--extend-steps",
    "2",
    "--eval-tokens",
    "512",
    "--device",
    "cpu",
]
TASK = [
    "length",
    "--task",
    "copy",
    "--schemes",
    "rope",
    "alibi",
    "--seeds",
    "2",
    "--d-model",
    "16",
    "--n-heads",
    "2",
    "--n-layers",
    "1",
    "--max-steps",
    "3",
    "--task-length",
    "2",
    "--device",
    "cpu",
    "--threads",
    "1",
]


def with_value(args: list[str], flag: str, value: str) -> list[str]:
    """``args`` with the value after ``flag`` replaced."""
    at = args.index(flag) + 1
    return [*args[:at], value, *args[at + 1 :]]


def run(args: list[str], out: Path, stop: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "octlm", *args, "--out", str(out)],
        env=child_env(dict(os.environ), stop),
        capture_output=True,
        text=True,
        timeout=900,
    )


def rows(path: Path) -> list[dict]:
    """The study's records, without timings and paths."""
    found = []
    for line in path.read_text().splitlines():
        record = {k: v for k, v in json.loads(line).items() if k not in NOT_COMPARED}
        if "options" in record:
            record["options"] = {k: v for k, v in record["options"].items() if k != "out"}
        found.append(record)
    return found


@pytest.fixture(scope="module")
def length_reference(tmp_path_factory, small_corpus) -> list[dict]:
    out = tmp_path_factory.mktemp("reference") / "study"
    done = run([*LENGTH, "--text", str(small_corpus)], out)
    assert done.returncode == 0, done.stderr
    return rows(out / "length.jsonl")


# Each point: where the study stops (the N-th training step, scored length or recorded unit of the process) and how.
# Steps 1-3 are the base model's, 4-5 the fine-tune's; lengths 1-2 the base model's, 3-4 the fine-tuned one's; units:
# 1 the base model trained, 2 scored, 3 and 4 the curve at 0 and 1 fine-tuning steps.
LENGTH_STOPS = {
    "training, Ctrl-C": "step:2:INT",
    "training, kill -9": "step:2:KILL",
    "scoring, kill -9": "length:1:KILL",
    "extension stage, Ctrl-C": "step:5:INT",
    "extension stage, kill -9": "unit:4:KILL",
    "scoring the fine-tuned model, Ctrl-C": "length:3:INT",
}
BASE_SCORED = " alibi at "  # the base model's score line (the fine-tuned one's says alibi@2x)
#: What the continued command must say (how it went on) and must not (work already recorded, done again).
SAYS = {
    "step:2:INT": ("resuming", None),  # from the checkpoint Ctrl-C saved
    "step:2:KILL": ("stopped before its first checkpoint", None),  # killed before the run saved one: from step 0
    "length:1:KILL": (BASE_SCORED, "[alibi] run folder"),  # the base model is kept, its scoring done again
    "step:5:INT": ("no record of a finished final evaluation", BASE_SCORED),
    "unit:4:KILL": ("resuming", BASE_SCORED),  # the fine-tune from its step-1 checkpoint; base scores kept
    "length:3:INT": ("alibi@2x at", BASE_SCORED),
}


@pytest.mark.slow
@pytest.mark.parametrize("stop", LENGTH_STOPS.values(), ids=LENGTH_STOPS.keys())
def test_an_interrupted_length_study_continues_to_the_rows_of_an_uninterrupted_one(
    stop, length_reference, small_corpus, tmp_path
):
    out = tmp_path / "study"
    stopped = run([*LENGTH, "--text", str(small_corpus)], out, stop)
    killed = stop.endswith("KILL")
    assert stopped.returncode == (-signal.SIGKILL if killed else 130), stopped.stderr
    assert not (out / "length.jsonl").exists() and not (out / "length.md").exists()  # no table yet, whole or half
    if not killed:
        assert "the same command continues it" in stopped.stderr
    continued = run([*LENGTH, "--text", str(small_corpus)], out)
    assert continued.returncode == 0, continued.stderr
    said = continued.stdout + continued.stderr
    assert "continuing the unfinished length study" in said
    must, must_not = SAYS[stop]
    assert must in said and (must_not is None or must_not not in said)
    assert rows(out / "length.jsonl") == length_reference
    assert sorted(p.name for p in out.iterdir()) == [
        "attention.png",
        "extend.png",
        "length.jsonl",
        "length.md",
        "length.png",
        "runs",
    ]


@pytest.fixture(scope="module")
def task_reference(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("task") / "reference"
    done = run(TASK, out)
    assert done.returncode == 0, done.stderr
    return rows(out / "tasks.jsonl")


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["unit:1:INT", "step:7:KILL", "unit:3:KILL"])
def test_an_interrupted_task_study_continues_to_the_rows_of_an_uninterrupted_one(stop, task_reference, tmp_path):
    out = tmp_path / "study"
    stopped = run(TASK, out, stop)
    assert stopped.returncode == (-signal.SIGKILL if stop.endswith("KILL") else 130), stopped.stderr
    assert not (out / "tasks.jsonl").exists()
    continued = run(TASK, out)
    assert continued.returncode == 0, continued.stderr
    assert rows(out / "tasks.jsonl") == task_reference
    assert not (out / "progress").exists()


@pytest.mark.slow
def test_a_task_model_killed_mid_training_resumes_from_its_checkpoint(tmp_path):
    # 250 steps, checkpoints every 100 (task_checkpoint.SAVE_EVERY): killed in step 180, the model resumes at 100, so
    # the continued command trains 150 steps; a stop at its 151st step would kill a model trained again from step 0
    args = [a for a in with_value(with_value(TASK, "--max-steps", "250"), "--seeds", "1") if a != "alibi"]  # one model
    reference = run(args, tmp_path / "reference")
    assert reference.returncode == 0, reference.stderr
    out = tmp_path / "study"
    assert run(args, out, "step:180:KILL").returncode == -signal.SIGKILL
    assert (out / "progress" / "model-copy-rope-seed1337.safetensors").is_file()
    continued = run(args, out, "step:151:KILL")
    assert continued.returncode == 0, continued.stderr
    assert rows(out / "tasks.jsonl") == rows(tmp_path / "reference" / "tasks.jsonl")


def test_a_study_with_other_options_in_the_folder_is_refused_naming_the_option(tmp_path, monkeypatch, capsys):
    out = tmp_path / "study"
    install("unit:1:INT", monkeypatch.setattr)
    assert main([*TASK, "--out", str(out)]) == 130
    kept = sorted(p.name for p in (out / "progress").iterdir())
    capsys.readouterr()
    assert main([*with_value(TASK, "--max-steps", "4"), "--out", str(out)]) == 1  # --max-steps 4 where it began with 3
    err = capsys.readouterr().err
    assert "begun with --max-steps 3, but this command gives --max-steps 4" in err and err.count("\n") == 1
    assert sorted(p.name for p in (out / "progress").iterdir()) == kept  # nothing of the study was touched
    assert main([*TASK, "--out", str(out)]) == 0
    assert "continuing the unfinished task study" in "".join(capsys.readouterr())


@pytest.mark.parametrize(
    ("name", "then", "now", "says"),
    [
        ("multipliers", [1, 2], [1, 2, 4], "begun with --multipliers 1 2, but this command gives --multipliers 1 2 4"),
        (
            "schemes",
            ["rope", "rope"],
            ["rope", "alibi"],
            "with --schemes rope rope, but this command gives --schemes rope alibi",
        ),
        ("max_steps", 300, None, "begun with --max-steps 300, but this command gives no --max-steps"),
        ("document_mask", False, True, "begun with no --document-mask, but this command gives --document-mask"),
        (
            "text",
            ["my corpus.txt"],
            ["b.txt"],
            "begun with --text 'my corpus.txt', but this command gives --text b.txt",
        ),
    ],
)
def test_an_option_that_differs_is_shown_as_the_command_line_writes_it(tmp_path, name, then, now, says):
    from octlm.errors import OctlmError
    from octlm.studies.shared.progress import continue_study

    with pytest.raises(OctlmError) as err:
        continue_study(tmp_path, "length study", {name: then, "seed": 1}, {name: now, "seed": 1})
    assert says in str(err.value) and "[" not in str(err.value)


def test_a_study_begun_before_an_option_existed_continues_at_its_default_and_not_past_it(
    tmp_path, monkeypatch, capsys, small_corpus
):
    """An octlm that gained an option (--canon, --key-offset) since the study began continues it when the option is
    at its default, which is what the study ran with; given another value, it is refused, naming the option."""
    out = tmp_path / "study"
    args = [*with_value(LENGTH, "--extend-to", "0"), "--text", str(small_corpus), "--out", str(out)]
    install("unit:1:INT", monkeypatch.setattr)  # stops once the model's training is recorded
    assert main(args) == 130
    for path in (out / "progress" / "study.json", out / "progress" / "train-alibi-seed1337.json"):
        record = json.loads(path.read_text())
        held = record.get("options", record)  # the model's record keeps its options under "options"
        for name in ("canon", "key_offset", "bigram_rows"):
            del held[name]  # as an octlm from before these options wrote it
        path.write_text(json.dumps(record))
    capsys.readouterr()
    assert main([*args, "--canon", "A"]) == 1
    err = capsys.readouterr().err
    assert "begun with no --canon, but this command gives --canon A" in err and err.count("\n") == 1
    assert main(args) == 0
    said = "".join(capsys.readouterr())
    assert "continuing the unfinished length study" in said and ": 1 finished parts kept" in said  # not trained again
    assert not (out / "progress").exists() and (out / "length.jsonl").is_file()


def test_a_kept_model_is_checked_against_its_recorded_options_and_data_not_its_name(
    tmp_path, monkeypatch, capsys, small_corpus
):
    out = tmp_path / "study"
    args = [*with_value(LENGTH, "--extend-to", "0"), "--text", str(small_corpus), "--out", str(out)]
    install("unit:1:INT", monkeypatch.setattr)  # stops once the model's training is recorded
    assert main(args) == 130
    record_path = out / "progress" / "train-alibi-seed1337.json"
    record = json.loads(record_path.read_text())
    capsys.readouterr()

    # the run folder's tokenizer was replaced after the model finished: not the model the study recorded
    tokenizer = out / "runs" / "alibi" / "tokenizer.json"
    original = tokenizer.read_bytes()
    tokenizer.write_bytes(original + b" ")
    assert main(args) == 1
    err = capsys.readouterr().err
    assert f"{out / 'runs' / 'alibi'}: its tokenizer or token files changed" in err and "--overwrite" in err
    tokenizer.write_bytes(original)

    # the record says the model trained with another --d-model than the study gives it now
    record_path.write_text(json.dumps({**record, "options": {**record["options"], "d_model": 64}}))
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "finished with --d-model 64" in err and "trains it with 32" in err
    record_path.write_text(json.dumps(record))

    assert main(args) == 0
    assert not (out / "progress").exists() and (out / "length.jsonl").is_file()


def test_a_study_stopped_while_writing_its_tables_writes_them_all_when_continued(tmp_path, monkeypatch, capsys):
    import octlm.studies.shared.core

    out = tmp_path / "study"
    written = []

    def stopped_after_the_first_file(path, data, write=octlm.studies.shared.core.atomic_write):
        if written:
            raise KeyboardInterrupt
        write(path, data)
        written.append(path)

    monkeypatch.setattr(octlm.studies.shared.core, "atomic_write", stopped_after_the_first_file)
    assert main([*TASK, "--out", str(out)]) == 130
    assert written == [out / "tasks.jsonl"] and not (out / "tasks.md").exists()
    first = rows(out / "tasks.jsonl")
    monkeypatch.undo()
    capsys.readouterr()
    assert main([*TASK, "--out", str(out)]) == 0
    assert "continuing the unfinished task study" in "".join(capsys.readouterr())
    assert rows(out / "tasks.jsonl") == first and (out / "tasks.md").is_file() and (out / "tasks.png").is_file()
    assert not (out / "progress").exists()


@pytest.mark.parametrize("stage", ["restore", "finish"])  # before the first step; during the final evaluation
def test_ctrl_c_inside_a_study_says_only_the_studys_way_on(stage, small_corpus, tmp_path, monkeypatch, capsys):
    import octlm.train.trainer

    real = getattr(octlm.train.trainer.Trainer, stage)

    def ctrl_c(self, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)  # outside the training loop: Python's own KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(octlm.train.trainer.Trainer, stage, ctrl_c)
    assert main([*LENGTH, "--text", str(small_corpus), "--out", str(tmp_path / "study")]) == 130
    err = capsys.readouterr().err
    assert "the same command continues it" in err
    # following a model's own resume would leave the continued study to train that model again
    assert "train --resume" not in err, err
