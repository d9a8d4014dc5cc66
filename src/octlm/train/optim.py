"""The optimiser and its learning-rate schedule."""

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


def make_optimizer(model: Decoder, opts: TrainOptions, device: torch.device) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices and tables only (not biases or norm gains)."""
    params = {id(p): p for p in model.parameters() if p.requires_grad}.values()
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": opts.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=opts.learning_rate, betas=(opts.beta1, opts.beta2), fused=device.type == "cuda")


__all__ = ["decay_progress", "lr_at", "make_optimizer"]
