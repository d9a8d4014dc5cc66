"""The studies' typed records: a scheme (a row) and a label are separate fields, written with the keys every earlier
study folder holds and read back from them."""

from __future__ import annotations

import json

import pytest

from octlm.studies.length.records import ScoredModel, TrainRecord
from octlm.studies.tasks.records import TaskRow, row_label


@pytest.mark.parametrize(
    "position,row,scaling,extended_to",
    [
        ("rope", "rope", None, None),
        ("rope-nope", "rope-nope", None, None),
        ("rope@4x", "rope", None, 4),
        ("rope+yarn@4x", "rope", "yarn", 4),
        ("rope+dynamic-ntk@16x", "rope", "dynamic-ntk", 16),
        ("swa-nope+yarn@4x", "swa-nope", "yarn", 4),
    ],
)
def test_a_train_record_on_disk_reads_as_its_row_scaling_and_multiple(position, row, scaling, extended_to):
    # as an earlier study wrote it: "position" held the model's label, the figures in training's order
    line = (
        f'{{"record": "train", "position": "{position}", "seed": 1338, "run_dir": "/s/runs/x", "steps": 3, '
        '"train_seconds": 0.5, "tokens_per_second": 100.0, "val_bpb": 6.25}'
    )
    record = TrainRecord.from_json(json.loads(line))
    assert (record.row, record.scaling, record.extended_to, record.label) == (row, scaling, extended_to, position)
    assert record.fine_tuned == (extended_to is not None)
    assert (record.seed, record.steps, record.val_bpb, record.run_dir) == (1338, 3, 6.25, "/s/runs/x")
    assert json.dumps(record.to_json()) == line  # the same keys, in the same order


def test_a_train_record_made_from_a_result_writes_its_label_where_position_always_was():
    result = {"run_dir": "r", "steps": 5, "train_seconds": 1.0, "tokens_per_second": 2.0, "val_bpb": 3.0, "x": 1}
    record = TrainRecord.of_result("rope-nope", 1337, result, "yarn", 4)
    assert record.to_json() == {
        "record": "train",
        "position": "rope-nope+yarn@4x",
        "seed": 1337,
        "run_dir": "r",
        "steps": 5,
        "train_seconds": 1.0,
        "tokens_per_second": 2.0,
        "val_bpb": 3.0,
    }


def test_a_scored_model_runs_from_its_base_rows_folder_unless_fine_tuned():
    base = {"record": "eval", "label": "rope+yarn", "position": "rope", "rope_scaling": "yarn", "rope_factor": 4.0}
    tuned = {"record": "eval", "label": "rope+yarn@4x", "position": "rope", "rope_scaling": "yarn", "extended_to": 4}
    logn = {"record": "eval", "label": "alibi+logn", "position": "alibi", "attention_scale": "log", "seed": 2}
    assert (ScoredModel.of(base).run_name, ScoredModel.of(base).factor) == ("rope", 4.0)
    assert (ScoredModel.of(tuned).run_name, ScoredModel.of(tuned).fine_tuned) == ("rope+yarn@4x", True)
    assert (ScoredModel.of(logn).row, ScoredModel.of(logn).attention_scale, ScoredModel.of(logn).seed) == (
        "alibi",
        "log",
        2,
    )


def test_a_task_row_keeps_its_scheme_apart_from_its_label_and_reads_older_records():
    randomized = TaskRow("rope+rand", "rope", randomized=True)
    layout = TaskRow("rope-nope", None, layers="rope none")
    assert randomized.to_json() == {"position": "rope", "label": "rope+rand", "randomized": True}
    assert layout.to_json() == {
        "position": "rope-nope",
        "label": "rope-nope",
        "randomized": False,
        "layers": "rope none",
    }
    assert TaskRow.from_json({"record": "eval", **randomized.to_json()}) == randomized
    assert TaskRow.from_json({"record": "eval", **layout.to_json()}) == layout
    assert row_label({"record": "eval", "position": "alibi", "size": 8}) == "alibi"  # before labels were written
