"""The options of ``octlm train``: :class:`TrainOptions`, and the step limit and warm-up a run resolves them to.

Each option is declared once (:func:`octlm.declare.option`): its default, help
text, argparse shape, bounds and what ``--resume`` may do with it. The model's
shape and position options are not declared here: :class:`TrainOptions` nests
the model's own :class:`~octlm.model.DecoderConfig`, whose fields (and the
position schemes' options) are flags of ``octlm train`` like the rest. From
the declarations come the flags (:func:`octlm.cli.add_dataclass_options`), the
keys of a ``--config`` TOML file and of ``config.json``
(:func:`octlm.option_values.checked_values`), the range checks and their messages
(:func:`octlm.declare.check_fields`) and the resume merge
(:mod:`octlm.train.resume`). Other commands declare their options beside the
function that takes them, sharing these with :func:`octlm.declare.same_as`.
The checks across options (a scheme option the scheme does not read, a
warm-up as long as the run) are :mod:`octlm.train.option_checks`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

from octlm.data.text import check_encoding
from octlm.data.tokenizer import MIN_VOCAB_SIZE
from octlm.declare import Bound, Resume, at_least, build, finite, flat_values, nested, option, option_fields
from octlm.errors import OctlmError
from octlm.model import DecoderConfig
from octlm.model.positions import ROPE_SCALINGS
from octlm.train.device import available_cpus
from octlm.train.tracking import TRACKERS, check_log_group, check_trackers

#: The optimizers --optimizer names (octlm.train.optim.make_optimizer builds them).
OPTIMIZERS = ("adamw", "muon")
#: Options that only Muon reads: refused away from their defaults with --optimizer adamw.
MUON_OPTIONS = ("muon_lr", "muon_momentum", "muon_weight_decay")
#: What a run whose config.json has no key for an option trained with, where that differs from today's default.
#: Runs made before --optimizer existed (issue 26) trained with AdamW; Muon became the default after, and such
#: a run must still resume as it trained (octlm.train.resume.stored_options fills these in).
UNRECORDED = {"optimizer": "adamw"}

#: Steps of the main job when neither --max-steps nor --time-budget is given;
#: about four minutes on two CPU cores with the Day-1 model.
DEFAULT_MAX_STEPS = 1200
DEFAULT_WARMUP_STEPS = 50
#: torch.manual_seed takes a signed 64-bit number.
MAX_SEED = 2**63 - 1

#: The range torch.manual_seed takes.
SEED = Bound(low=0, high=MAX_SEED, says=f"between 0 and {MAX_SEED} (2**63 - 1)")


def _check_text_field(name: str) -> None:
    if not name:
        raise OctlmError("--text-field must name a field, got ''; leave it out for 'text'")


def _text_on_resume(name: str, value, then, run_dir: Path) -> str | None:
    if [str(p) for p in value] == list(then or []):
        return None
    return (
        f"--text {' '.join(map(str, value))} with --resume {run_dir}: a resumed run trains on its own token files "
        f"(from {' '.join(then) if then else 'the default corpus'}); drop --text, or start a new run with --out"
    )


def _out_on_resume(name: str, value, then, run_dir: Path) -> str | None:
    if value is None or Path(value).resolve() == run_dir.resolve():
        return None
    return f"--out {value} with --resume {run_dir}: a resumed run stays in its own folder; drop --out"


def _overwrite_on_resume(name: str, value, then, run_dir: Path) -> str | None:
    if not value:
        return None
    return (
        f"--overwrite with --resume {run_dir}: --overwrite would delete the run that --resume continues; "
        "drop one of them"
    )


FREE, RETUNABLE = Resume.FREE, Resume.RETUNABLE


@dataclass
class TrainOptions:
    """Everything ``octlm train`` takes. Units are in each help text."""

    # data
    text: list[str] = option(
        [],
        "text files, JSON Lines (.jsonl, .json), Parquet or CSV files (also .gz, .xz, .bz2, .zst) or folders "
        "of them to train on (default: the Python standard library's .py files); inside a folder, a record file "
        "without the --text-field (a package.json, a results.csv) is skipped and listed in manifest.json, and "
        "symbolic links to folders are followed",
        resume_check=_text_on_resume,
        nargs="+",
        metavar="PATH",
    )
    encoding: str = option("utf-8", "text encoding of the input files, e.g. cp1252", check=check_encoding)
    text_field: str = option(
        "text",
        "the field (JSON Lines, JSON) or column (CSV, Parquet) that holds each record's text",
        metavar="NAME",
        check=_check_text_field,
    )
    skip_bad_records: bool = option(
        False,
        "skip records that give no text (not JSON, no --text-field, not a string) and count "
        "them in manifest.json and the report, instead of stopping at the first",
    )
    val_fraction: float = option(
        0.1, "fraction of each file (its end) held out for validation", bounds=Bound(0, 1, True, True)
    )
    vocab_size: int = option(
        1024,
        "BPE vocabulary size in tokens, including <|endoftext|>",
        bounds=Bound(MIN_VOCAB_SIZE, says=f"at least {MIN_VOCAB_SIZE} (the 256 byte values and <|endoftext|>)"),
    )
    tokenizer: str | None = option(
        None,
        "a tokenizer.json to use instead of training one (byte-level BPE: GPT-2's, Llama 3's, Qwen's, SmolLM's); "
        "the model's vocabulary is then the file's, and --vocab-size is not read",
        metavar="FILE",
    )
    # model: its shape and position scheme, with each scheme's options (the model's vocab_size is the tokenizer's)
    model: DecoderConfig = nested(DecoderConfig)
    # fine-tuning from a run (octlm.train.init_from)
    init_from: str | None = option(
        None,
        "start from this run's weights and tokenizer, with a fresh optimizer and schedule; "
        "the model shape is the source's, --context-length and the data may change",
        metavar="RUN_DIR",
    )
    rope_scaling: str | None = option(
        None,
        "train and run a RoPE model under this scaling (saved in config.json, so sample, "
        "evaluation and export reproduce it)",
        choices=list(ROPE_SCALINGS),
        metavar="METHOD",
    )
    rope_factor: float | None = option(
        None,
        "scale of --rope-scaling: new length / trained length (dynamic-ntk: default 1)",
        bounds=Bound(1, math.inf, high_open=True, says="a finite number >= 1"),
    )
    # optimisation
    batch_size: int = option(32, "blocks per step (per process)", bounds=at_least(1), resume=FREE)
    learning_rate: float = option(5e-3, "peak AdamW learning rate", bounds=finite(low_open=True), resume=RETUNABLE)
    embedding_lr: float | None = option(
        None,
        "peak AdamW learning rate of the token table, and so of the tied head, on the same warm-up and decay "
        "(default: --learning-rate; under Muon the table stays on AdamW either way: docs/training.md)",
        bounds=finite(low_open=True),
    )
    min_lr_ratio: float = option(
        0.1, "final learning rate as a fraction of the peak (cosine decay)", bounds=Bound(0, 1)
    )
    warmup_steps: int | None = option(
        None,
        f"steps of linear warmup, fewer than the run's steps (default: {DEFAULT_WARMUP_STEPS}, "
        f"or a tenth of the run when it has {DEFAULT_WARMUP_STEPS} steps or fewer)",
        bounds=at_least(0),
    )
    weight_decay: float = option(
        1.0, "AdamW weight decay on matrices (not on norms, biases)", bounds=finite(note="(0 turns it off)")
    )
    beta1: float = option(0.9, "AdamW beta1", bounds=Bound(0, 1, high_open=True))
    beta2: float = option(0.99, "AdamW beta2", bounds=Bound(0, 1, high_open=True))
    optimizer: str = option(
        "muon",
        "muon: Muon on the blocks' weight matrices, AdamW (the options above) on the token table, position "
        "parameters, biases and norm gains (1.513 bits per byte after the main job's 1,200 steps on one thread, AdamW "
        "1.629; 2.129 after 21 passes over tinyshakespeare, AdamW 2.148: docs/training.md); adamw: AdamW on every "
        "parameter",
        choices=list(OPTIMIZERS),
    )
    muon_lr: float = option(
        0.02,
        "peak Muon learning rate (--optimizer muon), on the same warm-up and cosine decay",
        bounds=finite(low_open=True),
        resume=RETUNABLE,
    )
    muon_momentum: float = option(
        0.95, "Muon's Nesterov momentum (--optimizer muon)", bounds=Bound(0, 1, high_open=True)
    )
    muon_weight_decay: float = option(
        0.25,
        "Muon's decoupled weight decay, times the learning rate per step (--optimizer muon): 0.25 shrinks the "
        "blocks' matrices by 0.02 x 0.25 = 0.005 per step at the peak, as AdamW's 5e-3 x 1.0 does; without it Muon "
        "over-fitted text read 21 times and fell behind AdamW (docs/training.md)",
        bounds=finite(note="(0 turns it off)"),
    )
    grad_clip: float = option(
        1.0,
        "clip the global gradient norm to this (0 disables)",
        bounds=finite(note="(0 turns it off)"),
        resume=RETUNABLE,
    )
    # length of the run
    max_steps: int | None = option(
        None,
        f"optimizer steps (default: {DEFAULT_MAX_STEPS} unless --time-budget is given; with --resume: the run's total)",
        bounds=at_least(1),
        resume=FREE,
    )
    time_budget: float | None = option(
        None,
        "stop cleanly after this many seconds of training and save (with --resume: the run's total)",
        resume=FREE,
        bounds=finite(True, says="a finite number of seconds > 0 (leave it out to stop at --max-steps)"),
    )
    save_every: int = option(
        200,
        "save a checkpoint (checkpoint.safetensors, model.safetensors) every this many steps; 0: only at the end",
        bounds=at_least(0),
        resume=FREE,
    )
    # evaluation and logging
    eval_interval: int = option(200, "evaluate every this many steps", bounds=at_least(1), resume=FREE)
    eval_blocks: int = option(
        1536,
        "validation blocks per periodic evaluation, one drawn from each of as many equal stretches of the split "
        "(the same blocks every time); its bits per byte is printed with its standard error, about 0.007 on the "
        "main job (the final evaluation uses all)",
        bounds=at_least(1),
        resume=FREE,
    )
    final_eval_blocks: int | None = option(
        None,
        "cap on validation blocks of the final evaluation, drawn as --eval-blocks are (default: all)",
        bounds=at_least(1),
        resume=FREE,
    )
    log_to: list[str] = option(
        [],
        "experiment trackers to log to beside metrics.jsonl: tensorboard (tensorboard/ in the run folder), "
        "mlflow (a local store, mlruns/ in the run folder, or $MLFLOW_TRACKING_URI), each named once; each is an "
        "extra: pip install 'octlm[tensorboard]'",
        nargs="+",
        choices=list(TRACKERS),
        check=check_trackers,
        resume=FREE,
        metavar="TRACKER",
    )
    log_group: str = option(
        "octlm",
        "the tracker experiment (MLflow) the run is filed under, at most 500 characters; a study files its models "
        "under its folder name",
        check=check_log_group,
        resume=FREE,
        metavar="NAME",
    )
    log_interval: int = option(
        20, "write a training line to metrics.jsonl every this many steps", bounds=at_least(1), resume=FREE
    )
    sample_tokens: int = option(
        160, "tokens of the sample printed at the end (0: none)", bounds=at_least(0), resume=FREE
    )
    # machine
    seed: int = option(1337, "random seed (weights, data order, dropout)", bounds=SEED)
    device: str = option("auto", "auto (GPU when there is one), cpu, cuda, cuda:N or mps", resume=FREE)
    dtype: str = option(
        "auto",
        "compute dtype: auto (bfloat16 on CUDA, float32 elsewhere), float32 or bfloat16",
        choices=["auto", "float32", "bfloat16"],
        resume=FREE,
    )
    compile: str = option(
        "auto",
        "torch.compile the model for training and evaluation: "
        "auto (on with CUDA for a step of 1e12 FLOPs or more, 6 x parameters x tokens per step, "
        "in a run of 1000 steps or 300 s or more; else off), on (--compile alone) or off",
        choices=["auto", "on", "off"],
        nargs="?",
        const="on",
        resume=FREE,
    )
    deterministic: bool = option(
        False,
        "deterministic kernels (torch.use_deterministic_algorithms): the same bits on every run on one "
        "GPU, slower; CPU runs are bitwise reproducible without it on one machine with one --threads",
        resume=FREE,
    )
    threads: int | None = option(
        None,
        "CPU threads for torch, at most the CPUs this process may use (default: the CPUs idle when the command "
        "starts, watched for 0.2 s, so a quiet machine uses all of them and a busy CPU is left to its work, "
        "which would stall every step; OMP_NUM_THREADS when set; the model line says which and why)",
        bounds=Bound(1, available_cpus(), note="(the CPUs this process may use)"),
        resume=FREE,
    )
    # output
    out: str | None = option(
        None,
        "run folder to create (default: runs/<date>-<time>)",
        resume=Resume.RUN_FOLDER,
        resume_check=_out_on_resume,
    )
    overwrite: bool = option(
        False, "replace an existing run folder at --out", resume=Resume.RUN_FOLDER, resume_check=_overwrite_on_resume
    )

    @classmethod
    def of(cls, **options) -> TrainOptions:
        """Options from flat names, the model's among them: ``TrainOptions.of(d_model=64, max_steps=100)``."""
        return build(cls, options)

    def model_config(self, vocab_size: int, eot_id: int = 0) -> DecoderConfig:
        """The decoder these options ask for, with the tokenizer's actual vocabulary size and ``<|endoftext|>`` id
        (``--document-mask`` reads it); the rest of the model was checked when these options were made."""
        return self.model.with_vocabulary(vocab_size, eot_id)

    def to_dict(self) -> dict:
        """Every option as ``{name: value}``, the model's flat among them (as flags and TOML keys name them)."""
        return flat_values(self)

    def train_section(self) -> dict:
        """The options ``config.json`` keeps under ``train``: all but the model's, which its ``model`` section holds."""
        return {name: value for name, value in flat_values(self).items() if name not in model_options()}


def model_options() -> frozenset[str]:
    """The options the nested DecoderConfig declares (the model's shape, its scheme and the schemes' options), read
    now: a plug-in's scheme options are among them once it is imported."""
    return frozenset(f.name for f in option_fields(DecoderConfig))


#: :func:`model_options` when this module was imported (the built-in schemes' and the installed entry points').
MODEL_OPTIONS = model_options()


def resolved_max_steps(opts: TrainOptions) -> int | None:
    """The run's step limit: ``--max-steps``, else :data:`DEFAULT_MAX_STEPS` unless a ``--time-budget`` limits it (then
    ``None``)."""
    if opts.max_steps is not None:
        return opts.max_steps
    return None if opts.time_budget else DEFAULT_MAX_STEPS


def resolved_warmup_steps(opts: TrainOptions) -> int:
    """The run's warm-up: ``--warmup-steps``, else :data:`DEFAULT_WARMUP_STEPS`, or a tenth of a run that short or
    shorter.

    A default warm-up as long as the run would leave the learning rate below
    its peak throughout and never decay (issue 10).
    """
    if opts.warmup_steps is not None:
        return opts.warmup_steps
    steps = resolved_max_steps(opts)
    return steps // 10 if steps is not None and steps <= DEFAULT_WARMUP_STEPS else DEFAULT_WARMUP_STEPS


def resolved(opts: TrainOptions) -> TrainOptions:
    """``opts`` with the step limit and the warm-up the run uses written in: what its config.json records."""
    return dataclasses.replace(opts, max_steps=resolved_max_steps(opts), warmup_steps=resolved_warmup_steps(opts))


def given_options(opts: TrainOptions) -> set[str]:
    """Options that differ from their defaults: what a Python caller asked for."""
    values, defaults = opts.to_dict(), TrainOptions().to_dict()
    return {name for name, value in values.items() if value != defaults[name]}


__all__ = [
    "DEFAULT_MAX_STEPS",
    "DEFAULT_WARMUP_STEPS",
    "MAX_SEED",
    "MODEL_OPTIONS",
    "model_options",
    "MUON_OPTIONS",
    "OPTIMIZERS",
    "UNRECORDED",
    "TrainOptions",
    "given_options",
    "resolved",
    "resolved_max_steps",
    "resolved_warmup_steps",
]
