"""Every option of every ``octlm`` command, declared once.

A command's options are one dataclass whose fields are made by
:func:`octlm.declare.option`:
each carries its default, help text, argparse shape (choices, nargs), its
bounds and, for ``octlm train``, what ``--resume`` may do with it. From that
one declaration come the command-line flags (:func:`octlm.cli.add_dataclass_options`),
the keys of a ``--config`` TOML file and of ``config.json`` (:func:`checked_values`),
the range checks and their messages (:func:`check_fields`) and the resume merge
(:func:`resume_merge`).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from octlm.declare import (
    REQUIRED, Bound, Resume, at_least, check_fields, finite, flag, option, option_default, same_as,
)
from octlm.data.text import check_encoding
from octlm.errors import OctlmError, RunError
from octlm.train.init_from import check_scaling_options
from octlm.model.decoder import ACTIVATIONS, DecoderConfig, DecoderFieldError
from octlm.model.positions.schemes import DEFAULT_BASE, ROPE_LAYOUTS, ROPE_SCALINGS, SCHEME_NAMES, SCHEMES, SINUSOIDAL_LAYOUTS, random_position_schemes
from octlm.run.folder import CONFIG, load_config
from octlm.data.tokenizer import MIN_VOCAB_SIZE

#: Steps of the main job when neither --max-steps nor --time-budget is given;
#: about four minutes on two CPU cores with the Day-1 model.
DEFAULT_MAX_STEPS = 1200
DEFAULT_WARMUP_STEPS = 50
#: torch.manual_seed takes a signed 64-bit number.
MAX_SEED = 2**63 - 1

#: The range torch.manual_seed takes.
SEED = Bound(low=0, high=MAX_SEED, says=f"between 0 and {MAX_SEED} (2**63 - 1)")


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
    return f"--overwrite with --resume {run_dir}: --overwrite would delete the run that --resume continues; drop one of them"


FREE, RETUNABLE = Resume.FREE, Resume.RETUNABLE


@dataclass
class TrainOptions:
    """Everything ``octlm train`` takes. Units are in each help text."""

    # data
    text: list[str] = option([], "UTF-8 text files or folders to train on (default: the Python standard library's .py files)",
                             resume_check=_text_on_resume, nargs="+", metavar="PATH")
    encoding: str = option("utf-8", "text encoding of the input files, e.g. cp1252", check=check_encoding)
    val_fraction: float = option(0.1, "fraction of each file (its end) held out for validation", bounds=Bound(0, 1, True, True))
    vocab_size: int = option(1024, "BPE vocabulary size in tokens, including <|endoftext|>",
                             bounds=Bound(MIN_VOCAB_SIZE, says=f"at least {MIN_VOCAB_SIZE} (the 256 byte values and <|endoftext|>)"))
    # model
    context_length: int = option(128, "tokens per training block (rows of a learned position table)")
    d_model: int = option(128, "model width C")
    n_heads: int = option(4, "attention heads")
    n_layers: int = option(2, "transformer blocks")
    dropout: float = option(0.0, "dropout probability")
    activation: str = option("gelu", "MLP nonlinearity: exact gelu, or gelu_tanh (GPT-2's gelu_new)", choices=list(ACTIVATIONS))
    position: str = option("learned", "position scheme", choices=SCHEME_NAMES)
    rope_theta: float = option(DEFAULT_BASE, "RoPE wavelength base")
    rope_layout: str = option("interleaved", "RoPE channel pairs: interleaved (2i, 2i+1) or half (i, i+d/2, GPT-NeoX/LLaMA)", choices=list(ROPE_LAYOUTS))
    partial_rotary_factor: float = option(1.0, "fraction of each head that RoPE rotates")
    sinusoidal_layout: str = option("interleaved", "sinusoidal columns: interleaved (sin, cos, ...) or concatenated ([sin | cos])", choices=list(SINUSOIDAL_LAYOUTS))
    t5_num_buckets: int = option(32, "distance buckets of the t5 bias (Raffel et al. 2020)", bounds=at_least(2))
    t5_max_distance: int = option(128, "distance (tokens) where the t5 bias's last bucket starts", bounds=at_least(2, "tokens"))
    randomize_positions: int = option(1, "train at positions drawn from FACTOR x context length (Ruoss et al. 2023; "
                                      f"{', '.join(random_position_schemes())}); 1: off. Evaluation and sampling use positions 0, 1, 2, ...", bounds=at_least(1), metavar="FACTOR")
    # fine-tuning from a run (octlm.train.init_from)
    init_from: str | None = option(None, "start from this run's weights and tokenizer, with a fresh optimizer and schedule; "
                                   "the model shape is the source's, --context-length and the data may change", metavar="RUN_DIR")
    rope_scaling: str | None = option(None, "train and run a RoPE model under this scaling (saved in config.json, so sample, "
                                      "evaluation and export reproduce it)", choices=list(ROPE_SCALINGS), metavar="METHOD")
    rope_factor: float | None = option(None, "scale of --rope-scaling: new length / trained length (dynamic-ntk: default 1)",
                                       bounds=Bound(1, math.inf, high_open=True, says="a finite number >= 1"))
    # optimisation
    batch_size: int = option(32, "blocks per step (per process)", bounds=at_least(1), resume=FREE)
    learning_rate: float = option(5e-3, "peak AdamW learning rate", bounds=finite(low_open=True), resume=RETUNABLE)
    min_lr_ratio: float = option(0.1, "final learning rate as a fraction of the peak (cosine decay)", bounds=Bound(0, 1))
    warmup_steps: int | None = option(None, f"steps of linear warmup, fewer than the run's steps (default: {DEFAULT_WARMUP_STEPS}, "
                                      f"or a tenth of the run when it has {DEFAULT_WARMUP_STEPS} steps or fewer)", bounds=at_least(0))
    weight_decay: float = option(1.0, "AdamW weight decay on matrices (not on norms, biases)", bounds=finite(note="(0 turns it off)"))
    beta1: float = option(0.9, "AdamW beta1", bounds=Bound(0, 1, high_open=True))
    beta2: float = option(0.99, "AdamW beta2", bounds=Bound(0, 1, high_open=True))
    grad_clip: float = option(1.0, "clip the global gradient norm to this (0 disables)", bounds=finite(note="(0 turns it off)"), resume=RETUNABLE)
    # length of the run
    max_steps: int | None = option(None, f"optimizer steps (default: {DEFAULT_MAX_STEPS} unless --time-budget is given; with --resume: the run's total)",
                                   bounds=at_least(1), resume=FREE)
    time_budget: float | None = option(None, "stop cleanly after this many seconds of training and save (with --resume: the run's total)", resume=FREE,
                                       bounds=finite(True, says="a finite number of seconds > 0 (leave it out to stop at --max-steps)"))
    save_every: int = option(200, "save a checkpoint (checkpoint.safetensors, model.safetensors) every this many steps; 0: only at the end",
                             bounds=at_least(0), resume=FREE)
    # evaluation and logging
    eval_interval: int = option(200, "evaluate every this many steps", bounds=at_least(1), resume=FREE)
    eval_blocks: int = option(64, "validation blocks per periodic evaluation (the final one uses all)", bounds=at_least(1), resume=FREE)
    final_eval_blocks: int | None = option(None, "cap on validation blocks of the final evaluation (default: all)", bounds=at_least(1), resume=FREE)
    log_interval: int = option(20, "write a training line to metrics.jsonl every this many steps", bounds=at_least(1), resume=FREE)
    sample_tokens: int = option(160, "tokens of the sample printed at the end (0: none)", bounds=at_least(0), resume=FREE)
    # machine
    seed: int = option(1337, "random seed (weights, data order, dropout)", bounds=SEED)
    device: str = option("auto", "auto (GPU when there is one), cpu, cuda, cuda:N or mps", resume=FREE)
    dtype: str = option("auto", "compute dtype: auto (bfloat16 on CUDA, float32 elsewhere), float32 or bfloat16", choices=["auto", "float32", "bfloat16"], resume=FREE)
    compile: str = option("auto", "torch.compile the model for training and evaluation: auto (on with CUDA for a step of 1e12 FLOPs "
                          "or more, 6 x parameters x tokens per step, in a run of 1000 steps or 300 s or more; else off), on (--compile alone) or off", choices=["auto", "on", "off"], nargs="?", const="on", resume=FREE)
    deterministic: bool = option(False, "deterministic kernels (torch.use_deterministic_algorithms): the same bits on every GPU run, "
                                 "slower; CPU runs are bitwise reproducible without it", resume=FREE)
    threads: int | None = option(None, "CPU threads for torch (default: torch's choice), at most this machine's CPU count",
                                 bounds=Bound(1, os.cpu_count() or 1, note="(this machine's CPUs)"), resume=FREE)
    # output
    out: str | None = option(None, "run folder to create (default: runs/<date>-<time>)", resume=Resume.RUN_FOLDER, resume_check=_out_on_resume)
    overwrite: bool = option(False, "replace an existing run folder at --out", resume=Resume.RUN_FOLDER, resume_check=_overwrite_on_resume)

    def model_config(self, vocab_size: int) -> DecoderConfig:
        """The decoder shape these options ask for, with the tokenizer's actual vocabulary size."""
        names = {f.name for f in dataclasses.fields(DecoderConfig)} - {"vocab_size"}
        return DecoderConfig(vocab_size=vocab_size, **{n: getattr(self, n) for n in names})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def resume_policy(cls=TrainOptions) -> dict[str, Resume]:
    """``{option: what --resume may do with it}``, read from the declarations."""
    return {f.name: f.metadata["resume"] for f in dataclasses.fields(cls)}


def changeable_on_resume(cls=TrainOptions) -> frozenset[str]:
    """The options a resumed run may take anew: those left out of a checkpoint's config digest."""
    return frozenset(name for name, policy in resume_policy(cls).items() if policy is not Resume.FIXED)


def scheme_options(position: str) -> tuple[set[str], set[str]]:
    """``(read, unread)``: the scheme options (``PositionScheme.reads`` of any scheme) scheme ``position`` reads, and the rest."""
    every = {name for cls in SCHEMES.values() for name in cls.reads}
    read = set(SCHEMES[position].reads) if position in SCHEMES else every
    return read, every - read


def check_scheme_options(opts) -> None:
    """Refuse a scheme option set away from its default for a scheme that does not read it (``--rope-layout`` with learned).

    Raises:
        OctlmError: naming the option, the scheme and the schemes that read it.
    """
    defaults = {f.name: option_default(f) for f in dataclasses.fields(opts)}
    for name in sorted(scheme_options(opts.position)[1]):
        if name in defaults and getattr(opts, name) != defaults[name]:
            names = [n for n, cls in SCHEMES.items() if name in cls.reads]
            readers = names[0] + " reads" if len(names) == 1 else ", ".join(names[:-1]) + f" and {names[-1]} read"
            raise OctlmError(f"{flag(name)} {getattr(opts, name)} means nothing for --position {opts.position}: only {readers} "
                             f"it; drop {flag(name)}, or choose --position {names[0]}")


def resolved_max_steps(opts: TrainOptions) -> int | None:
    """The run's step limit: ``--max-steps``, else :data:`DEFAULT_MAX_STEPS` unless a ``--time-budget`` limits it (then ``None``)."""
    if opts.max_steps is not None:
        return opts.max_steps
    return None if opts.time_budget else DEFAULT_MAX_STEPS


def resolved_warmup_steps(opts: TrainOptions) -> int:
    """The run's warm-up: ``--warmup-steps``, else :data:`DEFAULT_WARMUP_STEPS`, or a tenth of a run that short or shorter.

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


def check_options(opts: TrainOptions) -> None:
    """Reject option values that cannot work, naming the flag; nothing is read or written before this passes.

    Raises:
        OctlmError: for a value outside its declared bounds, a warm-up not
            shorter than the run, an unknown text encoding, a scheme option the
            chosen scheme does not read (:func:`check_scheme_options`), or a model shape
            :class:`~octlm.model.decoder.DecoderConfig` refuses (named by its flag:
            ``--d-model=30 is not divisible ...``).
    """
    for name, value, give in (("--out", opts.out, "a folder for the run, e.g. runs/NAME"), ("--init-from", opts.init_from, "the run folder to start from")):
        if value == "":  # argparse takes '' as a value, which would quietly mean '.' or nothing
            raise OctlmError(f"{name} got an empty path ''; give {give}, or leave {name} out")
    check_fields(opts)
    check_scheme_options(opts)
    check_scaling_options(opts)
    steps, warmup = resolved_max_steps(opts), resolved_warmup_steps(opts)
    if steps is not None and warmup >= steps:
        raise OctlmError(
            f"--warmup-steps {warmup} is not below the run's {steps} steps (--max-steps): the learning rate would stop at "
            f"{min(steps, warmup)}/{warmup} of its peak and never decay, unlike the schedule --help describes; "
            f"give --warmup-steps below {steps} (a tenth of the run, {steps // 10}, is common) or a larger --max-steps"
        )
    try:
        opts.model_config(vocab_size=opts.vocab_size)
    except DecoderFieldError as err:
        raise OctlmError(flag(err.field) + err.rest) from None
    except ValueError as err:
        raise OctlmError(str(err)) from None


def given_options(opts: TrainOptions) -> set[str]:
    """Options that differ from their defaults: what a Python caller asked for."""
    defaults = TrainOptions()
    return {f.name for f in dataclasses.fields(TrainOptions) if getattr(opts, f.name) != getattr(defaults, f.name)}


def _must_match(name: str, value, then, run_dir: Path) -> str | None:
    if value == then:
        return None
    return (
        f"{flag(name)} {value} contradicts the run being resumed, which has {name}={then!r} ({run_dir / 'config.json'}); "
        f"a resumed run keeps its model shape, data, seed and optimiser settings: drop {flag(name)}, or start a new run with --out"
    )


def stored_options(run_dir: Path) -> dict:
    """The ``train`` section of a run's ``config.json``, checked and keyed by option name.

    Raises:
        RunError: naming the file when the section is not an object or holds
            a value of the wrong type (the file is damaged).
    """
    where = f"--resume {run_dir}: {run_dir / CONFIG}"
    stored = load_config(run_dir).get("train", {})
    if not isinstance(stored, dict):
        raise RunError(f"{where}: its \"train\" section must be an object of options, got {type(stored).__name__}; the file is damaged")
    if isinstance(stored.get("rope_scaling"), dict):  # stored resolved (octlm.train.init_from.scaling_record); the option is its method
        stored = {**stored, "rope_scaling": stored["rope_scaling"].get("method")}
    try:
        return checked_values(stored, where, stored=True)
    except OctlmError as err:
        raise RunError(f"{err} (the file is damaged: put the run's own config.json back, or start a new run with --out)") from None


def resume_options(run_dir: Path, opts: TrainOptions, given: set[str]) -> tuple[TrainOptions, list[str]]:
    """The options of a resumed run: the run's own, with the ones given now that its declaration lets change.

    Each option given now goes by its :class:`Resume` policy: ``FIXED`` ones
    must equal the run's, ``FREE`` and ``RETUNABLE`` ones replace it, and
    ``RUN_FOLDER`` ones may only name the run itself.

    Returns ``(options, changes)`` where ``changes`` lists, for the person,
    re-tuned options that make the run differ from an uninterrupted one.

    Raises:
        OctlmError: when an option given now contradicts the run (a different
            model shape, data, seed or optimiser setting), naming it and the
            run's value; or for ``--overwrite`` or another ``--out``.
        RunError: when the run's ``config.json`` is damaged.
    """
    stored = stored_options(run_dir)
    merged, changes = dict(stored), []
    fields = {f.name: f for f in dataclasses.fields(TrainOptions)}
    for name in sorted(given):
        meta = fields[name].metadata
        value, then = getattr(opts, name), stored.get(name, option_default(fields[name]))
        refuse = meta["resume_check"] or (_must_match if meta["resume"] is Resume.FIXED else None)
        if refuse is not None and (message := refuse(name, value, then, run_dir)):
            raise OctlmError(message)
        if meta["resume"] is Resume.RETUNABLE and value != then:
            changes.append(f"{flag(name)} {value} (was {then})")
        if meta["resume"] in (Resume.FREE, Resume.RETUNABLE):
            merged[name] = value
    merged.update(out=str(run_dir), overwrite=False)
    return TrainOptions(**merged), changes


def field_types(cls) -> dict[str, tuple[type, bool, bool]]:
    """``{field: (item type, is a list, may be None)}`` for an options dataclass."""
    out = {}
    for name, hint in typing.get_type_hints(cls).items():
        optional = False
        if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
            optional = type(None) in typing.get_args(hint)
            hint = next(a for a in typing.get_args(hint) if a is not type(None))
        is_list = typing.get_origin(hint) is list
        out[name] = (typing.get_args(hint)[0] if is_list else hint, is_list, optional)
    return out


def _is_a(value, kind: type) -> bool:
    if isinstance(value, bool):  # bool is an int to Python, never to a person
        return kind is bool
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(value, kind)


def checked_values(values: Mapping, where: str, cls=TrainOptions, stored: bool = False) -> dict:
    """Option values read from a file, checked against the fields of ``cls`` and keyed by field name.

    Keys may be spelled with dashes or underscores (``max-steps``,
    ``max_steps``). Values are shown back as JSON (``true``, ``[5]``), the
    way the person wrote them. ``stored`` marks a run's own ``config.json``:
    there ``null`` stands for an unset option, an empty ``text`` list for the
    default corpus, and keys this version no longer has are ignored.

    Raises:
        OctlmError: naming ``where`` and the key: an unknown key (with the
            closest option name), one option given twice, a value of the
            wrong type or outside the option's choices.
    """
    kinds = field_types(cls)
    choices = {f.name: f.metadata["cli"].get("choices") for f in dataclasses.fields(cls)}
    checked: dict = {}
    spelled: dict[str, str] = {}
    for key, value in values.items():
        name = str(key).replace("-", "_")
        shown = json.dumps(value, ensure_ascii=False, default=str)
        if name not in kinds:
            if stored:
                continue
            close = difflib.get_close_matches(name, kinds, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise OctlmError(f"{where}: unknown key {key!r}; {hint}the keys are this command's options: {', '.join(sorted(kinds))}")
        if name in spelled:
            raise OctlmError(f"{where}: {spelled[name]!r} and {key!r} are the same option; keep one of them")
        spelled[name] = key
        kind, is_list, optional = kinds[name]
        if value is None and stored and (optional or is_list):
            checked[name] = [] if is_list else None
            continue
        if is_list and not isinstance(value, list):
            value = [value]
        items = value if is_list else [value]
        if not all(_is_a(v, kind) for v in items):
            expected = f"a list of {kind.__name__}" if is_list else kind.__name__
            raise OctlmError(f"{where}: key {key!r} must be {expected}, got {shown}")
        if is_list and not items and not stored:
            raise OctlmError(f"{where}: key {key!r} is an empty list; give at least one value, or leave the key out for the default")
        if choices[name] and value not in choices[name]:
            raise OctlmError(f"{where}: key {key!r} must be one of {', '.join(choices[name])}, got {shown}")
        checked[name] = kind(value) if kind is float else value
    return checked


def check_seed(seed: int, flag: str = "--seed") -> None:
    """Raise :class:`OctlmError` unless ``0 <= seed <= MAX_SEED``."""
    if not SEED.admits(seed):
        raise OctlmError(f"{flag} must be {SEED.phrase()}, got {seed}")


__all__ = [
    "DEFAULT_MAX_STEPS", "DEFAULT_WARMUP_STEPS", "MAX_SEED", "REQUIRED", "Bound", "Resume", "TrainOptions", "at_least", "check_fields",
    "check_options", "check_scheme_options", "check_seed", "checked_values", "field_types", "finite", "changeable_on_resume", "flag",
    "given_options", "option", "option_default", "resolved", "resolved_max_steps", "resolved_warmup_steps", "resume_options",
    "resume_policy", "same_as", "scheme_options", "stored_options",
]
