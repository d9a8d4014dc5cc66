"""Starting a run from another run's weights: ``octlm train --init-from RUN_DIR``.

A fine-tuning run keeps its source's tokenizer and model shape, and may
change the context length, the data and (for RoPE) the scaling the model
runs under. A learned position table is stretched to a new length by
:func:`interpolate_table`. The optimizer and learning-rate schedule start
fresh (nanoGPT's ``init_from``). The new run's ``config.json`` records where
it came from (``train.source``: path and sha256 of the source weights) and
the scaling it trains and runs under (``train.rope_scaling``, the key
``octlm import-hf`` also writes; :func:`octlm.run.folder.load_run` applies it).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from octlm.declare import option_default, option_fields, refused, replaced
from octlm.errors import OctlmError, RunError
from octlm.fileio import read_safetensors, sha256_file
from octlm.model import Decoder, DecoderConfig
from octlm.model.config import stored_layout_text
from octlm.model.positions import ROPE_SCALINGS, SCHEMES, schemes_taking
from octlm.model.weights import load_weights, weights_state
from octlm.run.folder import RunFolder, file_not_folder
from octlm.run.load import check_scheme_found
from octlm.run.scaling import apply_scaling

#: Model options a fine-tuning run must share with its source (``context_length`` and ``dropout`` may change;
#: ``eot_id`` is the source's tokenizer's, which the run keeps).
SHAPE_OPTIONS = (
    "vocab_size",
    *(f.name for f in option_fields(DecoderConfig) if f.name not in ("context_length", "dropout")),
)
#: The state-dict key of a learned position table.
TABLE_KEY = "positions.table.weight"


def interpolate_table(table: Tensor, length: int) -> Tensor:
    """A position table [T, C] stretched (or shrunk) to ``length`` rows by linear interpolation along positions.

    Position interpolation (Chen et al. 2023, "Extending Context Window of
    Large Language Models via Positional Interpolation", §2.3) maps position
    ``m`` of the longer sequence to position ``x = m * T / length`` of the one
    the model was trained on; vision transformers fine-tuned at a higher
    resolution interpolate their learned table the same way (Dosovitskiy et
    al. 2021, §3.2). Between trained rows the new row is
    ``(1 - w) * E[i] + w * E[min(i + 1, T - 1)]`` with ``i = floor(x)`` and
    ``w = x - i``. With ``length == T`` every ``x`` is an integer and the rows
    are the trained ones exactly.

    Args:
        table: the trained rows [T, C].
        length: rows wanted, >= 1.

    Returns: the new table [length, C], same dtype as ``table``.

    Raises:
        ValueError: when ``length`` < 1.
    """
    if length < 1:
        raise ValueError(f"a position table needs at least 1 row, got {length}")
    rows = table.shape[0]
    x = torch.arange(length, dtype=torch.float64) * (rows / length)
    low = x.floor().long().clamp(max=rows - 1)
    high = (low + 1).clamp(max=rows - 1)
    w = (x - low.double()).unsqueeze(1)
    source = table.double()
    return ((1 - w) * source[low] + w * source[high]).to(table.dtype)


def source_config(init_from: str | Path) -> dict:
    """The source run's ``config.json``, after checking it is a run with weights to start from.

    Raises:
        OctlmError: naming ``--init-from`` when the folder is missing, a file,
            or holds no ``model.safetensors``; RunError for a damaged config.
    """
    path = Path(init_from)
    if not path.is_dir():
        what = file_not_folder(path) if path.is_file() else "no such run folder"
        raise OctlmError(f"--init-from {path}: {what}")
    folder = RunFolder(path, "--init-from")
    if not folder.weights_path.is_file():
        raise OctlmError(f"--init-from {path}: holds no {folder.weights_path.name}; give a finished octlm run")
    config = folder.read_config()
    check_scheme_found(folder, config)
    return config


def init_from_options(opts, given: set[str]):
    """``opts`` with the model shape of the ``--init-from`` run; refuses a given option that contradicts it.

    Raises:
        OctlmError: naming the first option in :data:`SHAPE_OPTIONS` that was
            given with another value than the source's, and the source's value.
    """
    stored = source_config(opts.init_from)["model"]
    stored = {**stored, "layers": stored_layout_text(stored)} if "layers" in stored else stored
    defaults = {f.name: option_default(f) for f in option_fields(DecoderConfig)} | {
        "vocab_size": DecoderConfig.__dataclass_fields__["vocab_size"].default
    }
    values = opts.to_dict()
    shape = {}
    for name in SHAPE_OPTIONS:
        then = stored.get(name, defaults[name])
        if name in given and values[name] != then:
            raise OctlmError(
                f"--{name.replace('_', '-')} {values[name]} contradicts --init-from {opts.init_from}, "
                f"whose model has {name}={then!r}; a fine-tuning run keeps its source's tokenizer and shape: "
                f"drop --{name.replace('_', '-')}"
            )
        shape[name] = then
    try:
        return replaced(opts, **shape)
    except ValueError as err:  # the source's shape with a flag given now (its windows wider than --context-length)
        raise OctlmError(
            f"{refused(err)} (the model of --init-from {opts.init_from} with the flags given now)"
        ) from None


def source_record(init_from: str | Path) -> dict:
    """``{"run_dir": absolute path, "weights_sha256": ...}`` of the source run, for ``config.json``."""
    folder = RunFolder(init_from)
    return {"run_dir": str(folder.path.resolve()), "weights_sha256": sha256_file(folder.weights_path)}


def scaling_record(opts) -> dict | None:
    """The RoPE scaling a run trains and runs under, as ``config.json`` stores it (``train.rope_scaling``), or ``None``.

    Its ``original_length`` is the length the weights were first trained at:
    the source's (its own scaling's, when it had one) for ``--init-from``,
    else ``--context-length``.
    """
    if opts.rope_scaling is None:
        return None
    original = opts.model.context_length
    if opts.init_from:
        train = source_config(opts.init_from).get("train") or {}
        before = train.get("rope_scaling") if isinstance(train.get("rope_scaling"), dict) else None
        original = (
            int(before["original_length"]) if before else int(source_config(opts.init_from)["model"]["context_length"])
        )
    factor = 1.0 if opts.rope_factor is None else float(opts.rope_factor)
    return {"method": opts.rope_scaling, "factor": factor, "original_length": original}


def config_record(opts) -> dict:
    """What a run adds to its ``config.json`` ``train`` section: its ``source`` and resolved ``rope_scaling``."""
    record: dict = {"rope_scaling": scaling_record(opts)}
    if opts.init_from:
        record["source"] = source_record(opts.init_from)
    return record


def check_scaling_options(opts) -> None:
    """Refuse ``--rope-scaling``/``--rope-factor`` combinations that cannot work, naming the flags.

    Raises:
        OctlmError: for ``--rope-factor`` without ``--rope-scaling``, a method
            other than ``dynamic-ntk`` without a factor, or a position scheme
            that does not take the method.
    """
    if opts.rope_scaling is None:
        if opts.rope_factor is not None:
            raise OctlmError(f"--rope-factor needs --rope-scaling ({', '.join(ROPE_SCALINGS)})")
        return
    if opts.rope_factor is None and opts.rope_scaling != "dynamic-ntk":
        raise OctlmError(
            f"--rope-scaling {opts.rope_scaling} needs --rope-factor F (new length / trained length, e.g. 4)"
        )
    if opts.model.position in SCHEMES and opts.rope_scaling not in SCHEMES[opts.model.position].scalings():
        takers = " or ".join(schemes_taking(opts.rope_scaling))
        raise OctlmError(
            f"--rope-scaling {opts.rope_scaling} needs --position {takers}; "
            f"this run's position is {opts.model.position}"
        )


def prepare_model(model: Decoder, opts, load_source: bool) -> None:
    """Put the ``--init-from`` weights into a freshly built ``model`` (when ``load_source``) and set its RoPE scaling.

    A learned table of another length is interpolated (:func:`interpolate_table`).

    Raises:
        RunError: when the source weights cannot be read or do not fit.
    """
    if opts.init_from and load_source:
        load_source_weights(model, Path(opts.init_from) / "model.safetensors")
    apply_scaling(model, scaling_record(opts))


def load_source_weights(model: Decoder, path: Path) -> None:
    """Load the weights at ``path`` into ``model``, interpolating a learned table to the model's length.

    Raises:
        RunError: naming the file when it cannot be read or a tensor does not fit.
    """
    if TABLE_KEY in model.state_dict():
        try:
            state, _ = read_safetensors(path)
        except (OSError, ValueError) as err:
            raise RunError(f"{path}: cannot read weights ({err}); the file is truncated or corrupted") from None
        if set(state) != set(weights_state(model)):
            raise RunError(f"{path}: weights do not match the model of --init-from's config.json")
        rows = model.state_dict()[TABLE_KEY].shape[0]
        if state[TABLE_KEY].shape[0] != rows:
            state[TABLE_KEY] = interpolate_table(state[TABLE_KEY], rows)
        with torch.no_grad():
            model.positions.table.weight.copy_(state.pop(TABLE_KEY))
        model.load_state_dict(state, strict=False)
        model.tie_weights()
        return
    load_weights(path, model)


__all__ = [
    "SHAPE_OPTIONS",
    "check_scaling_options",
    "config_record",
    "init_from_options",
    "interpolate_table",
    "load_source_weights",
    "prepare_model",
    "scaling_record",
    "source_config",
    "source_record",
]
