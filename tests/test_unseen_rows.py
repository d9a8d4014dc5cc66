"""The rows a training split never selects: their summary against brute force, and why they drift together."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from octlm import Decoder, DecoderConfig
from octlm.cli import main
from octlm.inspect.unseen_rows import row_group, seen_and_unseen, unseen_line


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(0, 9), width=st.integers(1, 6), zero=st.booleans(), seed=st.integers(0, 2**16))
def test_row_group_matches_every_pair_taken_one_by_one(rows, width, zero, seed):
    table = torch.randn(rows, width, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    if zero and rows:
        table[0] = 0.0
    group = row_group(table)
    assert group.rows == rows
    if rows == 0:
        assert group.mean_norm is None and group.mean_cosine is None
        return
    assert group.mean_norm == pytest.approx(float(np.mean([float(r.norm()) for r in table])), rel=1e-12)
    pairs = [
        float(F.cosine_similarity(table[i], table[j], dim=0, eps=1e-12))
        for i, j in itertools.combinations(range(rows), 2)
    ]
    if rows == 1:
        assert group.mean_cosine is None
    else:
        assert group.mean_cosine == pytest.approx(float(np.mean(pairs)), abs=1e-9)


def test_seen_and_unseen_split_the_rows_by_their_count():
    table = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 0.0], [0.0, -4.0]])
    seen, unseen = seen_and_unseen(table, np.array([5, 0, 1, 0]))
    assert (seen.rows, seen.mean_norm, seen.mean_cosine) == (2, 2.0, 1.0)
    assert (unseen.rows, unseen.mean_norm, unseen.mean_cosine) == (2, 3.0, -1.0)
    assert "2 of 4 (50%), mean norm 3.000, mean cosine between two -1.000" in unseen_line(seen, unseen)
    assert unseen_line(*seen_and_unseen(table, np.ones(4, dtype=np.int64))) is None
    with pytest.raises(ValueError, match="counts has shape"):
        seen_and_unseen(table, np.ones(3, dtype=np.int64))


@pytest.mark.rounding
@pytest.mark.parametrize("untied_head", [False, True])
def test_a_row_never_selected_moves_only_through_the_tied_heads_softmax(untied_head):
    # The module's reason for the drift: with the tied head, the gradient of a row no input or target selects is
    # the batch mean of the final hidden states weighted by the row's probability; untied, it has none.
    torch.manual_seed(0)
    config = DecoderConfig(vocab_size=24, d_model=16, n_heads=2, n_layers=1, context_length=8, untied_head=untied_head)
    model = Decoder(config)
    tokens = torch.randint(0, 12, (3, 8))  # rows 12..23 never selected
    hidden = {}
    model.ln_final.register_forward_hook(lambda _m, _i, out: hidden.__setitem__("h", out))
    logits = model(tokens[:, :-1])
    F.cross_entropy(logits.reshape(-1, 24), tokens[:, 1:].reshape(-1)).backward()
    grad = model.token_embedding.weight.grad[12:]
    if untied_head:
        assert grad is None or torch.count_nonzero(grad) == 0
        return
    probs = logits.detach().softmax(-1).reshape(-1, 24)[:, 12:]
    expected = probs.T @ hidden["h"].detach().reshape(-1, 16) / probs.shape[0]
    torch.testing.assert_close(grad, expected, rtol=1e-4, atol=1e-7)


def test_octlm_embeddings_says_how_many_rows_the_training_split_never_selects(trained_run, tmp_path, capsys):
    assert main(["embeddings", "--run", str(trained_run), "--out", str(tmp_path / "figures"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    from octlm.run.folder import RunFolder

    tokens = np.asarray(RunFolder(trained_run).tokens("train"))
    vocab = json.loads((trained_run / "config.json").read_text())["model"]["vocab_size"]
    never = vocab - len(np.unique(tokens))
    assert never > 0, "the fixture's run should leave some rows unselected for this test to say anything"
    assert result["rows"]["unseen"]["rows"] == never
    assert result["rows"]["seen"]["rows"] == vocab - never


@pytest.mark.rounding
def test_the_unseen_targets_benchmark_recomputes_the_runs_own_bits_per_byte(trained_run):
    # Its totals are checked against octlm's evaluator (the run's final val_bpb) and its counts against numpy's.
    import importlib.util

    from octlm.run.folder import RunFolder
    from tests.conftest import REPO

    spec = importlib.util.spec_from_file_location("unseen_targets", REPO / "bench" / "unseen_targets.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    result = bench.unseen_costs(str(trained_run))
    final = [json.loads(line) for line in (trained_run / "metrics.jsonl").read_text().splitlines()]
    val_bpb = [r["val_bpb"] for r in final if r.get("kind") == "eval"][-1]
    assert result["bits_per_byte"] == pytest.approx(val_bpb, rel=1e-5)
    folder = RunFolder(trained_run)
    train, val = np.asarray(folder.tokens("train")), np.asarray(folder.tokens("val"))
    never = np.setdiff1d(np.arange(result["vocab_size"]), train)
    assert result["rows_never_selected"] == len(never)
    targets = val[1 : result["validation_targets"] + 1]
    assert result["unseen_targets"] == int(np.isin(targets, never).sum())
    assert 0 < result["mean_probability_on_unseen_rows"] < 1
