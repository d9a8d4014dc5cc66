"""A task model's checkpoint, so that a task study stopped mid-training resumes the model where it was.

A task model trains in memory (:func:`octlm.studies.task.train_task_model`);
every :data:`SAVE_EVERY` steps it saves its weights, its optimizer's state,
the batch generator's state and torch's global generator (randomized
positions draw from it) into the study's ``progress/`` folder, atomically.
Training resumed from there takes the same steps on the same batches, so on
the same machine and thread count it ends with the same weights as an
uninterrupted run. The file is removed once the model's record is written.
"""

from __future__ import annotations

import io
from pathlib import Path

import torch

from octlm.errors import OctlmError
from octlm.fileio import atomic_write

#: Steps between a task model's checkpoints.
SAVE_EVERY = 100


def save_task_checkpoint(
    path: Path, step: int, model: torch.nn.Module, optimizer, generator: torch.Generator, seconds: float
) -> None:
    """Write the state after ``step`` steps (``seconds`` of training so far) to ``path``, whole or not at all."""
    state = {
        "step": step,
        "seconds": seconds,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "generator": generator.get_state(),
        "torch_rng": torch.get_rng_state(),
    }
    buffer = io.BytesIO()
    torch.save(state, buffer)
    atomic_write(path, buffer.getvalue())


def restore_task_checkpoint(
    path: Path, model: torch.nn.Module, optimizer, generator: torch.Generator
) -> tuple[int, float]:
    """Load ``path`` into ``model``, ``optimizer`` and ``generator`` (and torch's global generator); returns ``(steps
    done, seconds of training so far)``.

    Raises:
        OctlmError: naming the file when it cannot be read or does not fit the model (it is damaged, or from
            other options).
    """
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        generator.set_state(state["generator"])
        torch.set_rng_state(state["torch_rng"])
    except (OSError, RuntimeError, KeyError, ValueError, TypeError) as err:
        raise OctlmError(
            f"{path}: cannot resume the task model from it ({err}); delete the file to train that model again from "
            "step 0, or pass --overwrite to start the study again"
        ) from None
    return int(state["step"]), float(state["seconds"])


__all__ = ["SAVE_EVERY", "restore_task_checkpoint", "save_task_checkpoint"]
