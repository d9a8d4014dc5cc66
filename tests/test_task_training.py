"""A task's own training (``Task.training``): applied where the person left an option at its default, never over a
flag they typed, ``--max-steps`` or a preset; its shape reaches the model and its sizes the tables."""

from __future__ import annotations

import dataclasses
import json

import pytest

from octlm.declare import build, option_fields
from octlm.studies.tasks import generators
from octlm.studies.tasks.options import TASK_TRAINING, TaskOptions, check_task_options
from tests.conftest import flags

OWN = {"n_layers": 2, "n_heads": 1, "optimizer": "adamw", "learning_rate": 3e-4, "task_length": 4, "max_steps": 300}


def _with_training(monkeypatch, name: str, **training) -> generators.Task:
    task = dataclasses.replace(generators.TASKS[name], training=training)
    monkeypatch.setitem(generators.TASKS, name, task)
    return task


def test_own_training_reaches_its_task_s_model_and_no_other(monkeypatch):
    recall = _with_training(monkeypatch, "recall", **OWN)
    opts = TaskOptions(task=["copy", "recall"]).resolved()
    train = opts.train_options(recall, "rope", 0)
    assert (train.model.n_layers, train.model.n_heads, train.optimizer) == (2, 1, "adamw")
    assert (train.learning_rate, train.max_steps) == (3e-4, 300)
    assert train.model.context_length == recall.sequence_length(4)
    copy = opts.train_options(generators.TASKS["copy"], "rope", 0)
    assert (copy.model.n_layers, copy.optimizer) == (TASK_TRAINING["n_layers"], TASK_TRAINING["optimizer"])
    assert copy.model.context_length == generators.TASKS["copy"].sequence_length(opts.task_length)
    assert opts.sizes("recall") == [4, 8, 12, 16] and opts.sizes("copy") == [16, 32, 48, 64]
    assert opts.sizes() == [16, 32, 48, 64]  # the study's, of the tasks without their own
    assert TaskOptions(task=["recall"]).resolved().sizes() == [4, 8, 12, 16]  # a study of it alone is at its sizes


def test_a_flag_the_person_typed_wins_even_at_its_default_value(monkeypatch):
    _with_training(monkeypatch, "recall", **OWN)
    typed = TaskOptions(task=["recall"]).resolved(given={"n_layers"})  # --n-layers 3, the default, typed
    assert typed.for_task("recall").n_layers == TASK_TRAINING["n_layers"]
    assert typed.for_task("recall").n_heads == 1  # the rest of its own still applies
    assert TaskOptions(task=["recall"], n_heads=2).resolved().for_task("recall").n_heads == 2
    assert TaskOptions(task=["recall"], max_steps=7).resolved().for_task("recall").max_steps == 7


def test_a_preset_keeps_the_paper_s_protocol(monkeypatch):
    _with_training(monkeypatch, "recall", **OWN)
    opts = TaskOptions(preset="kazemnejad2023").resolved()
    assert "recall" in opts.task_names() and opts.task_training == {}
    assert opts.for_task("recall").optimizer == opts.optimizer


def test_what_resolution_fixed_travels_to_a_worker_process(monkeypatch):
    _with_training(monkeypatch, "recall", **OWN)
    opts = TaskOptions(task=["recall"]).resolved(given={"n_layers"})
    again = build(TaskOptions, json.loads(json.dumps(dataclasses.asdict(opts)))).resolved()  # what a worker gets
    assert again.for_task("recall") == opts.for_task("recall")


@pytest.mark.parametrize("name", [n for n, t in generators.TASKS.items() if t.training])
def test_every_registered_task_s_own_training_is_options_that_pass_the_study_s_checks(name):
    options = {f.name for f in option_fields(TaskOptions)}
    assert set(generators.TASKS[name].training) <= options
    opts = TaskOptions(task=[name], out="x").resolved()
    check_task_options(opts.for_task(name))
    assert opts.for_task(name).max_steps >= 1


def test_a_task_trained_on_its_own_sizes_is_scored_and_tabled_at_them(monkeypatch, tmp_path):
    from octlm.cli import main

    _with_training(monkeypatch, "recall", task_length=4)
    out = tmp_path / "own"
    tiny = flags(d_model=16, n_heads=2, n_layers=1, max_steps=2, device="cpu")
    argv = ["length", "--task", "copy", "recall", "--schemes", "rope", "--seeds", "1", "--out", str(out), *tiny]
    assert main(argv) == 0
    records = [json.loads(line) for line in (out / "tasks.jsonl").read_text().splitlines()]
    sizes = {t: sorted({r["size"] for r in records if r.get("record") == "eval" and r["task"] == t}) for t in OWN_TASKS}
    assert sizes == {"copy": [16, 32, 48, 64], "recall": [4, 8, 12, 16]}
    assert records[0]["task_sizes"] == sizes
    text = (out / "tasks.md").read_text()
    assert "trained on sizes 1..4" in text and "trained on sizes 1..16" in text
    assert "recall trained with --task-length 4" in text


OWN_TASKS = ("copy", "recall")


def test_the_help_says_each_task_s_own_training(capsys):
    from octlm.cli import main

    with pytest.raises(SystemExit):
        main(["length", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    own = generators.TASKS["recall"].training
    assert f"recall: --task-length {own['task_length']} --n-layers {own['n_layers']}" in said
    assert "each unless you give that option" in said


def test_a_study_of_one_task_with_its_own_training_says_that_training(monkeypatch):
    from octlm.report import Reporter
    from octlm.studies.tasks.events import announce
    from octlm.studies.tasks.tables import protocol_sentence

    _with_training(monkeypatch, "recall", **OWN)
    opts = TaskOptions(task=["recall"]).resolved()
    said = protocol_sentence(opts)
    assert "300 steps of adamw" in said and "2 layers, 1 heads" in said and "trained with" not in said
    events = []
    report = Reporter()
    report.event = lambda kind, text, **fields: events.append(text)
    announce(opts, opts.tasks(), opts.variants(), [1337], opts.sizes(), report)
    assert "trained on sizes 1..4, evaluated at 4, 8, 12, 16" in events[0] and "1..16" not in events[0]
