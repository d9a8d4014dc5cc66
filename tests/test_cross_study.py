"""scripts/cross_study.py: a row of one study against a row of another gives what one study gives for two rows."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "cross_study.py"


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=300)


def test_two_studies_pair_as_two_rows_of_one_study_do(length_study, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(length_study, other)
    done = run(f"{length_study}:alibi", f"{other}:rope")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    records = [json.loads(line) for line in (length_study / "length.jsonl").read_text().splitlines()]
    own = {
        (r["reading"], r["eval_length"]): r
        for r in records
        if r["record"] == "comparison" and {r["a"], r["b"]} == {"alibi", "rope"}
    }
    assert {(x["reading"], x["eval_length"]) for x in lines} == set(own)
    for x in lines:
        r = own[x["reading"], x["eval_length"]]
        sign = 1 if r["a"] == "alibi" else -1
        assert x["difference"] == pytest.approx(sign * r["difference"], abs=1e-4)
        assert sorted([x["low"], x["high"]]) == pytest.approx(sorted([sign * r["low"], sign * r["high"]]), abs=1e-4)


def test_a_row_against_itself_is_zero_and_other_text_is_refused(length_study, tmp_path):
    done = run(f"{length_study}:rope", f"{length_study}:rope")
    assert all(json.loads(line)["high"] == 0 == json.loads(line)["low"] for line in done.stdout.splitlines())
    changed = tmp_path / "changed"
    shutil.copytree(length_study, changed)
    lines = (changed / "length.jsonl").read_text().splitlines()
    edited = [json.loads(line) for line in lines]
    for r in edited:
        if r["record"] == "window_bytes":
            r["bytes"][0] += 1
    (changed / "length.jsonl").write_text("\n".join(json.dumps(r) for r in edited) + "\n")
    done = run(f"{length_study}:rope", f"{changed}:rope")
    assert done.returncode != 0 and "windows at 8 differ" in done.stderr


def test_bad_input_ends_in_one_line_naming_the_cause_and_prints_nothing(length_study, tmp_path):
    """A missing or non-study folder, a row the study lacks, no :ROW, an unknown reading, and studies whose
    evaluation options differ each end in one line, no traceback, and no JSON line before it."""
    strided = tmp_path / "strided"
    shutil.copytree(length_study, strided)
    edited = [json.loads(line) for line in (strided / "length.jsonl").read_text().splitlines()]
    for r in edited:
        if r["record"] == "study":
            r["options"]["eval_stride"] = 3
    (strided / "length.jsonl").write_text("\n".join(json.dumps(r) for r in edited) + "\n")
    (tmp_path / "empty").mkdir()
    cases = [
        ((f"{tmp_path / 'missing'}:rope", f"{length_study}:rope"), "is no finished length study"),
        ((f"{tmp_path / 'empty'}:rope", f"{length_study}:rope"), "is no finished length study"),
        ((f"{length_study}:nope", f"{length_study}:rope"), "no eval rows labelled 'nope'; its rows are alibi"),
        ((str(length_study), f"{length_study}:rope"), "is not STUDY:ROW"),
        ((f"{length_study}:rope", f"{length_study}:alibi", "--reading", "streaming"), "invalid choice: 'streaming'"),
        ((f"{length_study}:rope", f"{strided}:rope"), "the studies differ in --eval-stride"),
    ]
    for args, match in cases:
        done = run(*args)
        assert done.returncode != 0 and done.stdout == "", (args, done.stdout)
        assert "Traceback" not in done.stderr and match in done.stderr, (args, done.stderr)
