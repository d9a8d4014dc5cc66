"""The long-context tokens reading (octlm length --long-tokens): marking, bits per byte on the marked targets, the
windows the bootstrap resamples, and the reading on a tiny study checked against the study's own figures."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from octlm.studies.length.readings.long_tokens import (
    COMPARISON,
    ROW,
    comparison_records,
    examples,
    mark,
    masked_bpb,
    reference_label,
    row_record,
    window_of,
    window_sums,
)


def test_mark_finds_the_targets_that_gain_and_only_those():
    # Targets 1 and 4 gain 3 nats and end below 2; 2 gains 3 but ends at 2.5 (LongPPL's LCL rule); 3 gains exactly 2
    # (not more); 5 gains but stands for no bytes (the end-of-text marker); 0 loses.
    short = np.array([1.0, 4.0, 5.5, 3.5, 3.1, 4.0])
    long_ = np.array([2.0, 1.0, 2.5, 1.5, 0.1, 1.0])
    nbytes = np.array([1, 2, 1, 3, 1, 0])
    assert np.flatnonzero(mark(short, long_, nbytes)).tolist() == [1, 4]
    assert np.flatnonzero(mark(short, long_, nbytes, gain=1.5, loss=3.0)).tolist() == [1, 2, 3, 4]


@given(st.lists(st.tuples(st.floats(0, 10), st.floats(0, 10), st.integers(0, 4)), min_size=1, max_size=40))
def test_mark_agrees_with_a_loop(triples):
    short, long_, nbytes = (np.array(column) for column in zip(*triples, strict=True))
    by_hand = [s - lg > 2.0 and lg < 2.0 and b > 0 for s, lg, b in triples]
    assert mark(short, long_, nbytes).tolist() == by_hand


def test_mark_refuses_arrays_that_do_not_line_up():
    with pytest.raises(ValueError, match="do not line up"):
        mark(np.zeros(3), np.zeros(4), np.ones(3))


@given(st.lists(st.tuples(st.floats(0, 10), st.integers(0, 4), st.booleans()), min_size=1, max_size=40))
def test_masked_bpb_is_the_marked_nats_over_their_bytes(triples):
    nats, nbytes, mask = (np.array(column) for column in zip(*triples, strict=True))
    total_bytes = sum(b for _, b, m in triples if m)
    got = masked_bpb(nats, nbytes, mask)
    if total_bytes == 0:
        assert got is None
    else:
        by_hand = sum(n for n, _, m in triples if m) / math.log(2) / total_bytes
        assert got == pytest.approx(by_hand, rel=1e-12, abs=1e-12)


def _windows_by_hand(n: int, length: int, stride: int) -> list[int]:
    """Which window scores each target, by walking the windows as octlm.train.evaluate.evaluate_sliding documents
    them: starts 0, stride, 2 * stride, ... the last pulled back to end at target n - 1, each scoring the targets no
    earlier window scored."""
    starts = sorted({min(s, n - length) for s in range(0, n - length + stride, stride)})
    owner = [-1] * n
    for k, start in enumerate(starts):
        for t in range(start, start + length):
            if owner[t] == -1:
                owner[t] = k
    return owner


@given(st.integers(1, 12), st.integers(1, 12), st.integers(0, 40))
def test_window_of_gives_the_window_that_scores_each_target(length, stride, extra):
    stride = min(stride, length)
    n = length + extra
    assert window_of(n, length, stride).tolist() == _windows_by_hand(n, length, stride)


def test_window_sums_add_the_marked_targets_of_each_window():
    nats = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    nbytes = np.array([1, 1, 2, 0, 3, 1])
    mask = np.array([True, False, True, False, True, True])
    windows = np.array([0, 0, 1, 1, 2, 2])
    summed, counted = window_sums(nats, nbytes, mask, windows, 4)
    assert summed.tolist() == [1.0, 3.0, 11.0, 0.0] and counted.tolist() == [1, 2, 4, 0]


def _row(label, length, sliding, seed=1, **extra):
    return {"label": label, "position": label, "eval_length": length, "sliding_bpb": sliding, "seed": seed, **extra}


def test_the_reference_is_the_best_sliding_reader_at_the_longest_length_over_its_seeds():
    rows = [
        _row("a", 8, 1.0),
        _row("a", 32, 2.0),
        _row("a", 32, 2.4, seed=2),  # mean 2.2
        _row("b", 32, 2.1),
        _row("b", 32, 2.2, seed=2),  # mean 2.15: the lowest
        _row("c", 32, None),  # a learned table past its rows
        _row("d", 8, 0.5),  # best, but not at the longest length
    ]
    assert reference_label(rows) == "b"
    with pytest.raises(ValueError, match="no row has a sliding reading"):
        reference_label([_row("c", 32, None)])


def test_a_row_record_keeps_the_windows_holding_a_marked_target():
    row = {**_row("a", 8, 2.5), "bpb": 2.6, "multiplier": 1, "status": "ok"}
    record = row_record(
        row, {"bpb": (np.array([2.0, 0.0, 4.0]), np.array([1, 0, 3])), "sliding_bpb": (np.zeros(2), np.zeros(2))}
    )
    assert record["record"] == ROW and record["window_nats"] == [2.0, 4.0] and record["window_bytes"] == [1, 3]
    assert record["bpb"] == pytest.approx(6.0 / math.log(2) / 4) and record["plain_bpb"] == 2.6
    assert record["sliding_bpb"] is None and record["sliding_window_nats"] is None  # nothing marked: nothing compared


def test_comparisons_over_the_marked_windows_pair_rows_as_the_study_does():
    rng = np.random.default_rng(0)
    nbytes = rng.integers(1, 5, size=30)
    base = rng.uniform(0, 3, size=30)
    records = []
    for label, shift in (("a", 0.0), ("b", 0.5)):
        for seed in (1, 2):
            row = {**_row(label, 8, 2.0, seed), "bpb": 2.0, "multiplier": 1}
            nats = base * nbytes + shift * nbytes + rng.normal(0, 0.01, 30)
            records.append(row_record(row, {"bpb": (nats, nbytes), "sliding_bpb": (nats, nbytes)}))
    compared = comparison_records(records)
    assert {(c["record"], c["reading"], c["a"], c["b"]) for c in compared} == {
        (COMPARISON, reading, "a", "b") for reading in ("bpb", "sliding_bpb")
    }
    for c in compared:
        assert c["difference"] == pytest.approx(-0.5 / math.log(2), abs=0.01)  # b pays 0.5 nats more per byte
        assert c["low"] <= c["difference"] <= c["high"] and c["verdict"] == "a" and len(c["seeds"]) == 2


def test_examples_are_spread_over_the_marked_targets_with_the_tokens_before_them():
    tokens = np.arange(100, 131)  # 30 targets; target i is tokens[i + 1]
    mask = np.zeros(30, dtype=bool)
    mask[[3, 10, 20, 29]] = True
    shown = examples(tokens, mask, np.full(30, 4.0), np.full(30, 1.0), lambda t: f"<{t}>", k=3, before=2)
    assert [e["target"] for e in shown] == [3, 20, 29]  # the first, the last and the nearest to halfway (1.5 -> 2)
    first = shown[0]
    assert first["token"] == "<104>" and first["before"] == "<102><103>" and first["short_nats"] == 4.0


# --- the reading on a tiny study ---------------------------------------------------------------------------------

T = 8
TINY = (
    "--vocab-size 280 --d-model 16 --n-heads 2 --n-layers 1 --batch-size 4 --max-steps 3 --threads 1 "
    f"--train-length {T} --multipliers 1 2 4 --schemes rope --rope-scalings yarn --extend-to 2 "
    "--extend-steps 2 --seeds 2 --quiet"
).split()


def _records(out) -> list[dict]:
    return [json.loads(line) for line in (out / "length.jsonl").read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def tiny_study(tmp_path_factory, small_corpus):
    from octlm.cli import main

    out = tmp_path_factory.mktemp("long") / "study"
    assert main(["length", "--text", str(small_corpus), "--out", str(out), *TINY]) == 0
    return out


def test_with_every_target_marked_each_row_reads_the_study_s_own_figures(tiny_study, monkeypatch):
    # Thresholds no target can miss: the marked set is every text target, so every row's figure on it must be the
    # study's bits per byte in both readings: the per-target scoring, the model's state (plain, yarn at each factor,
    # fine-tuned under its own scaling) and the windows all agree with the study's scoring.
    from octlm.studies.length.readings import long_token_scoring
    from octlm.studies.length.readings.reading import load_study

    monkeypatch.setattr(long_token_scoring, "GAIN_NATS", -1e9)
    monkeypatch.setattr(long_token_scoring, "LOSS_NATS", 1e9)
    study = load_study(tiny_study)
    records = long_token_scoring.compute(study, {"long_tokens_short": 4}, "cpu", _Silent())
    summary, rows = records[0], [r for r in records if r["record"] == ROW]
    assert summary["marked"] == summary["text_targets"] > 0
    evals = [r for r in study.records if r["record"] == "eval" and r.get("bpb") is not None]
    assert len(rows) == len(evals) and {r["label"] for r in rows} >= {"rope", "rope+yarn", "rope@2x", "rope+yarn@2x"}
    for record, row in zip(rows, evals, strict=True):
        assert (record["label"], record["seed"], record["eval_length"]) == (
            row["label"],
            row["seed"],
            row["eval_length"],
        )
        assert record["bpb"] == pytest.approx(row["bpb"], rel=1e-6)
        assert record["sliding_bpb"] == pytest.approx(row["sliding_bpb"], rel=1e-6)


class _Silent:
    def event(self, *args, **fields):
        pass


def test_target_nats_are_each_target_s_loss_in_its_own_window(tiny_study):
    # By hand: one forward pass per window, as the sliding reading defines it, each target's nats read off the
    # log-softmax of the position before it.
    import torch

    from octlm.run.load import load_run
    from octlm.studies.length.readings.long_token_scoring import target_nats
    from octlm.studies.length.readings.reading import load_study

    study = load_study(tiny_study)
    tokens = study.scored()[: 3 * 16 + 1]
    model, _ = load_run(study.models()[0].run_dir)
    got = target_nats(model, tokens, 16, 6, 2, "cpu")
    owner = _windows_by_hand(len(tokens) - 1, 16, 6)
    starts = sorted({min(s, len(tokens) - 1 - 16) for s in range(0, len(tokens) - 1 - 16 + 6, 6)})
    for t in range(len(tokens) - 1):
        start = starts[owner[t]]
        with torch.no_grad():
            logits = model(torch.tensor(tokens[start : start + 16])[None])[0, t - start]
        assert got[t] == pytest.approx(float(-torch.log_softmax(logits.double(), -1)[tokens[t + 1]]), abs=1e-5)


def test_reread_long_tokens_writes_its_records_and_section(tiny_study, capsys):
    from octlm.cli import main

    assert main(["length", "--out", str(tiny_study), "--reread", "--long-tokens", "--long-tokens-short", "4"]) == 0
    records = _records(tiny_study)
    summary = next(r for r in records if r["record"] == "long_tokens")
    assert summary["short_length"] == 4 and summary["long_length"] == 4 * T and summary["gain_nats"] == 2.0
    assert summary["reference"] in {r["label"] for r in records if r["record"] == "eval"}
    assert summary["marked"] == len(summary["targets"])
    assert "## Long-context tokens" in (tiny_study / "length.md").read_text()


@pytest.mark.parametrize(
    "args, match",
    [
        (["--long-tokens-short", "32"], "not below the study's longest length"),
        (["--long-tokens-short", "1"], "--long-tokens-short must be an integer >= 2"),
    ],
)
def test_bad_short_context_is_refused_in_one_line(tiny_study, capsys, args, match):
    from octlm.cli import main

    before = (tiny_study / "length.jsonl").read_bytes()
    assert main(["length", "--out", str(tiny_study), "--reread", "--long-tokens", *args]) != 0
    assert match in capsys.readouterr().err
    assert (tiny_study / "length.jsonl").read_bytes() == before


def test_each_row_is_scored_in_its_own_state_and_a_fine_tuned_model_keeps_its_scaling(tiny_study, monkeypatch):
    # The state each reading sees, read off the model (no floats): a base row under its scaling and factor, a plain
    # row under none, a fine-tuned row under the scaling it saved, reading after reading of the same loaded model.
    from octlm.studies.length.readings import long_token_scoring
    from octlm.studies.length.readings.reading import load_study

    study = load_study(tiny_study)
    seen = []

    def record_state(model, tokens, length, *args):
        scaling = model.positions.scaling
        seen.append(None if scaling is None else (scaling.method, scaling.factor))
        return np.zeros(len(tokens) - 1)

    monkeypatch.setattr(long_token_scoring, "target_nats", record_state)
    score = long_token_scoring.scorer(study, "cpu")
    rows = [r for r in study.records if r["record"] == "eval" and r["seed"] == study.options["seed"]]
    for label, expected in (
        ("rope+yarn@2x", lambda row: ("yarn", 2.0)),
        ("rope+yarn", lambda row: ("yarn", row["rope_factor"])),
        ("rope", lambda row: None),
    ):
        for row in (r for r in rows if r["label"] == label):
            seen.clear()
            score(row, row["eval_length"], row["eval_length"])
            score(row, row["eval_length"], row["eval_stride"])
            assert seen == [expected(row)] * 2, (label, row["eval_length"])
