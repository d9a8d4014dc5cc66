"""A model's weights as a safetensors file: a tied head stored once, as the token table; an untied one as
``lm_head.weight``."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save

from octlm.errors import RunError
from octlm.fileio import atomic_write, read_safetensors
from octlm.model.decoder import Decoder

#: A tied head shares the token table's Parameter, so it is not stored.
_TIED_KEYS = ("lm_head.weight",)


def weights_state(model: Decoder) -> dict[str, torch.Tensor]:
    """The state dict to store: contiguous CPU tensors, without a tied head."""
    left_out = () if model.config.untied_head else _TIED_KEYS
    return {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items() if k not in left_out}


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
        raise RunError(
            f"{path}: weights do not match config.json (missing: {missing or 'none'}, unexpected: "
            f"{unexpected or 'none'})"
        )
    for key, tensor in model.state_dict().items():
        if key in state and state[key].shape != tensor.shape:
            raise RunError(
                f"{path}: tensor {key} has shape {list(state[key].shape)}, config.json implies {list(tensor.shape)}"
            )
    model.load_state_dict(state, strict=False)
    model.tie_weights()


__all__ = ["load_weights", "save_weights", "weights_state"]
