"""What a training run says when it stops short of its end: what it kept, and the command that goes on.

A second Ctrl-C, a Ctrl-C during the final evaluation, a loss, gradient norm
or weight that stopped being finite, and a time budget spent inside the
warm-up each get one sentence here, naming the checkpoint on disk (or that
there is none) and the ``octlm train`` command to run next.
:class:`octlm.train.trainer.Trainer` raises or warns with them.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from octlm.run.folder import CHECKPOINT, RunFolder
from octlm.train.checkpoint import describe_checkpoint, resume_hint
from octlm.train.options import TrainOptions

# False while a study trains one of its models: the study's own message says how to go on, and a model
# resumed by hand would leave the continued study to train it again.
_TRAIN_RESUME_SAID: ContextVar[bool] = ContextVar("train_resume_said", default=True)


@contextmanager
def study_says_how_to_go_on() -> Iterator[None]:
    """Within it, a Ctrl-C of training leaves out ``octlm train --resume``: the study that trains the model says how
    to go on (:mod:`octlm.studies.length.models`)."""
    token = _TRAIN_RESUME_SAID.set(False)
    try:
        yield
    finally:
        _TRAIN_RESUME_SAID.reset(token)


def stopped_hint(run_dir: Path) -> str:
    """The sentence after a Ctrl-C's account of what is kept: :func:`resume_hint` with a leading space, or nothing
    inside :func:`study_says_how_to_go_on`."""
    return f" {resume_hint(run_dir)}" if _TRAIN_RESUME_SAID.get() else ""


def interrupted_twice(run_dir: Path) -> str:
    """The error of a second Ctrl-C during training: the last checkpoint kept, or that none was saved, and how to
    go on."""
    checkpoint = run_dir / CHECKPOINT
    last = (
        f"the last checkpoint ({describe_checkpoint(checkpoint)}) is kept"
        if checkpoint.exists()
        else "no checkpoint had been saved yet"
    )
    return f"interrupted twice: stopped at once; {last}.{stopped_hint(run_dir)}"


def interrupted_while_finishing(step: int, interrupted: bool, folder: RunFolder) -> str:
    """The warning of a Ctrl-C during the final evaluation or what follows it: the checkpoint of ``step`` and the
    ``--resume`` that does the rest (training on, when the run had been ``interrupted`` before)."""
    left = "Continue exactly where it stopped" if interrupted else "Do the final evaluation, loss curve and report"
    saved = f"interrupted during the final evaluation; the checkpoint of step {step} is saved."
    if not _TRAIN_RESUME_SAID.get():
        return saved
    return f"{saved} {left} with: octlm train --resume {shlex.quote(str(folder))}"


def recovery_hint(opts: TrainOptions, folder: RunFolder) -> str:
    """After a non-finite step: resume from the last good checkpoint with a lower learning rate, or start again."""
    path, run = folder.path / CHECKPOINT, shlex.quote(str(folder))
    if path.exists():
        return (
            f"The last good checkpoint ({describe_checkpoint(path)}) is kept: lower --learning-rate (now "
            f"{opts.learning_rate:g}) and resume with `octlm train --resume {run} --learning-rate ...`, or start again"
        )
    return (
        f"No checkpoint had been saved yet (--save-every {opts.save_every}): start again with a lower --learning-rate "
        f"(now {opts.learning_rate:g}){'' if opts.grad_clip > 0 else ' and --grad-clip on'}, adding --overwrite"
    )


def not_finite_step(
    loss: float, grad_norm: float, step: int, last_step: int, opts: TrainOptions, folder: RunFolder
) -> str:
    """The error of a ``step`` whose loss or gradient norm is not finite, found once the run reached ``last_step``
    (later on a GPU, which reads them at the next log): the steps left unsaved and :func:`recovery_hint`."""
    what = f"the training loss became {loss}" if not math.isfinite(loss) else f"the gradient norm became {grad_norm}"
    unsaved = "this step" if step == last_step else f"it or the {last_step - step - 1} steps after it"
    return f"{what} at step {step}; stopped without saving {unsaved}. {recovery_hint(opts, folder)}"


def not_finite_weights(step: int, opts: TrainOptions, folder: RunFolder) -> str:
    """The error of weights found not finite when saving ``step``: nothing saved, and :func:`recovery_hint`."""
    return f"the weights stopped being finite by step {step}; nothing was saved. {recovery_hint(opts, folder)}"


def ended_in_warmup(step: int, warmup_steps: int) -> str:
    """The warning of a run that ended (on its time budget) at ``step``, inside its warm-up."""
    return (
        f"the run ended at step {step}, still in its {warmup_steps}-step warm-up: the learning rate never reached its "
        "peak nor decayed; give a longer --time-budget or a smaller --warmup-steps"
    )


__all__ = [
    "ended_in_warmup",
    "interrupted_twice",
    "interrupted_while_finishing",
    "not_finite_step",
    "not_finite_weights",
    "recovery_hint",
    "stopped_hint",
    "study_says_how_to_go_on",
]
