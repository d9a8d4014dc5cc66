"""octlm compare: the options that differ, the final figures, the figure, study folders and the --out rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from octlm.cli import main


def _run(
    folder: Path,
    position: str,
    learning_rate: float,
    evals: list[tuple[int, float, float]],
    finished: bool = True,
    **model,
) -> Path:
    """A run folder as octlm train leaves it, as far as compare reads it: config.json (``model``: more of its model
    section) and metrics.jsonl."""
    folder.mkdir(parents=True)
    config = {
        "octlm_version": "0.1.0",
        "model": {"position": position, "d_model": 32, "vocab_size": 300, **model},
        "train": {"learning_rate": learning_rate, "seed": 1337, "out": str(folder), "threads": 1},
    }
    (folder / "config.json").write_text(json.dumps(config))
    records = [{"step": s, "kind": "train", "loss": loss + 0.1, "lr": learning_rate} for s, loss, _ in evals]
    records += [
        {"step": s, "kind": "eval", "val_loss": loss, "val_bpb": bpb, "val_perplexity": 2.0**bpb}
        for s, loss, bpb in evals
    ]
    records.sort(key=lambda r: r["step"])
    if finished:
        records.append({"step": evals[-1][0], "kind": "finished"})
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


@pytest.fixture
def three(tmp_path) -> list[Path]:
    return [
        _run(tmp_path / "a", "learned", 5e-3, [(10, 3.0, 1.5), (20, 2.5, 1.25)]),
        _run(tmp_path / "b", "rope", 5e-3, [(10, 2.9, 1.45), (20, 2.4, 1.2)]),
        _run(tmp_path / "c", "rope", 1e-3, [(10, 3.1, 1.55)], finished=False),
    ]


def test_the_table_holds_the_options_that_differ_and_the_last_evaluation(three, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare", *map(str, three), "--out", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    # out and threads differ between any runs; position and learning_rate make them different experiments
    assert result["differing"] == {"learning_rate": [5e-3, 5e-3, 1e-3], "position": ["learned", "rope", "rope"]}
    finals = [(r["step"], r["val_loss"], r["val_bpb"], r["finished"]) for r in result["runs"]]
    assert finals == [(20, 2.5, 1.25, True), (20, 2.4, 1.2, True), (10, 3.1, 1.55, False)]
    assert sorted(p.name for p in out.iterdir()) == ["compare.json", "compare.md", "compare.png"]
    assert (out / "compare.png").read_bytes().startswith(b"\x89PNG")
    table = (out / "compare.md").read_text()
    assert (
        "| position | learned | rope | rope |" in table
        and "| **val bits per byte** | 1.2500 | 1.2000 | 1.5500 |" in table
    )
    assert json.loads((out / "compare.json").read_text())["differing"] == result["differing"]


def test_layers_compare_as_layers_whether_kept_as_text_or_as_data(tmp_path, capsys):
    """An older config.json keeps the layout as a string (or, older still, none: one scheme throughout); a newer one
    as a list of layers. The same layers are no difference; other layers are, written as --layers takes them."""
    from octlm.model.layout import LayerSpec, layer_data

    mixed = [LayerSpec("rope", window=4), LayerSpec("rope", window=4), LayerSpec("none")]
    evals = [(10, 3.0, 1.5)]
    runs = [
        _run(tmp_path / "old", "rope", 5e-3, evals, n_layers=3, layers="rope/w4 rope/w4 none"),
        _run(tmp_path / "new", "rope", 5e-3, evals, n_layers=3, layers=layer_data(mixed)),
        _run(tmp_path / "older", "rope", 5e-3, evals, n_layers=3),
        _run(tmp_path / "plain", "rope", 5e-3, evals, n_layers=3, layers=[]),
    ]
    assert main(["compare", *map(str, runs[:2]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["differing"] == {}
    assert main(["compare", *map(str, runs[2:]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["differing"] == {}
    assert main(["compare", *map(str, runs[1:3]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["differing"] == {"layers": ["rope/w4*2 none", ""]}


def test_a_study_folder_stands_for_its_runs(tmp_path, capsys):
    study = tmp_path / "study"
    _run(study / "runs" / "learned", "learned", 5e-3, [(3, 5.0, 6.0)])
    _run(study / "runs" / "alibi", "alibi", 5e-3, [(3, 4.0, 5.0)])
    (study / "length.jsonl").write_text("{}\n")
    assert main(["compare", str(study), "--json"]) == 0
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert [r["label"] for r in result["runs"]] == ["study/alibi", "study/learned"] and result["files"] is None


def test_out_replaces_an_earlier_comparison_but_never_other_files_or_an_input(three, tmp_path, capsys):
    out = tmp_path / "cmp"
    args = ["compare", *map(str, three), "--out", str(out)]
    assert main(args) == 0 and main(args) == 0  # the earlier comparison is replaced
    (out / "notes.txt").write_text("mine")
    assert main(args) == 1
    assert "holds files that are not an octlm comparison, which octlm compare never replaces" in capsys.readouterr().err
    assert (out / "notes.txt").read_text() == "mine"
    assert main(["compare", *map(str, three), "--out", str(three[0])]) == 1
    assert "is RUN_DIR" in capsys.readouterr().err


def test_a_folder_that_is_no_run_nor_study_is_named(tmp_path, capsys):
    (tmp_path / "notes").mkdir()
    assert main(["compare", str(tmp_path / "notes")]) == 1
    assert "neither an octlm run (no config.json) nor a study folder with runs in runs/" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "absent")]) == 1
    assert "absent: no such folder" in capsys.readouterr().err
    (tmp_path / "data.jsonl").write_text("{}\n")
    assert main(["compare", str(tmp_path / "data.jsonl")]) == 1
    assert "data.jsonl: is a file, not a run folder" in capsys.readouterr().err


def test_compare_reads_real_runs(trained_run, capsys):
    assert main(["compare", str(trained_run), str(trained_run), "--json"]) == 0
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert result["differing"] == {} and result["runs"][0]["step"] == 30 and result["runs"][0]["val_bpb"] > 0
