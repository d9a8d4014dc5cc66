"""The paired bootstrap of the length study's comparisons, against the normal formula and its exact cases; and the
per-window losses it resamples, against a window-by-window computation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from octlm import Decoder, DecoderConfig
from octlm.studies.shared import confidence
from octlm.studies.shared.confidence import paired_difference, replicates, window_counts
from octlm.train.evaluate import evaluate, evaluate_sliding, sliding_windows

LN2 = math.log(2)


def _correlated_rows(n: int, shift: float, seed: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two rows of per-window nats that share most of their spread (the text's difficulty), as two models scored on
    the same windows do, and the windows' bytes (all 100)."""
    rng = np.random.default_rng(seed)
    difficulty = rng.normal(300.0, 50.0, n)
    return difficulty + rng.normal(0, 1, n), difficulty + shift + rng.normal(0, 1, n), np.full(n, 100)


def test_many_windows_give_the_normal_interval_of_the_mean_difference():
    # With equal bytes the difference in bits per byte is the mean per-window difference / ln 2 / bytes, and for
    # many windows its 95% interval is mean ± 1.96 sd / sqrt(n) (the central limit theorem).
    a, b, nbytes = _correlated_rows(4000, 0.5)
    result = paired_difference(a, b, nbytes)
    d = (a - b) / LN2 / 100
    half = 1.959964 * d.std(ddof=1) / math.sqrt(len(d))
    assert result.combined.difference == pytest.approx(d.mean(), rel=1e-12)
    # the percentiles of 2,000 replicates sit within about 0.06 standard errors of the true ones
    assert result.combined.low == pytest.approx(d.mean() - half, abs=0.15 * half / 1.96)
    assert result.combined.high == pytest.approx(d.mean() + half, abs=0.15 * half / 1.96)


def test_identical_rows_differ_by_exactly_zero():
    a, _, nbytes = _correlated_rows(50, 0.0)
    for rows in (a, np.stack([a, a + 3.0, a - 1.0])):  # one seed, and three
        result = paired_difference(rows, rows.copy(), nbytes)
        assert (result.combined.difference, result.combined.low, result.combined.high) == (0.0, 0.0, 0.0)
        assert all((s.low, s.high) == (0.0, 0.0) for s in result.per_seed)


@given(
    n=st.integers(1, 30),
    n_seeds=st.integers(1, 3),
    data=st.data(),
)
def test_the_interval_holds_the_observed_difference(n, n_seeds, data):
    nats = st.lists(st.floats(0.0, 5000.0), min_size=n * n_seeds, max_size=n * n_seeds)
    a = np.array(data.draw(nats)).reshape(n_seeds, n)
    b = np.array(data.draw(nats)).reshape(n_seeds, n)
    nbytes = np.array(data.draw(st.lists(st.integers(1, 5000), min_size=n, max_size=n)))
    result = paired_difference(a, b, nbytes, resamples=400)
    for interval in (result.combined, *result.per_seed):
        slack = 1e-9 * (1 + abs(interval.difference))
        assert interval.low - slack <= interval.difference <= interval.high + slack


def test_the_same_seed_gives_the_same_interval_and_another_seed_another():
    a, b, nbytes = _correlated_rows(300, 0.2)
    first, again = paired_difference(a, b, nbytes, seed=5), paired_difference(a, b, nbytes, seed=5)
    assert first == again
    assert paired_difference(a, b, nbytes, seed=6).combined.low != first.combined.low


def test_a_replicate_draws_every_window_count_with_replacement(monkeypatch):
    for counts in window_counts(7, 50, seed=3):
        assert counts.shape[1] == 7 and (counts.sum(axis=1) == 7).all() and counts.min() >= 0
    # replicates drawn in blocks (what a long split needs) are the ones drawn at once: the cap bounds memory only
    d, nbytes = np.stack([np.arange(12.0), np.ones(12)]), np.arange(1, 13)
    whole = replicates(d, nbytes, 60, seed=2)
    monkeypatch.setattr(confidence, "_BLOCK_ENTRIES", 12 * 7)
    assert len(list(window_counts(12, 60, seed=2))) == 9
    np.testing.assert_allclose(replicates(d, nbytes, 60, seed=2), whole, rtol=1e-12)
    # each replicate is the bits per byte of the drawn windows, row by row
    counts = next(window_counts(12, 60, seed=2))
    np.testing.assert_allclose(whole[: len(counts), 0], counts @ d[0] / (counts @ nbytes) / LN2, rtol=1e-12)


def test_seeds_that_agree_add_nothing_and_seeds_that_disagree_widen_the_interval():
    a, b, nbytes = _correlated_rows(400, 0.3)
    one = paired_difference(a, b, nbytes)
    # the same windows and the same difference in four seeds: the crossed draw resamples the windows once for all
    # seeds, so the interval is one seed's (a draw of windows per seed would shrink it by a factor of 2)
    same = paired_difference(np.stack([a] * 4), np.stack([b] * 4), nbytes)
    assert (same.combined.low, same.combined.high) == pytest.approx((one.combined.low, one.combined.high), rel=1e-9)
    # two seeds 0.2 apart: the interval reaches both seeds' differences
    shifted = paired_difference(np.stack([a, a + 20.0]), np.stack([b, b]), nbytes)
    low_seed, high_seed = sorted(s.difference for s in shifted.per_seed)
    assert shifted.combined.low < low_seed and shifted.combined.high > high_seed


def test_many_seeds_give_the_normal_interval_of_the_mean_over_seeds():
    # 60 seeds whose differences spread (sd 0.05 bits per byte) far more than the windows do: the interval is about
    # the mean ± 1.96 sd / sqrt(seeds)
    rng = np.random.default_rng(4)
    a, b, nbytes = _correlated_rows(200, 0.0)
    offsets = rng.normal(0.1, 0.05, 60)
    nats_a = a[None] + offsets[:, None] * LN2 * 100
    result = paired_difference(nats_a, np.stack([b] * 60), nbytes)
    per_seed = np.array([s.difference for s in result.per_seed])
    half = 1.959964 * per_seed.std(ddof=1) / math.sqrt(60)
    assert result.combined.low == pytest.approx(per_seed.mean() - half, abs=0.25 * half)
    assert result.combined.high == pytest.approx(per_seed.mean() + half, abs=0.25 * half)


# -- the per-window losses it resamples ------------------------------------------------------------------------


def _model() -> Decoder:
    torch.manual_seed(0)
    return Decoder(DecoderConfig(vocab_size=40, context_length=8, d_model=16, n_heads=2, n_layers=1)).eval()


def _window_nats(model, stream, nbytes, start, length, first):
    """Nats and bytes of the text targets window position ``first`` on, of the window from ``start``, directly."""
    block = torch.tensor(stream[start : start + length + 1], dtype=torch.long)
    with torch.no_grad():
        logp = torch.log_softmax(model(block[None, :-1])[0].double(), dim=-1)
    targets = block[1:].numpy()
    text = (nbytes[targets] > 0) & (np.arange(length) >= first)
    return -logp[torch.arange(length), block[1:]].numpy()[text].sum(), int(nbytes[targets][text].sum())


def test_each_window_keeps_its_own_nats_and_bytes():
    model = _model()
    stream = np.random.default_rng(3).integers(0, 40, 8 * 9 + 1).astype(np.uint16)
    nbytes = np.arange(40) % 4  # token 0, 4, ... stand for no bytes, as <|endoftext|> does
    blocks = evaluate(model, stream, nbytes, 8, batch_size=3, per_block=True)
    direct = [_window_nats(model, stream, nbytes, 8 * k, 8, 0) for k in range(9)]
    np.testing.assert_allclose(blocks.block_nats, [n for n, _ in direct], rtol=1e-5)
    assert blocks.block_bytes == [b for _, b in direct] and "val_block_nats" not in blocks.as_dict()
    starts, first = sliding_windows(len(stream) - 1, 8, 3)
    slid = evaluate_sliding(model, stream, nbytes, 8, 3, batch_size=4, per_block=True)
    direct = [_window_nats(model, stream, nbytes, int(s), 8, int(f)) for s, f in zip(starts, first, strict=True)]
    np.testing.assert_allclose(slid.block_nats, [n for n, _ in direct], rtol=1e-5)
    assert slid.block_bytes == [b for _, b in direct] and sum(slid.block_bytes) == slid.bytes
    assert sum(slid.block_nats) / LN2 / slid.bytes == pytest.approx(slid.bpb, rel=1e-9)
