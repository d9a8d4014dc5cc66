"""One ranking across tasks: each scheme's mean reciprocal rank at 2x and 4x, and which differences outgrow the spread
over seeds.

Kazemnejad et al. 2023 (§4, Figure 3) rank the position schemes on each task
by accuracy past the training length and average the reciprocal ranks over
tasks. Here a rank is taken per task, size and seed from the exact match of
that seed's models (fractional ranking: tied rows share the mean of their
places, so ten rows at 0% do not all come first); a scheme that cannot read
the size (a learned table past its rows) counts as 0%. The MRR of a seed is
the mean over tasks of 1 / rank, and the table gives its mean ± sample sd
over seeds.
"""

from __future__ import annotations

import statistics
from itertools import pairwise

import numpy as np

from octlm.studies.core import mean_std

#: Multiples of L the ranking is taken at, where the study evaluates them.
RANK_MULTIPLIERS = (2, 4)
#: Marks a cell whose mean ± sd interval lies wholly above that of the row ranked just below it.
SEPARATED = "†"


def fractional_ranks(scores: dict[str, float]) -> dict[str, float]:
    """``{label: rank}``, 1 for the highest score; tied labels share the mean of the places they fill."""
    ordered = sorted(scores, key=lambda k: -scores[k])
    ranks: dict[str, float] = {}
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and scores[ordered[j + 1]] == scores[ordered[i]]:
            j += 1
        for k in ordered[i : j + 1]:
            ranks[k] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def mean_reciprocal_ranks(
    records: list[dict], labels: list[str], tasks: list[str], seeds: list[int], multiplier: int
) -> dict[str, tuple[float, float | None]]:
    """``{label: (mean, sd)}`` over seeds of the MRR across ``tasks`` at ``multiplier`` x L, from the study's eval
    records."""
    per_seed: dict[str, list[float]] = {label: [] for label in labels}
    for seed in seeds:
        reciprocal: dict[str, list[float]] = {label: [] for label in labels}
        for task in tasks:
            scores = {label: _score(records, task, label, seed, multiplier) for label in labels}
            for label, rank in fractional_ranks(scores).items():
                reciprocal[label].append(1 / rank)
        for label in labels:
            per_seed[label].append(statistics.fmean(reciprocal[label]))
    return {label: mean_std(values) for label, values in per_seed.items()}


def _score(records: list[dict], task: str, label: str, seed: int, multiplier: int) -> float:
    found = [
        r["exact_match"]
        for r in records
        if r["record"] == "eval"
        and r["task"] == task
        and r["label"] == label
        and r["seed"] == seed
        and r["multiplier"] == multiplier
    ]
    return found[0] if found and found[0] is not None else 0.0


def ranking(
    records: list[dict], labels: list[str], tasks: list[str], seeds: list[int], multipliers: list[int]
) -> dict[int, dict]:
    """``{m: {label: (mean, sd)}}`` for each of :data:`RANK_MULTIPLIERS` the study evaluates."""
    return {m: mean_reciprocal_ranks(records, labels, tasks, seeds, m) for m in RANK_MULTIPLIERS if m in multipliers}


def separated(means: dict[str, float | None], spreads: dict[str, float | None]) -> set[str]:
    """Labels whose interval mean ± sd lies wholly above the interval of the label ranked just below them.

    With one seed there is no spread, and nothing is marked. ``None`` means
    (a size a learned table cannot read) take no part.
    """
    rows = sorted(((m, spreads.get(k), k) for k, m in means.items() if m is not None), key=lambda r: -r[0])
    marked = set()
    for (m1, s1, label), (m2, s2, _) in pairwise(rows):
        if s1 is None or s2 is None:
            return set()
        if m1 - s1 > m2 + s2:
            marked.add(label)
    return marked


def ranking_markdown(ranks: dict[int, dict], tasks: list[str], seeds: list[int]) -> str:
    """The ranking as a Markdown section: one row per scheme, best MRR at the first ranked size first."""
    if not ranks:
        return ""
    ms = list(ranks)
    first = ranks[ms[0]]
    order = sorted(first, key=lambda k: -first[k][0])
    lines = [
        "## Ranking across tasks",
        "",
        f"Mean reciprocal rank (Kazemnejad et al. 2023) over {len(tasks)} tasks ({', '.join(tasks)}): "
        "ranked on each task by exact match, ties sharing their places; mean ± sd over seeds "
        f"{', '.join(map(str, seeds))}. "
        "1 is first on every task.",
        "",
        "| scheme | " + " | ".join(f"MRR at {m}x" for m in ms) + " |",
        "| --- |" + " ---: |" * len(ms),
    ]
    lines += [f"| `{label}` | " + " | ".join(_mrr(ranks[m][label]) for m in ms) + " |" for label in order]
    return "\n".join(lines) + "\n"


def ranking_terminal(ranks: dict[int, dict]) -> str:
    """The ranking for the terminal."""
    if not ranks:
        return ""
    ms = list(ranks)
    first = ranks[ms[0]]
    lines = [
        "mean reciprocal rank across tasks (1: first on every task)",
        f"{'scheme':>12} " + " ".join(f"{f'{m}x':>13}" for m in ms),
    ]
    lines += [
        f"{label:>12} " + " ".join(f"{_mrr(ranks[m][label]):>13}" for m in ms)
        for label in sorted(first, key=lambda k: -first[k][0])
    ]
    return "\n".join(lines)


def _mrr(value: tuple[float, float | None]) -> str:
    return f"{value[0]:.2f}" + ("" if value[1] is None else f" ± {value[1]:.2f}")


def ranking_plot(ranks: dict[int, dict]) -> bytes:
    """PNG bytes: horizontal bars of each scheme's MRR at each ranked size, with sd over seeds as error bars."""
    from octlm.inspect.figures import Figure, png_bytes

    ms = list(ranks)
    first = ranks[ms[0]]
    order = sorted(first, key=lambda k: first[k][0])
    fig = Figure(figsize=(7, 0.45 * len(order) + 1.5), dpi=110, layout="constrained")
    ax = fig.subplots()
    height = 0.8 / len(ms)
    y = np.arange(len(order))
    for i, m in enumerate(ms):
        means = [ranks[m][k][0] for k in order]
        errors = [ranks[m][k][1] or 0.0 for k in order]
        ax.barh(y + i * height, means, height, xerr=errors, capsize=2, label=f"at {m}x")
    ax.set_yticks(y + height * (len(ms) - 1) / 2, order)
    ax.set_xlim(0, 1.05)
    ax.set_xlabel("mean reciprocal rank across tasks (1: first on every task); bars: sd over seeds")
    ax.set_title("position schemes ranked past the training length")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return png_bytes(fig)


__all__ = [
    "RANK_MULTIPLIERS",
    "SEPARATED",
    "fractional_ranks",
    "mean_reciprocal_ranks",
    "ranking",
    "ranking_markdown",
    "ranking_plot",
    "ranking_terminal",
    "separated",
]
