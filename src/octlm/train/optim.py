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
    """Learning rate: linear warmup over the run's warm-up steps (:func:`~octlm.train.options.resolved_warmup_steps`), then cosine decay to ``min_lr_ratio * peak``.

    ``progress`` in [0, 1] is how far the run is towards its limit (steps or
    seconds, whichever is nearer), so a time-budgeted run decays fully too.
    """
    peak, warmup = opts.learning_rate, resolved_warmup_steps(opts)
    if step < warmup:
        return peak * (step + 1) / warmup
    floor = peak * opts.min_lr_ratio
    return floor + 0.5 * (peak - floor) * (1.0 + math.cos(math.pi * min(max(progress, 0.0), 1.0)))


def scheduled_lr(optimizer: torch.optim.Optimizer, step: int, opts: TrainOptions, elapsed: float = 0.0) -> float:
    """Set every parameter group of ``optimizer`` to the learning rate of ``step`` and return it.

    Progress towards the run's end is the nearer of its two limits: steps
    past the warm-up over ``opts.max_steps`` past it, and ``elapsed``
    seconds over ``opts.time_budget`` (:func:`lr_at`).
    """
    warmup, max_steps = resolved_warmup_steps(opts), opts.max_steps
    progress = max(
        (step - warmup) / max(max_steps - warmup, 1) if max_steps else 0.0,
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


__all__ = ["backward", "lr_at", "make_optimizer", "scheduled_lr"]
