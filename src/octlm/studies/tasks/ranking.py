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

A task on which every scheme scores the same on every seed at a size (every
scheme 0% at 2x, say) orders nobody there: as a tie it would only pull every
MRR towards 1 / (the mean place). It is left out of that size's MRR and named
apart (:func:`tied_tasks`). Ties are judged over every seed, not on the mean,
so each seed's MRR averages the same tasks, and a task that orders the schemes
on any seed keeps its say.

A task that no scheme has learned at the trained size (1x) ranks nobody either: its order past the training length
would rank failures. Some scheme must reach :data:`LEARNED` exact match at 1x on every seed, else the task is reported
but left out at every size (:func:`unlearned_tasks`), as the task study's issue asks (the best scheme at least 90% on
three seeds).
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from octlm.studies.shared.core import mean_std

#: Multiples of L the ranking is taken at, where the study evaluates them.
RANK_MULTIPLIERS = (2, 4)
#: Exact match at 1x some scheme must reach on every seed for a task to enter the ranking.
LEARNED = 0.9
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


def tied_tasks(
    records: list[dict], labels: list[str], tasks: list[str], seeds: list[int], multiplier: int
) -> dict[str, float | None]:
    """``{task: score}`` for each of ``tasks`` on which every label scores the same on every seed at ``multiplier``:
    the shared exact match when it is one value on every seed, ``None`` when it differs from seed to seed.

    Such a task ranks nobody, so :func:`mean_reciprocal_ranks` leaves it out.
    """
    tied: dict[str, float | None] = {}
    for task in tasks:
        per_seed = [{_score(records, task, label, seed, multiplier) for label in labels} for seed in seeds]
        if all(len(values) == 1 for values in per_seed):
            shared = {next(iter(values)) for values in per_seed}
            tied[task] = shared.pop() if len(shared) == 1 else None
    return tied


def unlearned_tasks(records: list[dict], labels: list[str], tasks: list[str], seeds: list[int]) -> dict[str, float]:
    """``{task: best}`` for each of ``tasks`` that no label learns at 1x: no label reaches :data:`LEARNED` exact match
    at 1x on every seed. ``best`` is the highest, over labels, of a label's lowest 1x exact match over the seeds.

    Such a task ranks nobody, so :func:`mean_reciprocal_ranks` leaves it out at every size.
    """
    unlearned: dict[str, float] = {}
    for task in tasks:
        best = max(min(_score(records, task, label, seed, 1) for seed in seeds) for label in labels)
        if best < LEARNED:
            unlearned[task] = best
    return unlearned


def mean_reciprocal_ranks(
    records: list[dict], labels: list[str], tasks: list[str], seeds: list[int], multiplier: int
) -> dict[str, tuple[float, float | None]]:
    """``{label: (mean, sd)}`` over seeds of the MRR at ``multiplier`` x L, from the study's eval records, across the
    ``tasks`` that some label learns at 1x and that tell the labels apart (:func:`unlearned_tasks` and
    :func:`tied_tasks` are left out); ``{}`` when none does."""
    learned = [task for task in tasks if task not in unlearned_tasks(records, labels, tasks, seeds)]
    tied = tied_tasks(records, labels, learned, seeds, multiplier)
    deciding = [task for task in learned if task not in tied]
    if not deciding:
        return {}
    per_seed: dict[str, list[float]] = {label: [] for label in labels}
    for seed in seeds:
        reciprocal: dict[str, list[float]] = {label: [] for label in labels}
        for task in deciding:
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


@dataclass
class Ranking:
    """The ranking at one multiple of L: each label's MRR over the tasks that decide it, and the tasks left out."""

    multiplier: int
    #: every task of the study, in its order
    tasks: list[str]
    #: ``{label: (mean, sd)}`` over seeds; empty when every task ties
    mrr: dict[str, tuple[float, float | None]]
    #: ``{task: shared exact match, or None when it differs by seed}`` for the learned tasks every label ties on
    left_out: dict[str, float | None]
    #: ``{task: best 1x exact match}`` for the tasks no label learns at 1x (:func:`unlearned_tasks`)
    unlearned: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def deciding(self) -> list[str]:
        """The tasks the MRR is taken over, in study order."""
        return [task for task in self.tasks if task not in self.left_out and task not in self.unlearned]

    def decided_by(self) -> str:
        """``decided by 4 of 7 tasks; not learned at 1x: recall (best 41%); left out: reverse (every scheme 0%)``."""
        text = f"decided by {len(self.deciding)} of {len(self.tasks)} tasks"
        if self.unlearned:
            text += "; not learned at 1x: " + ", ".join(
                f"{task} (best {_percent(best)})" for task, best in self.unlearned.items()
            )
        if not self.left_out:
            return text
        groups: dict[float | None, list[str]] = {}
        for task, value in self.left_out.items():
            groups.setdefault(value, []).append(task)
        return f"{text}; left out: " + "; ".join(
            f"{', '.join(names)} ({_tie(value)})" for value, names in groups.items()
        )

    def record(self) -> dict:
        """The ``ranking`` record of ``tasks.jsonl``."""
        return {
            "record": "ranking",
            "multiplier": self.multiplier,
            "tasks": self.deciding,
            "not_learned": [{"task": task, "best_at_1x": best} for task, best in self.unlearned.items()],
            "left_out": [{"task": task, "exact_match": value} for task, value in self.left_out.items()],
            "mean_reciprocal_rank": {k: {"mean": v[0], "std": v[1]} for k, v in self.mrr.items()},
        }


def _tie(value: float | None) -> str:
    if value is None:
        return "every scheme the same on each seed"
    return f"every scheme {_percent(value)}"


def _percent(value: float) -> str:
    return f"{f'{100 * value:.1f}'.removesuffix('.0')}%"


def ranking(
    records: list[dict], labels: list[str], tasks: list[str], seeds: list[int], multipliers: list[int]
) -> dict[int, Ranking]:
    """``{m: Ranking}`` for each of :data:`RANK_MULTIPLIERS` the study evaluates."""
    unlearned = unlearned_tasks(records, labels, tasks, seeds)
    learned = [task for task in tasks if task not in unlearned]
    return {
        m: Ranking(
            m,
            list(tasks),
            mean_reciprocal_ranks(records, labels, tasks, seeds, m),
            tied_tasks(records, labels, learned, seeds, m),
            unlearned,
        )
        for m in RANK_MULTIPLIERS
        if m in multipliers
    }


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


def _ranked(ranks: dict[int, Ranking]) -> tuple[list[int], list[str]]:
    """The multipliers some task decides, and the labels best first at the first of them."""
    ms = [m for m, r in ranks.items() if r.mrr]
    if not ms:
        return [], []
    first = ranks[ms[0]].mrr
    return ms, sorted(first, key=lambda k: -first[k][0])


def ranking_markdown(ranks: dict[int, Ranking], tasks: list[str], seeds: list[int]) -> str:
    """The ranking as a Markdown section: what decides it at each size, then one row per scheme, best MRR at the first
    ranked size first."""
    if not ranks:
        return ""
    ms, order = _ranked(ranks)
    lines = [
        "## Ranking across tasks",
        "",
        f"Mean reciprocal rank (Kazemnejad et al. 2023) over the tasks ({', '.join(tasks)}) that tell the schemes "
        "apart: ranked on each task by exact match, ties sharing their places. A task that no scheme learns at 1x "
        f"({_percent(LEARNED)} exact match on every seed) ranks nobody, nor does one on which every scheme scores "
        "the same on every seed at a size: both are named and left out. Mean ± sd over seeds "
        f"{', '.join(map(str, seeds))}; 1 is first on every deciding task.",
        "",
        *(f"* At {m}x: {r.decided_by()}." for m, r in ranks.items()),
    ]
    if ms:
        lines += [
            "",
            "| scheme | " + " | ".join(f"MRR at {m}x" for m in ms) + " |",
            "| --- |" + " ---: |" * len(ms),
        ]
        lines += [f"| `{label}` | " + " | ".join(_mrr(ranks[m].mrr[label]) for m in ms) + " |" for label in order]
    return "\n".join(lines) + "\n"


def ranking_terminal(ranks: dict[int, Ranking]) -> str:
    """The ranking for the terminal: what decides it at each size, then the table."""
    if not ranks:
        return ""
    ms, order = _ranked(ranks)
    lines = ["mean reciprocal rank across tasks (1: first on every deciding task)"]
    lines += [f"  {m}x: {r.decided_by()}" for m, r in ranks.items()]
    if ms:
        lines.append(f"{'scheme':>12} " + " ".join(f"{f'{m}x':>13}" for m in ms))
        lines += [f"{label:>12} " + " ".join(f"{_mrr(ranks[m].mrr[label]):>13}" for m in ms) for label in order]
    return "\n".join(lines)


def _mrr(value: tuple[float, float | None]) -> str:
    return f"{value[0]:.2f}" + ("" if value[1] is None else f" ± {value[1]:.2f}")


def ranking_plot(ranks: dict[int, Ranking]) -> bytes:
    """PNG bytes: horizontal bars of each scheme's MRR at each ranked size, with sd over seeds as error bars; the
    title says which tasks decide each size."""
    from octlm.inspect.figures import Figure, png_bytes

    ms, best_first = _ranked(ranks)
    order = best_first[::-1]
    fig = Figure(figsize=(7, 0.45 * len(order) + 1.5 + 0.25 * len(ranks)), dpi=110, layout="constrained")
    ax = fig.subplots()
    height = 0.8 / max(len(ms), 1)
    y = np.arange(len(order))
    for i, m in enumerate(ms):
        means = [ranks[m].mrr[k][0] for k in order]
        errors = [ranks[m].mrr[k][1] or 0.0 for k in order]
        ax.barh(y + i * height, means, height, xerr=errors, capsize=2, label=f"at {m}x")
    ax.set_yticks(y + height * (len(ms) - 1) / 2, order)
    ax.set_xlim(0, 1.05)
    ax.set_xlabel("mean reciprocal rank across deciding tasks (1: first on every one); bars: sd over seeds")
    ax.set_title(
        "\n".join(
            ["position schemes ranked past the training length", *(f"{m}x: {r.decided_by()}" for m, r in ranks.items())]
        ),
        fontsize=8,
    )
    ax.grid(True, axis="x", alpha=0.3)
    if ms:
        ax.legend(fontsize=8, loc="lower right")
    return png_bytes(fig)


__all__ = [
    "LEARNED",
    "RANK_MULTIPLIERS",
    "SEPARATED",
    "Ranking",
    "fractional_ranks",
    "mean_reciprocal_ranks",
    "ranking",
    "ranking_markdown",
    "ranking_plot",
    "ranking_terminal",
    "separated",
    "tied_tasks",
    "unlearned_tasks",
]
