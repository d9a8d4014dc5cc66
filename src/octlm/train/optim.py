"""The optimiser and its learning-rate schedule."""

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


def make_optimizer(model: Decoder, opts: TrainOptions, device: torch.device) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices and tables only (not biases or norm gains)."""
    params = {id(p): p for p in model.parameters() if p.requires_grad}.values()
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": opts.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=opts.learning_rate, betas=(opts.beta1, opts.beta2), fused=device.type == "cuda")


__all__ = ["lr_at", "make_optimizer"]
