"""Training options: one dataclass is the CLI flags, the TOML keys and config.json.

Each field's metadata carries its help text, so ``octlm train --help``, a
``--config FILE.toml`` and the ``train`` section of a run's ``config.json``
cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field

from octlm.errors import OctlmError

from octlm.model import ACTIVATIONS, DecoderConfig
from octlm.positions import DEFAULT_BASE, ROPE_LAYOUTS, SCHEME_NAMES, SINUSOIDAL_LAYOUTS

#: Steps of the main job when neither --max-steps nor --time-budget is given;
#: about four minutes on two CPU cores with the Day-1 model.
DEFAULT_MAX_STEPS = 1200


def option(default, help: str, **meta):
    """A dataclass field that is also a CLI flag: ``help`` and argparse keywords (``choices``, ``nargs``) in its metadata.

    A callable ``default`` is called for each new value (a default read from a registry when it is used).
    """
    if callable(default):
        return field(default_factory=default, metadata={"help": help, **meta})
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": help, **meta})
    return field(default=default, metadata={"help": help, **meta})


@dataclass
class TrainOptions:
    """Everything ``octlm train`` takes. Units are in each help text."""

    # data
    text: list[str] = option([], "UTF-8 text files or folders to train on (default: the Python standard library's .py files)", nargs="+", metavar="PATH")
    encoding: str = option("utf-8", "text encoding of the input files, e.g. cp1252")
    val_fraction: float = option(0.1, "fraction of each file (its end) held out for validation")
    vocab_size: int = option(1024, "BPE vocabulary size in tokens, including <|endoftext|>")
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
    # optimisation
    batch_size: int = option(32, "blocks per step (per process)")
    learning_rate: float = option(5e-3, "peak AdamW learning rate")
    min_lr_ratio: float = option(0.1, "final learning rate as a fraction of the peak (cosine decay)")
    warmup_steps: int = option(50, "steps of linear warmup")
    weight_decay: float = option(1.0, "AdamW weight decay on matrices (not on norms, biases)")
    beta1: float = option(0.9, "AdamW beta1")
    beta2: float = option(0.99, "AdamW beta2")
    grad_clip: float = option(1.0, "clip the global gradient norm to this (0 disables)")
    # length of the run
    max_steps: int | None = option(None, f"optimizer steps (default: {DEFAULT_MAX_STEPS} unless --time-budget is given; with --resume: the run's total)")
    time_budget: float | None = option(None, "stop cleanly after this many seconds of training and save (with --resume: the run's total)")
    save_every: int = option(200, "save a checkpoint (checkpoint.safetensors, model.safetensors) every this many steps; 0: only at the end")
    # evaluation and logging
    eval_interval: int = option(200, "evaluate every this many steps")
    eval_blocks: int = option(64, "validation blocks per periodic evaluation (the final one uses all)")
    final_eval_blocks: int | None = option(None, "cap on validation blocks of the final evaluation (default: all)")
    log_interval: int = option(20, "write a training line to metrics.jsonl every this many steps")
    sample_tokens: int = option(160, "tokens of the sample printed at the end (0: none)")
    # machine
    seed: int = option(1337, "random seed (weights, data order, dropout)")
    device: str = option("auto", "auto (GPU when there is one), cpu, cuda, cuda:N or mps")
    dtype: str = option("auto", "compute dtype: auto (bfloat16 on CUDA, float32 elsewhere), float32 or bfloat16", choices=["auto", "float32", "bfloat16"])
    threads: int | None = option(None, "CPU threads for torch (default: torch's choice)")
    # output
    out: str | None = option(None, "run folder to create (default: runs/<date>-<time>)")
    overwrite: bool = option(False, "replace an existing run folder at --out")

    def model_config(self, vocab_size: int) -> DecoderConfig:
        """The decoder shape these options ask for, with the tokenizer's actual vocabulary size."""
        names = {f.name for f in dataclasses.fields(DecoderConfig)} - {"vocab_size"}
        return DecoderConfig(vocab_size=vocab_size, **{n: getattr(self, n) for n in names})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


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
    choices = {f.name: f.metadata.get("choices") for f in dataclasses.fields(cls)}
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


#: torch.manual_seed takes a signed 64-bit number.
MAX_SEED = 2**63 - 1


def check_seed(seed: int, flag: str = "--seed") -> None:
    """Raise :class:`OctlmError` unless ``0 <= seed <= MAX_SEED``."""
    if not 0 <= seed <= MAX_SEED:
        raise OctlmError(f"{flag} must be between 0 and {MAX_SEED} (2**63 - 1), got {seed}")


__all__ = ["DEFAULT_MAX_STEPS", "MAX_SEED", "TrainOptions", "check_seed", "checked_values", "field_types", "option"]
