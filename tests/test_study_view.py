"""What the page shows of a length study (octlm serve --study, octlm export-web --study), and what it refuses.

The maps of each model are checked against the model loaded on its own and
recorded at that length (``record`` and ``attention_statistics``): a scaled
label under its record's scaling, an extended run under the scaling it saved.
"""

from __future__ import annotations

import base64
import json
import re
import shutil

import numpy as np
import pytest
import torch

from octlm.cli import main
from octlm.export.study_view import PAGE_FIELDS, missing_parts, read_records, record_problem, study_view
from octlm.export.web import RUN_DATA
from octlm.inspect.attention import record
from octlm.inspect.attention_statistics import attention_statistics
from octlm.run.folder import RunFolder
from octlm.run.load import load_run
from tests.conftest import REPO

LENGTHS = [8, 16, 32]


def records(study) -> list[dict]:
    return [json.loads(line) for line in (study / "length.jsonl").read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def view(length_study):
    return study_view(length_study)


def model_view(view: dict, label: str) -> dict[int, dict]:
    entry = next(m for m in view["attention"]["models"] if m["label"] == label)
    return {x["length"]: x for x in entry["lengths"]}


def recorded(model, study, length: int):
    ids = [int(i) for i in RunFolder(study / "runs" / "rope").tokens("val")[:length]]
    maps = record(model, ids, torch.device("cpu"))
    return attention_statistics(maps.probabilities, maps.logits)


def test_the_view_holds_the_records_without_per_position_loss(view, length_study):
    written = records(length_study)
    assert view["kind"] == "study" and view["study"] == written[0]
    evals = [r for r in written if r["record"] == "eval"]
    # the page draws neither the per-position losses nor the per-window ones (the comparisons' bootstrap reads those)
    undrawn = ("position_", "window_", "sliding_window_")
    assert view["eval"] == [{k: v for k, v in r.items() if not k.startswith(undrawn)} for r in evals]
    assert view["curve"] == [r for r in written if r["record"] == "curve"] and view["curve"]
    assert [m["label"] for m in view["attention"]["models"]] == list(dict.fromkeys(r["label"] for r in evals))


def test_every_model_at_every_length_and_no_rows_invented(view):
    for entry in view["attention"]["models"]:
        assert [x["length"] for x in entry["lengths"]] == LENGTHS
    learned = model_view(view, "learned")
    assert "maps" in learned[8] and all(
        "has 8 rows" in learned[n]["note"] and "maps" not in learned[n] for n in (16, 32)
    )
    stretched = model_view(view, "learned@2x")  # the fine-tune interpolated its table to 2 x T rows
    assert "maps" in stretched[16] and "has 16 rows" in stretched[32]["note"]
    assert all("maps" in x for x in model_view(view, "alibi").values())


def test_a_scaled_label_is_its_base_run_under_the_records_scaling(view, length_study):
    rope_yarn = next(
        r
        for r in records(length_study)
        if r["record"] == "eval" and r["label"] == "rope+yarn" and r["eval_length"] == 32
    )
    model, _ = load_run(length_study / "runs" / "rope")
    plain = recorded(model, length_study, 32)
    model.set_rope_scaling("yarn", rope_yarn["rope_factor"])
    scaled = recorded(model, length_study, 32)
    shown = model_view(view, "rope+yarn")[32]["statistics"]
    np.testing.assert_allclose(shown["max_logit"], scaled.max_logit.numpy(), atol=1e-4)
    assert np.abs(np.array(shown["max_logit"]) - plain.max_logit.numpy()).max() > 1e-3  # the scaling shows
    np.testing.assert_allclose(
        model_view(view, "rope")[32]["statistics"]["max_logit"], plain.max_logit.numpy(), atol=1e-4
    )


def test_an_extended_run_keeps_the_scaling_it_saved(view, length_study):
    model, _ = load_run(length_study / "runs" / "rope+yarn@2x")
    saved = recorded(model, length_study, 32)
    model.set_rope_scaling(None)
    unscaled = recorded(model, length_study, 32)
    shown = model_view(view, "rope+yarn@2x")[32]["statistics"]
    np.testing.assert_allclose(shown["max_logit"], saved.max_logit.numpy(), atol=1e-4)
    assert np.abs(np.array(shown["max_logit"]) - unscaled.max_logit.numpy()).max() > 1e-3


def test_a_moved_study_finds_its_runs_and_a_missing_run_is_a_note(length_study, tmp_path):
    moved = tmp_path / "moved"
    shutil.copytree(length_study, moved)
    shutil.rmtree(moved / "runs" / "alibi")
    view = study_view(moved)
    assert all("maps" in x for x in model_view(view, "rope").values())
    assert all("runs/alibi) is missing" in x["note"] for x in model_view(view, "alibi").values())
    assert all("maps" in x for x in model_view(view, "alibi@2x").values())


def test_a_large_study_gets_smaller_maps_within_the_page_budget(length_study, monkeypatch):
    from octlm.inspect import attention_view

    full = study_view(length_study)
    assert full["attention"]["side"] == 128  # 30 tiny map sets fit whole
    monkeypatch.setattr(attention_view, "PAGE_MAP_BYTES", 9_000)
    small = study_view(length_study)
    side = small["attention"]["side"]
    maps = [x for m in small["attention"]["models"] for x in m["lengths"] if "maps" in x]
    assert side < 32 and all(x["side"] <= side for x in maps) and any(x["block"] > 1 for x in maps)
    assert sum(len(base64.b64decode(x["maps"])) for x in maps) <= 9_000


def rewrite(study, tmp_path, name: str, change) -> object:
    copy = tmp_path / name
    shutil.copytree(study, copy)
    lines = [change(dict(r)) for r in records(copy)]
    (copy / "length.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines if r is not None))
    return copy


def test_an_older_study_is_shown_with_what_it_lacks(length_study, tmp_path):
    def strip(r):  # as octlm length wrote it before the sliding reading and the attention records
        return (
            None
            if r["record"] == "attention"
            else {k: v for k, v in r.items() if not k.startswith("sliding") and k != "eval_stride"}
        )

    def add(r):  # the fields a current study writes (by hand until octlm length writes them)
        if r["record"] == "eval":
            r.update(
                sliding_bpb=None if r["bpb"] is None else r["bpb"] - 0.01,
                sliding_loss=None,
                eval_stride=r["eval_length"] // 2,
                sliding_windows=3,
            )
        return r

    old = rewrite(length_study, tmp_path, "old", strip)
    lacks = missing_parts(records(old))
    assert any("sliding-window reading" in m and "sliding_bpb" in m for m in lacks)
    assert any("attention statistics" in m for m in lacks)
    assert study_view(old)["missing"] == lacks
    current = rewrite(length_study, tmp_path, "current", add)
    current_records = records(current) + [{"record": "attention", "label": "rope", "seed": 1337, "eval_length": 8}]
    assert missing_parts(current_records) == []


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.fixture
def not_studies(tmp_path, trained_run, length_study):
    (tmp_path / "empty").mkdir()
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "tasks.jsonl").write_text('{"record": "study"}\n')
    damaged = tmp_path / "damaged"
    shutil.copytree(length_study, damaged, ignore=shutil.ignore_patterns("runs"))
    (damaged / "length.jsonl").write_text((damaged / "length.jsonl").read_text() + "{not json\n")
    # Stopped by Ctrl-C before any table: progress/study.json holds the options (a task study's have task_length).
    for name, options in {
        "stopped": {"text": ["a.txt"]},
        "stopped-tasks": {"task": ["copy"], "task_length": 8},
    }.items():
        (tmp_path / name / "progress").mkdir(parents=True)
        (tmp_path / name / "progress" / "study.json").write_text(json.dumps(options))
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "length.jsonl").write_text('{"record": "train", "position": "rope", "seed": 1}\n')
    return {
        "missing": (tmp_path / "nope", "no such folder"),
        "file": (tmp_path / "a-file", "is a file"),
        "run": (trained_run, "is a run folder made by octlm train, not a length study; show it with --run"),
        "task study": (
            tmp_path / "tasks",
            "not a length study (it holds tasks.jsonl, not length.jsonl); the page shows folders made by `octlm length "
            f"--text`; make one with `octlm length --text FILE --out {tmp_path / 'tasks-length'}`",
        ),
        "empty": (tmp_path / "empty", "not a length study (no length.jsonl)"),
        "damaged": (damaged, "length.jsonl:"),
        "unfinished": (unfinished, "holds no 'study' record"),
        "stopped length study": (
            tmp_path / "stopped",
            f"{tmp_path / 'stopped'}: an unfinished length study (its finished parts are in progress/); run the same "
            "octlm length command to finish it, then serve it",
        ),
        "stopped task study": (
            tmp_path / "stopped-tasks",
            f"{tmp_path / 'stopped-tasks'}: an unfinished task study (its finished parts are in progress/), not a "
            "length study; run the same octlm length --task command to finish it",
        ),
    }


@pytest.mark.parametrize(
    "case",
    [
        "missing",
        "file",
        "run",
        "task study",
        "empty",
        "damaged",
        "unfinished",
        "stopped length study",
        "stopped task study",
    ],
)
def test_a_folder_that_is_not_a_study_is_one_line(case, not_studies, tmp_path, capsys):
    folder, says = not_studies[case]
    out = tmp_path / "page"
    assert main(["export-web", "--study", str(folder), "--out", str(out)]) == 1
    line = one_line_error(capsys)
    assert line.startswith("octlm: error: ") and says in line and not out.exists()
    assert main(["serve", "--study", str(folder), "--port", "0"]) == 1
    assert says in one_line_error(capsys)


#: A record the page cannot read: (the kind of the record changed, the change, the field the refusal names, what it
#: says).
#: "appended" adds the change's record as a new last line, as a person editing the file would.
DAMAGED = {
    "eval appended without fields": (
        "appended",
        lambda r: {"record": "eval"},
        "label",
        'the eval record lacks "label"',
    ),
    "study lengths a string": (
        "study",
        lambda r: {**r, "lengths": "oops"},
        "lengths",
        '"lengths" is a string, expected a list of numbers',
    ),
    "study lengths holding null": (
        "study",
        lambda r: {**r, "lengths": [8, None]},
        "lengths",
        "is a list holding null, expected",
    ),
    "study without train_length": (
        "study",
        lambda r: {k: v for k, v in r.items() if k != "train_length"},
        "train_length",
        "lacks",
    ),
    "study targets null": ("study", lambda r: {**r, "targets": None}, "targets", "is null, expected a number"),
    "train without position": ("train", lambda r: {k: v for k, v in r.items() if k != "position"}, "position", "lacks"),
    "eval label a number": ("eval", lambda r: {**r, "label": 12}, "label", "is a number, expected a string"),
    "eval length a list": (
        "eval",
        lambda r: {**r, "eval_length": [8]},
        "eval_length",
        "is a list of numbers, expected a number",
    ),
    "eval bpb a string": ("eval", lambda r: {**r, "bpb": "1.2"}, "bpb", "is a string, expected a number or null"),
    "eval sliding_bpb an object": (
        "eval",
        lambda r: {**r, "sliding_bpb": {}},
        "sliding_bpb",
        "is an object, expected a number or null",
    ),
    "curve without step": ("curve", lambda r: {k: v for k, v in r.items() if k != "step"}, "step", "lacks"),
    "curve bpb null": ("curve", lambda r: {**r, "bpb": None}, "bpb", "is null, expected a number"),
    "attention without seed": ("attention", lambda r: {k: v for k, v in r.items() if k != "seed"}, "seed", "lacks"),
    "attention max_logit a number": (
        "attention",
        lambda r: {**r, "max_logit": 3.5},
        "max_logit",
        "is a number, expected a list of lists",
    ),
    "attention sink_mass flat": (
        "attention",
        lambda r: {**r, "sink_mass": [0.5]},
        "sink_mass",
        "is a list of numbers, expected a list of",
    ),
}


@pytest.mark.parametrize("case", list(DAMAGED))
def test_a_record_the_page_cannot_read_is_one_line_naming_its_line_and_field(case, length_study, tmp_path, capsys):
    kind, change, field, says = DAMAGED[case]
    study = tmp_path / "study"
    shutil.copytree(length_study, study, ignore=shutil.ignore_patterns("runs"))
    lines = records(study)
    if kind == "appended":
        lines.append(change({}))
    else:
        index = max(i for i, r in enumerate(lines) if r["record"] == kind)
        lines[index] = change(lines[index])
    (study / "length.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    number = len(lines) if kind == "appended" else index + 1
    out = tmp_path / "page"
    for command in (
        ["export-web", "--study", str(study), "--out", str(out)],
        ["serve", "--study", str(study), "--port", "0"],
    ):
        assert main(command) == 1
        line = one_line_error(capsys)
        assert line.startswith(f"octlm: error: {study / 'length.jsonl'} line {number}: "), line
        assert f'"{field}"' in line and says in line and "re-run `octlm length`, or repair the line" in line
    assert not out.exists()


def test_a_real_studys_records_all_pass_and_unknown_kinds_and_fields_are_kept(length_study, tmp_path):
    written = records(length_study)
    assert {r["record"] for r in written} >= set(PAGE_FIELDS)  # every kind the check knows is in the tiny study
    assert [record_problem(r) for r in written] == [None] * len(written)
    newer = tmp_path / "newer"
    shutil.copytree(length_study, newer, ignore=shutil.ignore_patterns("runs"))
    extra = [{**r, "added_later": [1, "x"]} for r in written] + [{"record": "some later kind", "label": None}]
    (newer / "length.jsonl").write_text("".join(json.dumps(r) + "\n" for r in extra))
    assert read_records(newer) == extra


def test_the_check_matches_the_pages_own_types():
    """Each checked field is declared in web/src/study/data.ts with the same type; one the check requires, the page
    requires too."""
    source = (REPO / "web" / "src" / "study" / "data.ts").read_text(encoding="utf-8")
    interfaces = {
        name: dict((f, (opt, ts)) for f, opt, ts in re.findall(r"^  (\w+)(\??): (.+);$", body, re.M))
        for name, body in re.findall(r"^export interface (\w+) \{\n(.*?)^\}", source, re.M | re.S)
    }
    ts_types = {
        "a number": "number",
        "a number or null": "number | null",
        "a string": "string",
        "a string or null": "string | null",
        "a list of numbers": "number[]",
        "a list of lists of numbers": "number[][]",
    }
    python_only = {("train", "run_dir")}  # read by study_view to find the runs, never handed to the page's code
    for kind, fields in PAGE_FIELDS.items():
        declared = interfaces[f"{kind.capitalize()}Record"]
        for name, expected in fields.items():
            field = name.rstrip("?")
            if (kind, field) in python_only:
                continue
            optional, ts = declared[field]
            assert ts == ts_types[expected], (kind, field, ts)
            assert name.endswith("?") or not optional, (
                f"{kind}.{field} is optional on the page; the check must not require it"
            )


def test_run_and_study_are_one_or_the_other(trained_run, length_study, tmp_path, capsys):
    # Neither is the playgrounds alone (test_web.py::test_serve_without_a_run_or_a_study_serves_the_playgrounds_alone)
    out = tmp_path / "page"
    for command in (["serve", "--port", "0"], ["export-web", "--out", str(out)]):
        assert main([*command, "--run", str(trained_run), "--study", str(length_study)]) == 1
        line = one_line_error(capsys)
        assert "both given" in line and "give --run RUN_DIR or --study DIR" in line
        assert main([*command, "--run", str(length_study)]) == 1
        assert f"show it with --study {length_study}" in one_line_error(capsys)
    assert not out.exists()


def test_export_web_writes_the_study(length_study, tmp_path, capsys):
    out = tmp_path / "page"
    assert main(["export-web", "--study", str(length_study), "--out", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    script = (out / RUN_DATA).read_text(encoding="utf-8")
    prefix = "window.OCTLM_STUDY = "
    assert script.startswith(prefix) and result["bytes"] == sum(p.stat().st_size for p in out.iterdir())
    data = json.loads(script[len(prefix) :].rstrip().rstrip(";"))
    maps = model_view(data, "rope")[32]
    raw = base64.b64decode(maps["maps"])
    assert len(raw) == 1 * 2 * 32 * 33 // 2  # 1 layer x 2 heads, 32 x 32 cells on and below the diagonal
