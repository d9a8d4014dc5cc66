"""The options of the text study, ``octlm length --text``: :class:`LengthOptions`, and the checks they must pass before
anything is trained (those that read the validation text: :mod:`octlm.studies.length.validation`)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from octlm.declare import (
    Bound,
    at_least,
    check_fields,
    flag,
    flat_values,
    group,
    option,
    option_default,
    option_fields,
    refused,
    same_as,
)
from octlm.errors import OctlmError
from octlm.model.positions import (
    ROPE_SCALINGS,
    SCHEMES,
    length_study_schemes,
    schemes_taking,
    task_study_schemes,
)
from octlm.model.scheme_catalog import SchemeOptions
from octlm.studies.length.fine_tunes import extension_rows
from octlm.studies.shared.core import check_schemes, study_flag
from octlm.studies.shared.processes import PROCESSES_HELP
from octlm.studies.shared.rows import (
    LayoutRow,
    check_layouts,
    layout_rows,
    layout_settings,
    layouts_option,
    row_scalings,
    scalings_taken,
    schemes_option,
    unread_options,
)
from octlm.studies.shared.spread import SHARD_HELP
from octlm.studies.tasks.options import ALL_TASKS_STEPS, TASK_MULTIPLIERS, TASK_SEEDS, TASK_STEPS, TaskOptions
from octlm.train.mlflow_tracker import check_experiment
from octlm.train.option_checks import check_options as check_train_options
from octlm.train.option_checks import scheme_options
from octlm.train.options import TrainOptions

#: Seconds of training per model by default. With the extension stage on, the
#: whole default study fits in 15 minutes on two CPU cores, its models in two
#: processes (docs/length-study.md gives the measured time and the command).
DEFAULT_TIME_BUDGET = 180.0
#: Wall minutes of the default study, extension stage included (tinyshakespeare, two processes of one thread).
MEASURED_MINUTES = 12.1
#: The default extension stage: fine-tune a copy of each model at 4 x T for
#: 100 steps (Chen et al. 2023 fine-tune LLaMA at 2x to 16x; 4x keeps the
#: longest fine-tuning window at 512 tokens, cheap on a CPU).
DEFAULT_EXTEND_TO = 4
RUNS = "runs"


def _check_extend_to(value: int) -> None:
    """``--extend-to`` is 0 (no extension stage) or a multiple >= 2: at 1x there is nothing to extend to."""
    if value != 0 and not value >= 2:
        raise OctlmError(f"--extend-to must be 0 (no extension stage) or an integer >= 2, got {value}")


def _default(cls, name: str) -> Any:
    """The declared default of option ``name`` of options class ``cls``."""
    return option_default(next(f for f in option_fields(cls) if f.name == name))


def _task_default(name: str, what: str) -> str:
    """Help text of an option whose default differs between the text and the task study (one flag serves both)."""
    return (
        f"{what} (default: {_default(TrainOptions, name):g} as octlm train; "
        f"with --task {_default(TaskOptions, name):g})"
    )


@dataclass
class LengthOptions:
    """Everything the text study, ``octlm length --text``, takes. Units are in each help text.

    The options it shares with ``octlm train`` are that command's own
    declarations (:func:`octlm.declare.same_as`): the same default, help and
    bounds, handed to every model's :class:`TrainOptions` by name; every
    position scheme's options are among them (``scheme_options``, :func:`octlm.declare.group`).
    The task study's options (``--task``) are :class:`octlm.studies.tasks.options.TaskOptions`.
    """

    text: list[str] = same_as(
        TrainOptions,
        "text",
        help="text, JSON Lines, Parquet or CSV files (also compressed) or folders of them "
        "(the same split, tokenizer and seed for every model)",
    )
    out: str | None = option(
        None,
        "study folder to create: runs/<scheme>/, length.jsonl, length.png, length.md (with --task: tasks.jsonl, "
        "tasks.md, tasks.png, and ranking.png for several tasks)",
    )
    # The study checks its budget itself (one of --time-budget and --max-steps must hold), so no train bound here.
    time_budget: float | None = same_as(
        TrainOptions,
        "time_budget",
        default=DEFAULT_TIME_BUDGET,
        bounds=None,
        help="seconds of training per model, timed once into one step count for every model "
        f"(default {DEFAULT_TIME_BUDGET:g}; the whole default study, extension stage included, "
        f"took {MEASURED_MINUTES} minutes on tinyshakespeare in 2 processes of one thread (--processes' default) on "
        "a quiet 2-core machine, both readings and the attention records included, within the 15 minutes it is "
        "sized for on 2 CPU cores; 30 gives a quick look)",
    )
    max_steps: int | None = same_as(
        TrainOptions,
        "max_steps",
        help="train each model for exactly this many steps instead of --time-budget (reproducible; length.jsonl then "
        "records time_budget null); "
        f"with --task the only budget (default: each task's own where it has one, docs/tasks.md, else {TASK_STEPS} "
        f"for one task and {ALL_TASKS_STEPS} for several)",
    )
    train_length: int = same_as(
        TrainOptions,
        "context_length",
        help="context length T the models train on (tokens)",
        bounds=at_least(2, "tokens"),
    )
    multipliers: list[int] = option(
        [1, 2, 4, 8, 16],
        "evaluation lengths as multiples of T (with --task: sizes as multiples of "
        f"--task-length, default {' '.join(map(str, TASK_MULTIPLIERS))})",
        bounds=Bound(1, says="integers >= 1"),
        nargs="+",
        metavar="M",
    )
    schemes: list[str] = schemes_option(
        length_study_schemes,
        f"those the text study trains, in registration order: {' '.join(length_study_schemes())}; "
        f"with --task: {' '.join(task_study_schemes())}",
    )
    layouts: list[str] = layouts_option()
    block: str = same_as(TrainOptions, "block")
    qk_norm: bool = same_as(TrainOptions, "qk_norm")
    attention_sinks: bool = same_as(TrainOptions, "attention_sinks")
    output_gate: bool = same_as(TrainOptions, "output_gate")
    canon: str = same_as(TrainOptions, "canon")
    key_offset: bool = same_as(TrainOptions, "key_offset")
    value_embeddings: bool = same_as(TrainOptions, "value_embeddings")
    bigram_rows: int = same_as(TrainOptions, "bigram_rows")
    untied_head: bool = same_as(TrainOptions, "untied_head")
    smear_gate: bool = same_as(TrainOptions, "smear_gate")
    x0_skips: bool = same_as(TrainOptions, "x0_skips")
    embedding_norm: str = same_as(TrainOptions, "embedding_norm")
    embedding_scale: str = same_as(TrainOptions, "embedding_scale")
    embedding_lr: float | None = same_as(TrainOptions, "embedding_lr")
    rope_scalings: list[str] | None = option(
        None,
        "RoPE context-extension methods to evaluate the rope model under (default: "
        f"{' '.join(ROPE_SCALINGS)} when rope is among --schemes, else none)",
        nargs="*",
        choices=list(ROPE_SCALINGS),
        metavar="METHOD",
    )
    attention_scales: list[str] = option(
        [],
        "also score every base model with its query-key logits past T multiplied by log(n) / log(T) "
        "(octlm train --attention-scale; rows <scheme>+logn; within T the model is the same): "
        "log, or none of them (the default, to keep the default study's time)",
        nargs="*",
        choices=["log"],
        metavar="SCALE",
    )
    document_mask: bool = same_as(TrainOptions, "document_mask")
    vocab_size: int = same_as(TrainOptions, "vocab_size")
    tokenizer: str | None = same_as(TrainOptions, "tokenizer")
    d_model: int = same_as(TrainOptions, "d_model", help=_task_default("d_model", "model width C"))
    n_heads: int = same_as(TrainOptions, "n_heads")
    n_layers: int = same_as(TrainOptions, "n_layers", help=_task_default("n_layers", "transformer blocks"))
    batch_size: int = same_as(TrainOptions, "batch_size")
    learning_rate: float = same_as(
        TrainOptions, "learning_rate", help=_task_default("learning_rate", "peak AdamW learning rate")
    )
    optimizer: str = same_as(TrainOptions, "optimizer")
    muon_lr: float = same_as(TrainOptions, "muon_lr")
    muon_momentum: float = same_as(TrainOptions, "muon_momentum")
    muon_weight_decay: float = same_as(
        TrainOptions,
        "muon_weight_decay",
        help=_task_default(
            "muon_weight_decay", "Muon's decoupled weight decay, times the learning rate per step (--optimizer muon)"
        ),
    )
    eval_tokens: int = option(
        8192,
        "the batch size of evaluation, in tokens: each forward pass reads this / L windows of length L, so it "
        "sets speed and memory, not how many tokens are scored (every length reads the whole validation split); "
        "at least the longest evaluated length",
        bounds=at_least(1),
    )
    eval_stride: int | None = option(
        None,
        "the sliding-window reading: tokens between window starts at every length L, each window scoring "
        "only its last S targets, so every target after the first window sees at least L - S tokens (default: "
        "L / 2 at each length, at twice the cost of the non-overlapping reading; S >= L gives that reading)",
        bounds=at_least(1, "tokens"),
        metavar="S",
    )
    encoding: str = same_as(TrainOptions, "encoding")
    text_field: str = same_as(TrainOptions, "text_field")
    skip_bad_records: bool = same_as(TrainOptions, "skip_bad_records")
    log_to: list[str] = same_as(
        TrainOptions,
        "log_to",
        help="experiment trackers (tensorboard, mlflow) to log each model to, as its own run "
        "filed under the study folder's name (tensorboard --logdir STUDY shows them together); with --task in "
        "runs/<task>/<row>-seed<seed>/, with the final exact match at each size",
    )
    val_fraction: float = same_as(TrainOptions, "val_fraction")
    seed: int = same_as(TrainOptions, "seed", help="random seed, the same for every model")
    device: str = same_as(TrainOptions, "device")
    threads: int | None = same_as(TrainOptions, "threads")
    overwrite: bool = option(False, "replace an existing study folder at --out")
    shard: str | None = option(None, SHARD_HELP, metavar="I/N")
    processes: int | None = option(None, PROCESSES_HELP, metavar="N", bounds=at_least(1))
    seeds: int = option(
        1,
        "train every model (base and extended) with this many seeds (--seed, --seed + 1, ...); tables show "
        f"mean ± std (default: 1; with --task {TASK_SEEDS})",
        bounds=at_least(1),
    )
    extend_to: int = option(
        DEFAULT_EXTEND_TO,
        "extension stage: fine-tune a copy of each model at this multiple M of T "
        "(octlm train --init-from); 0 skips the stage",
        check=_check_extend_to,
        metavar="M",
    )
    extend_steps: int = option(
        100,
        "fine-tuning steps of each extension (curve points after 0, N/4, N/2, 3N/4 and N)",
        bounds=at_least(1),
        metavar="N",
    )
    extend_learning_rate: float = option(
        1e-3,
        "peak learning rate of the fine-tunes",
        bounds=Bound(0, math.inf, low_open=True, high_open=True, says="a finite number > 0"),
    )

    # Every position scheme's options, one flag each: each model takes those its scheme reads.
    scheme_options: SchemeOptions = group(SchemeOptions, handed_over=True)

    def resolved(self) -> LengthOptions:
        """A copy with the defaults that depend on other options filled in: what the study runs and records."""
        scalings = self.rope_scalings
        if scalings is None:
            # Unset means "every method some model of the study can take": none when no scheme takes one.
            scalings = scalings_taken(self.schemes, layout_rows(self.layouts))
        # --max-steps replaces the budget (train_options drops it), so the record must not claim one.
        budget = None if self.max_steps is not None else self.time_budget
        # The extension stage scores at M x T, so that length is among the evaluated ones (when some scheme has a
        # method).
        extending = self.extend_to and extension_rows(self)
        multipliers = sorted(set(self.multipliers) | ({self.extend_to} if extending else set()))
        return dataclasses.replace(self, rope_scalings=list(scalings), time_budget=budget, multipliers=multipliers)

    def rows(self) -> list[str]:
        """The labels of the study's base models, in table order: ``--schemes``, then ``--layouts``."""
        return [*self.schemes, *(row.label for row in layout_rows(self.layouts))]

    def layout(self, row: str) -> LayoutRow | None:
        """The layout row labelled ``row``, or ``None`` for a scheme row."""
        return next((layout for layout in layout_rows(self.layouts) if layout.label == row), None)

    def scalings_of(self, row: str) -> list[str]:
        """The ``--rope-scalings`` the base model ``row`` (a label of :meth:`rows`) is scored under."""
        layout = self.layout(row)
        taken = SCHEMES[row].scalings() if layout is None else row_scalings(layout)
        return [method for method in self.rope_scalings or [] if method in taken]

    def train_options(self, scheme: str, run_dir: Path, seed: int | None = None) -> TrainOptions:
        """The ``octlm train`` options of one model of the study (``scheme``: a label of :meth:`rows`): the shared ones
        by name, the rest fixed; a layout row's ``--layers`` and ``--position`` as
        :func:`~octlm.studies.shared.rows.layout_settings` gives them."""
        layout = self.layout(scheme)
        unread = scheme_options(scheme)[1] if layout is None else unread_options(layout)
        values = flat_values(self)
        shared = {
            f.metadata["same_as"]: values[f.name]
            for f in option_fields(type(self))
            if f.metadata.get("same_as") not in unread | {None}
        }
        shared.update(text=list(self.text), time_budget=None if self.max_steps is not None else self.time_budget)
        # the study folder's name: its models, grouped in the tracker
        shared["log_group"] = run_dir.parent.parent.resolve().name
        if seed is not None:
            shared["seed"] = seed
        shared.update({"position": scheme} if layout is None else layout_settings(layout))
        return TrainOptions.of(**shared, sample_tokens=0, out=str(run_dir), overwrite=True)


def check_options(opts: LengthOptions) -> None:
    """Reject options that cannot work, naming the flag; nothing is written before this passes."""
    if not opts.text:
        raise OctlmError(
            "--text: give at least one text file or folder, e.g. --text tinyshakespeare or --text stdlib (corpora "
            "built into octlm)"
        )
    if opts.out is None:
        raise OctlmError("--out: give the study folder to create, e.g. --out runs/length")
    if opts.max_steps is None and (opts.time_budget is None or not opts.time_budget > 0):
        raise OctlmError(
            f"--time-budget must be a positive number of seconds (or give --max-steps), got {opts.time_budget}"
        )
    check_fields(opts)
    check_schemes(opts.schemes)
    rows = layout_rows(opts.layouts)
    check_layouts(rows, opts.schemes, lambda row: [opts.train_options(row.label, Path(opts.out) / RUNS / row.label)])
    untaken = [m for m in opts.rope_scalings or [] if m not in scalings_taken(opts.schemes, rows)]
    if untaken:
        takers = schemes_taking(untaken[0])
        named = takers[0] if len(takers) == 1 else f"{', '.join(takers[:-1])} or {takers[-1]}"
        raise OctlmError(
            f"--rope-scalings needs the {named} model: add {takers[0]} to --schemes or pass "
            "--rope-scalings with no methods"
        )
    fields, values = {f.name: f for f in option_fields(type(opts))}, flat_values(opts)
    unread = [scheme_options(s)[1] for s in opts.schemes] + [unread_options(row) for row in rows]
    for name in set.intersection(*unread) & set(fields):
        if values[name] != option_default(fields[name]):
            raise OctlmError(
                f"{flag(name)} {values[name]} means nothing for --schemes "
                f"{' '.join(opts.schemes)}{' or their --layouts' if rows else ''}: none of them reads it; "
                f"drop {flag(name)}, or add a scheme that reads it"
            )
    for scheme in opts.schemes:
        try:
            train_opts = opts.train_options(scheme, Path(opts.out) / RUNS / scheme)
        except ValueError as err:  # the model refuses the shape (--d-model 30 --n-heads 4)
            raise refused(err, study_flag) from None
        check_train_options(train_opts)
    # The study files its models under its folder's name: a deleted experiment of that name is refused here, before
    # the study folder is made.
    check_experiment(list(opts.log_to), Path(opts.out).resolve().name, None, "--out", opts.out)


__all__ = [
    "DEFAULT_EXTEND_TO",
    "DEFAULT_TIME_BUDGET",
    "MEASURED_MINUTES",
    "RUNS",
    "LengthOptions",
    "check_options",
    "scalings_taken",
]
