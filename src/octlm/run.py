"""Run folders: what a training run leaves on disk, and loading it back.

A run folder holds

* ``config.json``       -- ``{"model": DecoderConfig fields, "train": resolved options}``
* ``model.safetensors`` -- the weights; the tied head is stored once, as the token table
* ``tokenizer.json``    -- the Hugging Face tokenizer
* ``manifest.json``     -- what was read (paths, bytes, sha256) and the token files
* ``train.bin``, ``val.bin`` -- token streams (numpy memmaps)
* ``metrics.jsonl``     -- one JSON object per training or evaluation event

Every file is written atomically (:mod:`octlm.fileio`).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save

from octlm.errors import RunError
from octlm.fileio import atomic_write, atomic_write_json, read_safetensors
from octlm.model import Decoder, DecoderConfig
from octlm.tokenizer import Tokenizer

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
TOKENIZER = "tokenizer.json"
MANIFEST = "manifest.json"
METRICS = "metrics.jsonl"

#: The head shares the token table's Parameter, so it is not stored.
_TIED_KEYS = ("lm_head.weight",)


def weights_state(model: Decoder) -> dict[str, torch.Tensor]:
    """The state dict to store: contiguous CPU tensors, without the tied head."""
    return {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items() if k not in _TIED_KEYS}


def save_weights(path: str | Path, model: Decoder, metadata: dict[str, str] | None = None) -> None:
    """Write ``model``'s weights as safetensors, atomically."""
    atomic_write(path, save(weights_state(model), metadata=metadata))


def load_weights(path: str | Path, model: Decoder) -> None:
    """Load safetensors weights into ``model`` and re-tie its head.

    Raises:
        RunError: naming the file when it is missing, truncated or corrupted,
            or when its tensors do not fit the model.
    """
    path = Path(path)
    if not path.is_file():
        raise RunError(f"{path}: no weights file; is this a finished octlm run folder?")
    try:
        state, _ = read_safetensors(path)
    except (OSError, ValueError) as err:
        raise RunError(f"{path}: cannot read weights ({err}); the file is truncated or corrupted") from None
    expected = set(weights_state(model))
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        raise RunError(f"{path}: weights do not match config.json (missing: {missing or 'none'}, unexpected: {unexpected or 'none'})")
    for key, tensor in model.state_dict().items():
        if key in state and state[key].shape != tensor.shape:
            raise RunError(f"{path}: tensor {key} has shape {list(state[key].shape)}, config.json implies {list(tensor.shape)}")
    model.load_state_dict(state, strict=False)
    model.tie_weights()


def read_json(path: Path) -> dict:
    """Parse a JSON file of a run, raising ``RunError`` naming it when absent or malformed."""
    if not path.is_file():
        raise RunError(f"{path}: missing; is {path.parent} an octlm run folder?")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise RunError(f"{path}: not valid JSON ({err}); the file is corrupted") from None


def load_config(run_dir: str | Path) -> dict:
    """The run's ``config.json`` as a dict with ``model`` and ``train`` sections."""
    config = read_json(Path(run_dir) / CONFIG)
    if "model" not in config:
        raise RunError(f"{Path(run_dir) / CONFIG}: has no 'model' section; not an octlm run config")
    return config


def load_run(run_dir: str | Path, device: str | torch.device = "cpu") -> tuple[Decoder, Tokenizer]:
    """Load a trained model and its tokenizer from a run folder.

    Returns:
        ``(model, tokenizer)``; the model is in eval mode on ``device`` and
        its head is tied to its token table again.

    Raises:
        RunError: when the folder or one of its files is missing or corrupted
            (the message names the file).
    """
    run_dir = Path(run_dir)
    if run_dir.is_file():
        raise RunError(f"{run_dir}: is a file; give the run folder that holds it ({run_dir.parent})")
    if not run_dir.is_dir():
        raise RunError(f"{run_dir}: no such run folder; train one with `octlm train --out {run_dir}`")
    config = load_config(run_dir)
    try:
        model_config = DecoderConfig.from_dict(config["model"])
    except (TypeError, ValueError) as err:
        raise RunError(f"{run_dir / CONFIG}: invalid model config: {err}") from None
    model = Decoder(model_config)
    load_weights(run_dir / WEIGHTS, model)
    tokenizer_path = run_dir / TOKENIZER
    if not tokenizer_path.is_file():
        raise RunError(f"{tokenizer_path}: missing; is {run_dir} an octlm run folder?")
    try:
        tokenizer = Tokenizer.load(tokenizer_path)
    except Exception as err:  # tokenizers raises plain Exception on bad JSON
        raise RunError(f"{tokenizer_path}: cannot read tokenizer ({err})") from None
    if tokenizer.vocab_size != model_config.vocab_size:
        raise RunError(
            f"{tokenizer_path}: has {tokenizer.vocab_size} tokens but the model's vocab_size is {model_config.vocab_size}"
        )
    return model.to(device).eval(), tokenizer


def is_octlm_run(folder: str | Path) -> bool:
    """Whether ``folder`` holds an octlm run (trained, imported or half-made), by its own files.

    A ``manifest.json``, or a ``config.json`` that octlm wrote (it records
    ``octlm_version``); a transformers checkpoint's ``config.json`` does not.
    """
    folder = Path(folder)
    if (folder / MANIFEST).is_file():
        return True
    try:
        config = json.loads((folder / CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and "octlm_version" in config


def write_config(run_dir: Path, model_config: DecoderConfig, train_options: dict) -> None:
    """Write ``config.json`` (model shape plus the resolved training options)."""
    from octlm import __version__

    atomic_write_json(run_dir / CONFIG, {"octlm_version": __version__, "model": model_config.to_dict(), "train": train_options})


__all__ = ["is_octlm_run", "load_config", "load_run", "load_weights", "read_json", "save_weights", "weights_state", "write_config"]
