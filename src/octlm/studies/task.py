"""The task study: ``octlm length --task NAME`` trains each scheme on a synthetic task and tests it on longer instances.

Protocol (after Kazemnejad et al. 2023 and Ruoss et al. 2023):

* One decoder per position scheme and seed, the same shape, steps and
  learning rate, on the task of :data:`octlm.studies.tasks.TASKS` named by ``--task``.
* Training instances have ``1 .. L`` input items (``L = --task-length``), a
  size drawn uniformly for each batch from the seed's generator; the loss is
  on the answer tokens only.
* Evaluation: :data:`EVAL_COUNT` fresh instances (from a generator seeded
  ``seed + EVAL_SEED_OFFSET``, never used in training) at each size ``m x L``
  for ``m`` in :data:`TASK_MULTIPLIERS`. Sizes above ``L`` never occur in
  training; ``1x`` is the longest trained size, scored on new instances. An
  instance counts when the whole answer is right: the greedy choice at every
  answer position (given the right tokens before it, which is what greedy
  decoding sees as long as it has been right) is the answer token.
* A learned table has rows for the longest training sequence only: longer
  sizes are reported ``n/a``, as in the text study.

Outputs in ``--out``: ``tasks.jsonl``, ``tasks.png``, ``tasks.md``, and the
table on the terminal; accuracy is the mean over ``--seeds``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from octlm.declare import check_fields, flag, option_default
from octlm.train.device import resolve_device, torch_settings
from octlm.errors import OctlmError
from octlm.fileio import atomic_write
from octlm.model import Decoder, DecoderConfig, DecoderFieldError, cross_entropy
from octlm.report import Reporter
from octlm.run.folder import RunFolder
from octlm.studies.tasks import TASKS, Task

#: Evaluated sizes, as multiples of the longest training size L.
TASK_MULTIPLIERS = (1, 2, 3, 4)
#: Instances scored per size and model.
EVAL_COUNT = 256
#: The evaluation generator's seed is the run's seed plus this, so its data never meets training's.
EVAL_SEED_OFFSET = 10**6
#: Steps per model when --max-steps is not given.
TASK_STEPS = 5000
#: The task study's model and learning rate when the flags are not given (the text study uses octlm train's).
TASK_DEFAULTS = {"d_model": 64, "n_layers": 3, "learning_rate": 1e-3}
#: Seeds per scheme when --seeds is not given: whether one model learns copy in the budget varies by seed.
TASK_SEEDS = 2
JSONL, PLOT, TABLE = "tasks.jsonl", "tasks.png", "tasks.md"


def task_model(task: Task, scheme: str, opts: Any) -> Decoder:
    """A decoder for ``task`` whose context holds the longest training instance (the learned table's rows)."""
    longest = max(TASK_MULTIPLIERS) * opts.task_length
    config = DecoderConfig(vocab_size=task.vocab_size(longest), context_length=task.sequence_length(opts.task_length),
                           d_model=opts.d_model, n_heads=opts.n_heads, n_layers=opts.n_layers, position=scheme)
    return Decoder(config)


def answer_loss(model: Decoder, tokens: torch.Tensor, answer: int) -> torch.Tensor:
    """Mean nats of the ``answer`` last tokens of ``tokens`` [B, S], each predicted from the tokens before it."""
    logits = model(tokens[:, :-1])[:, -answer:]
    return cross_entropy(logits, tokens[:, -answer:])


def train_task_model(task: Task, scheme: str, seed: int, opts: Any, device: torch.device) -> tuple[Decoder, dict]:
    """Train one model for ``opts.max_steps or TASK_STEPS`` steps; returns it (in eval mode) and its training record."""
    torch.manual_seed(seed)
    model = task_model(task, scheme, opts).to(device).train()
    steps = opts.max_steps or TASK_STEPS
    optimizer = torch.optim.AdamW(model.parameters(), lr=opts.learning_rate, betas=(0.9, 0.99), weight_decay=0.0)
    warmup = min(50, steps // 10)
    # Linear warmup, then cosine decay to a tenth of the peak.
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: (s + 1) / warmup if s < warmup else
                                                  0.1 + 0.45 * (1 + math.cos(math.pi * (s - warmup) / max(1, steps - warmup))))
    g = torch.Generator().manual_seed(seed)
    longest = max(TASK_MULTIPLIERS) * opts.task_length
    t0, loss = time.perf_counter(), torch.tensor(float("nan"))
    for _ in range(steps):
        size = int(torch.randint(1, opts.task_length + 1, (1,), generator=g))
        tokens = task.batch(size, opts.batch_size, longest, g).to(device)
        loss = answer_loss(model, tokens, task.answer_length(size))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
    record = {"record": "train", "position": scheme, "seed": seed, "steps": steps, "final_loss": float(loss.detach()),
              "train_seconds": time.perf_counter() - t0}
    return model.eval(), record


@torch.no_grad()
def exact_match(model: Decoder, task: Task, size: int, longest: int, seed: int, device: torch.device) -> float | None:
    """Fraction of :data:`EVAL_COUNT` fresh instances of ``size`` items whose whole answer is right; ``None`` past a table."""
    if model.max_length is not None and task.sequence_length(size) - 1 > model.max_length:
        return None
    g = torch.Generator().manual_seed(seed + EVAL_SEED_OFFSET + size)
    tokens = task.batch(size, EVAL_COUNT, longest, g).to(device)
    answer = task.answer_length(size)
    guess = model(tokens[:, :-1])[:, -answer:].argmax(dim=-1)
    return float((guess == tokens[:, -answer:]).all(dim=1).float().mean())


#: The options of ``octlm length`` the task study reads; any other given away from its default is refused, not ignored.
TASK_READS = frozenset({"task", "task_length", "out", "overwrite", "schemes", "d_model", "n_heads", "n_layers", "batch_size",
                        "learning_rate", "max_steps", "seed", "seeds", "device", "threads"})


def check_task_options(opts: Any) -> None:
    """Reject task-study options that cannot work, naming the flag, before anything is written.

    Raises:
        OctlmError: for a value out of its declared range (``--seeds 0``,
            ``--max-steps -5``, ``--learning-rate nan``), or an option of the
            text study the task study does not read (``--text``, ``--time-budget``).
    """
    if opts.task not in TASKS:
        raise OctlmError(f"--task must be one of {', '.join(TASKS)}, got {opts.task!r}")
    if opts.out is None:
        raise OctlmError("--out: give the study folder to create, e.g. --out runs/copy")
    check_fields(opts)
    for f in dataclasses.fields(opts):
        if f.name not in TASK_READS and getattr(opts, f.name) != option_default(f):
            raise OctlmError(f"{flag(f.name)} means nothing with --task: the task study generates its own sequences, trains "
                             f"--max-steps steps and scores exact match at {', '.join(f'{m}x' for m in TASK_MULTIPLIERS)} --task-length; "
                             f"drop {flag(f.name)}")
    if opts.task_length < 1:
        raise OctlmError(f"--task-length must be >= 1 item, got {opts.task_length}")
    if len(set(opts.schemes)) != len(opts.schemes):
        raise OctlmError(f"--schemes lists a scheme twice: {opts.schemes}")
    for scheme in opts.schemes:
        try:
            DecoderConfig(d_model=opts.d_model, n_heads=opts.n_heads, n_layers=opts.n_layers, position=scheme)
        except DecoderFieldError as err:
            raise OctlmError(flag(err.field) + err.rest) from None
        except ValueError as err:
            raise OctlmError(str(err)) from None


def prepare_task_dir(out: str, overwrite: bool) -> Path:
    """Create the study folder; an existing task study is replaced only with ``overwrite``, anything else never."""
    path = Path(out)

    def refuse(folder: RunFolder) -> str | None:
        is_study = all(p.name in {JSONL, PLOT, TABLE} for p in path.iterdir())
        return None if is_study else f"--out {path}: holds files that are not an octlm task study, which octlm never replaces; choose a new or empty folder"

    study = RunFolder(path)
    study.check_target(overwrite, refuse, f"--out {path}: already holds a task study; choose another --out or pass --overwrite to replace it")
    study.recreate()
    return path


def task_study(opts: Any, report: Reporter | None = None) -> dict:
    """Run ``octlm length --task``; returns the result dict (also the last ``--json`` line).

    Raises:
        OctlmError: for bad options or an existing folder (before anything is trained).
    """
    check_task_options(opts)
    with torch_settings(opts.threads, False):
        return _study(opts, report or Reporter())


def _study(opts: Any, report: Reporter) -> dict:
    task, device = TASKS[opts.task], resolve_device(opts.device)
    out = prepare_task_dir(opts.out, opts.overwrite)
    seeds = [opts.seed + i for i in range(opts.seeds)]
    sizes = [m * opts.task_length for m in TASK_MULTIPLIERS]
    report.event("study", f"task study: {task.name}, {len(opts.schemes)} schemes x {len(seeds)} seeds, trained on sizes 1..{opts.task_length}, "
                 f"evaluated at {', '.join(map(str, sizes))}", task=task.name, schemes=opts.schemes, sizes=sizes, seeds=seeds)
    t0, records = time.perf_counter(), []
    for scheme in opts.schemes:
        for seed in seeds:
            model, record = train_task_model(task, scheme, seed, opts, device)
            records.append(record)
            for m, size in zip(TASK_MULTIPLIERS, sizes):
                accuracy = exact_match(model, task, size, max(sizes), seed, device)
                records.append({"record": "eval", "position": scheme, "seed": seed, "multiplier": m, "size": size, "exact_match": accuracy})
            shown = ", ".join("n/a" if r["exact_match"] is None else f"{r['exact_match']:.2f}" for r in records[-len(sizes):])
            report.event("task", f"{scheme:>10} seed {seed}: {record['steps']} steps in {record['train_seconds']:.0f}s; exact match {shown}")
    grid, spread = mean_accuracy(records, opts.schemes, sizes)
    header = {"record": "study", "task": task.name, "task_length": opts.task_length, "sizes": sizes, "seeds": seeds, "steps": opts.max_steps or TASK_STEPS,
              "eval_count": EVAL_COUNT, "options": dataclasses.asdict(opts)}
    atomic_write(out / JSONL, "\n".join(json.dumps(r) for r in [header, *records]) + "\n")
    atomic_write(out / TABLE, markdown_table(grid, spread, task, sizes, seeds))
    atomic_write(out / PLOT, plot(grid, task, sizes))
    seconds = time.perf_counter() - t0
    result = {"out": str(out), "task": task.name, "sizes": sizes, "seeds": seeds, "accuracy": grid, "accuracy_std": spread, "seconds": seconds,
              "jsonl": str(out / JSONL), "plot": str(out / PLOT), "table": str(out / TABLE)}
    report.result(result, f"{terminal_table(grid, spread, task, sizes)}\n\nwrote {out / JSONL}, {out / PLOT} and {out / TABLE} in {seconds / 60:.1f} minutes")
    return result


Grid = dict[str, list[float | None]]


def mean_accuracy(records: list[dict], schemes: list[str], sizes: list[int]) -> tuple[Grid, Grid]:
    """``({scheme: [mean exact match over seeds at each size]}, {scheme: [their sample std]})``.

    ``None`` where no model could read the size (a learned table's end); the
    std is ``None`` with a single seed too, where there is no spread to show.
    """
    means: Grid = {}
    spreads: Grid = {}
    for scheme in schemes:
        means[scheme], spreads[scheme] = [], []
        for size in sizes:
            values = [r["exact_match"] for r in records if r["record"] == "eval" and r["position"] == scheme and r["size"] == size]
            known = bool(values) and None not in values
            means[scheme].append(sum(values) / len(values) if known else None)
            spreads[scheme].append(statistics.stdev(values) if known and len(values) > 1 else None)
    return means, spreads


def _cell(value: float | None, std: float | None = None) -> str:
    if value is None:
        return "n/a"
    return f"{100 * value:.1f}%" + ("" if std is None else f" ± {100 * std:.1f}")


def terminal_table(grid: Grid, spread: Grid, task: Task, sizes: list[int]) -> str:
    """The exact-match table for the terminal: one row per scheme, one column per size (mean ± std over seeds)."""
    width = 14 if any(v is not None for row in spread.values() for v in row) else 12
    lines = [f"{task.name}: exact match of the whole answer (trained on sizes 1..{sizes[0]})",
             f"{'scheme':>10} " + " ".join(f"{f'{m}x ({s})':>{width}}" for m, s in zip(TASK_MULTIPLIERS, sizes))]
    lines += [f"{scheme:>10} " + " ".join(f"{_cell(v, d):>{width}}" for v, d in zip(row, spread[scheme])) for scheme, row in grid.items()]
    return "\n".join(lines)


def markdown_table(grid: Grid, spread: Grid, task: Task, sizes: list[int], seeds: list[int]) -> str:
    """The same table in Markdown, with the protocol in a sentence."""
    over = f"mean ± sample std over seeds {', '.join(map(str, seeds))}" if len(seeds) > 1 else f"seed {seeds[0]}"
    lines = [f"# Task study: {task.name}", "", f"{task.description}. Exact match of the whole answer on {EVAL_COUNT} fresh instances "
             f"per size, {over}; trained on sizes 1..{sizes[0]}.", "",
             "| scheme | " + " | ".join(f"{m}x ({s})" for m, s in zip(TASK_MULTIPLIERS, sizes)) + " |",
             "| --- |" + " ---: |" * len(sizes)]
    lines += [f"| `{scheme}` | " + " | ".join(_cell(v, d) for v, d in zip(row, spread[scheme])) + " |" for scheme, row in grid.items()]
    return "\n".join(lines) + "\n"


def plot(grid: dict, task: Task, sizes: list[int]) -> bytes:
    """PNG bytes: exact match against size, one line per scheme."""
    from octlm.inspect.figures import Figure  # matplotlib, whatever MPLBACKEND says

    fig = Figure(figsize=(7, 4.5), dpi=110)
    ax = fig.subplots()
    for scheme, row in grid.items():
        xs = [s for s, v in zip(sizes, row) if v is not None]
        ax.plot(xs, [100 * v for v in row if v is not None], marker="o", label=scheme)
    ax.axvline(sizes[0], color="grey", linestyle=":", linewidth=1)
    ax.set_xticks(sizes, [str(s) for s in sizes])
    ax.set_ylim(-2, 102)
    ax.set_xlabel(f"instance size (items); dotted: longest trained size {sizes[0]}")
    ax.set_ylabel("exact match (%)")
    ax.set_title(f"{task.name}: exact match past the training length")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    from octlm.inspect.figures import png_bytes

    return png_bytes(fig)


__all__ = ["EVAL_COUNT", "EVAL_SEED_OFFSET", "TASK_DEFAULTS", "TASK_MULTIPLIERS", "TASK_SEEDS", "TASK_STEPS", "exact_match", "task_study", "train_task_model"]
