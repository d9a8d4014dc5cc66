"""A task model's checkpoint, so that a task study stopped mid-training resumes the model where it was.

A task model trains in memory (:func:`octlm.studies.tasks.study.train_task_model`);
every :data:`SAVE_EVERY` steps it saves its weights, its optimizer's state,
the batch generator's state and torch's global generator (randomized
positions draw from it) into the study's ``progress/`` folder, atomically.
Training resumed from there takes the same steps on the same batches, so on
the same machine and thread count it ends with the same weights as an
uninterrupted run. The file is removed once the model's record is written.
"""

from __future__ import annotations

from pathlib import Path

import torch

from octlm.errors import OctlmError
from octlm.train.checkpoint import (
    capture_rng,
    load_checkpoint,
    load_optimizer_tensors,
    model_tensors,
    restore_rng,
    rng_of,
    save_checkpoint,
)

#: Steps between a task model's checkpoints.
SAVE_EVERY = 100


def save_task_checkpoint(
    path: Path, step: int, model: torch.nn.Module, optimizer, generator: torch.Generator, seconds: float
) -> None:
    """Write the state after ``step`` steps (``seconds`` of training so far) to ``path``, whole or not at all.

    The file is an octlm training checkpoint (safetensors and JSON, nothing pickled): the batch generator's
    state is one more tensor beside the weights, the optimizer's state and the process's generators.
    """
    tensors, meta = capture_rng()
    tensors["batches"] = generator.get_state()
    save_checkpoint(path, model, optimizer, {"step": step, "seconds": seconds}, [(tensors, meta)])


def restore_task_checkpoint(
    path: Path, model: torch.nn.Module, optimizer, generator: torch.Generator
) -> tuple[int, float]:
    """Load ``path`` into ``model``, ``optimizer`` and ``generator`` (and the process's generators); returns ``(steps
    done, seconds of training so far)``.

    Raises:
        OctlmError: naming the file when it cannot be read or does not fit the model (it is damaged, or from
            other options).
    """
    try:
        checkpoint = load_checkpoint(path)
        missing, unexpected = model.load_state_dict(model_tensors(checkpoint), strict=False)
        if unexpected or [k for k in missing if not k.endswith("lm_head.weight")]:
            raise ValueError(f"its weights do not fit this model (missing {missing}, unexpected {unexpected})")
        load_optimizer_tensors(path, checkpoint.tensors, model, optimizer)
        tensors, meta = rng_of(checkpoint, 0)
        generator.set_state(tensors.pop("batches"))
        restore_rng(tensors, meta)
    except (OctlmError, OSError, RuntimeError, KeyError, ValueError, TypeError) as err:
        raise OctlmError(
            f"{path}: cannot resume the task model from it ({err}); delete the file to train that model again from "
            "step 0, or pass --overwrite to start the study again"
        ) from None
    return int(checkpoint.state["step"]), float(checkpoint.state["seconds"])


__all__ = ["SAVE_EVERY", "restore_task_checkpoint", "save_task_checkpoint"]
