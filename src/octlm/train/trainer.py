"""The training loop, in plain phases: set up, restore, step, evaluate, save, finish.

:class:`Trainer` holds the run's state in plain attributes; :meth:`Trainer.run`
is the loop, which reads top to bottom like the table of contents of a
training step. :func:`octlm.train.launch.train` builds one and runs it. Two
phases are mixins beside it: the run folder (:mod:`octlm.train.run_setup`)
and the checkpoint, restored and written (:mod:`octlm.train.checkpointing`);
what a run says when it stops short is :mod:`octlm.train.stop_messages`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

import torch

from octlm.data.tokens import BlockSampler, count_blocks, gather_blocks
from octlm.errors import OctlmError
from octlm.model import Decoder, cross_entropy
from octlm.report import Reporter
from octlm.train.checkpointing import CheckpointPhase
from octlm.train.device import (
    autocast_for,
    check_memory,
    compiles,
    defers_host_sync,
    resolve_device,
    thread_choice,
    to_device,
)
from octlm.train.distributed import Group
from octlm.train.evaluate import EvalResult, evaluate
from octlm.train.init_from import prepare_model
from octlm.train.optim import backward, make_optimizer, scheduled_lr
from octlm.train.options import TrainOptions, resolved
from octlm.train.resumable import FINISHED
from octlm.train.run_setup import RunFolderPhase
from octlm.train.signals import StopSignals
from octlm.train.step_window import add_step, empty_window, window_record
from octlm.train.stop_messages import (
    ended_in_warmup,
    interrupted_twice,
    interrupted_while_finishing,
    not_finite_step,
    not_finite_weights,
)


class TrainingError(OctlmError):
    """Training cannot go on (a non-finite loss, say); the message names the step."""


class Trainer(RunFolderPhase, CheckpointPhase):
    """One training run, fresh or resumed, in one process of a (possibly one-process) group.

    Call :meth:`setup`, :meth:`restore`, then :meth:`run`, which returns the
    result dict of :func:`octlm.train.launch.train`. Rank 0 writes every file; every
    rank trains.

    Args:
        opts: checked options (for a resumed run, already merged with the run's).
        resume: the run folder to continue, or ``None`` for a new run in ``opts.out``.
        changes: for a resumed run, what makes it differ from an uninterrupted one.
        step_hook: called with the step number before each optimizer step.
    """

    def __init__(
        self,
        opts: TrainOptions,
        report: Reporter,
        group: Group,
        device_name: str,
        resume: Path | None,
        changes: list[str],
        step_hook: Callable[[int], None] | None = None,
    ) -> None:
        # The step limit and warm-up resolved once; config.json records them as the run uses them.
        opts = resolved(opts)
        self.opts, self.report, self.group, self.step_hook = opts, report, group, step_hook
        self.resume, self.changes = resume, changes
        self.device = resolve_device(device_name)
        check_memory(opts.model_config(opts.vocab_size), opts.batch_size, self.device)
        self.max_steps = opts.max_steps
        self.tokens_per_step = opts.batch_size * group.world_size * opts.model.context_length
        # Where the run stands: fresh, or as restore() finds it in the checkpoint.
        self.ckpt = None
        self.step, self.elapsed, self.step_seconds = 0, 0.0, 0.0
        self.window = empty_window()
        self.last_saved = -1
        self.stop_requested = self.interrupted = False
        self.metrics = None
        # On a GPU in one process a step waits for nothing: its loss and gradient norm stay
        # on the device until _settle() reads them at the next log, evaluation or save.
        self.deferred = defers_host_sync(self.device, group)
        self.pending: list[tuple[int, torch.Tensor]] = []

    # -- set up -------------------------------------------------------------------------------------
    def setup(self) -> None:
        """The run folder (made, or found and locked), its data and config, the model and optimizer."""
        self._open_folder()
        self.config = self._fresh_config() if self.ckpt is None else self._resumed_config()
        opts, config, group = self.opts, self.config, self.group
        torch.manual_seed(opts.seed)
        self.model = Decoder(config)
        prepare_model(self.model, opts, load_source=self.ckpt is None)  # --init-from weights, --rope-scaling
        self.model.to(self.device)
        if group.active:
            # Same initial weights everywhere (DDP also broadcasts them), different dropout masks per rank.
            torch.manual_seed(opts.seed + 1_000_003 * group.rank)
        self.autocast, dtype_name = autocast_for(self.device, opts.dtype)
        model = self.model
        self.compiled = compiles(
            opts.compile,
            self.device,
            6 * model.num_parameters() * self.tokens_per_step,
            self.max_steps,
            opts.time_budget,
        )
        threads = thread_choice()
        self.report.event(
            "model",
            f"model: {model.num_parameters():,} parameters ({model.num_parameters(exclude_embeddings=True):,} "
            f"without embeddings), position={config.position}, device={self.device}, dtype={dtype_name}, "
            f"threads={threads.threads} ({threads.reason})"
            + (", torch.compile" if self.compiled else "")
            + (f", {group.world_size} processes ({group.backend})" if group.active else ""),
            parameters=model.num_parameters(),
            device=str(self.device),
            dtype=dtype_name,
            world_size=group.world_size,
            compiled=self.compiled,
            threads=threads.threads,
            threads_reason=threads.reason,
        )
        self.optimizer = make_optimizer(model, opts, self.device)
        self.sampler = BlockSampler(
            len(self.data.train), config.context_length, opts.batch_size, opts.seed, group.rank, group.world_size
        )

    # -- the loop -----------------------------------------------------------------------------------
    def run(self) -> dict:
        """Train until the step or time limit, or a stop request; then evaluate and return the result dict."""
        opts, max_steps = self.opts, self.max_steps
        if not self._finished():  # a resume at the limit only finishes (resumable.resume_line says so)
            self._announce()
        bar = self.report.progress(max_steps if max_steps else opts.time_budget, "train", "step" if max_steps else "s")
        bar.update(self.step if max_steps else min(self.elapsed, opts.time_budget))
        self.session_start, self.elapsed_before = time.perf_counter(), self.elapsed
        self.model.train()
        with StopSignals(force_on_repeat=not self.group.active) as signals:
            try:
                while not self._finished():
                    # evaluate now and then, on the weights before this step
                    if self.step > 0 and self.step % opts.eval_interval == 0:
                        result = self.evaluate(self.step, opts.eval_blocks)
                        self.report.event(
                            "eval",
                            f"step {self.step}: val loss {result.loss:.4f}, val bpb {result.bpb:.4f}"
                            + (f" ± {result.bpb_se:.4f}" if result.bpb_se else ""),
                            step=self.step,
                            **result.as_dict(),
                        )
                    if self.step_hook is not None:
                        self.step_hook(self.step)
                    # one optimizer step, agreed on by every rank
                    lr = self.train_step(signals)
                    # metrics and progress
                    if self.step % opts.log_interval == 0 or self.step == max_steps:
                        self._log_window(lr, bar)
                    bar.update(1 if max_steps else min(self.elapsed, opts.time_budget) - bar.n)
                    # a checkpoint now and then (a stop request saves below, once)
                    if opts.save_every and self.step % opts.save_every == 0 and not self.stop_requested:
                        self.save()
                self.interrupted = self.stop_requested
                if self.interrupted:
                    self.report.warn(f"interrupted at step {self.step}; saving a checkpoint")
                elif self.step < opts.warmup_steps:
                    # Only a time budget can end a run this early (a step limit is checked against the warm-up).
                    self.report.warn(ended_in_warmup(self.step, opts.warmup_steps))
                self.save()
            except KeyboardInterrupt:
                raise TrainingError(interrupted_twice(self.folder.path)) from None
            finally:
                bar.close()
        try:
            return self.finish()
        except KeyboardInterrupt:
            self.stopped_while_finishing()
            raise

    def stopped_while_finishing(self) -> None:
        """Say what Ctrl-C during the final evaluation or what follows it left: the checkpoint, and the --resume that
        does the rest."""
        self.report.warn(interrupted_while_finishing(self.step, self.interrupted, self.folder))

    def _announce(self) -> None:
        opts, max_steps = self.opts, self.max_steps
        budget_text = " and ".join(
            filter(
                None,
                [f"{max_steps} steps" if max_steps else None, f"{opts.time_budget:g}s" if opts.time_budget else None],
            )
        )
        text = f"training for {budget_text}, {self.tokens_per_step} tokens per step"
        self.report.event(
            "train",
            f"{text}, a checkpoint every {opts.save_every} steps" if opts.save_every else text,
            max_steps=max_steps,
            time_budget=opts.time_budget,
            start_step=self.step,
        )

    def _finished(self) -> bool:
        limit_reached = (self.max_steps is not None and self.step >= self.max_steps) or (
            self.opts.time_budget is not None and self.elapsed >= self.opts.time_budget
        )
        return limit_reached or self.stop_requested

    # -- step ---------------------------------------------------------------------------------------
    def train_step(self, signals: StopSignals) -> float:
        """One optimizer step on the batch of the current step; returns its learning rate.

        Raises:
            TrainingError: when the loss or the gradient norm is not finite
                (the step is not applied, nothing is saved).
        """
        opts, group = self.opts, self.group
        lr = scheduled_lr(self.optimizer, self.step, opts, self.elapsed)
        t0 = time.perf_counter()
        blocks = to_device(
            torch.from_numpy(
                gather_blocks(self.data.train, self.sampler.starts(self.step), self.config.context_length)
            ),
            self.device,
        )
        with self.autocast:
            loss = cross_entropy(self.forward(blocks[:, :-1]), blocks[:, 1:])
        norm = backward(loss, self.model, self.optimizer, opts.grad_clip)
        now = self.elapsed_before + time.perf_counter() - self.session_start
        if self.deferred:
            # One process: the clock and a stop request are its own; the NaN guard runs in _settle.
            self.pending.append((self.step, torch.stack([loss.detach().float(), norm.detach().float()])))
            clock, stops, loss_value, norm_value = now, float(signals.requested), 0.0, 0.0
        else:
            # One exchange per step keeps the ranks in agreement: the mean loss, whether
            # anyone was asked to stop, and rank 0's clock (which drives the schedule).
            loss_sum, norm_sum, stops, clock = group.all_sum(
                [float(loss.detach()), float(norm), float(signals.requested), now if group.is_main else 0.0],
                self.device,
            )
            loss_value, norm_value = loss_sum / group.world_size, norm_sum / group.world_size
            self._check_finite(loss_value, norm_sum, self.step)
        self.optimizer.step()
        dt = time.perf_counter() - t0
        self.step += 1
        self.step_seconds += dt
        self.elapsed, self.stop_requested = clock, stops > 0
        add_step(self.window, self.tokens_per_step, dt, loss_value, norm_value)
        return lr

    def _settle(self) -> None:
        """Read the losses and norms the device holds (one transfer) and run the NaN guard over them, in step order.

        Raises:
            TrainingError: naming the first step whose loss or norm is not
                finite; the checkpoint on disk predates it (every save settles first).
        """
        if not self.pending:
            return
        steps = [step for step, _ in self.pending]
        t0 = time.perf_counter()
        values = torch.stack([v for _, v in self.pending]).cpu().tolist()
        # The wait is the device finishing steps the host already queued: it is their time.
        waited = time.perf_counter() - t0
        self.step_seconds, self.window["seconds"] = self.step_seconds + waited, self.window["seconds"] + waited
        self.pending = []
        for step, (loss, norm) in zip(steps, values, strict=True):
            self._check_finite(loss, norm, step)
            self.window["loss"] += loss
            self.window["grad_norm"] += norm

    def _check_finite(self, loss: float, grad_norm: float, step: int) -> None:
        if not (math.isfinite(loss) and math.isfinite(grad_norm)):
            raise TrainingError(not_finite_step(loss, grad_norm, step, self.step, self.opts, self.folder))

    def _log(self, record: dict) -> None:
        if self.metrics is not None:
            self.metrics.log(record)

    def _log_window(self, lr: float, bar) -> None:
        self._settle()
        record = window_record(self.window, self.step, lr, self.elapsed, self.opts.grad_clip > 0)
        self._log(record)
        bar.set_postfix(loss=f"{record['loss']:.3f}", tok_s=f"{record['tokens_per_second']:.0f}", refresh=False)
        self.report.log_line(
            f"step {self.step}: loss {record['loss']:.4f}, lr {lr:.3g}, {record['tokens_per_second']:,.0f} tokens/s"
        )
        self.window = empty_window()

    # -- evaluate -----------------------------------------------------------------------------------
    def evaluate(self, at_step: int, max_blocks: int | None, progress=None) -> EvalResult:
        """Score the validation split (at most ``max_blocks`` blocks, ``progress`` as :func:`evaluate`'s); rank 0
        logs."""
        self._settle()
        with self.autocast:
            result = evaluate(
                self.scorer,
                self.data.val,
                self.data.tokenizer.bytes_per_token,
                self.config.context_length,
                self.opts.batch_size,
                max_blocks,
                self.device,
                progress=progress,
            )
        self._log({"step": at_step, "kind": "eval", **result.as_dict()})
        return result

    # -- save ---------------------------------------------------------------------------------------
    def save(self) -> None:
        """Write the checkpoint and the weights of the current step (once per step), atomically.

        Raises:
            TrainingError: when the weights are not finite (nothing is written).
            CheckpointError: when the files cannot be written; the previous ones are kept.
        """
        at_step = self.step
        if at_step == self.last_saved:
            return
        self._settle()  # never save past a non-finite step
        if not all(bool(torch.isfinite(p).all()) for p in self.model.parameters()):
            raise TrainingError(not_finite_weights(at_step, self.opts, self.folder))
        self._write_checkpoint(at_step)
        self.last_saved = at_step

    # -- finish -------------------------------------------------------------------------------------
    def finish(self) -> dict:
        """The final evaluation: the result dict of :func:`octlm.train.launch.train`, which then shows the run and calls
        :meth:`close`."""
        opts, data, group = self.opts, self.data, self.group
        # An interrupted run is scored on the periodic blocks only: the person wants out.
        final_blocks = opts.eval_blocks if self.interrupted else opts.final_eval_blocks
        n_val_blocks = count_blocks(len(data.val), self.config.context_length)
        n_final = min(n_val_blocks, final_blocks or n_val_blocks)
        # A GB of text has a validation split of 300,000 blocks, minutes of scoring on a CPU: say how to score fewer.
        fewer = "; --final-eval-blocks N scores a sample of N, with its standard error" if n_final > 10_000 else ""
        self.report.event(
            "final_eval", f"final evaluation on {n_final:,} validation block{'s' if n_final != 1 else ''}{fewer}..."
        )
        with self.report.progress(n_final, "final evaluation", "block") as bar:
            final = self.evaluate(self.step, final_blocks, progress=bar.update)
        result = {
            "run_dir": str(self.folder),
            "steps": self.step,
            "train_seconds": self.elapsed,
            "tokens_per_second": self.step * self.tokens_per_step / self.step_seconds if self.step_seconds else 0.0,
            "train_tokens_seen": self.step * self.tokens_per_step,
            "epochs": self.sampler.epoch_of(self.step),
            "interrupted": self.interrupted,
            "resumed_from": self.ckpt.step if self.ckpt is not None else (0 if self.resume is not None else None),
            "world_size": group.world_size,
            **final.as_dict(),
        }
        return result

    def close(self) -> None:
        """Mark a run that reached its end as finished, and let go of the run folder.

        Called once the command has shown the finished run: a run stopped
        anywhere before has no :data:`FINISHED` record, and ``--resume`` at its
        limit does the final evaluation and what follows it again.
        """
        if not self.interrupted:
            self._log({"step": self.step, "kind": FINISHED})
        if self.lock is not None:
            self.lock.close()  # the run may be resumed by another process from here on
        if self.metrics is not None:
            self.metrics.close(finished=not self.interrupted)


__all__ = ["StopSignals", "Trainer", "TrainingError"]
