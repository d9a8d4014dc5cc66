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
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from octlm.declare import Bound, at_least, check_fields, option, refused, same_as
from octlm.errors import OctlmError
from octlm.fileio import atomic_write
from octlm.model import Decoder, cross_entropy
from octlm.model.positions import SCHEME_NAMES, random_position_schemes, task_study_schemes
from octlm.report import Reporter
from octlm.studies.core import StudyFiles, check_schemes, prepare_study_folder, study_seeds, write_study, wrote_line
from octlm.studies.task_presets import PRESETS, apply_preset
from octlm.studies.task_tables import protocol_sentence, summarize
from octlm.studies.tasks import TASKS, Task
from octlm.train.device import resolve_device, torch_settings
from octlm.train.optim import backward, make_optimizer, scheduled_lr
from octlm.train.options import TrainOptions, check_options
from octlm.train.tracking import MetricsLog, check_trackers

#: Evaluated sizes, as multiples of the longest training size L.
TASK_MULTIPLIERS = (1, 2, 3, 4)
#: Instances scored per size and model.
EVAL_COUNT = 256
#: The evaluation generator's seed is the run's seed plus this, so its data never meets training's.
EVAL_SEED_OFFSET = 10**6
#: Steps per model of a one-task study when --max-steps is not given (Muon learns copy in about 1,000; docs/tasks.md).
TASK_STEPS = 2000
#: Steps per model when several tasks run (--task all), so that every task fits in the hour.
ALL_TASKS_STEPS = 500
#: Seeds per scheme when --seeds is not given: three, so that a difference can be set against its spread.
TASK_SEEDS = 3
#: The task study's training where it differs from octlm train's (the rest is octlm train's: betas, clipping, schedule
#: shape).
#: A deeper, narrower model learns copy in minutes; weight decay would pull the few weights that copy needs back to
#: zero;
#: Muon learns copy in a fifth of AdamW's steps here (docs/tasks.md), its learning rate on the blocks' matrices, this
#: one on the rest.
TASK_TRAINING = {"d_model": 64, "n_layers": 3, "learning_rate": 1e-3, "weight_decay": 0.0, "optimizer": "muon"}
#: Minutes of the default one-task study (copy) on one thread: its CPU time, which is its wall time alone (docs/tasks.md
#: gives
#: the command, the wall time it had beside other jobs, and the table; a test checks that both agree).
MEASURED_MINUTES = 20.3
#: Wall minutes of the default --task all study, measured beside one other job.
MEASURED_ALL_MINUTES = 43.5
#: The --task help's measured figure.
MEASURED_HELP = (
    f"The default one-task study (copy, {len(task_study_schemes())} default schemes x {TASK_SEEDS} seeds x "
    f"{TASK_STEPS} steps) took "
    f"{MEASURED_MINUTES} minutes with --threads 1 on a 2-core machine; --task all ({ALL_TASKS_STEPS} steps) "
    f"{MEASURED_ALL_MINUTES} minutes "
    "(docs/tasks.md)"
)
#: Bins of needle depth that passkey is scored in, from the start of the filler to its end (as needle-in-a-haystack
#: evaluations draw it).
DEPTH_BINS = 10
#: Each depth bin's evaluation generator is seeded this far from the last, clear of every size's.
DEPTH_SEED_STEP = 1000
DEPTH_PLOT = "tasks-depth.png"
RANK_PLOT = "ranking.png"
#: With --log-to, each model's tracker run: runs/<task>/<row>-seed<seed>/.
RUNS = "runs"
#: Steps between the train records a tracker receives.
LOG_EVERY = 50
FILES = StudyFiles("task study", "tasks.jsonl", "tasks.md", "tasks.png", extra=(DEPTH_PLOT, RANK_PLOT, RUNS))
JSONL, PLOT, TABLE = FILES.jsonl, FILES.plot, FILES.table


#: ``--task all``: every task of :data:`~octlm.studies.tasks.TASKS`, in registration order.
ALL = "all"


@dataclass(frozen=True)
class Variant:
    """One row of the task study: a scheme, trained plain or at randomized positions (Ruoss et al. 2023)."""

    scheme: str
    randomized: bool = False

    @property
    def label(self) -> str:
        """The row's name in tables and records: the scheme, ``+rand`` when randomized."""
        return f"{self.scheme}+rand" if self.randomized else self.scheme


@dataclass
class TaskOptions:
    """Everything ``octlm length --task`` reads. Units are in each help text.

    Shared options are ``octlm train``'s declarations (:func:`octlm.declare.same_as`),
    with the task study's own defaults (:data:`TASK_TRAINING`, :data:`TASK_STEPS`,
    :data:`TASK_SEEDS`, the schemes of :func:`octlm.model.positions.task_study_schemes`).
    ``task`` is one name, a list, or ``["all"]``; :meth:`resolved` applies
    ``--preset`` and fills the step count.
    """

    task: list[str] | None = option(
        None,
        f"synthetic tasks to train on instead of --text, one or more of {', '.join(TASKS)}, or all (docs/tasks.md): "
        "sizes 1..--task-length, exact match at --multipliers; several end with a ranking across tasks (ranking.png). "
        f"{MEASURED_HELP}",
        nargs="+",
        choices=[*TASKS, ALL],
        metavar="TASK",
    )
    task_length: int = option(
        16,
        "longest training instance of --task, L (items: symbols, pairs or filler tokens)",
        bounds=at_least(1, "items"),
    )
    multipliers: list[int] = option(
        list(TASK_MULTIPLIERS),
        "evaluated sizes as multiples of --task-length (with --task)",
        bounds=Bound(1, says="integers >= 1"),
        nargs="+",
        metavar="M",
    )
    preset: str | None = option(
        None,
        "a paper's protocol, instead of --task (tasks, lengths, model, steps, seeds, schemes; a flag given "
        "with it must agree): "
        + "; ".join(
            f"{p.name}, {p.paper.split(',')[0]}, for a {p.hardware.upper()}: {p.expected}" for p in PRESETS.values()
        ),
        choices=list(PRESETS),
    )
    randomize_positions: int = same_as(
        TrainOptions,
        "randomize_positions",
        help="with --task: also train every scheme that reads positions "
        "at positions drawn from FACTOR x the longest training sequence (Ruoss et al. 2023), and set both "
        "side by side (rows <scheme>+rand); 1: plain only",
    )
    out: str | None = option(None, "study folder to create: tasks.jsonl, tasks.png, tasks.md")
    overwrite: bool = option(False, "replace an existing study folder at --out")
    # Read from the registry when used, so a plug-in scheme registered after import takes part.
    schemes: list[str] = option(
        task_study_schemes,
        "position schemes to train and compare (default: those the task study trains, "
        f"in registration order: {' '.join(task_study_schemes())})",
        nargs="+",
        choices=SCHEME_NAMES,
        metavar="SCHEME",
    )
    d_model: int = same_as(TrainOptions, "d_model", default=TASK_TRAINING["d_model"])
    n_heads: int = same_as(TrainOptions, "n_heads")
    n_layers: int = same_as(TrainOptions, "n_layers", default=TASK_TRAINING["n_layers"])
    batch_size: int = same_as(TrainOptions, "batch_size")
    learning_rate: float = same_as(TrainOptions, "learning_rate", default=TASK_TRAINING["learning_rate"])
    max_steps: int | None = same_as(TrainOptions, "max_steps", default=None)
    optimizer: str = same_as(TrainOptions, "optimizer", default=TASK_TRAINING["optimizer"])
    muon_lr: float = same_as(TrainOptions, "muon_lr")
    muon_momentum: float = same_as(TrainOptions, "muon_momentum")
    muon_weight_decay: float = same_as(TrainOptions, "muon_weight_decay")
    seed: int = same_as(TrainOptions, "seed", help="random seed, the same for every model")
    seeds: int = option(
        TASK_SEEDS,
        "train every model with this many seeds (--seed, --seed + 1, ...); tables show mean ± std",
        bounds=at_least(1),
    )
    device: str = same_as(TrainOptions, "device")
    threads: int | None = same_as(TrainOptions, "threads")
    log_to: list[str] = same_as(TrainOptions, "log_to")

    def task_names(self) -> list[str]:
        """The tasks to run, in the order given (``all``: every task, in registration order)."""
        names = [self.task] if isinstance(self.task, str) else list(self.task or [])
        return list(TASKS) if ALL in names else names

    def steps(self) -> int:
        """Steps per model: ``--max-steps``, else :data:`TASK_STEPS` for one task and :data:`ALL_TASKS_STEPS` for
        several."""
        if self.max_steps is not None:
            return self.max_steps
        return TASK_STEPS if len(self.task_names()) == 1 else ALL_TASKS_STEPS

    def resolved(self, given: set[str] | None = None) -> TaskOptions:
        """A copy with ``--preset`` applied (:func:`~octlm.studies.task_presets.apply_preset`), the tasks named, the
        step count filled in and the multipliers sorted, 1 among them."""
        opts = apply_preset(self, given)
        # 1x, the longest trained size, anchors every table ("trained on sizes 1..L"), so it is always scored.
        return dataclasses.replace(
            opts, task=opts.task_names(), max_steps=opts.steps(), multipliers=sorted(set(opts.multipliers) | {1})
        )

    def variants(self) -> list[Variant]:
        """The study's rows: each scheme plain, and randomized too where ``randomize_positions`` > 1 and the scheme
        reads positions."""
        rows = []
        for scheme in self.schemes:
            rows.append(Variant(scheme))
            if self.randomize_positions > 1 and scheme in random_position_schemes():
                rows.append(Variant(scheme, randomized=True))
        return rows

    def train_options(self, task: Task, variant: Variant | str, seed: int) -> TrainOptions:
        """The training of one model: octlm train's options with the task study's (:data:`TASK_TRAINING`), at the
        longest training instance."""
        variant = Variant(variant) if isinstance(variant, str) else variant
        steps = self.steps()
        return TrainOptions.of(
            position=variant.scheme,
            randomize_positions=self.randomize_positions if variant.randomized else 1,
            context_length=task.sequence_length(self.task_length),
            d_model=self.d_model,
            n_heads=self.n_heads,
            n_layers=self.n_layers,
            batch_size=self.batch_size,
            learning_rate=self.learning_rate,
            max_steps=steps,
            warmup_steps=min(50, steps // 10),
            weight_decay=TASK_TRAINING["weight_decay"],
            seed=seed,
            device=self.device,
            optimizer=self.optimizer,
            muon_lr=self.muon_lr,
            muon_momentum=self.muon_momentum,
            muon_weight_decay=self.muon_weight_decay,
            threads=self.threads,
            sample_tokens=0,
        )


def answer_loss(model: Decoder, tokens: torch.Tensor, task: Task, size: int) -> torch.Tensor:
    """Mean nats of the scored answer tokens of ``tokens`` [B, S] (instances of ``size`` items), each predicted from the
    tokens before it."""
    answer, scored = task.answer_length(size), task.answer_mask(size).to(tokens.device)
    logits = model(tokens[:, :-1])[:, -answer:][:, scored]
    return cross_entropy(logits, tokens[:, -answer:][:, scored])


def train_task_model(
    task: Task, scheme: Variant | str, seed: int, opts: TaskOptions, device: torch.device, log: MetricsLog | None = None
) -> tuple[Decoder, dict]:
    """Train one model for ``opts.max_steps`` steps as ``octlm train`` steps (its optimizer, schedule and clipping);
    returns it in eval mode and its record.

    Each step draws an instance size from ``1 .. task_length`` and a batch of
    that size from the seed's generator; the loss is on the answer tokens only.
    The decoder's context holds the longest training instance (a learned
    table's rows); its vocabulary, the task's symbols up to the longest evaluated size.
    ``log`` receives a ``train`` record (loss in nats, learning rate) every
    :data:`LOG_EVERY` steps and at the last.
    """
    variant = Variant(scheme) if isinstance(scheme, str) else scheme
    train = opts.train_options(task, variant, seed)
    longest = max(opts.multipliers) * opts.task_length
    torch.manual_seed(seed)
    model = Decoder(train.model_config(task.vocab_size(longest))).to(device).train()
    optimizer = make_optimizer(model, train, device)
    g = torch.Generator().manual_seed(seed)
    t0, loss = time.perf_counter(), torch.tensor(float("nan"))
    for step in range(train.max_steps):
        scheduled_lr(optimizer, step, train)
        size = int(torch.randint(1, opts.task_length + 1, (1,), generator=g))
        tokens = task.batch(size, opts.batch_size, longest, g).to(device)
        loss = answer_loss(model, tokens, task, size)
        backward(loss, model, optimizer, train.grad_clip)
        optimizer.step()
        if log is not None and ((step + 1) % LOG_EVERY == 0 or step + 1 == train.max_steps):
            log.log(
                {"kind": "train", "step": step + 1, "loss": float(loss.detach()), "lr": optimizer.param_groups[0]["lr"]}
            )
    record = {
        "record": "train",
        "task": task.name,
        **_row(variant),
        "seed": seed,
        "steps": train.max_steps,
        "final_loss": float(loss.detach()),
        "train_seconds": time.perf_counter() - t0,
    }
    return model.eval(), record


def _row(variant: Variant) -> dict:
    """What every record says of its row: the scheme, the row's label and whether it trained at randomized positions."""
    return {"position": variant.scheme, "label": variant.label, "randomized": variant.randomized}


@torch.no_grad()
def exact_match(model: Decoder, task: Task, size: int, longest: int, seed: int, device: torch.device) -> float | None:
    """Fraction of :data:`EVAL_COUNT` fresh instances of ``size`` items whose whole answer is right; ``None`` past a
    table."""
    if model.max_length is not None and task.sequence_length(size) - 1 > model.max_length:
        return None
    g = torch.Generator().manual_seed(seed + EVAL_SEED_OFFSET + size)
    return _all_right(model, task.batch(size, EVAL_COUNT, longest, g).to(device), task, size)


@torch.no_grad()
def exact_match_by_depth(
    model: Decoder, task: Task, size: int, longest: int, seed: int, device: torch.device
) -> list[float | None] | None:
    """Exact match of :data:`EVAL_COUNT` fresh instances in each of :data:`DEPTH_BINS` bins of needle depth (start to
    end); ``None`` for a task without a needle.

    An entry is ``None`` where no place of ``size`` filler tokens lies in the
    bin, or past a learned table. Each bin draws from its own generator, kept
    apart from training's and from :func:`exact_match`'s.
    """
    if task.make_at_depth is None:
        return None
    scores: list[float | None] = []
    for b in range(DEPTH_BINS):
        g = torch.Generator().manual_seed(seed + EVAL_SEED_OFFSET + size + DEPTH_SEED_STEP * (b + 1))
        tokens = task.batch_at_depth(size, EVAL_COUNT, longest, g, b / DEPTH_BINS, (b + 1) / DEPTH_BINS)
        scores.append(None if tokens is None else _all_right(model, tokens.to(device), task, size))
    return scores


def _all_right(model: Decoder, tokens: torch.Tensor, task: Task, size: int) -> float | None:
    """Fraction of the rows of ``tokens`` (instances of ``size`` items) whose every scored answer token is the greedy
    choice; ``None`` past a table."""
    if model.max_length is not None and tokens.shape[1] - 1 > model.max_length:
        return None
    answer, scored = task.answer_length(size), task.answer_mask(size).to(tokens.device)
    guess = model(tokens[:, :-1])[:, -answer:][:, scored].argmax(dim=-1)
    return float((guess == tokens[:, -answer:][:, scored]).all(dim=1).float().mean())


def check_task_options(opts: TaskOptions) -> None:
    """Reject task-study options that cannot work, naming the flag, before anything is written (``opts`` as
    :meth:`TaskOptions.resolved` gives them).

    Raises:
        OctlmError: for an unknown task, no ``--out``, a value out of its
            declared range (``--seeds 0``, ``--max-steps -5``,
            ``--learning-rate nan``), a scheme or task named twice,
            ``--randomize-positions`` with no scheme that reads positions, or
            a model shape or training the model or ``octlm train`` refuses.
    """
    names = opts.task_names()
    if not names or any(name not in TASKS for name in names):
        raise OctlmError(
            f"--task must name tasks among {', '.join(TASKS)} (or all), got {' '.join(map(str, names)) or 'no task'}"
        )
    if len(set(names)) != len(names):
        raise OctlmError(f"--task lists a task twice: {' '.join(names)}")
    if opts.out is None:
        raise OctlmError("--out: give the study folder to create, e.g. --out runs/copy")
    check_fields(opts)
    check_schemes(opts.schemes)
    check_trackers(list(opts.log_to))
    takers = random_position_schemes()
    if opts.randomize_positions > 1 and not any(s in takers for s in opts.schemes):
        raise OctlmError(
            f"--randomize-positions {opts.randomize_positions}: none of --schemes {' '.join(opts.schemes)} reads "
            "positions that "
            f"could be drawn at random (those that do: {', '.join(takers)}); add one of them or drop "
            "--randomize-positions"
        )
    for variant in opts.variants():
        for name in names:
            try:
                train = opts.train_options(TASKS[name], variant, opts.seed)
            except ValueError as err:
                raise refused(err) from None
            check_options(train)


def task_study(opts: TaskOptions, report: Reporter | None = None, given: set[str] | None = None) -> dict:
    """Run ``octlm length --task``; returns the result dict (also the last ``--json`` line).

    ``given``: the flags typed on the command line, so that one typed with its
    default value still conflicts with ``--preset``.

    Raises:
        OctlmError: for bad options or an existing folder (before anything is trained).
    """
    opts = opts.resolved(given)
    check_task_options(opts)
    with torch_settings(opts.threads, False):
        return _study(opts, report or Reporter())


def _study(opts: TaskOptions, report: Reporter) -> dict:
    device = resolve_device(opts.device)
    tasks = [TASKS[name] for name in opts.task_names()]
    out = prepare_study_folder(opts.out, opts.overwrite, FILES)
    seeds = study_seeds(opts.seed, opts.seeds)
    sizes = [m * opts.task_length for m in opts.multipliers]
    variants = opts.variants()
    plain_only = [s for s in opts.schemes if opts.randomize_positions > 1 and s not in random_position_schemes()]
    report.event(
        "study",
        f"task study: {', '.join(t.name for t in tasks)}; {len(variants)} rows x {len(seeds)} "
        f"seed{'' if len(seeds) == 1 else 's'} x "
        f"{opts.max_steps} steps, trained on sizes 1..{opts.task_length}, evaluated at {', '.join(map(str, sizes))}"
        + (f"; {', '.join(plain_only)} plain only (no positions to randomize)" if plain_only else ""),
        tasks=[t.name for t in tasks],
        rows=[v.label for v in variants],
        sizes=sizes,
        seeds=seeds,
    )
    t0, records, depths = time.perf_counter(), [], []
    total = len(tasks) * len(variants) * len(seeds)
    for task in tasks:
        for variant in variants:
            for seed in seeds:
                got, by_depth = _train_and_score(task, variant, seed, opts, sizes, device, out)
                records += got
                depths += by_depth
                evals = [r for r in got if r["record"] == "eval"]
                shown = ", ".join(
                    "n/a" if r["exact_match"] is None else f"{100 * r['exact_match']:.1f}%" for r in evals
                )
                done = len([r for r in records if r["record"] == "train"])
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
    header = {
        "record": "study",
        "task": opts.task_names()[0] if len(tasks) == 1 else opts.task_names(),
        "tasks": opts.task_names(),
        "task_length": opts.task_length,
        "sizes": sizes,
        "seeds": seeds,
        "steps": opts.max_steps,
        "eval_count": EVAL_COUNT,
        "rows": [v.label for v in variants],
        "options": asdict(opts),
    }
    summary = summarize(records, depths, tasks, [v.label for v in variants], sizes, seeds, protocol_sentence(opts))
    paths = write_study(out, FILES, [header, *records, *depths], summary.markdown, summary.figure)
    for name, data in summary.extra_files.items():
        atomic_write(out / name, data)
        paths[name.split(".")[0].replace("-", "_")] = str(out / name)
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


def _train_and_score(
    task: Task, variant: Variant, seed: int, opts: TaskOptions, sizes: list[int], device: torch.device, out: Path
) -> tuple[list[dict], list[dict]]:
    """Train one model and score it at every size: ``([train record, eval records], [depth records])``.

    With ``--log-to``, the model is its own tracker run in ``out/runs/<task>/<row>-seed<seed>/``
    (``metrics.jsonl`` and the trackers' files), filed under the study folder's name.
    """
    log = None
    if opts.log_to:
        folder = out / RUNS / task.name / f"{variant.label}-seed{seed}"
        folder.mkdir(parents=True, exist_ok=True)
        log = MetricsLog(
            folder,
            folder / "metrics.jsonl",
            list(opts.log_to),
            {**opts.train_options(task, variant, seed).to_dict(), "task": task.name},
            None,
            out.name,
        )
    try:
        model, record = train_task_model(task, variant, seed, opts, device, log)
        got = _score(model, record, task, variant, seed, opts, sizes, device)
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


def _score(
    model: Decoder,
    record: dict,
    task: Task,
    variant: Variant,
    seed: int,
    opts: TaskOptions,
    sizes: list[int],
    device: torch.device,
) -> tuple[list[dict], list[dict]]:
    row, evals, depths = _row(variant), [], []
    for m, size in zip(opts.multipliers, sizes, strict=True):
        accuracy = exact_match(model, task, size, max(sizes), seed, device)
        evals.append(
            {
                "record": "eval",
                "task": task.name,
                **row,
                "seed": seed,
                "multiplier": m,
                "size": size,
                "exact_match": accuracy,
            }
        )
        if (by_depth := exact_match_by_depth(model, task, size, max(sizes), seed, device)) is not None:
            depths.append(
                {
                    "record": "depth",
                    "task": task.name,
                    **row,
                    "seed": seed,
                    "multiplier": m,
                    "size": size,
                    "depth_bins": [[b / DEPTH_BINS, (b + 1) / DEPTH_BINS] for b in range(DEPTH_BINS)],
                    "exact_match": by_depth,
                }
            )
    return [record, *evals], depths


__all__ = [
    "ALL",
    "ALL_TASKS_STEPS",
    "DEPTH_BINS",
    "Variant",
    "check_task_options",
    "EVAL_COUNT",
    "EVAL_SEED_OFFSET",
    "exact_match_by_depth",
    "TASK_MULTIPLIERS",
    "TASK_SEEDS",
    "TASK_STEPS",
    "TASK_TRAINING",
    "TaskOptions",
    "exact_match",
    "task_study",
    "train_task_model",
]
