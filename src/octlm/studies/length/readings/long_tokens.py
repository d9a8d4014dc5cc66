"""Long-context tokens: the validation targets a reference model predicts much better from long context than from
short, and every model's bits per byte on them (``octlm length --long-tokens``).

Bits per byte averages over every target, and most targets of natural text are
predicted as well from a few dozen tokens as from thousands; whether a model
uses long context is then a small share of the figure. Fang et al. 2024 ("What
is Wrong with Perplexity for Long-context Language Modeling?", arXiv
2410.23771, §3) mark *key tokens* under an evaluator model: target ``i`` is one
when its log-probability gain from long over short context (their LSD, or log
probability gain) exceeds ``alpha = 2`` nats and its long-context
log-probability (LCL) exceeds ``beta = -2``, and report perplexity over those
targets alone (LongPPL).

octlm has no large evaluator, so the reference is one of the study's own rows
(:func:`reference_label`; by default the one that reads the longest length best
in sliding windows), its per-target nats averaged over its seeds. Short context
is the sliding reading at the shortest length (each target after the first
window sees ``L_min - S`` to ``L_min`` tokens), long context the sliding reading
at the longest; a target is marked when ``short - long > gain`` and
``long < loss``, both in nats (:data:`GAIN_NATS`, :data:`LOSS_NATS`: LongPPL's
``alpha`` and ``-beta``), and only targets that stand for text (bytes > 0) can
be. Every row is then read on the marked targets at every length in both
readings; how sure a difference is comes from the study's paired bootstrap
(:mod:`octlm.studies.shared.confidence`), over the windows of each reading that hold a
marked target, crossed with the seeds.

Everything here is a pure function of per-target arrays; the scoring that gives
them is :mod:`octlm.studies.length.readings.long_token_scoring`.
"""

from __future__ import annotations

import math

import numpy as np

from octlm.studies.length.comparisons import WINDOWS, comparisons
from octlm.train.evaluate import sliding_windows

#: Fang et al. 2024's ``alpha``: a marked target's nats fall by more than this from short to long context.
GAIN_NATS = 2.0
#: Fang et al. 2024's ``-beta``: a marked target's long-context nats are below this (the long context predicts it).
LOSS_NATS = 2.0
#: The record kinds this reading adds to ``length.jsonl``.
SUMMARY, ROW, COMPARISON = "long_tokens", "long_tokens_eval", "long_tokens_comparison"


def mark(
    short_nats: np.ndarray,
    long_nats: np.ndarray,
    nbytes: np.ndarray,
    gain: float = GAIN_NATS,
    loss: float = LOSS_NATS,
) -> np.ndarray:
    """Which targets are long-context ones: bool [N], True where ``short - long > gain`` and ``long < loss`` and the
    target stands for text.

    Args:
        short_nats: the reference's nats of every target read with short context [N].
        long_nats: the same targets read with long context [N].
        nbytes: the UTF-8 bytes each target stands for [N] (0: the end-of-text marker, never marked).
        gain: nats the long context must save (LongPPL's ``alpha``).
        loss: nats the long-context prediction must stay under (LongPPL's ``-beta``).

    Raises:
        ValueError: when the three arrays differ in shape.
    """
    short, long_, nbytes = (np.asarray(a) for a in (short_nats, long_nats, nbytes))
    if not short.shape == long_.shape == nbytes.shape:
        raise ValueError(f"per-target arrays of shapes {short.shape}, {long_.shape}, {nbytes.shape} do not line up")
    return (short - long_ > gain) & (long_ < loss) & (nbytes > 0)


def masked_bpb(nats: np.ndarray, nbytes: np.ndarray, mask: np.ndarray) -> float | None:
    """Bits per byte over the targets of ``mask``: ``sum(nats) / ln 2 / sum(bytes)`` (``None`` when they hold no
    bytes). ``nats``, ``nbytes`` and ``mask`` are [N]."""
    mask = np.asarray(mask, dtype=bool)
    total = float(np.asarray(nbytes, dtype=np.float64)[mask].sum())
    if total == 0:
        return None
    return float(np.asarray(nats, dtype=np.float64)[mask].sum()) / math.log(2) / total


def window_of(n_targets: int, length: int, stride: int) -> np.ndarray:
    """The window of a reading that scores each target: int64 [n_targets].

    The reading is :func:`octlm.train.evaluate.sliding_windows` of ``length`` and ``stride``
    (``stride == length``: the non-overlapping windows), where window ``k`` scores
    the targets ``starts[k] + first[k] .. starts[k] + length - 1``.

    Raises:
        ValueError: as :func:`~octlm.train.evaluate.sliding_windows`.
    """
    starts, first = sliding_windows(n_targets, length, stride)
    scored_from = starts + first  # each window scores on from here, up to the next window's first target
    return np.searchsorted(scored_from, np.arange(n_targets), side="right") - 1


def window_sums(
    nats: np.ndarray, nbytes: np.ndarray, mask: np.ndarray, windows: np.ndarray, n_windows: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each window's nats and bytes of the marked targets: ``(float64 [n_windows], int64 [n_windows])``.

    ``windows`` is :func:`window_of` [N]; text targets only count (bits per byte leaves the end-of-text marker out,
    and it is never marked)."""
    mask = np.asarray(mask, dtype=bool)
    at = np.asarray(windows)[mask]
    summed = np.bincount(at, weights=np.asarray(nats, dtype=np.float64)[mask], minlength=n_windows)
    counted = np.bincount(at, weights=np.asarray(nbytes, dtype=np.float64)[mask], minlength=n_windows)
    return summed, counted.round().astype(np.int64)


def reference_label(rows: list[dict]) -> str:
    """The row that reads the longest length best: lowest sliding bits per byte there, averaged over its seeds
    (the rows that cannot read it, a learned table past its rows, left out).

    A reference that breaks at the long length would mark the targets where it breaks least, not those long
    context helps; the best long-context reader the study has is the nearest it comes to LongPPL's evaluator.

    Raises:
        ValueError: when no row has a sliding reading at the longest length.
    """
    longest = max(r["eval_length"] for r in rows)
    found: dict[str, list[float]] = {}
    for row in rows:
        if row["eval_length"] == longest and row.get("sliding_bpb") is not None:
            found.setdefault(row["label"], []).append(row["sliding_bpb"])
    if not found:
        raise ValueError(f"no row has a sliding reading at the longest length ({longest} tokens)")
    return min(found, key=lambda label: (float(np.mean(found[label])), label))


def row_record(row: dict, per_reading: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict:
    """A ``long_tokens_eval`` record: an eval row's identity, and per reading (``bpb``, ``sliding_bpb``) its bits
    per byte on the marked targets and the nats and bytes of each window holding one (the bootstrap's units).

    Args:
        row: the study's eval row (label, seed, length, the scalings that identify the model).
        per_reading: ``{reading: (window nats [W], window bytes [W])}`` from :func:`window_sums`, all windows.
    """
    keep = ("label", "position", "seed", "multiplier", "eval_length", "rope_scaling", "attention_scale")
    record = {"record": ROW, **{k: row[k] for k in keep if k in row}}
    for reading, (nats, nbytes) in per_reading.items():
        nats_key, bytes_key = WINDOWS[reading]
        held = np.flatnonzero(np.asarray(nbytes) > 0)
        total = int(np.asarray(nbytes)[held].sum())
        record[reading] = float(np.asarray(nats)[held].sum()) / math.log(2) / total if total else None
        record[f"plain_{reading}"] = row.get(reading)
        # No window holds a marked target: nothing to resample, and the comparisons leave the row out.
        record[nats_key] = [round(float(v), 4) for v in np.asarray(nats)[held]] if total else None
        record[bytes_key] = [int(v) for v in np.asarray(nbytes)[held]] if total else None
    return record


def examples(
    tokens: np.ndarray, mask: np.ndarray, short: np.ndarray, long_: np.ndarray, show, k: int = 6, before: int = 12
) -> list[dict]:
    """Up to ``k`` marked targets, evenly spread over the stream, as ``length.md`` shows them: the target's index,
    its token and the ``before`` tokens ahead of it (each shown by ``show(token id) -> str``) and the reference's
    nats short and long.

    Args:
        tokens: the scored stream [N + 1]; target ``i`` is ``tokens[i + 1]``.
        mask: the marked targets [N]; ``short``, ``long_``: the reference's nats [N].
    """
    marked = np.flatnonzero(mask)
    picked = marked[np.linspace(0, len(marked) - 1, min(k, len(marked))).round().astype(int)] if len(marked) else []
    return [
        {
            "target": int(i),
            "token": show(int(tokens[i + 1])),
            "before": "".join(show(int(t)) for t in tokens[max(0, i + 1 - before) : i + 1]),
            "short_nats": round(float(short[i]), 3),
            "long_nats": round(float(long_[i]), 3),
        }
        for i in picked
    ]


def comparison_records(records: list[dict]) -> list[dict]:
    """The comparisons of the study (:func:`octlm.studies.length.comparisons.comparisons`: the same pairs, the same
    paired bootstrap crossed with the seeds) over the marked targets, as ``long_tokens_comparison`` records."""
    return [{**c, "record": COMPARISON} for c in comparisons([r for r in records if r["record"] == ROW])]


__all__ = [
    "COMPARISON",
    "GAIN_NATS",
    "LOSS_NATS",
    "ROW",
    "SUMMARY",
    "comparison_records",
    "examples",
    "mark",
    "masked_bpb",
    "reference_label",
    "row_record",
    "window_of",
    "window_sums",
]
