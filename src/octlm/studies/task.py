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

import time
from dataclasses import asdict, dataclass

import torch

from octlm.declare import at_least, check_fields, option, refused, same_as
from octlm.errors import OctlmError
from octlm.fileio import atomic_write
from octlm.model import Decoder, cross_entropy
from octlm.model.positions import SCHEME_NAMES, task_study_schemes
from octlm.report import Reporter
from octlm.studies.core import StudyFiles, check_schemes, prepare_study_folder, study_seeds, write_study, wrote_line
from octlm.studies.task_tables import depth_markdown, depth_plot, markdown_table, mean_accuracy, plot, terminal_table
from octlm.studies.tasks import TASKS, Task
from octlm.train.device import resolve_device, torch_settings
from octlm.train.optim import backward, make_optimizer, scheduled_lr
from octlm.train.options import TrainOptions, check_options

#: Evaluated sizes, as multiples of the longest training size L.
TASK_MULTIPLIERS = (1, 2, 3, 4)
#: Instances scored per size and model.
EVAL_COUNT = 256
#: The evaluation generator's seed is the run's seed plus this, so its data never meets training's.
EVAL_SEED_OFFSET = 10**6
#: Steps per model when --max-steps is not given.
TASK_STEPS = 5000
#: Seeds per scheme when --seeds is not given: whether one model learns copy in the budget varies by seed.
TASK_SEEDS = 2
#: The task study's training where it differs from octlm train's (the rest is octlm train's: betas, clipping, schedule shape).
#: A deeper, narrower model learns copy in minutes; weight decay would pull the few weights that copy needs back to zero.
TASK_TRAINING = {"d_model": 64, "n_layers": 3, "learning_rate": 1e-3, "weight_decay": 0.0}
#: Bins of needle depth that passkey is scored in, from the start of the filler to its end (as needle-in-a-haystack evaluations draw it).
DEPTH_BINS = 10
#: Each depth bin's evaluation generator is seeded this far from the last, clear of every size's.
DEPTH_SEED_STEP = 1000
DEPTH_PLOT = "tasks-depth.png"
FILES = StudyFiles("task study", "tasks.jsonl", "tasks.md", "tasks.png", extra=(DEPTH_PLOT,))
JSONL, PLOT, TABLE = FILES.jsonl, FILES.plot, FILES.table


@dataclass
class TaskOptions:
    """Everything ``octlm length --task`` reads. Units are in each help text.

    Shared options are ``octlm train``'s declarations (:func:`octlm.declare.same_as`),
    with the task study's own defaults (:data:`TASK_TRAINING`, :data:`TASK_STEPS`,
    :data:`TASK_SEEDS`, the schemes of :func:`octlm.model.positions.task_study_schemes`).
    """

    task: str | None = option(
        None, "train on a synthetic task instead of --text: sizes 1..--task-length, exact match at 1x-4x. The default copy study "
        f"(its 8 default schemes x {TASK_SEEDS} seeds x {TASK_STEPS} steps) took 24.1 minutes with --threads 1 on a shared 2-core machine, and its "
        "best scheme at 1x (xpos) copied 97.9%% of instances exactly", choices=list(TASKS))
    task_length: int = option(16, "longest training instance of --task, L (items: symbols, pairs or filler tokens)", bounds=at_least(1, "items"))
    out: str | None = option(None, "study folder to create: tasks.jsonl, tasks.png, tasks.md")
    overwrite: bool = option(False, "replace an existing study folder at --out")
    # Read from the registry when used, so a plug-in scheme registered after import takes part.
    schemes: list[str] = option(task_study_schemes, "position schemes to train and compare (default: those the task study trains, "
                                f"in registration order: {' '.join(task_study_schemes())})",
                                nargs="+", choices=SCHEME_NAMES, metavar="SCHEME")
    d_model: int = same_as(TrainOptions, "d_model", default=TASK_TRAINING["d_model"])
    n_heads: int = same_as(TrainOptions, "n_heads")
    n_layers: int = same_as(TrainOptions, "n_layers", default=TASK_TRAINING["n_layers"])
    batch_size: int = same_as(TrainOptions, "batch_size")
    learning_rate: float = same_as(TrainOptions, "learning_rate", default=TASK_TRAINING["learning_rate"])
    max_steps: int = same_as(TrainOptions, "max_steps", default=TASK_STEPS)
    optimizer: str = same_as(TrainOptions, "optimizer")
    muon_lr: float = same_as(TrainOptions, "muon_lr")
    muon_momentum: float = same_as(TrainOptions, "muon_momentum")
    muon_weight_decay: float = same_as(TrainOptions, "muon_weight_decay")
    seed: int = same_as(TrainOptions, "seed", help="random seed, the same for every model")
    seeds: int = option(TASK_SEEDS, "train every model with this many seeds (--seed, --seed + 1, ...); tables show mean ± std", bounds=at_least(1))
    device: str = same_as(TrainOptions, "device")
    threads: int | None = same_as(TrainOptions, "threads")

    def train_options(self, task: Task, scheme: str, seed: int) -> TrainOptions:
        """The training of one model: octlm train's options with the task study's (:data:`TASK_TRAINING`), at the longest training instance."""
        return TrainOptions.of(
            position=scheme, context_length=task.sequence_length(self.task_length), d_model=self.d_model, n_heads=self.n_heads,
            n_layers=self.n_layers, batch_size=self.batch_size, learning_rate=self.learning_rate, max_steps=self.max_steps,
            warmup_steps=min(50, self.max_steps // 10), weight_decay=TASK_TRAINING["weight_decay"], seed=seed, device=self.device,
            optimizer=self.optimizer, muon_lr=self.muon_lr, muon_momentum=self.muon_momentum, muon_weight_decay=self.muon_weight_decay,
            threads=self.threads, sample_tokens=0,
        )


def answer_loss(model: Decoder, tokens: torch.Tensor, answer: int) -> torch.Tensor:
    """Mean nats of the ``answer`` last tokens of ``tokens`` [B, S], each predicted from the tokens before it."""
    logits = model(tokens[:, :-1])[:, -answer:]
    return cross_entropy(logits, tokens[:, -answer:])


def train_task_model(task: Task, scheme: str, seed: int, opts: TaskOptions, device: torch.device) -> tuple[Decoder, dict]:
    """Train one model for ``opts.max_steps`` steps as ``octlm train`` steps (its optimizer, schedule and clipping); returns it in eval mode and its record.

    Each step draws an instance size from ``1 .. task_length`` and a batch of
    that size from the seed's generator; the loss is on the answer tokens only.
    The decoder's context holds the longest training instance (a learned
    table's rows); its vocabulary, the task's symbols up to the longest evaluated size.
    """
    train = opts.train_options(task, scheme, seed)
    longest = max(TASK_MULTIPLIERS) * opts.task_length
    torch.manual_seed(seed)
    model = Decoder(train.model_config(task.vocab_size(longest))).to(device).train()
    optimizer = make_optimizer(model, train, device)
    g = torch.Generator().manual_seed(seed)
    t0, loss = time.perf_counter(), torch.tensor(float("nan"))
    for step in range(train.max_steps):
        scheduled_lr(optimizer, step, train)
        size = int(torch.randint(1, opts.task_length + 1, (1,), generator=g))
        tokens = task.batch(size, opts.batch_size, longest, g).to(device)
        loss = answer_loss(model, tokens, task.answer_length(size))
        backward(loss, model, optimizer, train.grad_clip)
        optimizer.step()
    record = {"record": "train", "position": scheme, "seed": seed, "steps": train.max_steps, "final_loss": float(loss.detach()),
              "train_seconds": time.perf_counter() - t0}
    return model.eval(), record


@torch.no_grad()
def exact_match(model: Decoder, task: Task, size: int, longest: int, seed: int, device: torch.device) -> float | None:
    """Fraction of :data:`EVAL_COUNT` fresh instances of ``size`` items whose whole answer is right; ``None`` past a table."""
    if model.max_length is not None and task.sequence_length(size) - 1 > model.max_length:
        return None
    g = torch.Generator().manual_seed(seed + EVAL_SEED_OFFSET + size)
    return _all_right(model, task.batch(size, EVAL_COUNT, longest, g).to(device), task.answer_length(size))


@torch.no_grad()
def exact_match_by_depth(model: Decoder, task: Task, size: int, longest: int, seed: int, device: torch.device) -> list[float | None] | None:
    """Exact match of :data:`EVAL_COUNT` fresh instances in each of :data:`DEPTH_BINS` bins of needle depth (start to end); ``None`` for a task without a needle.

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
        scores.append(None if tokens is None else _all_right(model, tokens.to(device), task.answer_length(size)))
    return scores


def _all_right(model: Decoder, tokens: torch.Tensor, answer: int) -> float | None:
    """Fraction of the rows of ``tokens`` whose whole answer (the last ``answer`` tokens) the greedy choice gets right; ``None`` past a table."""
    if model.max_length is not None and tokens.shape[1] - 1 > model.max_length:
        return None
    guess = model(tokens[:, :-1])[:, -answer:].argmax(dim=-1)
    return float((guess == tokens[:, -answer:]).all(dim=1).float().mean())


def check_task_options(opts: TaskOptions) -> None:
    """Reject task-study options that cannot work, naming the flag, before anything is written.

    Raises:
        OctlmError: for an unknown task, no ``--out``, a value out of its
            declared range (``--seeds 0``, ``--max-steps -5``,
            ``--learning-rate nan``), a scheme named twice, or a model shape
            or training the model or ``octlm train`` refuses.
    """
    if opts.task not in TASKS:
        raise OctlmError(f"--task must be one of {', '.join(TASKS)}, got {opts.task!r}")
    if opts.out is None:
        raise OctlmError("--out: give the study folder to create, e.g. --out runs/copy")
    check_fields(opts)
    check_schemes(opts.schemes)
    for scheme in opts.schemes:
        try:
            train = opts.train_options(TASKS[opts.task], scheme, opts.seed)
        except ValueError as err:
            raise refused(err) from None
        check_options(train)


def task_study(opts: TaskOptions, report: Reporter | None = None) -> dict:
    """Run ``octlm length --task``; returns the result dict (also the last ``--json`` line).

    Raises:
        OctlmError: for bad options or an existing folder (before anything is trained).
    """
    check_task_options(opts)
    with torch_settings(opts.threads, False):
        return _study(opts, report or Reporter())


def _study(opts: TaskOptions, report: Reporter) -> dict:
    task, device = TASKS[opts.task], resolve_device(opts.device)
    out = prepare_study_folder(opts.out, opts.overwrite, FILES)
    seeds = study_seeds(opts.seed, opts.seeds)
    sizes = [m * opts.task_length for m in TASK_MULTIPLIERS]
    report.event("study", f"task study: {task.name}, {len(opts.schemes)} schemes x {len(seeds)} seed{'' if len(seeds) == 1 else 's'}, trained on sizes 1..{opts.task_length}, "
                 f"evaluated at {', '.join(map(str, sizes))}", task=task.name, schemes=opts.schemes, sizes=sizes, seeds=seeds)
    t0, records, depths = time.perf_counter(), [], []
    for scheme in opts.schemes:
        for seed in seeds:
            model, record = train_task_model(task, scheme, seed, opts, device)
            records.append(record)
            evals = []
            for m, size in zip(TASK_MULTIPLIERS, sizes):
                accuracy = exact_match(model, task, size, max(sizes), seed, device)
                evals.append({"record": "eval", "position": scheme, "seed": seed, "multiplier": m, "size": size, "exact_match": accuracy})
                if (by_depth := exact_match_by_depth(model, task, size, max(sizes), seed, device)) is not None:
                    depths.append({"record": "depth", "position": scheme, "seed": seed, "multiplier": m, "size": size,
                                   "depth_bins": [[b / DEPTH_BINS, (b + 1) / DEPTH_BINS] for b in range(DEPTH_BINS)], "exact_match": by_depth})
            records += evals
            shown = ", ".join("n/a" if r["exact_match"] is None else f"{r['exact_match']:.2f}" for r in evals)
            report.event("task", f"{scheme:>10} seed {seed}: {record['steps']} steps in {record['train_seconds']:.0f}s; exact match {shown}")
    grid, spread = mean_accuracy(records, opts.schemes, sizes)
    header = {"record": "study", "task": task.name, "task_length": opts.task_length, "sizes": sizes, "seeds": seeds, "steps": opts.max_steps,
              "eval_count": EVAL_COUNT, "options": asdict(opts)}
    table = markdown_table(grid, spread, task, sizes, seeds, EVAL_COUNT) + (f"\n{depth_markdown(depths, sizes)}" if depths else "")
    paths = write_study(out, FILES, [header, *records, *depths], table, plot(grid, task, sizes))
    if depths:
        atomic_write(out / DEPTH_PLOT, depth_plot(depths, sizes))
        paths["depth_plot"] = str(out / DEPTH_PLOT)
    seconds = time.perf_counter() - t0
    result = {"out": str(out), "task": task.name, "sizes": sizes, "seeds": seeds, "accuracy": grid, "accuracy_std": spread, "seconds": seconds, **paths}
    report.result(result, f"{terminal_table(grid, spread, task, sizes)}\n\n{wrote_line(paths.values(), seconds)}")
    return result


__all__ = ["DEPTH_BINS", "EVAL_COUNT", "EVAL_SEED_OFFSET", "exact_match_by_depth", "TASK_MULTIPLIERS", "TASK_SEEDS", "TASK_STEPS", "TASK_TRAINING", "TaskOptions", "exact_match",
           "task_study", "train_task_model"]
