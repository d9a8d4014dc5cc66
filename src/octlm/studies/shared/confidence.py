"""How sure a difference in bits per byte is: a paired bootstrap over windows, crossed with a bootstrap over seeds.

Two rows of a study (two schemes, a RoPE scaling and plain RoPE, a fine-tuned
model and the model it started from) are scored on the same validation
targets cut into the same windows. Their difference is then measured window
by window, and how far it would move on other text is estimated by resampling
the windows: each replicate draws ``N`` of the ``N`` windows with replacement,
the same draw for both rows (the pairing removes what the two rows share, the
text's own difficulty), and takes the difference of their bits per byte over
the drawn windows, ``sum(nats) / ln 2 / sum(bytes)`` (a ratio, so the bytes are
resampled with the nats). The interval is the central ``confidence`` share of
the replicates (the percentile interval: Efron & Tibshirani 1993, *An
Introduction to the Bootstrap*, ch. 13).

With several seeds, every seed's models read the same windows: seeds and
windows are crossed, not nested. Each replicate therefore draws the windows
once, for every seed, and also draws ``S`` of the ``S`` seeds with
replacement; its value is the mean over the drawn seeds of their differences
on the drawn windows (a two-way bootstrap of a crossed design: Owen 2007, "The
pigeonhole bootstrap", Annals of Applied Statistics 1(2)). A row is paired
with the other row of the same seed. One seed is the paired window bootstrap
alone. Each seed's own interval (the window draw alone) is kept beside it.

Every number here is deterministic: the window draws come from
``numpy.random.default_rng`` seeded by the first child of
``SeedSequence(seed)``, the seed draws from its second child, so a comparison
recomputed from a study's records gives the same interval.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

#: Replicates per interval: enough that the 2.5% and 97.5% percentiles move by well under the tables' last digit.
RESAMPLES = 2000
#: The seed of the resampling generator (not a training seed).
BOOTSTRAP_SEED = 0
#: The share of replicates an interval covers.
CONFIDENCE = 0.95
#: How many window counts one block of replicates holds at most, so that a long validation split (10^5 windows)
#: resamples in bounded memory (32 MiB of counts).
_BLOCK_ENTRIES = 1 << 22


@dataclass(frozen=True)
class Interval:
    """A difference in bits per byte (row a minus row b; negative: a predicts better) and its interval."""

    difference: float
    low: float
    high: float

    def as_dict(self) -> dict:
        return {"difference": self.difference, "low": self.low, "high": self.high}


@dataclass(frozen=True)
class Comparison:
    """Two rows compared: over the seeds together (``combined``), and each seed alone (``per_seed``, in seed order)."""

    combined: Interval
    per_seed: tuple[Interval, ...]


def _generators(seed: int) -> tuple[np.random.Generator, np.random.Generator]:
    """Independent generators for the window draws and the seed draws."""
    windows, seeds = np.random.SeedSequence(seed).spawn(2)
    return np.random.default_rng(windows), np.random.default_rng(seeds)


def window_counts(n_windows: int, resamples: int, seed: int = BOOTSTRAP_SEED) -> Iterator[np.ndarray]:
    """How often each window is drawn in each replicate, in blocks of replicates: int64 [block, n_windows] each,
    ``resamples`` rows in all, every row summing to ``n_windows`` (draws with replacement)."""
    rng, _ = _generators(seed)
    block = max(1, min(resamples, _BLOCK_ENTRIES // max(n_windows, 1)))
    for start in range(0, resamples, block):
        rows = min(block, resamples - start)
        drawn = rng.integers(0, n_windows, size=(rows, n_windows))
        offsets = np.arange(rows)[:, None] * n_windows
        yield np.bincount((drawn + offsets).ravel(), minlength=rows * n_windows).reshape(rows, n_windows)


def replicates(
    differences: np.ndarray, nbytes: np.ndarray, resamples: int = RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> np.ndarray:
    """Bits per byte of each series of per-window nats over the resampled windows: float64 [resamples, K].

    Args:
        differences: nats per window [K, N]: row a's minus row b's, one series per pair of rows (and seed).
        nbytes: the bytes of each window's targets [N], the same for every series (the rows read the same targets).
    """
    differences = np.atleast_2d(np.asarray(differences, dtype=np.float64))
    nbytes = np.asarray(nbytes, dtype=np.float64)
    blocks = []
    for counts in window_counts(len(nbytes), resamples, seed):
        counts = counts.astype(np.float64)
        blocks.append((counts @ differences.T) / (counts @ nbytes)[:, None] / math.log(2))
    return np.concatenate(blocks)


def seed_draws(n_seeds: int, resamples: int, seed: int = BOOTSTRAP_SEED) -> np.ndarray:
    """Which seeds each replicate draws, with replacement: int64 [resamples, n_seeds]."""
    _, rng = _generators(seed)
    return rng.integers(0, n_seeds, size=(resamples, n_seeds))


def percentile_interval(values: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The central ``confidence`` share of ``values``: their ``(1 - c) / 2`` and ``(1 + c) / 2`` quantiles."""
    low, high = np.quantile(values, [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(low), float(high)


def compare_many(
    pairs: Sequence[tuple[np.ndarray, np.ndarray]],
    nbytes: np.ndarray,
    resamples: int = RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
) -> list[Comparison]:
    """Compare several pairs of rows scored on the same windows, all with the same window draws.

    Args:
        pairs: ``(nats_a, nats_b)`` per pair, each [S, N] (or [N] for one seed): the nats of each window's text
            targets, seed ``s`` of row a paired with seed ``s`` of row b.
        nbytes: the bytes of each window's targets [N].

    Raises:
        ValueError: when a pair's two rows differ in shape or their windows are not ``len(nbytes)``.
    """
    nbytes = np.asarray(nbytes, dtype=np.float64)
    series, seeds = [], []
    for nats_a, nats_b in pairs:
        a, b = np.atleast_2d(np.asarray(nats_a, np.float64)), np.atleast_2d(np.asarray(nats_b, np.float64))
        if a.shape != b.shape or a.shape[1] != len(nbytes):
            raise ValueError(f"rows of shape {a.shape} and {b.shape} cannot be paired over {len(nbytes)} windows")
        series.append(a - b)
        seeds.append(len(a))
    drawn = replicates(np.concatenate(series), nbytes, resamples, seed)
    ends = np.cumsum(seeds)
    results = []
    for d, reps in zip(series, np.split(drawn, ends[:-1], axis=1), strict=True):
        observed = d.sum(axis=1) / nbytes.sum() / math.log(2)  # [S]
        combined = np.take_along_axis(reps, seed_draws(len(d), resamples, seed), axis=1).mean(axis=1)
        per_seed = tuple(
            Interval(float(observed[s]), *percentile_interval(reps[:, s], confidence)) for s in range(len(d))
        )
        results.append(
            Comparison(Interval(float(observed.mean()), *percentile_interval(combined, confidence)), per_seed)
        )
    return results


def paired_difference(
    nats_a: np.ndarray,
    nats_b: np.ndarray,
    nbytes: np.ndarray,
    resamples: int = RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
) -> Comparison:
    """Row a's bits per byte minus row b's, over windows and seeds, with its interval (:func:`compare_many` of one
    pair)."""
    return compare_many([(nats_a, nats_b)], nbytes, resamples, seed, confidence)[0]


__all__ = [
    "BOOTSTRAP_SEED",
    "CONFIDENCE",
    "RESAMPLES",
    "Comparison",
    "Interval",
    "compare_many",
    "paired_difference",
    "percentile_interval",
    "replicates",
    "seed_draws",
    "window_counts",
]
