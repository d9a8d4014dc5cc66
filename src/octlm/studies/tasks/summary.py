"""Every table and figure of the task study, gathered from its records once every model is scored: per task, the
randomized rows, passkey and the needles by depth, and the ranking across tasks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from octlm.studies.tasks.generators import Task
from octlm.studies.tasks.needle_report import needle_summary
from octlm.studies.tasks.options import EVAL_COUNT
from octlm.studies.tasks.ranking import ranking, ranking_markdown, ranking_plot, ranking_terminal
from octlm.studies.tasks.tables import (
    depth_markdown,
    depth_plot,
    markdown_table,
    mean_accuracy,
    multipliers,
    plot,
    randomized_markdown,
    terminal_table,
)

DEPTH_PLOT = "tasks-depth.png"
RANK_PLOT = "ranking.png"


@dataclass
class Summary:
    """What the task study writes and prints once every model is scored."""

    markdown: str
    figure: bytes
    terminal: str
    result: dict
    extra_files: dict[str, bytes] = field(default_factory=dict)
    #: the ``ranking`` records of ``tasks.jsonl``, one per ranked multiple of L (several tasks only)
    records: list[dict] = field(default_factory=list)


def summarize(
    records: list[dict],
    depths: list[dict],
    tasks: list[Task],
    labels: list[str],
    sizes: list[int],
    seeds: list[int],
    protocol: str = "",
    task_sizes: Mapping[str, list[int]] | None = None,
) -> Summary:
    """Every table and figure of the task study from its records: per task, randomized rows, passkey depth, and the
    ranking across tasks (two or more tasks). ``sizes``: the study's sizes; ``task_sizes``: a task's own where its
    training sets another longest size (``{task: sizes}``, the same multipliers)."""
    grids, spreads, sections, terminal, ranking_records = {}, {}, [], [], []
    several = len(tasks) > 1
    sizes_of = {t.name: list((task_sizes or {}).get(t.name, sizes)) for t in tasks}
    for task in tasks:
        at = sizes_of[task.name]
        grid, spread = mean_accuracy(records, labels, at, task.name)
        grids[task.name], spreads[task.name] = grid, spread
        sections.append(markdown_table(grid, spread, task, at, seeds, EVAL_COUNT, "##" if several else "#"))
        if diff := randomized_markdown(records, task.name, labels, at, seeds):
            sections.append(diff)
        terminal.append(terminal_table(grid, spread, task, at))
    extra: dict[str, bytes] = {}
    if passkey := [r for r in depths if r.get("task", "passkey") == "passkey"]:
        sections.append(depth_markdown(passkey, sizes))
        extra[DEPTH_PLOT] = depth_plot(passkey, sizes)
    needle_sections, needle_files, effective = needle_summary(records, depths, sizes)
    sections, extra = sections + needle_sections, extra | needle_files
    result: dict = {"accuracy": grids, "accuracy_std": spreads}
    if several:
        ranks = ranking(records, labels, [t.name for t in tasks], seeds, multipliers(sizes))
        if ranks:
            sections.insert(0, ranking_markdown(ranks, [t.name for t in tasks], seeds))
            terminal.append(ranking_terminal(ranks))
            extra[RANK_PLOT] = ranking_plot(ranks)
            result["mean_reciprocal_rank"] = {f"{m}x": r.record()["mean_reciprocal_rank"] for m, r in ranks.items()}
            result["ranking"] = {
                f"{m}x": {k: r.record()[k] for k in ("tasks", "not_learned", "left_out")} for m, r in ranks.items()
            }
            ranking_records = [r.record() for r in ranks.values()]
    else:
        result = {"task": tasks[0].name, "accuracy": grids[tasks[0].name], "accuracy_std": spreads[tasks[0].name]}
    if effective:
        result["effective_context"] = effective
    title = [f"# Task study: {', '.join(t.name for t in tasks)}", ""] if several else []
    if protocol:
        (title if several else sections).insert(len(title) if several else 1, protocol + "\n")
    markdown = "\n".join([*title, *sections])
    return Summary(markdown, plot(grids, sizes_of), "\n\n".join(terminal), result, extra, ranking_records)


__all__ = ["DEPTH_PLOT", "RANK_PLOT", "Summary", "summarize"]
