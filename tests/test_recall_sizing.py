"""bench/recall_sizing.py's recall variants: each asked key is answered with the value it was paired with, every key
is asked once when all are, and --distinct draws no value twice in an instance (the rule written out again here)."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("recall_sizing", REPO / "bench" / "recall_sizing.py")
recall_sizing = importlib.util.module_from_spec(spec)
spec.loader.exec_module(recall_sizing)


@settings(max_examples=40, deadline=None)
@given(
    size=st.integers(1, 12),
    values=st.integers(12, 40),
    asked=st.sampled_from(["quarter", "half", "all"]),
    d=st.booleans(),
)
def test_every_asked_key_is_answered_with_its_own_value(size, values, asked, d):
    task = recall_sizing.recall_variant(values, asked, d)
    rows = task.batch(size, 8, 12, torch.Generator().manual_seed(size))
    assert rows.shape == (8, task.sequence_length(size)) and int(rows.max()) < task.vocab_size(12)
    questions = task.answer_length(size) // 2
    assert questions == {"quarter": max(1, size // 4), "half": max(1, size // 2), "all": size}[asked]
    for row in rows.tolist():
        pairs, sep, answer = row[: 2 * size], row[2 * size], row[2 * size + 1 :]
        assert sep == values + 12
        paired = dict(zip(pairs[0::2], pairs[1::2], strict=True))
        assert len(paired) == size and all(k >= values for k in paired) and all(v < values for v in pairs[1::2])
        asked_keys = answer[0::2]
        assert len(set(asked_keys)) == questions and all(
            paired[k] == v for k, v in zip(asked_keys, answer[1::2], strict=True)
        )
        if d:
            assert len(set(pairs[1::2])) == size


@pytest.mark.parametrize(
    "argv,said",
    [
        (["--optimizer", "adam"], "invalid choice: 'adam'"),
        (["--task-length", "0"], "--task-length: must be >= 1, got 0"),
        (["--position", "nosuch"], "invalid choice: 'nosuch'"),
        (["--n-heads", "3"], "--n-heads 3 does not divide --d-model 64"),
        (["--learning-rate", "0"], "--learning-rate: must be > 0, got 0"),
        (["--learning-rate", "nan"], "--learning-rate: must be > 0, got nan"),
        (["--learning-rate", "fast"], "invalid number value: 'fast'"),
        (["--d-model", "6", "--n-heads", "2", "--max-steps", "1"], "rotated part of each head must be even"),
    ],
)
def test_bad_arguments_end_with_one_line_and_no_traceback(monkeypatch, capsys, argv, said):
    monkeypatch.setattr("sys.argv", ["recall_sizing.py", *argv])
    with pytest.raises(SystemExit) as stop:
        recall_sizing.main()
    assert stop.value.code == 2 and said in capsys.readouterr().err
