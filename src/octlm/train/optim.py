"""The optimiser, its learning-rate schedule and the backward pass: what every octlm training loop steps with.

``octlm train`` (:class:`octlm.train.trainer.Trainer`) and the task study
(:mod:`octlm.studies.task`) both build their optimizer with
:func:`make_optimizer`, set each step's rate with :func:`scheduled_lr` and
take gradients with :func:`backward`.
"""

from __future__ import annotations

import math

import torch

from octlm.model import Decoder
from octlm.train.options import TrainOptions, resolved_warmup_steps


def lr_at(step: int, progress: float, opts: TrainOptions) -> float:
    """Learning rate of step ``step`` (0-based): linear warmup over the run's warm-up steps, then cosine decay to ``min_lr_ratio * peak``.

    The warm-up (:func:`~octlm.train.options.resolved_warmup_steps`, ``W``)
    climbs to the peak at its last step, ``W - 1``; the decay follows.
    ``progress`` in [0, 1] is how far the decay is (:func:`decay_progress`
    for a run of steps; for a time budget, the share of it spent, whichever
    is further), and at 1 the rate is exactly the floor.
    """
    peak, warmup = opts.learning_rate, resolved_warmup_steps(opts)
    if step < warmup:
        return peak * ((step + 1) / warmup)  # exactly the peak at step warmup - 1
    floor, progress = peak * opts.min_lr_ratio, min(max(progress, 0.0), 1.0)
    if progress in (0.0, 1.0):  # the ends exactly, not to a rounding of the sum below
        return peak if progress == 0.0 else floor
    return floor + 0.5 * (peak - floor) * (1.0 + math.cos(math.pi * progress))


def decay_progress(step: int, max_steps: int, warmup: int) -> float:
    """How far step ``step`` (0-based) of a ``max_steps``-step run is through the cosine decay: 0 at the peak, 1 at the last step.

    The peak is the warm-up's last step (``warmup - 1``, or step 0 without a
    warm-up), so one step trains at the peak and step ``max_steps - 1``
    at the floor; before the peak the value is negative (the warm-up rules there).
    """
    peak = max(warmup - 1, 0)
    return (step - peak) / max(max_steps - 1 - peak, 1)


def scheduled_lr(optimizer: torch.optim.Optimizer, step: int, opts: TrainOptions, elapsed: float = 0.0) -> float:
    """Set every parameter group of ``optimizer`` to the learning rate of ``step`` and return it.

    Progress towards the run's end is the nearer of its two limits: steps
    through the decay (:func:`decay_progress`), and ``elapsed`` seconds over
    ``opts.time_budget`` (:func:`lr_at`).
    """
    warmup, max_steps = resolved_warmup_steps(opts), opts.max_steps
    progress = max(
        decay_progress(step, max_steps, warmup) if max_steps else 0.0,
        elapsed / opts.time_budget if opts.time_budget else 0.0,
    )
    lr = lr_at(step, progress, opts)
    for group in optimizer.param_groups:
        group["lr"] = lr
    return lr


def backward(loss: torch.Tensor, model: torch.nn.Module, optimizer: torch.optim.Optimizer, grad_clip: float) -> torch.Tensor:
    """Gradients of ``loss`` (a scalar, nats) into ``model``, clipped to global norm ``grad_clip`` (0: not clipped).

    Returns the gradient norm before clipping (a 0-dim tensor, zero when not
    clipped; it stays on the device, so the caller decides when to read it).
    The caller then checks what it must and calls ``optimizer.step()``.
    """
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    return torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip) if grad_clip > 0 else loss.new_zeros(())


def make_optimizer(model: Decoder, opts: TrainOptions, device: torch.device) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices and tables only (not biases or norm gains)."""
    params = {id(p): p for p in model.parameters() if p.requires_grad}.values()
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": opts.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=opts.learning_rate, betas=(opts.beta1, opts.beta2), fused=device.type == "cuda")


__all__ = ["backward", "decay_progress", "lr_at", "make_optimizer", "scheduled_lr"]
