"""The leaderboard (octlm.studies.leaderboard, scripts/leaderboard.py): per column the best row and every other row
against it, checked on studies whose true differences are known by construction."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

from octlm.errors import OctlmError
from octlm.studies.leaderboard.board import Source, corpus_columns
from octlm.studies.leaderboard.markdown import cell, readme_table
from octlm.studies.leaderboard.protocol import CORPORA, command, studies
from tests.conftest import REPO

SEEDS = (1337, 1338, 1339)
WINDOWS = 60


def _rows(label: str, shift: float, noise: float, rng, lengths=(8, 16), seeds=SEEDS, upto: int | None = None):
    """Eval rows of one label: each window's nats are a common baseline plus ``shift`` plus noise of scale ``noise``;
    ``upto``: the row has no score past that length (a learned table)."""
    rows = []
    for seed in seeds:
        for length in lengths:
            base = np.random.default_rng(length).uniform(20, 30, WINDOWS)  # the same text for every row
            nats = base + shift + rng.normal(0, noise, WINDOWS)
            nbytes = [40] * WINDOWS
            none = upto is not None and length > upto
            row = {"record": "eval", "label": label, "seed": seed, "eval_length": length, "multiplier": length // 8}
            for reading, nk, bk in (
                ("bpb", "window_nats", "window_bytes"),
                ("sliding_bpb", "sliding_window_nats", "sliding_window_bytes"),
            ):
                row[reading] = None if none else float(nats.sum() / sum(nbytes) / math.log(2))
                row[nk] = None if none else [round(float(v), 4) for v in nats]
                row[bk] = None if none else nbytes
            rows.append(row)
    return rows


def _study(folder: Path, rows: list[dict], **options) -> Path:
    folder.mkdir(parents=True)
    head = {
        "record": "study",
        "train_length": 8,
        "octlm_version": "0.1.0+gabc",
        "options": {
            "text": ["t.txt"],
            "vocab_size": 64,
            "train_length": 8,
            "multipliers": [1, 2],
            "eval_tokens": 8192,
            "eval_stride": None,
            "val_fraction": 0.1,
            "seed": 1337,
            "seeds": 3,
        }
        | options,
    }
    (folder / "length.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [head, *rows]))
    return folder


def _script():
    """scripts/leaderboard.py as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("leaderboard_script", REPO / "scripts" / "leaderboard.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def board(tmp_path):
    rng = np.random.default_rng(0)
    rope = _rows("rope", 0.0, 0.05, rng)
    yarn = [r | {"label": "rope+yarn"} for r in rope]  # a scaling at 1x: the same numbers
    learned = _rows("learned", 2.0, 0.05, rng, upto=8)
    a = _study(tmp_path / "a", rope + _rows("alibi", 0.5, 0.05, rng) + learned + yarn)
    # rope with +1 and -1 nats on alternate windows and 0.01 more on each: behind rope on average, never separated
    swing = [r | {"window_nats": [v + 0.01 + (-1) ** i for i, v in enumerate(r["window_nats"])]} for r in rope]
    b = _study(tmp_path / "b", swing)
    c = _study(tmp_path / "c", _rows("rope", 0.1, 0.05, rng, seeds=SEEDS[:2]))
    sources = [Source("text", a), Source("text", b, {"rope": "rope-gate"}), Source("text", c, {"rope": "rope-short"})]
    return corpus_columns("text", sources)


def _by(columns, reading, length):
    col = next(c for c in columns if c["reading"] == reading and c["eval_length"] == length)
    return col, {c["label"]: c for c in col["cells"]}


def test_the_best_row_and_each_verdict_follow_from_the_windows(board):
    """alibi is 0.5 nats a window behind rope on every window (behind in every seed); rope-gate is rope with noise
    of mean zero (not separated); learned has no score past T (n/a); a row lacking a seed is not ranked."""
    columns, sources = board
    assert [s["folder"].rsplit("/", 1)[1] for s in sources] == ["a", "b", "c"]
    col, cells = _by(columns, "bpb", 8)
    means = {k: c["bpb"] for k, c in cells.items() if c["status"] != "not run"}
    assert col["best"] == min(means, key=means.get) == "rope"
    assert cells["rope+yarn"]["status"] == "equal" and cells["rope+yarn"]["difference"] == 0
    assert cells["alibi"]["status"] == "behind" and cells["alibi"]["low"] > 0 and cells["alibi"]["seeds_agreeing"] == 3
    assert cells["alibi"]["difference"] == pytest.approx(0.5 / 40 / math.log(2), abs=2e-3)
    gate = cells["rope-gate"]
    assert gate["status"] == "not separated" and gate["low"] < 0 < gate["high"]
    assert cells["rope-short"] == {"label": "rope-short", "status": "not run", "seeds": [1337, 1338]}
    assert not col["alone"]
    _, past = _by(columns, "sliding_bpb", 16)
    assert past["learned"] == {"label": "learned", "status": "n/a"}


def test_the_board_refuses_studies_that_do_not_pair(tmp_path):
    rng = np.random.default_rng(1)
    a = _study(tmp_path / "a", _rows("rope", 0.0, 0.05, rng))
    b = _study(tmp_path / "b", _rows("rope", 0.0, 0.05, rng), vocab_size=128)
    with pytest.raises(OctlmError, match=r"--vocab-size \(64 and 128\)"):
        corpus_columns("text", [Source("text", a), Source("text", b, {"rope": "rope-gate"})])
    (b / "progress").mkdir()
    with pytest.raises(OctlmError, match="unfinished"):
        corpus_columns("text", [Source("text", b)])
    with pytest.raises(OctlmError, match="no row 'alibi'"):
        corpus_columns("text", [Source("text", a, {"alibi": "x"})])


def test_cells_say_best_behind_and_not_separated():
    assert cell({"status": "best", "bpb": 2.0944, "sd": 0.0031}, 3) == "**2.094** ± 0.003"
    behind = {"status": "behind", "bpb": 2.123, "difference": 0.029, "low": 0.016, "high": 0.043, "seeds_agreeing": 3}
    assert cell(behind, 3) == "2.123 (+0.0290 [+0.0160, +0.0430], 3/3)"
    assert cell(behind | {"status": "not separated", "low": -0.01}, 3).startswith("≈ 2.123 (+0.0290 [-0.0100")


def test_the_readme_table_is_written_between_its_markers(board, tmp_path):
    module = _script()
    columns, _ = board
    table = readme_table(columns, {"text": "text"})
    assert table.splitlines()[0] == "| row | text 1x |"  # the README's 4x and 16x are not in this board
    assert "| `rope` | **" in table and "| `rope+yarn` | = " in table
    assert "| `alibi` | " in table and "**" in table
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{module.START}\nold\n{module.END}\noutro\n")
    with pytest.raises(OctlmError, match="3 of the board's studies are not finished"):
        module.write(tmp_path / "nothing", ["shakespeare"], None, readme)
    assert readme.read_text() == f"intro\n{module.START}\nold\n{module.END}\noutro\n"


def test_the_protocol_runs_every_registered_scheme_on_both_corpora(tmp_path):
    from octlm.model.scheme_catalog import SCHEMES

    argv = command(tmp_path, CORPORA["shakespeare"], studies()[0])
    listed = argv[argv.index("--schemes") + 1 : argv.index("--layouts")]
    assert sorted(listed) == sorted(SCHEMES)
    stdlib = CORPORA["stdlib"].text()
    assert len(stdlib) == 7 and all(Path(p).is_dir() for p in stdlib)
    assert [s.rows for s in studies()[1:]] == [{"rope": "rope-sinks"}, {"rope": "rope-gate"}]


def test_the_figure_draws_each_rows_means_where_it_has_them(board):
    from octlm.studies.leaderboard.figure import leaderboard_figure, series

    columns, _ = board
    drawn = series([c for c in columns if c["reading"] == "bpb"])
    assert drawn["learned"][0] == [1]  # no score past T: the line stops at 1x
    by_length = {c["eval_length"]: {x["label"]: x for x in c["cells"]} for c in columns if c["reading"] == "bpb"}
    assert drawn["alibi"] == ([1, 2], [by_length[8]["alibi"]["bpb"], by_length[16]["alibi"]["bpb"]])
    records = [{"record": "leaderboard", "corpora": {"text": "a text"}}, *columns]
    figure = leaderboard_figure(records)
    panels = figure.axes
    assert len(panels) == 3 and [p.get_title() for p in panels][0].startswith("a text, non-overlapping")
    lines = {line.get_label(): list(line.get_ydata()) for line in panels[0].get_lines()}
    assert lines["alibi"] == drawn["alibi"][1] and "rope-short" not in lines  # a row missing a seed is not drawn
    assert "rope+yarn" not in lines  # a scaling has its own panel, beside RoPE alone
    assert sorted(line.get_label() for line in panels[2].get_lines()) == ["rope", "rope+yarn"]


def test_write_makes_the_document_the_figure_and_the_readme_table(tmp_path):
    """scripts/leaderboard.py write on a leaderboard folder of three finished studies of one corpus."""
    module = _script()
    rng = np.random.default_rng(2)
    rope = _rows("rope", 0.0, 0.05, rng)
    yarn = _rows("rope+yarn", 0.1, 0.05, rng)
    _study(
        tmp_path / "shakespeare-schemes", rope + _rows("alibi", 0.3, 0.05, rng) + _rows("none", 1.0, 0.05, rng) + yarn
    )
    _study(tmp_path / "shakespeare-sinks", _rows("rope", 0.2, 0.05, rng))
    _study(tmp_path / "shakespeare-gate", _rows("rope", -0.4, 0.05, rng))
    readme, doc = tmp_path / "README.md", tmp_path / "docs" / "leaderboard.md"
    doc.parent.mkdir()
    markers = f"{module.START}\nold\n{module.END}\n{module.FINDINGS_START}\nold\n{module.FINDINGS_END}\n"
    readme.write_text(f"intro\n{markers}outro\n")
    module.write(tmp_path, ["shakespeare"], doc, readme)
    text = doc.read_text()
    assert text == (tmp_path / "leaderboard.md").read_text() and "## tinyshakespeare, non-overlapping windows" in text
    assert "* best at 1x: `rope-gate`, ahead of every other row at 95%" in text  # 0.4 nats a window below rope
    assert (tmp_path / "leaderboard.png").is_file() and (tmp_path / "docs" / "leaderboard.png").is_file()
    table = readme.read_text().split(module.START)[1].split(module.END)[0]
    assert "| `rope-gate` | **" in table and "| `rope-sinks` | " in table and readme.read_text().endswith("outro\n")
    said = readme.read_text().split(module.FINDINGS_START)[1].split(module.FINDINGS_END)[0]
    # the gate is 0.4 nats a window below rope, sinks 0.2 above: among the three, the gate is best and rope next
    gate = "* **RoPE with learned sinks or the output gate**, tinyshakespeare, seeds 1337-1339: at 1x `rope-gate`"
    assert gate in said and "; next `rope` +0.01" in said and said.strip() in text
    assert (
        "Not run yet, so not on this board: the standard library (seven packages) (the first command above with "
        in text
    )
    assert "`--corpus stdlib` runs it" in text
    assert "Not run yet, so not on this board: the standard library (seven packages)." in table
    assert "scripts/leaderboard.py run --out runs/leaderboard --corpus shakespeare" in text
    assert str(tmp_path) not in text  # the machine's own folders are no reader's
    assert "| `rope+yarn` |" in text and "| `rope+yarn` |" not in table  # a scaling: in the document, not the README
    # the scalings are compared among themselves: rope (0 nats) is best, rope+yarn (+0.1) behind; alibi is not in it
    records = [json.loads(line) for line in (tmp_path / "leaderboard.jsonl").read_text().splitlines()]
    scalings = [r for r in records if r["record"] == "group" and r["group"] == "scalings" and r["reading"] == "bpb"]
    assert [(r["multiplier"], r["best"]) for r in scalings] == [(1, "rope"), (2, "rope")]
    assert {c["label"]: c["status"] for c in scalings[1]["cells"]} == {"rope": "best", "rope+yarn": "behind"}
    records = [json.loads(line) for line in (tmp_path / "leaderboard.jsonl").read_text().splitlines()]
    assert [r["folder"].rsplit("/", 1)[1] for r in records if r["record"] == "source"] == [
        "shakespeare-schemes", "shakespeare-sinks", "shakespeare-gate"
    ]  # fmt: skip


def test_a_finding_says_the_best_the_rows_not_separated_from_it_and_the_nearest_behind():
    from octlm.studies.leaderboard.findings import clause

    def behind(label, difference, low, agree, status="behind"):
        return {"label": label, "status": status, "difference": difference, "low": low, "high": difference + 0.01}

    col = {
        "multiplier": 4,
        "best": "alibi",
        "cells": [
            {"label": "alibi", "status": "best", "bpb": 2.11104, "seeds": [1, 2, 3]},
            behind("fox", 0.05, 0.04, 3) | {"seeds_agreeing": 3},
            behind("kerple", 0.002, -0.004, 1, "not separated") | {"seeds_agreeing": 1},
            behind("rope", 0.03, 0.02, 2) | {"seeds_agreeing": 2},
            {"label": "learned", "status": "n/a"},
            {"label": "rope+ntk", "status": "equal", "difference": 0.0},
        ],
    }
    assert clause(col) == (
        "at 4x `alibi` 2.1110; not separated: `kerple` (+0.0020 [-0.0040, +0.0120], 1/3 seeds); "
        "next `rope` +0.0300 [+0.0200, +0.0400], 2/3 seeds"
    )
    assert clause({"multiplier": 16, "best": None, "cells": []}) == "at 16x not run on every seed"


def test_the_documents_write_the_standard_library_as_a_variable_they_set():
    import sysconfig

    module = _script()
    lines = module.shown_commands(["stdlib"], "schemes")
    assert module.STDLIB_LINE in lines and "--text $STDLIB/asyncio $STDLIB/email" in lines[-1]
    assert sysconfig.get_paths()["stdlib"] not in "\n".join(lines)
    assert all(
        line.endswith(f"runs/leaderboard/stdlib-{s}")
        for line, s in zip(lines[-3:], ("schemes", "sinks", "gate"), strict=True)
    )


def test_a_scaling_row_is_told_from_a_scheme_by_its_suffix():
    from octlm.studies.leaderboard.protocol import is_scaling

    assert is_scaling("rope+yarn") and is_scaling("xpos+dynamic-ntk") and is_scaling("prope+llama3")
    assert not is_scaling("rope") and not is_scaling("rope-sinks") and not is_scaling("swa-nope")
    assert not is_scaling("rope+rand")  # a randomized row is a model of its own, not a reading


def test_a_partial_board_is_written_from_the_finished_studies_and_names_the_rest(tmp_path):
    """``write --partial`` leaves out a study still running (progress/ beside its length.jsonl) and one not started,
    and says so; without it, or with nothing finished, the board refuses, naming the folder."""
    module = _script()
    rng = np.random.default_rng(4)
    _study(tmp_path / "shakespeare-schemes", _rows("rope", 0.0, 0.05, rng) + _rows("alibi", 0.3, 0.05, rng))
    running = _study(tmp_path / "shakespeare-sinks", _rows("rope", -0.4, 0.05, rng))
    (running / "progress").mkdir()
    said = r"2 of the board's studies are not finished \(shakespeare-sinks, shakespeare-gate\); run them with `scripts/"
    with pytest.raises(OctlmError, match=said + r"leaderboard.py run --board schemes --out .*--partial"):
        module.write(tmp_path, ["shakespeare"], None, None)
    module.write(tmp_path, ["shakespeare"], None, None, partial=True)
    text = (tmp_path / "leaderboard.md").read_text()
    assert "Not finished yet, so not on this board: tinyshakespeare's `sinks`, `gate` (" in text
    assert "| `alibi` |" in text and "rope-sinks" not in text.split("Not finished yet")[1]
    records = [json.loads(line) for line in (tmp_path / "leaderboard.jsonl").read_text().splitlines()]
    assert records[0]["unfinished"] == {"shakespeare": ["sinks", "gate"]}
    assert [r["folder"].rsplit("/", 1)[1] for r in records if r["record"] == "source"] == ["shakespeare-schemes"]
    with pytest.raises(OctlmError, match="no study of the board is finished"):
        module.write(tmp_path / "empty", ["shakespeare"], None, None, partial=True)


def test_a_corpus_not_run_is_told_how_to_run_by_the_command_the_document_shows(tmp_path):
    """A corpus `write` was asked for is in the document's first command already; one it was not asked for needs
    that command with its --corpus."""
    module = _script()
    rng = np.random.default_rng(5)
    for study in ("schemes", "sinks", "gate"):
        _study(tmp_path / f"shakespeare-{study}", _rows("rope", 0.0, 0.05, rng) + _rows("alibi", 0.3, 0.05, rng))
    module.write(tmp_path, ["shakespeare", "stdlib"], None, None, partial=True)
    text = (tmp_path / "leaderboard.md").read_text()
    assert "--corpus shakespeare stdlib" in text
    assert (
        "Not run yet, so not on this board: the standard library (seven packages) (the first command above runs" in text
    )
    module.write(tmp_path, ["shakespeare"], None, None, partial=True)
    assert "(the first command above with `--corpus stdlib` runs it" in (tmp_path / "leaderboard.md").read_text()


def test_a_missing_document_folder_or_readme_is_refused_before_anything_is_written(tmp_path):
    module = _script()
    _study(tmp_path / "shakespeare-schemes", _rows("rope", 0.0, 0.05, np.random.default_rng(5)))
    with pytest.raises(OctlmError, match=r"--doc .*nowhere/board\.md: its folder .*nowhere does not exist"):
        module.write(tmp_path, ["shakespeare"], tmp_path / "nowhere" / "board.md", None, partial=True)
    with pytest.raises(OctlmError, match=r"--readme .*README\.md: no such file"):
        module.write(tmp_path, ["shakespeare"], None, tmp_path / "README.md", partial=True)
    assert not (tmp_path / "leaderboard.md").exists()
