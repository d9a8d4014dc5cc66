"""Faults of the command line and its output, one test each: what a person or script gave, and what octlm now does.

Each test's docstring states the fault it holds fixed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from hypothesis import given
from hypothesis import strategies as st

from octlm.cli import main
from octlm.model.sampling import sample_next

TINY_TRAINING = [
    "--max-steps",
    "3",
    "--d-model",
    "32",
    "--n-heads",
    "2",
    "--n-layers",
    "1",
    "--vocab-size",
    "300",
    "--batch-size",
    "4",
    "--context-length",
    "32",
    "--threads",
    "1",
    "--sample-tokens",
    "8",
]

#: Two ways a terminal ends up not UTF-8: Python told so, and the C locale with Python's UTF-8 mode off.
NOT_UTF8 = {
    "PYTHONIOENCODING=ascii": {"PYTHONIOENCODING": "ascii"},
    "LC_ALL=C PYTHONUTF8=0": {"LC_ALL": "C", "PYTHONUTF8": "0"},
}


def _octlm(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """``python -m octlm ARGS`` under ``env`` (added to this environment); stdout and stderr as bytes."""
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONIOENCODING", "LC_ALL", "LANG", "PYTHONUTF8")}
    return subprocess.run([sys.executable, "-m", "octlm", *args], env={**base, **env}, capture_output=True)


def _metrics_run(folder: Path, text: str) -> Path:
    """A run folder as far as compare reads it: config.json and ``text`` as metrics.jsonl."""
    folder.mkdir(parents=True)
    config = {"model": {"position": "rope"}, "train": {"learning_rate": 5e-3, "out": str(folder)}}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "metrics.jsonl").write_text(text)
    return folder


def test_compare_skips_the_line_a_training_run_is_still_writing(tmp_path, capsys):
    """Fault: ``octlm compare`` on a run still training (its metrics.jsonl ending in a line being written) called the
    file damaged and compared nothing."""
    done = '{"step": 10, "kind": "train", "loss": 3.0}\n{"step": 10, "kind": "eval", "val_loss": 2.5, "val_bpb": 1.2}\n'
    running = _metrics_run(tmp_path / "running", done + '{"step": 20, "kind": "tr')
    finished = _metrics_run(tmp_path / "finished", done)
    assert main(["compare", str(running), str(finished), "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    warnings = [line["message"] for line in lines if line["event"] == "warning"]
    assert len(warnings) == 1 and "line 3" in warnings[0] and str(running / "metrics.jsonl") in warnings[0]
    assert [run["step"] for run in lines[-1]["runs"]] == [10, 10]
    # A line that is complete (it ends in a newline) and still not JSON is damage, as before.
    damaged = _metrics_run(tmp_path / "damaged", '{"step": 20, "kind": "tr\n' + done)
    assert main(["compare", str(damaged)]) == 1
    assert "line 1 is not JSON; the file is damaged" in capsys.readouterr().err


def _unit_run(folder: Path, text: str, tokenizer: str, bpb: float) -> Path:
    """A run folder as compare reads it, with the validation text (its file's hash) and tokenizer given."""
    _metrics_run(folder, json.dumps({"step": 5, "kind": "eval", "val_loss": 2.0, "val_bpb": bpb}) + "\n")
    files = [{"path": "corpus.txt", "sha256": text, "format": "text", "records": 1}]
    (folder / "manifest.json").write_text(json.dumps({"files": files, "val_fraction": 0.1, "encoding": "utf-8"}))
    (folder / "tokenizer.json").write_text(tokenizer)
    return folder


def test_compare_says_which_figures_do_not_compare(tmp_path, capsys):
    """Fault: ``octlm compare`` set side by side the loss and perplexity of runs with different tokenizers, or the bits
    per byte of runs validated on different text, without a word."""
    same = _unit_run(tmp_path / "same", "aa", "tokenizer A", 1.5)
    twin = _unit_run(tmp_path / "twin", "aa", "tokenizer A", 1.4)
    retokenized = _unit_run(tmp_path / "retokenized", "aa", "tokenizer B", 1.3)
    other_text = _unit_run(tmp_path / "other-text", "bb", "tokenizer A", 1.2)

    def compared(*runs: Path) -> tuple[dict, list[str]]:
        assert main(["compare", *map(str, runs), "--json"]) == 0
        lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        return lines[-1], [line["message"] for line in lines if line["event"] == "warning"]

    result, warnings = compared(same, twin)
    assert result["not_comparable"] == [] and warnings == []
    result, warnings = compared(same, retokenized)
    assert [entry["figures"] for entry in result["not_comparable"]] == [["val_loss", "val_perplexity", "train_loss"]]
    assert len(warnings) == 1 and "tokenizer" in warnings[0] and "bits per byte do compare" in warnings[0]
    result, warnings = compared(same, other_text)
    figures = [entry["figures"] for entry in result["not_comparable"]]
    assert figures == [["val_loss", "val_perplexity", "train_loss", "val_bpb"]]
    assert len(warnings) == 1 and "validation text" in warnings[0] and "other-text" in warnings[0]


def test_top_k_keeps_k_tokens_and_breaks_ties_toward_the_lowest_id():
    """Fault: top-k kept every token tied with the k-th, so ``top_k=1`` over ``[1, 3, 3, 3, 0.5]`` drew among ids 1, 2
    and 3."""
    logits = torch.tensor([[1.0, 3.0, 3.0, 3.0, 0.5]])
    generator = torch.Generator().manual_seed(0)
    drawn = {int(sample_next(logits, 1.0, 1, generator)) for _ in range(200)}
    assert drawn == {1}
    drawn = {int(sample_next(logits, 1.0, 2, generator)) for _ in range(200)}
    assert drawn == {1, 2}
    # torch.topk itself keeps no such rule on ties: on CPU its k=2 here is ids 1 and 3.
    drawn = {int(sample_next(logits, 1.0, 3, generator)) for _ in range(300)}
    assert drawn == {1, 2, 3}


@given(
    values=st.lists(st.integers(-3, 3), min_size=1, max_size=40),
    k=st.integers(1, 45),
    rows=st.integers(1, 3),
)
def test_exactly_k_ids_can_ever_be_drawn(values, k, rows):
    """Fault (property): with ties at the k-th logit more than k ids could be drawn; now exactly min(k, V) can, the k
    largest with ties to the lowest id."""
    from octlm.model.sampling import top_k_mask

    logits = torch.tensor([values] * rows, dtype=torch.float32)
    kept = top_k_mask(logits, k)
    expected = sorted(range(len(values)), key=lambda i: (-values[i], i))[:k]
    assert [sorted(torch.nonzero(row).flatten().tolist()) for row in kept] == [sorted(expected)] * rows
    generator = torch.Generator().manual_seed(len(values) * 100 + k)
    for _ in range(5):
        assert set(sample_next(logits, 1.0, k, generator).flatten().tolist()) <= set(expected)
