"""The task study's options: what ``octlm length --task`` reads, its defaults, its rows and the checks run before
anything is trained.

Shared options are ``octlm train``'s declarations (:func:`octlm.declare.same_as`) with the task study's own defaults:
a deeper, narrower model trained with Muon (:data:`TASK_TRAINING`), :data:`TASK_STEPS` steps and :data:`TASK_SEEDS`
seeds. :mod:`octlm.studies.tasks.study` runs the study on them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from octlm.declare import Bound, at_least, check_fields, option, refused, same_as
from octlm.errors import OctlmError
from octlm.model.config import DecoderFieldError
from octlm.model.positions import random_position_schemes, task_study_schemes
from octlm.studies.shared.core import check_schemes, study_flag
from octlm.studies.shared.processes import PROCESSES_HELP
from octlm.studies.shared.progress import option_defaults
from octlm.studies.shared.rows import (
    LayoutRow,
    check_layouts,
    layout_rows,
    layout_settings,
    layouts_option,
    schemes_option,
)
from octlm.studies.shared.spread import SHARD_HELP
from octlm.studies.tasks.generators import TASKS, Task, own_training_said
from octlm.studies.tasks.needle import DEFAULT_TEXT, VARIANTS, check_haystack, needle_task
from octlm.studies.tasks.presets import PRESETS, apply_preset
from octlm.train.mlflow_tracker import check_experiment
from octlm.train.option_checks import check_optimizer_options, check_options
from octlm.train.options import MUON_OPTIONS, TrainOptions
from octlm.train.tracking import check_trackers

#: Evaluated sizes, as multiples of the longest training size L.
TASK_MULTIPLIERS = (1, 2, 3, 4)
#: Steps per model of a one-task study when --max-steps is not given (Muon learns copy in about 1,000; docs/tasks.md).
TASK_STEPS = 2000
#: Steps per model when several tasks run (--task all), so that every task fits in the hour.
ALL_TASKS_STEPS = 500
#: Seeds per scheme when --seeds is not given: three, so that a difference can be set against its spread.
TASK_SEEDS = 3
#: Instances scored per size and model.
EVAL_COUNT = 256
#: The task study's training where it differs from octlm train's (the rest is octlm train's: betas, clipping, schedule
#: shape). A deeper, narrower model learns copy in minutes; weight decay would pull the few weights that copy needs
#: back to zero, on Muon's matrices as on the rest (octlm train's Muon decays them since issue 53; the task study never
#: did); Muon learns copy in a fifth of AdamW's steps here (docs/tasks.md), its learning rate on the blocks' matrices,
#: this one on the rest.
TASK_TRAINING = {
    "d_model": 64,
    "n_layers": 3,
    "learning_rate": 1e-3,
    "weight_decay": 0.0,
    "optimizer": "muon",
    "muon_weight_decay": 0.0,
}
#: Minutes of the default one-task study (copy) on one thread: its CPU time, which is its wall time alone (docs/tasks.md
#: gives the command, the wall time it had beside other jobs, and the table; a test checks that both agree).
MEASURED_MINUTES = 20.3
#: Wall minutes of the default --task all study (every task its own training), 2 processes of one thread (docs/tasks.md:
#: beside other trainings for 35 of them).
MEASURED_ALL_MINUTES = 57.6
#: The --task help's measured figure.
MEASURED_HELP = (
    f"The default one-task study (copy, {len(task_study_schemes())} default schemes x {TASK_SEEDS} "
    f"seeds x {TASK_STEPS} steps) took {MEASURED_MINUTES} minutes with --threads 1 on a 2-core machine; "
    f"--task all (each task's own training) {MEASURED_ALL_MINUTES} minutes in 2 processes (docs/tasks.md)"
)

_IN_ALL = [name for name, task in TASKS.items() if task.in_all]
_NAMED_ONLY = [name for name, task in TASKS.items() if not task.in_all]

#: ``--task all``: every task of :data:`~.generators.TASKS` whose ``in_all`` is set, in registration order.
ALL = "all"


@dataclass(frozen=True)
class Variant:
    """One row of the task study: a scheme, trained plain or at randomized positions (Ruoss et al. 2023), or a layer
    layout (``layout``, ``--layouts``; its ``scheme`` is the ``--position`` it trains with,
    :func:`~octlm.studies.shared.rows.row_position`)."""

    scheme: str
    randomized: bool = False
    layout: LayoutRow | None = None

    @property
    def label(self) -> str:
        """The row's name in tables and records: the scheme, ``+rand`` when randomized; a layout row's own label."""
        if self.layout is not None:
            return self.layout.label
        return f"{self.scheme}+rand" if self.randomized else self.scheme

    @classmethod
    def of(cls, layout: LayoutRow) -> Variant:
        """The row of a layout: never randomized (a layout's layers would each draw their own positions)."""
        return cls(layout_settings(layout)["position"], layout=layout)


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
        f"synthetic tasks to train on instead of --text, one or more of {', '.join(_IN_ALL)}, or all (docs/tasks.md): "
        "sizes 1..--task-length, exact match at --multipliers; several end with a ranking across tasks (ranking.png). "
        f"Also, not in all: {', '.join(_NAMED_ONLY)}, state tracking (the S5 word problem, parity); "
        f"{', '.join(VARIANTS)}, key-value needles in real text (--text; RULER's variants). Some tasks train with "
        f"options of their own, each unless you give that option ({own_training_said()}). {MEASURED_HELP}",
        nargs="+",
        choices=[*TASKS, *VARIANTS, ALL],
        metavar="TASK",
    )
    text: list[str] | None = option(
        None,
        f"with a needle task: the corpus whose text is the haystack (default {DEFAULT_TEXT}); training's filler "
        "from its training split, evaluation's from its validation split",
        nargs="+",
        metavar="PATH",
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
    shard: str | None = option(None, SHARD_HELP, metavar="I/N")
    processes: int | None = option(None, PROCESSES_HELP, metavar="N", bounds=at_least(1))
    schemes: list[str] = schemes_option(
        task_study_schemes, f"those the task study trains, in registration order: {' '.join(task_study_schemes())}"
    )
    layouts: list[str] = layouts_option()
    block: str = same_as(TrainOptions, "block")
    qk_norm: bool = same_as(TrainOptions, "qk_norm")
    attention_sinks: bool = same_as(TrainOptions, "attention_sinks")
    output_gate: bool = same_as(TrainOptions, "output_gate")
    d_model: int = same_as(TrainOptions, "d_model", default=TASK_TRAINING["d_model"])
    n_heads: int = same_as(TrainOptions, "n_heads")
    n_layers: int = same_as(TrainOptions, "n_layers", default=TASK_TRAINING["n_layers"])
    batch_size: int = same_as(TrainOptions, "batch_size")
    learning_rate: float = same_as(TrainOptions, "learning_rate", default=TASK_TRAINING["learning_rate"])
    max_steps: int | None = same_as(TrainOptions, "max_steps", default=None)
    optimizer: str = same_as(TrainOptions, "optimizer", default=TASK_TRAINING["optimizer"])
    muon_lr: float = same_as(TrainOptions, "muon_lr")
    muon_momentum: float = same_as(TrainOptions, "muon_momentum")
    muon_weight_decay: float = same_as(
        TrainOptions,
        "muon_weight_decay",
        default=TASK_TRAINING["muon_weight_decay"],
    )
    seed: int = same_as(TrainOptions, "seed", help="random seed, the same for every model")
    seeds: int = option(
        TASK_SEEDS,
        "train every model with this many seeds (--seed, --seed + 1, ...); tables show mean ± std",
        bounds=at_least(1),
    )
    device: str = same_as(TrainOptions, "device")
    threads: int | None = same_as(TrainOptions, "threads")
    log_to: list[str] = same_as(TrainOptions, "log_to")
    #: ``{task: {option: value}}``, each task's own training (Task.training) that applies, fixed by :meth:`resolved`
    #: from what the person typed; not an option (no flag), but recorded with them in study.json.
    task_training: dict[str, dict] | None = None

    def task_names(self) -> list[str]:
        """The tasks to run, in the order given (``all``: every task with ``in_all``, in registration order)."""
        names = [self.task] if isinstance(self.task, str) else list(self.task or [])
        return list(_IN_ALL) if ALL in names else names

    def task_named(self, name: str) -> Task:
        """Task ``name``: of :data:`~octlm.studies.tasks.generators.TASKS`, or a needle task on ``--text``
        (:func:`~octlm.studies.tasks.needle.needle_task`)."""
        return needle_task(name, tuple(self.text or ())) if name in VARIANTS else TASKS[name]

    def tasks(self) -> list[Task]:
        """The tasks to run (:meth:`task_names`), in order."""
        return [self.task_named(name) for name in self.task_names()]

    def own_training(self, name: str, given: set[str] | None = None) -> dict:
        """Task ``name``'s own training (:attr:`~octlm.studies.tasks.generators.Task.training`) that applies: each
        option the person neither typed (``given``) nor set away from its default, as :meth:`resolved` fixed it;
        none under ``--preset`` (the paper's protocol is the study's)."""
        if self.task_training is not None:
            return dict(self.task_training.get(name, {}))
        if self.preset:
            return {}
        own, defaults = TASKS[name].training if name in TASKS else {}, option_defaults(TaskOptions)
        return {k: v for k, v in own.items() if k not in (given or ()) and getattr(self, k) == defaults[k]}

    def for_task(self, name: str) -> TaskOptions:
        """These options as task ``name`` is trained and scored with: its own training applied, its steps set."""
        return dataclasses.replace(self, **{**self.own_training(name), "max_steps": self.steps(name)})

    def sizes(self, name: str | None = None) -> list[int]:
        """The sizes task ``name`` is scored at: each multiplier times its longest training size (:meth:`for_task`);
        without a name, the study's (its one task's, or those of every task without its own ``task_length``)."""
        names = self.task_names()
        if name is None and len(names) == 1:
            name = names[0]
        length = self.task_length if name is None else self.for_task(name).task_length
        return [m * length for m in self.multipliers]

    def steps(self, task: str | None = None) -> int:
        """Steps per model of the task named ``task``: ``--max-steps``, else the task's own (:meth:`own_training`; a
        needle task has none), else :data:`TASK_STEPS` for one task and :data:`ALL_TASKS_STEPS` for several."""
        if self.max_steps is not None:
            return self.max_steps
        if task is not None and (own := self.own_training(task).get("max_steps")) is not None:
            return own
        return TASK_STEPS if len(self.task_names()) == 1 else ALL_TASKS_STEPS

    def steps_by_task(self) -> dict[str, int]:
        """``{task: steps per model}`` for every task of the study, in order (:meth:`steps`)."""
        return {name: self.steps(name) for name in self.task_names()}

    def steps_said(self) -> str:
        """``2000 steps``, or each task's own budget where they differ: ``steps copy 2000, flip-flop 500``."""
        if self.max_steps is not None:
            return f"{self.max_steps} steps"
        return "steps " + ", ".join(f"{name} {steps}" for name, steps in self.steps_by_task().items())

    def resolved(self, given: set[str] | None = None) -> TaskOptions:
        """A copy with ``--preset`` applied (:func:`~octlm.studies.tasks.presets.apply_preset`), each task's own
        training fixed (:meth:`own_training`), the tasks named, the step count filled in and the multipliers sorted, 1
        among them."""
        opts = apply_preset(self, given)
        if opts.task_training is None:
            own = {name: opts.own_training(name, given) for name in opts.task_names()}
            opts = dataclasses.replace(opts, task_training={name: o for name, o in own.items() if o})
        # 1x, the longest trained size, anchors every table ("trained on sizes 1..L"), so it is always scored.
        # Without --max-steps each task keeps its own budget (steps_by_task); one shared budget is written out.
        budgets = set(opts.steps_by_task().values())
        steps = budgets.pop() if len(budgets) == 1 else None
        return dataclasses.replace(
            opts, task=opts.task_names(), max_steps=steps, multipliers=sorted(set(opts.multipliers) | {1})
        )

    def variants(self) -> list[Variant]:
        """The study's rows: each scheme plain, and randomized too where ``randomize_positions`` > 1 and the scheme
        reads positions; then each layout (plain only)."""
        rows = []
        for scheme in self.schemes:
            rows.append(Variant(scheme))
            if self.randomize_positions > 1 and scheme in random_position_schemes():
                rows.append(Variant(scheme, randomized=True))
        return rows + [Variant.of(layout) for layout in layout_rows(self.layouts)]

    def train_options(self, task: Task, variant: Variant | str, seed: int) -> TrainOptions:
        """The training of one model: octlm train's options with the task study's (:data:`TASK_TRAINING`), at the
        longest training instance, with the task's own training (:meth:`for_task`)."""
        variant = Variant(variant) if isinstance(variant, str) else variant
        own = self.for_task(task.name)
        steps = own.max_steps
        return TrainOptions.of(
            position=variant.scheme,
            layers="" if variant.layout is None else variant.layout.layers,
            block=own.block,
            qk_norm=own.qk_norm,
            attention_sinks=own.attention_sinks,
            output_gate=own.output_gate,
            randomize_positions=own.randomize_positions if variant.randomized else 1,
            context_length=task.sequence_length(own.task_length),
            d_model=own.d_model,
            n_heads=own.n_heads,
            n_layers=own.n_layers,
            batch_size=own.batch_size,
            learning_rate=own.learning_rate,
            max_steps=steps,
            warmup_steps=min(50, steps // 10),
            weight_decay=TASK_TRAINING["weight_decay"],
            seed=seed,
            device=own.device,
            optimizer=own.optimizer,
            # With AdamW, Muon's options stay octlm train's defaults: the task study's own (no weight decay) would read
            # as a Muon flag given to AdamW, which octlm train refuses.
            **({name: getattr(self, name) for name in MUON_OPTIONS} if own.optimizer == "muon" else {}),
            threads=own.threads,
            sample_tokens=0,
        )


def check_task_options(opts: TaskOptions) -> None:
    """Reject task-study options that cannot work, naming the flag, before anything is written (``opts`` as
    :meth:`TaskOptions.resolved` gives them).

    Raises:
        OctlmError: for an unknown task, no ``--out``, a value out of its
            declared range (``--seeds 0``, ``--max-steps -5``,
            ``--learning-rate nan``), a scheme or task named twice,
            ``--randomize-positions`` with no scheme that reads positions, a
            layout that cannot train (:func:`~octlm.studies.shared.rows.check_layouts`),
            or a model shape or training the model or ``octlm train`` refuses;
            for a needle task, a ``--text`` that cannot be read or is too
            short for the sizes (:func:`~octlm.studies.tasks.needle.check_haystack`).
    """
    names = opts.task_names()
    if not names or any(name not in TASKS and name not in VARIANTS for name in names):
        raise OctlmError(
            f"--task must name tasks among {', '.join([*TASKS, *VARIANTS])} (or all), got "
            f"{' '.join(map(str, names)) or 'no task'}"
        )
    if opts.text and not any(name in VARIANTS for name in names):
        raise OctlmError(
            f"--text means nothing with --task {' '.join(names)}: only the needle tasks ({', '.join(VARIANTS)}) "
            "read text; drop --text"
        )
    if len(set(names)) != len(names):
        raise OctlmError(f"--task lists a task twice: {' '.join(names)}")
    if opts.out is None:
        raise OctlmError("--out: give the study folder to create, e.g. --out runs/copy")
    check_fields(opts)
    # against the task study's own defaults: its models' options leave Muon's out under AdamW, so the check of
    # each model's options below cannot see a Muon flag given with --optimizer adamw
    check_optimizer_options(opts)
    check_schemes(opts.schemes)
    check_layouts(layout_rows(opts.layouts), opts.schemes, lambda row: _layout_models(opts, row, names))
    check_trackers(list(opts.log_to))
    takers = random_position_schemes()
    if opts.randomize_positions > 1 and not any(s in takers for s in opts.schemes):
        raise OctlmError(
            f"--randomize-positions {opts.randomize_positions}: none of --schemes {' '.join(opts.schemes)} "
            f"reads positions that could be drawn at random (those that do: {', '.join(takers)}); "
            "add one of them or drop --randomize-positions"
        )
    for variant in (v for v in opts.variants() if v.layout is None):
        for name in names:
            try:
                train = opts.train_options(opts.task_named(name), variant, opts.seed)
            except ValueError as err:
                raise refused(err, study_flag) from None
            check_options(train)
    for name in (n for n in names if n in VARIANTS):
        check_haystack(name, tuple(opts.text or ()), opts.task_length, max(opts.multipliers) * opts.task_length)
    # The study files its models under its folder's name, refused here when MLflow cannot take it.
    check_experiment(list(opts.log_to), Path(opts.out).resolve().name, None, "--out", opts.out)


def _layout_models(opts: TaskOptions, row: LayoutRow, names: list[str]) -> list[TrainOptions]:
    """The training options of a layout row's model for each task; a layout the model refuses is said with the task
    whose sequences it was built for (a window must fit each task's longest training instance)."""
    models = []
    for name in names:
        try:
            models.append(opts.train_options(opts.task_named(name), Variant.of(row), opts.seed))
        except DecoderFieldError as err:
            raise DecoderFieldError(err.field, f"{err.rest} (--task {name})") from None
    return models


__all__ = [
    "EVAL_COUNT",
    "ALL",
    "ALL_TASKS_STEPS",
    "MEASURED_ALL_MINUTES",
    "MEASURED_MINUTES",
    "TASK_MULTIPLIERS",
    "TASK_SEEDS",
    "TASK_STEPS",
    "TASK_TRAINING",
    "TaskOptions",
    "Variant",
    "check_task_options",
]
