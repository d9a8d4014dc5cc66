"""octlm length end to end on a tiny shape, and sampling with RoPE scaling."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from octlm.cli import main
from octlm.errors import OctlmError
from octlm.run.load import load_run
from octlm.version import build_version
from tests.conftest import hand_bpb, tiny_model

T = 8
MULTIPLIERS = [1, 2, 4]
TINY = tiny_model(max_steps=3, train_length=T, multipliers=MULTIPLIERS)
#: The tests here are about the base study; tests/test_extend.py covers the extension stage, which is on by default.
TINY += ["--extend-to", "0"]


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def study(tmp_path_factory, small_corpus):
    out = tmp_path_factory.mktemp("length") / "study"
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(["length", "--text", str(small_corpus), "--out", str(out), "--json", *TINY])
    assert code == 0
    return out, json_lines(buffer.getvalue())


def test_study_writes_jsonl_plot_and_table(study):
    out, lines = study
    result = lines[-1]
    assert result["event"] == "result" and result["lengths"] == [8, 16, 32]
    assert sum(line["event"] == "trained" for line in lines) == 5
    records = json_lines((out / "length.jsonl").read_text())
    assert records[0]["record"] == "study" and records[0]["octlm_version"] == build_version()
    assert [r["position"] for r in records if r["record"] == "train"] == [
        "learned",
        "sinusoidal",
        "rope",
        "alibi",
        "none",
    ]
    evals = [r for r in records if r["record"] == "eval"]
    labels = [
        "learned",
        "sinusoidal",
        "rope",
        "rope+linear",
        "rope+ntk",
        "rope+dynamic-ntk",
        "rope+yarn",
        "rope+llama3",
        "alibi",
        "none",
    ]
    assert [r["label"] for r in evals] == [label for label in labels for _ in MULTIPLIERS]
    assert (out / "length.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = (out / "length.md").read_text()
    assert "n/a (no rows past T)" in table and "| `rope+yarn` |" in table


def test_learned_is_not_available_past_its_table(study):
    out, _ = study
    evals = [
        r
        for r in json_lines((out / "length.jsonl").read_text())
        if r["record"] == "eval" and r["position"] == "learned"
    ]
    assert [(r["eval_length"], r["status"]) for r in evals] == [
        (8, "ok"),
        (16, "n/a (no rows past T)"),
        (32, "n/a (no rows past T)"),
    ]
    assert evals[1]["bpb"] is None


def test_every_length_scores_the_same_targets_and_per_position_adds_up(study):
    out, _ = study
    records = json_lines((out / "length.jsonl").read_text())
    targets = records[0]["targets"]
    for r in records:
        if r["record"] != "eval" or r["status"] != "ok":
            continue
        assert r["tokens"] == targets and r["windows"] * r["eval_length"] == targets
        assert len(r["position_loss"]) == len(r["position_bytes"]) == r["eval_length"]
        assert sum(r["position_bytes"]) == r["bytes"]
        assert sum(r["position_loss"]) * r["windows"] / targets == pytest.approx(r["loss"], rel=1e-5)
    # at 1x a scaling with factor 1 is plain RoPE
    at_t = {r["label"]: r["bpb"] for r in records if r["record"] == "eval" and r["eval_length"] == T}
    for method in ("linear", "ntk", "dynamic-ntk", "yarn"):
        assert at_t[f"rope+{method}"] == pytest.approx(at_t["rope"], rel=1e-6)


def test_a_row_matches_a_direct_computation(study):
    # ALiBi at 4x and RoPE+YaRN at 4x, recomputed window by window by hand.
    out, _ = study
    records = json_lines((out / "length.jsonl").read_text())
    targets = records[0]["targets"]
    for label, position, scaling in (("alibi", "alibi", None), ("rope+yarn", "rope", "yarn")):
        row = next(r for r in records if r["record"] == "eval" and r["label"] == label and r["eval_length"] == 4 * T)
        assert row["bpb"] == pytest.approx(hand_bpb(out / "runs" / position, targets, 4 * T, scaling), rel=1e-5), label


def test_terminal_table(small_corpus, study, tmp_path, capsys):
    out, _ = study
    # an existing study is kept without --overwrite
    assert main(["length", "--text", str(small_corpus), "--out", str(out), *TINY]) == 1
    assert "--overwrite" in capsys.readouterr().err
    code = main(
        [
            "length",
            "--text",
            str(small_corpus),
            "--out",
            str(tmp_path / "s"),
            "--schemes",
            "learned",
            "rope",
            "--rope-scalings",
            "yarn",
            "--quiet",
            *TINY,
        ]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "rope+yarn" in text and "where each scheme breaks" in text
    lines = text.splitlines()
    head, *body, footnote = lines[1 : lines.index("")]
    # every cell past T is a short n/a in its own column, and the reason is said once, under the table
    assert [line.split()[0] for line in body] == ["learned", "rope", "rope+yarn"]
    assert body[0].split()[2:] == ["n/a", "n/a"] and float(body[0].split()[1]) > 0
    assert {len(line) for line in [head, *body]} == {len(head)}
    assert footnote == "n/a: no rows past T=8 (a learned position table has T rows)"


@pytest.mark.parametrize(
    "args,match",
    [
        (["--schemes", "alibi", "--rope-scalings", "yarn"], "--rope-scalings needs the rope, xpos or prope model"),
        (["--multipliers", "0"], "--multipliers"),
        (["--schemes", "rope", "rope"], "twice"),
        (["--d-model", "30", "--n-heads", "4"], "--d-model=30"),
    ],
)
def test_bad_options_write_nothing(small_corpus, tmp_path, capsys, args, match):
    out = tmp_path / "s"
    assert main(["length", "--text", str(small_corpus), "--out", str(out), *TINY, *args]) == 1
    err = capsys.readouterr().err
    assert err.startswith("octlm: error:") and match in err
    assert not out.exists()


def test_eval_tokens_below_the_longest_window_is_refused(small_corpus, tmp_path, capsys):
    from octlm.studies.length.options import LengthOptions
    from octlm.studies.length.validation import check_eval_tokens

    out = tmp_path / "s"
    longest = max(MULTIPLIERS) * T  # a batch of --eval-tokens must hold one window of the longest length
    assert main(["length", "--text", str(small_corpus), "--out", str(out), *TINY, "--eval-tokens", "31"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("octlm: error:") and len(err.strip().splitlines()) == 1, err
    assert f"--eval-tokens 31 is below {longest}" in err and f"give --eval-tokens {longest} or more" in err
    assert not out.exists()
    base = dict(text=[str(small_corpus)], out=str(out), train_length=T, multipliers=MULTIPLIERS, schemes=["rope"])
    check_eval_tokens(LengthOptions(**base, extend_to=0, eval_tokens=longest))  # exactly one window is fine
    # the extension stage scores its fine-tunes at extend_to x T, past the longest multiplier here
    with pytest.raises(OctlmError, match=f"below {8 * T}, the longest evaluated window"):
        check_eval_tokens(LengthOptions(**base, extend_to=8, eval_tokens=longest))


def test_validation_too_short_stops_before_training_and_writes_nothing(small_corpus, study, tmp_path, capsys):
    out = tmp_path / "s"
    assert (
        main(
            ["length", "--text", str(small_corpus), "--out", str(out), "--json", *TINY, "--multipliers", "1", "100000"]
        )
        == 1
    )
    captured = capsys.readouterr()
    assert not out.exists() and not any(tmp_path.iterdir())
    assert not [line for line in json_lines(captured.out) if line.get("event") in ("run", "trained", "study")]
    # the message names the value and the longest multiplier this validation text supports
    manifest = json.loads((study[0] / "runs" / "rope" / "manifest.json").read_text())
    supported = (manifest["tokens"]["val"]["count"] - 1) // T
    err = captured.err.strip()
    assert err.startswith("octlm: error: --multipliers 100000:") and "\n" not in err
    assert f"lower --multipliers to at most {supported} " in err and "--val-fraction" in err
    # and that multiplier does run: the check counts the same tokens the runs prepare
    from octlm.studies.length.options import LengthOptions
    from octlm.studies.length.validation import check_validation_length, validation_tokens

    opts = LengthOptions(text=[str(small_corpus)], vocab_size=280, train_length=T, multipliers=[supported])
    assert validation_tokens(opts) == manifest["tokens"]["val"]["count"]
    assert check_validation_length(manifest["tokens"]["val"]["count"], opts) == 1


@pytest.fixture(scope="module")
def alibi_study(tmp_path_factory, small_corpus):
    out = tmp_path_factory.mktemp("alibi") / "study"
    assert (
        main(
            [
                "length",
                "--text",
                str(small_corpus),
                "--out",
                str(out),
                "--quiet",
                *TINY,
                "--schemes",
                "alibi",
                "--max-steps",
                "2",
            ]
        )
        == 0
    )
    return out, json_lines((out / "length.jsonl").read_text())


def test_without_rope_the_default_scalings_are_dropped(alibi_study):
    study, *rows = alibi_study[1]
    assert study["options"]["rope_scalings"] == []
    assert [(r["label"], r["eval_length"]) for r in rows if r["record"] == "eval"] == [
        ("alibi", m * T) for m in MULTIPLIERS
    ]


def test_extend_to_zero_skips_the_extension_stage(alibi_study):
    out, (study, *rows) = alibi_study
    assert study["options"]["extend_to"] == 0 and study["options"]["multipliers"] == MULTIPLIERS
    assert not [r for r in rows if r["record"] == "curve" or "@" in r.get("label", r.get("position", ""))]
    assert not (out / "extend.png").exists() and "fine-tuning steps" not in (out / "length.md").read_text()


def test_max_steps_is_recorded_as_the_limit_not_the_default_budget(alibi_study):
    from octlm.studies.length.options import DEFAULT_TIME_BUDGET, LengthOptions

    study, *rows = alibi_study[1]
    assert study["options"]["max_steps"] == 2 and study["options"]["time_budget"] is None
    assert [r["steps"] for r in rows if r["record"] == "train"] == [2]
    assert LengthOptions().resolved().time_budget == DEFAULT_TIME_BUDGET


def test_a_folder_that_is_not_a_study_is_never_touched(small_corpus, tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["length", "--text", str(small_corpus), "--out", str(tmp_path), "--overwrite", *TINY]) == 1
    assert "not an octlm length study" in capsys.readouterr().err
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_sample_with_rope_scaling_and_cache(study, capsys):
    out, _ = study
    rope = str(out / "runs" / "rope")
    common = ["sample", "--run", rope, "--max-new-tokens", "40", "--temperature", "0", "--json"]
    assert main([*common, "--rope-scaling", "yarn", "--rope-factor", "4"]) == 0
    cached = json_lines(capsys.readouterr().out)[-1]
    assert cached["rope_scaling"] == {"method": "yarn", "factor": 4.0, "original_length": T} and cached["use_cache"]
    assert main([*common, "--rope-scaling", "yarn", "--rope-factor", "4", "--no-cache"]) == 0
    assert json_lines(capsys.readouterr().out)[-1]["samples"] == cached["samples"]
    assert main([*common, "--rope-scaling", "dynamic-ntk"]) == 0
    assert json_lines(capsys.readouterr().out)[-1]["rope_scaling"]["factor"] == 1.0


@pytest.mark.parametrize(
    "run,args,match",
    [
        ("learned", ["--rope-scaling", "linear", "--rope-factor", "2"], "needs position='rope'"),
        ("rope", ["--rope-scaling", "linear"], "needs --rope-factor"),
        ("rope", ["--rope-scaling", "ntk", "--rope-factor", "0.5"], ">= 1"),
        ("rope", ["--rope-factor", "2"], "needs --rope-scaling"),
    ],
)
def test_sample_rope_scaling_errors(study, capsys, run, args, match):
    out, _ = study
    assert main(["sample", "--run", str(out / "runs" / run), *args]) == 1
    err = capsys.readouterr().err
    assert err.startswith("octlm: error:") and match in err and "Traceback" not in err


def test_position_buckets_and_curve_cover_every_position(study):
    from octlm.studies.length.tables import bucket_bpb, position_buckets, position_curve

    assert position_buckets(128, 2048) == [(0, 128), (128, 256), (256, 512), (512, 1024), (1024, 2048)]
    assert position_buckets(8, 20) == [(0, 8), (8, 16), (16, 20)]
    out, _ = study
    row = next(
        r
        for r in json_lines((out / "length.jsonl").read_text())
        if r["record"] == "eval" and r["eval_length"] == 4 * T and r["label"] == "rope"
    )
    # one bucket spanning the window is the row's own bits per byte
    assert bucket_bpb(row, [(0, 4 * T)]) == [pytest.approx(row["bpb"], rel=1e-5)]
    centres, curve = position_curve(row, first=3)
    assert len(centres) == len(curve) and np.all(np.diff(centres) > 0) and centres[-1] <= 4 * T
    assert np.all(np.isfinite(curve)) and curve.min() <= row["bpb"] <= curve.max()


def test_help_and_docs_give_the_measured_duration_of_the_default_study(capsys):
    import re
    from pathlib import Path

    from octlm.studies.length.options import MEASURED_MINUTES

    doc = " ".join(
        (Path(__file__).resolve().parents[1] / "docs" / "length-study.md").read_text(encoding="utf-8").split()
    )
    measured = float(re.search(r"whole study took \*\*([\d.]+) minutes\*\*", doc)[1])
    with pytest.raises(SystemExit):
        main(["length", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert measured == MEASURED_MINUTES
    assert f"extension stage included, took {measured} minutes on tinyshakespeare in 2 processes" in help_text
    assert measured <= 15 and "within the 15 minutes it is sized for on 2 CPU cores" in help_text


# -- the sliding reading and the attention statistics (issue 22) ----------------------------------------


def test_every_length_is_read_twice_and_the_sliding_reading_recomputes(study):
    from octlm.train.evaluate import evaluate_sliding

    out, lines = study
    records = json_lines((out / "length.jsonl").read_text())
    evals = [r for r in records if r["record"] == "eval" and r["status"] == "ok"]
    assert evals and all(r["eval_stride"] == r["eval_length"] // 2 and r["sliding_bpb"] > 0 for r in evals)
    # ALiBi at 4x, recomputed from the run's own weights and validation text with the stride the row names
    row = next(r for r in evals if r["label"] == "alibi" and r["eval_length"] == 4 * T)
    model, tokenizer = load_run(out / "runs" / "alibi")
    from octlm.run.folder import RunFolder

    val = np.asarray(RunFolder(out / "runs" / "alibi").tokens("val")[: records[0]["targets"] + 1])
    again = evaluate_sliding(model, val, tokenizer.bytes_per_token, 4 * T, row["eval_stride"])
    assert row["sliding_bpb"] == pytest.approx(again.bpb, rel=1e-6) and row["sliding_windows"] == again.blocks
    table = (out / "length.md").read_text()
    assert "sliding windows (stride L/2" in table and table.count("| `rope+yarn` |") >= 2


def test_attention_is_recorded_for_every_model_at_every_length_it_can_read(study):
    out, _ = study
    records = json_lines((out / "length.jsonl").read_text())
    scored = {(r["label"], r["eval_length"]) for r in records if r["record"] == "eval" and r["status"] == "ok"}
    attention = [r for r in records if r["record"] == "attention"]
    assert {(r["label"], r["eval_length"]) for r in attention} == scored  # none past a learned table
    for r in attention:
        layers, heads = len(r["mean_entropy"]), len(r["mean_entropy"][0])
        assert (layers, heads) == (1, 2) and len(r["entropy"][0][0]) == len(r["query_positions"])
        # entropy of a query that sees n keys lies in [0, ln n]; the first token's mass in [0, 1]
        assert all(0 <= h <= math.log(r["eval_length"]) + 1e-6 for head in r["mean_entropy"] for h in head)
        assert all(0 <= s <= 1 for head in r["sink_mass"] for s in head)
    assert (out / "attention.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "**entropy (nats)**" in (out / "length.md").read_text()
