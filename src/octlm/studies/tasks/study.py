"""The task study: ``octlm length --task NAME`` trains each scheme on a synthetic task and tests it on longer instances.

Protocol (after Kazemnejad et al. 2023 and Ruoss et al. 2023):

* One decoder per position scheme and seed, the same shape, steps and
  learning rate, on the task of :data:`octlm.studies.tasks.generators.TASKS` named by ``--task``.
* Training instances have ``1 .. L`` input items (``L = --task-length``), a
  size drawn uniformly for each batch from the seed's generator; the loss is
  on the answer tokens only.
* Evaluation: :data:`EVAL_COUNT` fresh instances (from a generator seeded
  ``seed + scoring.EVAL_SEED_OFFSET``, never used in training) at each size ``m x L``
  for ``m`` in :data:`~octlm.studies.tasks.options.TASK_MULTIPLIERS`. Sizes above
  ``L`` never occur in training; ``1x`` is the longest trained size, scored on new instances. An
  instance counts when the whole answer is right: the greedy choice at every
  answer position (given the right tokens before it, which is what greedy
  decoding sees as long as it has been right) is the answer token.
* A learned table has rows for the longest training sequence only: longer
  sizes are reported ``n/a``, as in the text study.

Outputs in ``--out``: ``tasks.jsonl``, ``tasks.png``, ``tasks.md``, and the
table on the terminal; accuracy is the mean over ``--seeds``. The options, their
defaults and their checks are :mod:`octlm.studies.tasks.options`.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from octlm.fileio import atomic_write
from octlm.model import Decoder, cross_entropy
from octlm.report import Reporter, SilentReporter
from octlm.studies.shared.core import StudyFiles, prepare_study_folder, study_seeds, write_study, wrote_line
from octlm.studies.shared.processes import checker, local_share, side_by_side, started
from octlm.studies.shared.progress import PLACEMENT, PROGRESS, StudyProgress, open_study, option_defaults
from octlm.studies.shared.spread import Share, count_models, finish_share, open_share, placed_device, share_of
from octlm.studies.tasks.checkpoint import SAVE_EVERY, restore_task_checkpoint, save_task_checkpoint
from octlm.studies.tasks.events import announce, report_model
from octlm.studies.tasks.generators import Task
from octlm.studies.tasks.needle_report import NEEDLE_FILES
from octlm.studies.tasks.options import EVAL_COUNT, TaskOptions, Variant, check_task_options
from octlm.studies.tasks.records import TaskRow
from octlm.studies.tasks.scoring import score_model
from octlm.studies.tasks.summary import DEPTH_PLOT, RANK_PLOT, Summary, summarize
from octlm.studies.tasks.tables import protocol_sentence
from octlm.train.device import resolve_device, torch_settings
from octlm.train.optim import backward, make_optimizer, scheduled_lr
from octlm.train.tracking import MetricsLog
from octlm.version import build_version

#: With --log-to, each model's tracker run: runs/<task>/<row>-seed<seed>/.
RUNS = "runs"
#: Steps between the train records a tracker receives.
LOG_EVERY = 50
FILES = StudyFiles(
    "task study", "tasks.jsonl", "tasks.md", "tasks.png", extra=(DEPTH_PLOT, RANK_PLOT, RUNS, PROGRESS, *NEEDLE_FILES)
)
JSONL, PLOT, TABLE = FILES.jsonl, FILES.plot, FILES.table


def answer_loss(model: Decoder, tokens: torch.Tensor, task: Task, size: int) -> torch.Tensor:
    """Mean nats of the scored answer tokens of ``tokens`` [B, S] (instances of ``size`` items), each predicted from the
    tokens before it."""
    answer, scored = task.answer_length(size), task.answer_mask(size).to(tokens.device)
    logits = model(tokens[:, :-1])[:, -answer:][:, scored]
    return cross_entropy(logits, tokens[:, -answer:][:, scored])


def train_task_model(
    task: Task,
    scheme: Variant | str,
    seed: int,
    opts: TaskOptions,
    device: torch.device,
    log: MetricsLog | None = None,
    checkpoint: Path | None = None,
) -> tuple[Decoder, dict]:
    """Train one model for ``opts.steps(task.name)`` steps as ``octlm train`` steps (its optimizer, schedule and
    clipping); returns it in eval mode and its record.

    Each step draws an instance size from ``1 .. task_length`` and a batch of
    that size from the seed's generator; the loss is on the answer tokens only.
    The decoder's context holds the longest training instance (a learned
    table's rows); its vocabulary, the task's symbols up to the longest evaluated size.
    ``log`` receives a ``train`` record (loss in nats, learning rate) every
    :data:`LOG_EVERY` steps and at the last. With ``checkpoint``, training
    resumes from that file when it exists and saves it every
    :data:`~octlm.studies.tasks.checkpoint.SAVE_EVERY` steps.
    """
    variant = Variant(scheme) if isinstance(scheme, str) else scheme
    train, opts = opts.train_options(task, variant, seed), opts.for_task(task.name)
    longest = max(opts.multipliers) * opts.task_length
    torch.manual_seed(seed)
    model = Decoder(train.model_config(task.vocab_size(longest))).to(device).train()
    optimizer = make_optimizer(model, train, device)
    g = torch.Generator().manual_seed(seed)
    t0, loss, start, before = time.perf_counter(), torch.tensor(float("nan")), 0, 0.0
    if checkpoint is not None and checkpoint.is_file():
        start, before = restore_task_checkpoint(checkpoint, model, optimizer, g)
    for step in range(start, train.max_steps):
        scheduled_lr(optimizer, step, train)
        size = int(torch.randint(1, opts.task_length + 1, (1,), generator=g))
        tokens = task.batch(size, opts.batch_size, longest, g).to(device)
        loss = answer_loss(model, tokens, task, size)
        backward(loss, model, optimizer, train.grad_clip)
        optimizer.step()
        if checkpoint is not None and (step + 1) % SAVE_EVERY == 0 and step + 1 < train.max_steps:
            save_task_checkpoint(checkpoint, step + 1, model, optimizer, g, before + time.perf_counter() - t0)
        if log is not None and ((step + 1) % LOG_EVERY == 0 or step + 1 == train.max_steps):
            log.log(
                {"kind": "train", "step": step + 1, "loss": float(loss.detach()), "lr": optimizer.param_groups[0]["lr"]}
            )
    record = {
        "record": "train",
        "task": task.name,
        **TaskRow.of_variant(variant).to_json(),
        "seed": seed,
        "steps": train.max_steps,
        "final_loss": float(loss.detach()),
        "train_seconds": before + time.perf_counter() - t0,
    }
    return model.eval(), record


def task_study(
    opts: TaskOptions, report: Reporter | None = None, given: set[str] | None = None, share: Share | None = None
) -> dict:
    """Run ``octlm length --task``; returns the result dict (also the last ``--json`` line).

    ``given``: the flags typed on the command line, so that one typed with its
    default value still conflicts with ``--preset``. ``share``: this process's
    part when a ``--processes`` study started it (else from torchrun,
    ``--shard`` or ``--processes``: :mod:`octlm.studies.shared.processes`).

    An unfinished study of the same options at ``--out`` is continued
    (:mod:`octlm.studies.shared.progress`, :mod:`octlm.studies.tasks.checkpoint`).

    Raises:
        OctlmError: for bad options, an existing finished study without
            ``--overwrite``, or an unfinished study of other options (before
            anything is trained).
    """
    opts = opts.resolved(given)
    check_task_options(opts)
    models = len(opts.tasks()) * len(opts.variants()) * opts.seeds
    share = share or local_share(opts, share_of(opts.shard, opts.overwrite), models)
    device, threads = placed_device(opts.device, opts.threads, share)
    report = report or Reporter()
    with torch_settings(threads, False):
        return _study(opts, share, resolve_device(device), report if share.speaks else SilentReporter(report))


def _study(opts: TaskOptions, share: Share, device: torch.device, report: Reporter) -> dict:
    def begin(overwrite: bool) -> StudyProgress:
        prepare = lambda: prepare_study_folder(opts.out, overwrite, FILES)  # noqa: E731
        return open_study(opts.out, overwrite, FILES.kind, asdict(opts), prepare, report, option_defaults(TaskOptions))

    given = asdict(replace(opts, overwrite=False))
    progress = open_share(share, opts.out, opts.overwrite, begin)
    tasks = opts.tasks()
    seeds = study_seeds(opts.seed, opts.seeds)
    sizes = opts.sizes()
    variants = opts.variants()
    announce(opts, tasks, variants, seeds, sizes, report, side_by_side(share, opts.processes))
    t0 = time.perf_counter()
    models = [(task, variant, seed) for task in tasks for variant in variants for seed in seeds]
    tables = lambda: _tables(opts, tasks, variants, sizes, seeds, models, device, progress, report, t0)  # noqa: E731
    if not share.spread:
        return tables()
    with started(share, "tasks", given, progress.folder) as workers:
        units = [_unit(*model) for model in models]
        count_models(progress, units, report)
        _models([m for k, m in enumerate(models) if share.owns(k)], opts, device, progress, report)
        return finish_share(share, progress, units, units, report, tables, checker(workers))


def _unit(task: Task, variant: Variant, seed: int) -> str:
    return f"model-{task.name}-{variant.label}-seed{seed}"


def _models(models: list, opts: TaskOptions, device, progress: StudyProgress, report):
    """Train and score ``models`` (``(task, variant, seed)``, in order), or read back those recorded: ``(records,
    depths)``. Each model's line says how many of ``models`` are done."""
    records, depths = [], []
    for task, variant, seed in models:
        unit = _unit(task, variant, seed)
        if (kept := progress.get(unit)) is None:  # trained and scored in an earlier command: never redone
            saved = progress.folder / f"{unit}.safetensors"
            got, by_depth = _train_and_score(
                task, variant, seed, opts, opts.sizes(task.name), device, progress.out, saved
            )
            kept = progress.put(unit, {"records": got, "depths": by_depth})
            saved.unlink(missing_ok=True)
        records += kept["records"]
        depths += kept["depths"]
        done = len([r for r in records if r["record"] == "train"])
        report_model(kept["records"], task, variant, seed, done, len(models), report)
    return records, depths


def _tables(opts, tasks, variants, sizes, seeds, models, device, progress: StudyProgress, report, t0: float) -> dict:
    """Every model of the study (trained here or read back), then the tables: the study's result."""
    out = progress.out
    records, depths = _models(models, opts, device, progress, report)
    header = _header(opts, tasks, variants, sizes, seeds)
    own_sizes = {t.name: opts.sizes(t.name) for t in tasks}
    summary = summarize(
        records, depths, tasks, [v.label for v in variants], sizes, seeds, protocol_sentence(opts), own_sizes
    )
    paths = _write(out, [header, *records, *depths, *summary.records], summary)
    progress.finish()
    seconds = time.perf_counter() - t0
    result = {
        "out": str(out),
        "tasks": opts.task_names(),
        "sizes": sizes,
        "seeds": seeds,
        **summary.result,
        "seconds": seconds,
        **paths,
    }
    report.result(result, f"{summary.terminal}\n\n{wrote_line(paths.values(), seconds)}")
    return result


def _header(opts: TaskOptions, tasks: list[Task], variants: list[Variant], sizes: list[int], seeds: list[int]) -> dict:
    """The ``study`` record that opens ``tasks.jsonl``: the protocol and every option."""
    return {
        "record": "study",
        "octlm_version": build_version(),  # the release and, from a checkout, the commit: what made these numbers
        "task": opts.task_names()[0] if len(tasks) == 1 else opts.task_names(),
        "tasks": opts.task_names(),
        "task_length": sizes[0],
        "sizes": sizes,
        "seeds": seeds,
        "steps": opts.max_steps,  # None when the tasks' own budgets differ: task_steps
        "task_steps": opts.steps_by_task(),
        "task_sizes": {t.name: opts.sizes(t.name) for t in tasks},
        "eval_count": EVAL_COUNT,
        "rows": [v.label for v in variants],
        "options": {k: v for k, v in asdict(opts).items() if k not in PLACEMENT},  # how it ran: not recorded
    }


def _write(out: Path, records: list[dict], summary: Summary) -> dict[str, str]:
    """Write the study's files and the summary's extra figures; ``{name: path}`` of everything written."""
    paths = write_study(out, FILES, records, summary.markdown, summary.figure)
    for name, data in summary.extra_files.items():
        atomic_write(out / name, data)
        paths[name.split(".")[0].replace("-", "_")] = str(out / name)
    return paths


def _train_and_score(
    task: Task,
    variant: Variant,
    seed: int,
    opts: TaskOptions,
    sizes: list[int],
    device: torch.device,
    out: Path,
    checkpoint: Path,
) -> tuple[list[dict], list[dict]]:
    """Train one model and score it at every size: ``([train record, eval records], [depth records])``.

    With ``--log-to``, the model is its own tracker run in ``out/runs/<task>/<row>-seed<seed>/``
    (``metrics.jsonl`` and the trackers' files), filed under the study folder's name.
    """
    log = None
    if opts.log_to:
        folder = out / RUNS / task.name / f"{variant.label}-seed{seed}"
        shutil.rmtree(folder, ignore_errors=True)  # a resumed model's tracker run starts anew
        folder.mkdir(parents=True)
        log = MetricsLog(
            folder,
            folder / "metrics.jsonl",
            list(opts.log_to),
            {**opts.train_options(task, variant, seed).to_dict(), "task": task.name},
            None,
            out.name,
        )
    try:
        model, record = train_task_model(task, variant, seed, opts, device, log, checkpoint)
        got = score_model(model, record, task, variant, seed, opts.multipliers, sizes, device)
        if log is not None:
            log.log(
                {
                    "kind": "eval",
                    "step": record["steps"],
                    **{
                        f"exact_match_{r['multiplier']}x": r["exact_match"]
                        for r in got[0][1:]
                        if r["exact_match"] is not None
                    },
                }
            )
    finally:
        if log is not None:
            log.close()
    return got


__all__ = ["task_study", "train_task_model"]
