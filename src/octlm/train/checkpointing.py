"""The trainer's checkpoint, both ways: a run put back where its checkpoint left it, and a step's checkpoint written.

:class:`CheckpointPhase` is the part of :class:`octlm.train.trainer.Trainer`
that moves a run between memory and its ``checkpoint.safetensors``
(:mod:`octlm.train.checkpoint` is the file format). :meth:`~CheckpointPhase.restore`
is the phase after ``setup``; :meth:`~CheckpointPhase._write_checkpoint` is what
the trainer's ``save`` writes. It reads the trainer's ``opts``, ``group``,
``report``, ``folder``, ``resume``, ``ckpt``, ``model``, ``optimizer``,
``compiled``, ``device``, ``digests`` and ``max_steps``, and sets ``step``,
``elapsed``, ``step_seconds``, ``window``, ``last_saved``, ``scorer``,
``forward`` and ``metrics``.
"""

from __future__ import annotations

import shlex

import torch

from octlm.model.weights import save_weights
from octlm.train.checkpoint import (
    CHECKPOINT,
    Checkpoint,
    CheckpointError,
    capture_rng,
    describe_checkpoint,
    generators_note,
    load_optimizer_tensors,
    model_tensors,
    restore_rng,
    rng_of,
    save_checkpoint,
)
from octlm.train.device import compile_model
from octlm.train.step_window import empty_window
from octlm.train.tracking import open_metrics


class CheckpointPhase:
    """Restoring a run from its checkpoint and writing one (a mixin of the Trainer; see the module docstring)."""

    def restore(self) -> None:
        """Put the run where its checkpoint left it (a fresh run starts at step 0), then wrap the model for the ranks.

        The random generators come back last, so nothing here draws from them after.
        """
        ckpt, group = self.ckpt, self.group
        if ckpt is None and self.resume is not None and group.is_main:
            self.folder.rewind_metrics(0, self.report)
            self.folder.remove_stale_temporaries(self.report)
        if ckpt is not None:
            self._load_checkpoint(ckpt)
        self._wrap_for_ranks()
        self.metrics = (
            open_metrics(self.folder, self.opts, self.step if self.resume is not None else None)
            if group.is_main
            else None
        )
        if ckpt is not None:
            saved = rng_of(ckpt, group.rank)
            if saved is not None:
                restore_rng(*saved)
            if (note := generators_note(ckpt, group.world_size)) is not None:
                self.report.warn(note)  # on rank 0, which alone prints, for every rank

    def _load_checkpoint(self, ckpt: Checkpoint) -> None:
        state = ckpt.state
        self.step, self.elapsed, self.step_seconds, self.window = (
            state["step"],
            state["elapsed_s"],
            state["step_seconds"],
            {**empty_window(), **state["window"]},
        )
        self.last_saved = self.step
        self.model.load_state_dict(model_tensors(ckpt), strict=False)
        self.model.tie_weights()
        load_optimizer_tensors(ckpt.path, ckpt.tensors, self.model, self.optimizer)
        if self.group.is_main:
            self.folder.rewind_metrics(state["metrics_bytes"], self.report)
            self.folder.remove_stale_temporaries(self.report)

    def _wrap_for_ranks(self) -> None:
        # Training and evaluation call self.forward and self.scorer; the weights stay self.model's,
        # so saving, sampling and the diagnostics use the eager module.
        self.scorer = compile_model(self.model, self.opts.compile) if self.compiled else self.model
        self.forward = self.scorer
        if self.group.active:
            from torch.nn.parallel import DistributedDataParallel

            self.forward = DistributedDataParallel(
                self.scorer, device_ids=[self.device.index] if self.device.type == "cuda" else None
            )

    def _write_checkpoint(self, at_step: int) -> None:
        """Write the checkpoint and the weights of ``at_step`` (rank 0; every rank hands it its generators).

        Raises:
            CheckpointError: when the files cannot be written; the previous ones are kept.
        """
        opts, group, folder = self.opts, self.group, self.folder
        rng = group.gather(capture_rng())
        if not group.is_main:
            return
        if self.metrics is not None:
            self.metrics.flush()
        state = {
            "step": at_step,
            "elapsed_s": self.elapsed,
            "step_seconds": self.step_seconds,
            "window": dict(self.window),
            "metrics_bytes": folder.metrics_path.stat().st_size,
            "world_size": group.world_size,
            "global_batch": opts.batch_size * group.world_size,
            "max_steps": self.max_steps,
            "time_budget": opts.time_budget,
            "digests": self.digests,
            "torch": torch.__version__,
        }
        checkpoint = folder.path / CHECKPOINT
        try:
            save_checkpoint(checkpoint, self.model, self.optimizer, state, rng)
            save_weights(folder.weights_path, self.model, {"step": str(at_step)})
        except OSError as err:
            raise CheckpointError(
                f"{checkpoint}: could not save the checkpoint of step {at_step}: {err.strerror or err}; "
                f"the previous one ({describe_checkpoint(checkpoint)}) is kept. "
                f"Free some disk space and resume with: octlm train --resume {shlex.quote(str(folder))}"
            ) from None


__all__ = ["CheckpointPhase"]
