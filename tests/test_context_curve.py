"""The opt-in readings of a finished length study: ``--context-curve`` and ``--reread``
(octlm.studies.length.reread)."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from octlm.cli import main
from octlm.run.folder import RunFolder
from octlm.run.load import load_run
from octlm.studies.length.readings.context_curve import context_grid, effective_context, knee, sample_targets, score_at

T = 8
TINY = "--vocab-size 280 --d-model 16 --n-heads 2 --n-layers 1 --batch-size 4 --max-steps 3 --threads 1".split()
TINY += ["--train-length", str(T), "--multipliers", "1", "4", "--extend-to", "0", "--quiet"]


def records(folder):
    return [json.loads(line) for line in (folder / "length.jsonl").read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def curved(tmp_path_factory, small_corpus):
    """A tiny study of learned and rope, two seeds, with --context-curve on 24 targets."""
    out = tmp_path_factory.mktemp("curve") / "study"
    args = ["length", "--text", str(small_corpus), "--out", str(out), *TINY, "--schemes", "learned", "rope"]
    assert main([*args, "--seeds", "2", "--context-curve", "--context-targets", "24"]) == 0
    return out


def hand_nats(model, tokens, t: int, c: int) -> float:
    """Nats of target ``t`` from one forward pass over exactly the ``c`` tokens before it."""
    with torch.no_grad():
        x = torch.tensor(np.asarray(tokens[t - c : t], dtype=np.int64))[None]
        return -torch.log_softmax(model(x)[0, -1].double(), dim=-1)[int(tokens[t])].item()


def test_exactly_c_tokens_of_context_matches_one_forward_per_target(curved):
    model, tokenizer = load_run(curved / "runs" / "rope-seed1337")
    tokens = np.asarray(RunFolder(curved / "runs" / "rope-seed1337").tokens("val"))
    targets = np.array([40, 41, 57, 90, 133])
    for c in (1, 3, 8, 32):  # within T, past it, at 4x T; batches of 2 split the five targets unevenly
        got = score_at(model, tokens.astype(np.int64), targets, c, 2, "cpu")
        want = [hand_nats(model, tokens, int(t), c) for t in targets]
        assert np.allclose(got, want, atol=1e-5), c


def test_the_curve_records_are_the_targets_bits_per_byte(curved):
    got = records(curved)
    sample = next(r for r in got if r["record"] == "context_targets")
    nbytes = np.array(sample["bytes"])
    assert len(sample["positions"]) == 24 and all(b > 0 for b in nbytes)  # no end-of-text target: bytes to count
    assert min(sample["positions"]) >= 4 * T  # every target has the longest context before it
    rows = [r for r in got if r["record"] == "context"]
    assert {(r["label"], r["seed"]) for r in rows} == {(a, s) for a in ("learned", "rope") for s in (1337, 1338)}
    assert sorted({r["context"] for r in rows if r["label"] == "learned"}) == [1, 2, 4, 8]  # its table: T rows
    assert sorted({r["context"] for r in rows if r["label"] == "rope"}) == [1, 2, 4, 8, 16, 32]
    model, tokenizer = load_run(curved / "runs" / "learned-seed1338")
    tokens = RunFolder(curved / "runs" / "learned-seed1338").tokens("val")
    row = next(r for r in rows if (r["label"], r["seed"], r["context"]) == ("learned", 1338, 4))
    nats = sum(hand_nats(model, tokens, t, 4) for t in sample["positions"])
    text = sum(len(tokenizer.decode([int(tokens[t])]).encode("utf-8")) for t in sample["positions"])
    assert row["bpb"] == pytest.approx(nats / math.log(2) / text, rel=1e-4)
    effective = [r for r in got if r["record"] == "effective_context"]
    assert [r["label"] for r in effective] == ["learned", "rope"] and all(r["seeds"] == 2 for r in effective)
    md = (curved / "length.md").read_text()
    assert "## Loss against available context" in md and "| 32 | n/a |" in md
    assert (curved / "context.png").read_bytes()[:4] == b"\x89PNG"


def test_reread_gives_the_records_the_study_computed(curved, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(curved, copy)
    (copy / "context.png").unlink()
    assert (
        main(["length", "--out", str(copy), "--reread", "--context-curve", "--context-targets", "24", "--quiet"]) == 0
    )
    before, after = records(curved), records(copy)
    assert [r["record"] for r in after] == [r["record"] for r in before]  # replaced, not appended twice
    for a, b in zip(before, after, strict=True):
        if a["record"] == "context":
            assert (a["label"], a["seed"], a["context"]) == (b["label"], b["seed"], b["context"])
            assert np.allclose(a["target_nats"], b["target_nats"], atol=2e-4) and a["bpb"] == pytest.approx(b["bpb"])
        elif a["record"] == "effective_context":
            assert {k: a[k] for k in ("effective", "low", "high")} == {k: b[k] for k in ("effective", "low", "high")}
        else:
            assert a == b
    assert (copy / "length.md").read_text() == (curved / "length.md").read_text()
    assert (copy / "context.png").is_file()


def test_a_default_study_reread_keeps_its_own_records_and_tables(length_study, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(length_study, copy)
    md = (copy / "length.md").read_text()
    assert main(["length", "--out", str(copy), "--reread", "--context-curve", "--context-targets", "8", "--quiet"]) == 0
    old, new = records(length_study), records(copy)
    assert new[: len(old)] == old  # the study's records, comparisons recomputed, then the reading's
    assert {r["record"] for r in new[len(old) :]} == {"context_targets", "context", "effective_context"}
    assert (copy / "length.md").read_text().startswith(md.rstrip("\n"))


def gain_matrix(curve):
    """``[i, j]``: bits per byte gained from ``curve[i]`` to ``curve[j]``."""
    curve = np.asarray(curve, dtype=float)
    return curve[:, None] - curve[None, :]


@given(st.lists(st.floats(0.0, 5.0), min_size=2, max_size=8))
@settings(max_examples=100, deadline=None)
def test_knee_is_the_first_context_no_longer_one_beats_by_the_threshold(curve):
    grid = [2**k for k in range(len(curve))]
    want = None
    for i in range(len(curve) - 1):  # by hand: the first c that every longer c' misses by less than 0.01
        if all(curve[i] - curve[j] < 0.01 for j in range(i + 1, len(curve))):
            want = grid[i]
            break
    assert knee(grid, gain_matrix(curve), 0.01) == want


def test_knee_of_curves_that_flatten_rise_or_keep_falling():
    grid = [1, 2, 4, 8, 16, 32]
    assert knee(grid, gain_matrix([3.0, 2.5, 2.2, 2.195, 2.4, 2.8]), 0.01) == 4  # rises past 8: the knee is at 4
    assert knee(grid, gain_matrix([3.0, 2.5, 2.2, 2.194, 2.188, 2.182]), 0.01) == 16  # 8 -> 32 still gains 0.012
    assert knee(grid, gain_matrix([3.0, 2.5, 2.2, 2.1, 2.0, 1.9]), 0.01) is None  # falling at the longest context
    assert knee([1], np.zeros((1, 1)), 0.01) == 1


def test_effective_context_of_a_synthetic_curve_with_a_known_knee():
    """bpb falls by 0.3 per doubling up to c = 16, by 0.015 (above the threshold of 0.01) to 64, then by 0.001: the
    effective context is 64, and with targets this many and this little noise every replicate finds it there."""
    rng = np.random.default_rng(1)
    grid = context_grid(256)
    assert grid == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    drop = [0.3 * min(k, 4) + 0.015 * min(max(k - 4, 0), 2) + 0.001 * max(k - 6, 0) for k in range(len(grid))]
    # from 64 on, at most 0.002 is left to gain: below the threshold
    curve = 4.0 - np.array(drop)  # bits per byte
    nbytes = rng.integers(1, 4, size=600).astype(float)
    nats = curve[None, :, None] * nbytes[None, None, :] * math.log(2) + rng.normal(0, 0.05, size=(2, len(grid), 600))
    found = effective_context(grid, nats, nbytes)
    assert (found["effective"], found["low"], found["high"]) == (64, 64, 64)
    by_hand = (nats[:, 0].sum(-1) - nats[:, 1].sum(-1)).mean() / math.log(2) / nbytes.sum()
    assert found["gains"][0]["difference"] == pytest.approx(by_hand) and found["gains"][0]["low"] > 0.25
    gains = {(g["from"], g["to"]): g for g in found["gains"]}
    assert len(gains) == 9 * 8 // 2 and gains[(16, 32)]["low"] > 0.01 and gains[(32, 64)]["low"] > 0.01
    assert all(g["high"] < 0.01 for (a, _), g in gains.items() if a >= 64)
    # The same mean curve, each target ±1 nat at random past c = 16 (cancelling exactly over the targets): the gains
    # past 64 are 0.001 as before, so the estimate stays 64, but their intervals reach past 0.01 and so do the
    # replicates' knees: the interval reaches beyond the grid.
    signs = rng.permuted(np.tile(np.repeat([-1.0, 1.0], 300), (2, len(grid), 1)), axis=-1)  # each sums to 0
    noisy = nats + np.where(np.arange(len(grid))[None, :, None] > 4, signs, 0.0)
    found = effective_context(grid, noisy, nbytes)
    assert found["effective"] == 64 and found["high"] is None and found["low"] <= 64
    late = [g for g in found["gains"] if g["from"] >= 64]
    assert max(g["difference"] for g in late) < 0.01 < min(g["high"] for g in late)


def test_the_grid_and_the_sample():
    assert context_grid(2048) == [2**k for k in range(12)]
    assert context_grid(2048, 128) == [1, 2, 4, 8, 16, 32, 64, 128]
    assert context_grid(48) == [1, 2, 4, 8, 16, 32, 48]
    tokens = np.arange(100) % 10
    nbytes = np.array([0] + [1] * 9)  # token 0 is the end-of-text marker: no bytes
    picked = sample_targets(tokens, nbytes, 30, 20)
    assert len(set(picked)) == 30 and picked.min() >= 20 and all(tokens[picked] != 0)
    assert np.array_equal(picked, sample_targets(tokens, nbytes, 30, 20))
    assert len(sample_targets(tokens, nbytes, 1000, 20)) == 72  # all there are


@pytest.mark.parametrize(
    "args,match",
    [
        (["--reread", "--context-curve"], "is no finished length study"),
        (["--reread"], "--reread needs --out DONE (a finished study) and a reading"),
        (["--reread", "--context-curve", "--schemes", "rope"], "--schemes means nothing with --reread"),
        (["--context-targets", "9", "--reread"], "--context-targets sets --context-curve"),
        (["--reread", "--context-curve", "--context-targets", "0"], "--context-targets must be an integer >= 1"),
    ],
)
def test_bad_rereads_are_refused_in_one_line_writing_nothing(tmp_path, capsys, args, match):
    out = tmp_path / "notes"
    out.mkdir()
    (out / "mine.txt").write_text("a person's notes")
    assert main(["length", "--out", str(out), *args]) == 1
    err = capsys.readouterr().err
    assert err.startswith("octlm: error:") and len(err.strip().splitlines()) == 1 and match in err, err
    assert [p.name for p in out.iterdir()] == ["mine.txt"]


def test_an_unfinished_study_and_the_task_study_are_refused(curved, small_corpus, tmp_path, capsys):
    unfinished = tmp_path / "unfinished"
    shutil.copytree(curved, unfinished)
    (unfinished / "progress").mkdir()
    assert main(["length", "--out", str(unfinished), "--reread", "--context-curve"]) == 1
    assert "is an unfinished length study (progress/ remains)" in capsys.readouterr().err
    out = tmp_path / "task"
    assert main(["length", "--task", "copy", "--out", str(out), "--context-curve"]) == 1
    err = capsys.readouterr().err
    assert "--context-curve reads a text study's models, not --task's" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_doubling_bins_of_position_in_length_md(length_study):
    """The table of bits per byte by position in doubling bins (1, 2-3, 4-7, ...) of the longest windows, each cell
    summed here from the eval row's per-position loss and bytes."""
    from octlm.studies.length.tables import doubling_bins

    for L in (1, 5, 8, 2048):
        bins = doubling_bins(L)
        assert [p for a, b in bins for p in range(a, b)] == list(range(L))  # every position once, in order
        assert all(b - a == a + 1 for a, b in bins[:-1])  # positions 2^k .. 2^(k+1) - 1, counted from 1
        assert L == 1 or bins[-1][1] - bins[-1][0] > 1  # the last bin reaches L: never a bin of one position
    assert doubling_bins(2048)[-1] == (1023, 2048)  # positions 1024-2048
    row = next(
        r for r in records(length_study) if r["record"] == "eval" and r["label"] == "rope" and r["eval_length"] == 32
    )
    md = (length_study / "length.md").read_text()
    head = "| scheme | 1 | 2-3 | 4-7 | 8-15 | 16-32 |"
    assert head in md
    table = md[md.index(head) :].splitlines()
    shown = next(line for line in table if line.startswith("| `rope` |")).strip("| ").split(" | ")[1:]
    nats = np.array(row["position_loss"]) * row["windows"]
    nbytes = np.array(row["position_bytes"])
    want = [nats[a:b].sum() / math.log(2) / nbytes[a:b].sum() for a, b in [(0, 1), (1, 3), (3, 7), (7, 15), (15, 32)]]
    assert [float(v) for v in shown] == pytest.approx(want, abs=6e-5)
    learned = next(line for line in table if line.startswith("| `learned` |"))
    assert learned.endswith("| - | - |")  # its table stops at T = 8: positions 9 on are not read


def test_a_study_read_again_is_still_a_length_study(tmp_path):
    """The figure a reading adds does not make the folder 'files that are not a study' when the command runs again."""
    from octlm.errors import OctlmError
    from octlm.studies.length.study import FILES
    from octlm.studies.shared.core import prepare_study_folder

    for name in ("length.jsonl", "length.md", "length.png", "attention.png", "context.png"):
        (tmp_path / name).write_bytes(b"x")
    with pytest.raises(OctlmError, match="already holds a length study"):
        prepare_study_folder(str(tmp_path), False, FILES)
