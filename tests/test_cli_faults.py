"""Faults of the command line and its output, one test each: what a person or script gave, and what octlm now does.

Each test's docstring states the fault it holds fixed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from octlm.cli import main
from octlm.cli.program import COMMANDS
from octlm.model.sampling import sample_next
from tests.conftest import TINY_MODEL

TINY_TRAINING = [*TINY_MODEL, "--context-length", "32", "--sample-tokens", "8"]

#: Two ways a terminal ends up not UTF-8: Python told so, and the C locale with Python's UTF-8 mode off.
NOT_UTF8 = {
    "PYTHONIOENCODING=ascii": {"PYTHONIOENCODING": "ascii"},
    "LC_ALL=C PYTHONUTF8=0": {"LC_ALL": "C", "PYTHONUTF8": "0"},
}


def _octlm(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """``python -m octlm ARGS`` under ``env`` (added to this environment); stdout and stderr as bytes."""
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONIOENCODING", "LC_ALL", "LANG", "PYTHONUTF8")}
    return subprocess.run([sys.executable, "-m", "octlm", *args], env={**base, **env}, capture_output=True)


@pytest.mark.parametrize("setting", list(NOT_UTF8))
@pytest.mark.slow
def test_a_terminal_that_is_not_utf8_gets_escapes_not_a_traceback(setting, shakespeare, tmp_path):
    """Fault: with stdout not UTF-8 and a corpus whose first line has an accented letter, ``octlm train --json``
    ended in a UnicodeEncodeError traceback, and so did ``octlm sample`` printing non-ASCII text; in the C locale
    a UTF-8 ``--prompt`` was refused as "not valid UTF-8"."""
    corpus = tmp_path / "accented.txt"
    corpus.write_text("Ça va, élan, café\n" + shakespeare.read_text(encoding="utf-8")[:60_000], encoding="utf-8")
    env = NOT_UTF8[setting]
    trained = _octlm(["train", "--text", str(corpus), "--out", str(tmp_path / "run"), "--json", *TINY_TRAINING], env)
    assert trained.returncode == 0, trained.stderr.decode("utf-8", "replace")
    assert b"Traceback" not in trained.stderr
    lines = [json.loads(line) for line in trained.stdout.decode("ascii").splitlines()]  # ASCII, every line JSON
    assert lines[-1]["event"] == "result"
    assert "Ça va" in json.dumps(lines, ensure_ascii=False)  # escaped, not lost

    sampled = _octlm(["sample", "--run", str(tmp_path / "run"), "--prompt", "Ça va", "--max-new-tokens", "4"], env)
    assert sampled.returncode == 0, sampled.stderr.decode("utf-8", "replace")
    assert b"Traceback" not in sampled.stderr
    assert sampled.stdout.startswith(b"\\xc7a va")  # what an ASCII terminal cannot show, as an escape


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


def _required(command: str) -> list[str]:
    """Words that give ``command`` every argument it requires (placeholders), so only the word under test is wrong."""
    from octlm.cli import build_parser

    words = ["--text", "missing.txt"] if command == "train" else []  # train requires nothing, reads tinyshakespeare
    for action in build_parser().subcommands[command]._actions:
        value = str(next(iter(action.choices))) if action.choices else "x"
        if not action.option_strings:
            words.append(value)
        elif action.required:
            words += [action.option_strings[0], value]
    return words


@pytest.mark.parametrize("command", COMMANDS)
def test_an_abbreviated_option_is_refused_by_every_command(command, tmp_path, capsys, monkeypatch):
    """Fault: argparse took ``--js`` for ``--json``, but an error met before parsing (a missing --config file) came
    as plain text, not the JSON line --json promises; the --config pre-parser likewise took ``--conf``."""
    monkeypatch.chdir(tmp_path)  # where the placeholders name nothing, and any file written is the test's
    missing = str(tmp_path / "recipe.toml")
    wrongs = [["--jso"], ["--js", "--config", missing], ["--conf", missing, "--json"]]
    for wrong in wrongs if command == "train" else wrongs[:1]:  # train takes --config
        with pytest.raises(SystemExit) as exit_:
            main([command, *_required(command), *wrong])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert f"unrecognized arguments: {wrong[0]}" in err and "no such file" not in err


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["sample", "--run", "r", "--prompt", "-ROMEO"], "--prompt=-ROMEO"),
        (["bench", "--token", "-x", "--run", "r"], "--token=-x"),
        (["train", "--text", "-notes.txt"], "--text=-notes.txt"),
    ],
)
def test_a_value_that_starts_with_a_dash_gets_the_equals_hint(args, hint, capsys):
    """Fault: ``--prompt -ROMEO`` was refused with "expected one argument" and no word of ``--prompt=-ROMEO``."""
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "expected" in err and f"write it as {hint}" in err


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


@pytest.mark.parametrize(
    "args",
    [
        ["embeddings", "--token", "\udcff", "--out", "{tmp}/figures"],
        ["bench", "--token", "\udcff"],
        ["sample", "--prompt", "a\udcff"],
        ["attention", "--prompt", "a\udcff", "--out", "{tmp}/attention"],
    ],
    ids=["embeddings", "bench", "sample", "attention"],
)
def test_argv_text_that_is_not_utf8_is_one_line(args, trained_run, tmp_path, capsys):
    """Fault: ``octlm embeddings --token $'\\xff'`` (a byte that is not UTF-8 reaches Python as a lone surrogate)
    ended in a TypeError traceback from the tokenizer; bench --token did the same."""
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    code = main([args[0], "--run", str(trained_run), *args[1:]])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    flag = args[1]
    shown = args[2].replace("\udcff", "\\xff")
    assert len(err.splitlines()) == 1
    assert err.startswith(f"octlm: error: {flag} '{shown}' is not valid UTF-8 (byte 0xff, byte {len(shown) - 3} of")
    assert not (tmp_path / "figures").exists() and not (tmp_path / "attention").exists()


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
