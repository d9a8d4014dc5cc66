"""What the task study says while it runs: its opening line and one line per model trained and scored."""

from __future__ import annotations

from octlm.model.positions import random_position_schemes
from octlm.report import Reporter
from octlm.studies.tasks.generators import Task
from octlm.studies.tasks.options import TaskOptions, Variant


def announce(
    opts: TaskOptions,
    tasks: list[Task],
    variants: list[Variant],
    seeds: list[int],
    sizes: list[int],
    report: Reporter,
    where: str = "",
) -> None:
    """The study's opening event: what is trained, on which sizes, which schemes stay plain under
    ``--randomize-positions``, and ``where`` (``", in 2 processes of 1 thread each"``, or nothing)."""
    plain_only = [s for s in opts.schemes if opts.randomize_positions > 1 and s not in random_position_schemes()]
    report.event(
        "study",
        f"task study: {', '.join(t.name for t in tasks)}; {len(variants)} rows x {len(seeds)} "
        f"seed{'' if len(seeds) == 1 else 's'} x "
        f"{opts.steps_said()}, trained on sizes 1..{sizes[0]}, evaluated at {', '.join(map(str, sizes))}"
        + "".join(
            f"; {t.name} on 1..{at[0]}, at {', '.join(map(str, at))}"
            for t in tasks
            if (at := opts.sizes(t.name)) != sizes
        )
        + where
        + (f"; {', '.join(plain_only)} plain only (no positions to randomize)" if plain_only else ""),
        tasks=[t.name for t in tasks],
        rows=[v.label for v in variants],
        sizes=sizes,
        seeds=seeds,
    )


def report_model(
    got: list[dict], task: Task, variant: Variant, seed: int, done: int, total: int, report: Reporter
) -> None:
    """One model's progress event: its steps, training seconds and exact match at every size (``n/a`` past a
    table)."""
    evals = [r for r in got if r["record"] == "eval"]
    shown = ", ".join("n/a" if r["exact_match"] is None else f"{100 * r['exact_match']:.1f}%" for r in evals)
    report.event(
        "task",
        f"[{done}/{total}] {task.name:>14} {variant.label:>12} seed {seed}: {got[0]['steps']} steps in "
        f"{got[0]['train_seconds']:.0f}s; exact match {shown}",
        model=done,
        models=total,
        task=task.name,
        row=variant.label,
        seed=seed,
        steps=got[0]["steps"],
        train_seconds=got[0]["train_seconds"],
        exact_match={f"{r['multiplier']}x": r["exact_match"] for r in evals},
    )


__all__ = ["announce", "report_model"]
