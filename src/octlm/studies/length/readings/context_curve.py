"""Loss against available context (``--context-curve``): each model scored on the same targets with exactly ``c``
tokens before each, and its effective context.

For a fixed sample of validation targets (:func:`sample_targets`: ``--context-targets``
of the study's scored targets, drawn without replacement by
``numpy.random.default_rng(0)`` from those that stand for bytes and have at
least ``c_max`` tokens before them), every model predicts each target ``t``
from exactly the ``c`` tokens ``t - c .. t - 1``, for ``c`` in
:func:`context_grid` (1, 2, 4, ... up to the study's longest length, 16 x T by
default; a learned table stops at its ``T`` rows). Only the window's last
position is scored. Bits per byte is the study's: the targets' nats / ln 2 /
their UTF-8 bytes (the sample holds no end-of-text targets, which stand for no
bytes and count in neither sum).

The effective context of a model is read off the gains ``g(c, c') = bpb(c) -
bpb(c')`` from each ``c`` to each longer ``c'`` of the grid, each with its
interval from the study's paired bootstrap over targets crossed with seeds
(:func:`octlm.studies.shared.confidence.compare_many`). The rule (:func:`knee`): the
effective context is the smallest ``c`` of the grid such that no longer ``c'``
lowers bits per byte by :data:`THRESHOLD` or more on the sample (a curve that
rises past ``T`` has its knee where it stops falling). When no ``c`` short of
the longest qualifies, the curve may still fall at the longest context, and the
effective context is reported as beyond ``c_max``. Its interval is the central
95% of the same rule applied to each bootstrap replicate (targets crossed with
seeds), the percentile interval of the statistic, so the estimate always lies
within it; a wide interval, or one reaching beyond ``c_max``, says that the
targets and seeds cannot place the knee more closely.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from octlm.report import Reporter
from octlm.studies.length.readings.context_tables import context_markdown, context_plot
from octlm.studies.length.readings.reading import FinishedStudy, Param, Reading
from octlm.studies.shared.confidence import (
    BOOTSTRAP_SEED,
    CONFIDENCE,
    RESAMPLES,
    compare_many,
    replicates,
    seed_draws,
)

#: Bits per byte per doubling of context below which more context counts as no longer helping: the tables' models
#: differ by 0.01 to 0.1 bits per byte, and a gain under 0.01 (about 0.5% of their 2 bits per byte) is smaller than
#: any of those differences.
THRESHOLD = 0.01
#: Targets scored at every context length by default: about a minute per model at the default shape on one CPU thread
#: (rope, T = 128, c to 2048: 64 targets took 8.1 CPU seconds, 55% of them at c = 2048; a learned table, to T only,
#: takes 2% of that); bench/context_curve.py measures it.
DEFAULT_TARGETS = 512
#: The seed of the target sample (not a training seed).
SAMPLE_SEED = 0
#: The figure.
CONTEXT_PLOT = "context.png"


def context_grid(longest: int, limit: int | None = None) -> list[int]:
    """``1, 2, 4, ...`` up to ``longest`` (and ``longest`` itself when it is no power of two), none past ``limit``
    (a learned table's rows)."""
    top = longest if limit is None else min(longest, limit)
    grid = [1 << k for k in range(top.bit_length()) if 1 << k <= top]
    return grid + ([top] if grid[-1] != top else [])


def sample_targets(tokens: np.ndarray, bytes_per_token: np.ndarray, count: int, before: int) -> np.ndarray:
    """Up to ``count`` indices ``t`` into ``tokens`` (sorted), drawn without replacement by
    ``default_rng(SAMPLE_SEED)`` among the targets that stand for bytes and have at least ``before`` tokens before
    them (``t >= before``)."""
    candidates = np.flatnonzero(bytes_per_token[tokens[before:]] > 0) + before
    rng = np.random.default_rng(SAMPLE_SEED)
    return np.sort(rng.choice(candidates, size=min(count, len(candidates)), replace=False))


@torch.no_grad()
def score_at(model, tokens: np.ndarray, targets: np.ndarray, c: int, batch: int, device) -> np.ndarray:
    """Nats of each target predicted from exactly the ``c`` tokens before it: float64 [len(targets)].

    Each forward reads a batch of windows ``tokens[t - c : t]`` [B, c] and keeps the last position's log-probability
    of ``tokens[t]``.
    """
    nats = np.zeros(len(targets))
    offsets = np.arange(-c, 0)
    for i in range(0, len(targets), batch):
        chunk = targets[i : i + batch]
        x = torch.from_numpy(tokens[chunk[:, None] + offsets[None, :]]).to(device)
        logits = model(x)[:, -1].double()
        y = torch.from_numpy(tokens[chunk]).to(device)
        nats[i : i + len(chunk)] = (torch.logsumexp(logits, -1) - logits.gather(1, y[:, None])[:, 0]).cpu().numpy()
    return nats


def compute(study: FinishedStudy, params: dict, device, report: Reporter) -> list[dict]:
    """The ``context`` records of every base model (one per model, seed and ``c``), the ``context_targets`` record
    (the sample and its bytes) and the ``effective_context`` records (:func:`effective_records`)."""
    from octlm.run.load import load_run

    tokens = study.scored()
    longest = max(study.lengths)
    eval_tokens = study.options.get("eval_tokens", 8192)
    targets, nbytes, records = None, None, []
    for m in study.models():
        model, tokenizer = load_run(m.run_dir, device)
        if targets is None:
            targets = sample_targets(tokens, tokenizer.bytes_per_token, params["context_targets"], longest)
            nbytes = tokenizer.bytes_per_token[tokens[targets]].astype(np.int64)
        for c in context_grid(longest, model.max_length):
            nats = score_at(model, tokens, targets, c, max(1, eval_tokens // c), device)
            bpb = float(nats.sum() / math.log(2) / nbytes.sum())
            records.append(
                {
                    "record": "context",
                    "label": m.label,
                    "seed": m.seed,
                    "context": c,
                    "bpb": bpb,
                    "target_nats": [round(float(v), 4) for v in nats],
                }
            )
        report.event("context", f"{m.label} seed {m.seed}: {bpb:.4f} bits per byte with {c} tokens of context")
    sample = {
        "record": "context_targets",
        "positions": targets.tolist(),
        "bytes": nbytes.tolist(),
        "sample_seed": SAMPLE_SEED,
        "longest": longest,
    }
    return [sample, *records, *effective_records(records, nbytes)]


def _curves(records: list[dict]) -> dict[str, tuple[list[int], np.ndarray]]:
    """``{label: (grid, nats [S, len(grid), N])}`` of the ``context`` records, seeds in order."""
    found: dict[str, dict[int, dict[int, list]]] = {}
    for r in records:
        if r["record"] == "context":
            found.setdefault(r["label"], {}).setdefault(r["seed"], {})[r["context"]] = r["target_nats"]
    curves = {}
    for label, seeds in found.items():
        grid = sorted(next(iter(seeds.values())))
        curves[label] = (grid, np.array([[seeds[s][c] for c in grid] for s in sorted(seeds)], dtype=np.float64))
    return curves


def knee(grid: list[int], gains: np.ndarray, threshold: float = THRESHOLD) -> int | None:
    """The smallest ``c`` of ``grid`` that no longer context of the grid beats by ``threshold`` or more, or ``None``
    when only the longest is left (the curve may still fall there).

    Args:
        gains: [n, n] with ``gains[i, j]`` the bits per byte gained going from ``grid[i]`` to ``grid[j]``
            (``bpb(grid[i]) - bpb(grid[j])``), read for ``j > i`` only.
    """
    if len(grid) == 1:
        return grid[0]
    gains = np.asarray(gains)
    return next((grid[i] for i in range(len(grid) - 1) if np.all(gains[i, i + 1 :] < threshold)), None)


def effective_context(grid: list[int], nats: np.ndarray, nbytes: np.ndarray, threshold: float = THRESHOLD) -> dict:
    """A model's gains from each context length to each longer one with their intervals, and its effective context
    (:func:`knee` of the gains on the sample) with its interval (the knees of the bootstrap replicates).

    Args:
        nats: the targets' nats [S, len(grid), N] (seeds, context lengths, targets).
        nbytes: the targets' bytes [N].

    Returns ``{"gains": [{"from", "to", "difference", "low", "high"}], "effective", "low", "high"}``;
    ``effective`` is ``None`` beyond the grid, ``low``/``high`` ``None`` when replicates fall beyond it.
    """
    S, n = nats.shape[0], len(grid)
    steps = [(i, j) for i in range(n) for j in range(i + 1, n)]
    if not steps:
        return {"gains": [], "effective": grid[0], "low": grid[0], "high": grid[0]}
    pairs = [(nats[:, i], nats[:, j]) for i, j in steps]
    compared = compare_many(pairs, nbytes)
    gains = [
        {"from": grid[i], "to": grid[j], **r.combined.as_dict()} for (i, j), r in zip(steps, compared, strict=True)
    ]
    point = np.full((n, n), np.nan)
    for (i, j), g in zip(steps, gains, strict=True):
        point[i, j] = g["difference"]
    reps = replicates(np.concatenate([a - b for a, b in pairs]), nbytes)  # [R, len(steps) * S], series pair-major
    drawn = seed_draws(S, RESAMPLES, BOOTSTRAP_SEED)
    matrix = np.full((RESAMPLES, n, n), np.nan)
    for k, (i, j) in enumerate(steps):  # each replicate's gains, averaged over its drawn seeds
        matrix[:, i, j] = np.take_along_axis(reps[:, k * S : (k + 1) * S], drawn, axis=1).mean(axis=1)
    beyond = 2 * grid[-1]  # a replicate in which no c short of the longest is beaten by less than the threshold
    knees = [knee(grid, m, threshold) or beyond for m in matrix]
    ends = (np.quantile(np.log2(knees), q, method="inverted_cdf") for q in ((1 - CONFIDENCE) / 2, (1 + CONFIDENCE) / 2))
    low, high_c = (None if 2**v >= beyond else int(round(2**v)) for v in ends)
    return {"gains": gains, "effective": knee(grid, point, threshold), "low": low, "high": high_c}


def effective_records(records: list[dict], nbytes: np.ndarray) -> list[dict]:
    """One ``effective_context`` record per model label of the ``context`` records (:func:`effective_context`)."""
    out = []
    for label, (grid, nats) in _curves(records).items():
        found = effective_context(grid, nats, np.asarray(nbytes, dtype=np.float64))
        out.append(
            {
                "record": "effective_context",
                "label": label,
                "threshold": THRESHOLD,
                **found,
                "longest": grid[-1],
                "seeds": len(nats),
                "targets": nats.shape[2],
                "confidence": CONFIDENCE,
                "resamples": RESAMPLES,
                "bootstrap_seed": BOOTSTRAP_SEED,
            }
        )
    return out


def _figures(records: list[dict], study: FinishedStudy) -> dict[str, bytes]:
    return {CONTEXT_PLOT: context_plot(records, study.train_length)}


def _markdown(records: list[dict], study: FinishedStudy) -> str:
    return context_markdown(records, study.train_length)


CONTEXT_CURVE = Reading(
    name="context-curve",
    help="also score every base model on a fixed sample of validation targets with exactly c = 1, 2, 4, ... "
    "up to the longest length tokens of context (a learned table to T), and report each model's effective context: "
    f"the smallest c that no longer context beats by {THRESHOLD} bits per byte or more, with a bootstrap interval; "
    "writes context.png and a section of length.md (opt-in: about a minute per model at the default shape)",
    kinds=("context_targets", "context", "effective_context"),
    compute=compute,
    markdown=_markdown,
    figures=_figures,
    params=(
        Param(
            "context_targets",
            DEFAULT_TARGETS,
            f"--context-curve: validation targets scored at every context length (default {DEFAULT_TARGETS})",
        ),
    ),
)


__all__ = [
    "CONTEXT_CURVE",
    "CONTEXT_PLOT",
    "THRESHOLD",
    "context_grid",
    "effective_context",
    "knee",
    "sample_targets",
    "score_at",
]
