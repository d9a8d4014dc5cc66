"""The optimiser, its learning-rate schedule and the backward pass: what every octlm training loop steps with.

``octlm train`` (:class:`octlm.train.trainer.Trainer`) and the task study
(:mod:`octlm.studies.tasks.study`) both build their optimizer with
:func:`make_optimizer`, set each step's rate with :func:`scheduled_lr` and
take gradients with :func:`backward`.

Two optimizers are on offer (``--optimizer``): AdamW (Loshchilov & Hutter
2019) on every parameter, or Muon (Jordan et al. 2024, "Muon: an optimizer for
hidden layers in neural networks"; Liu et al. 2025, "Muon is scalable for LLM
training", §2) on the blocks' weight matrices with AdamW on the rest
(:class:`MuonWithAdamW`). Muon is PyTorch's own ``torch.optim.Muon``.
"""

from __future__ import annotations

import math

import torch

from octlm.model import Decoder
from octlm.train.options import TrainOptions, resolved_warmup_steps


def lr_at(step: int, progress: float, opts: TrainOptions) -> float:
    """Learning rate of step ``step`` (0-based): linear warmup over the run's warm-up steps, then cosine decay to
    ``min_lr_ratio * peak``.

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
    """How far step ``step`` (0-based) of a ``max_steps``-step run is through the cosine decay: 0 at the peak, 1 at the
    last step.

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
        # A group with its own peak (Muon's) follows the same schedule, scaled; AdamW's groups take ``lr`` itself, to
        # the bit.
        group["lr"] = lr if "peak_lr" not in group else lr * (group["peak_lr"] / opts.learning_rate)
    return lr


def backward(
    loss: torch.Tensor, model: torch.nn.Module, optimizer: torch.optim.Optimizer, grad_clip: float
) -> torch.Tensor:
    """Gradients of ``loss`` (a scalar, nats) into ``model``, clipped to global norm ``grad_clip`` (0: not clipped).

    Returns the gradient norm before clipping (a 0-dim tensor, zero when not
    clipped; it stays on the device, so the caller decides when to read it).
    The caller then checks what it must and calls ``optimizer.step()``.
    """
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    return torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip) if grad_clip > 0 else loss.new_zeros(())


#: Muon's per-matrix rate adjustment (torch.optim.Muon's adjust_lr_fn): "original" is Jordan et al.'s sqrt(max(1, rows /
#: cols)).
MUON_ADJUST_LR = "original"


def muon_parameters(model: Decoder) -> list[str]:
    """Names of the parameters Muon trains under ``--optimizer muon``: the 2-D weight matrices of the transformer
    blocks.

    Muon orthogonalises a matrix's update, which suits the hidden layers'
    linear maps (Jordan et al. 2024); the token table (and so the tied head),
    the position scheme's parameters (a learned table, T5's or FIRE's biases),
    biases and norm gains stay with AdamW, as in Jordan et al. 2024 and
    Liu et al. 2025 §2.2 (embeddings and heads are not hidden matrices).
    """
    return [
        name for name, p in model.named_parameters() if p.requires_grad and p.dim() == 2 and name.startswith("blocks.")
    ]


def _adamw(params, opts: TrainOptions, device: torch.device, table: torch.Tensor) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices and tables only (not biases or norm gains); with ``opts.embedding_lr`` the
    token ``table`` in a group of its own at that peak (:func:`scheduled_lr` scales the schedule to it)."""
    own = opts.embedding_lr is not None and any(p is table for p in params)
    decay = [p for p in params if p.dim() >= 2 and not (own and p is table)]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": opts.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if own:  # only then: a run without it keeps the two groups its checkpoints hold
        rate = opts.embedding_lr
        groups.append({"params": [table], "weight_decay": opts.weight_decay, "lr": rate, "peak_lr": rate})
    return torch.optim.AdamW(groups, lr=opts.learning_rate, betas=(opts.beta1, opts.beta2), fused=device.type == "cuda")


class MuonWithAdamW:
    """Muon on some parameters and AdamW on the others, stepped as one optimizer.

    It has what octlm's loop and checkpoints use of a ``torch.optim.Optimizer``:
    ``param_groups`` (Muon's groups first, each carrying ``peak_lr`` so that
    :func:`scheduled_lr` scales the schedule to it), ``zero_grad``, ``step``,
    and ``state_dict``/``load_state_dict`` numbering the parameters through
    both in that order, as one optimizer's would.

    Muon's update (Jordan et al. 2024): a Nesterov momentum buffer,
    orthogonalised by five Newton-Schulz iterations, scaled by
    ``sqrt(max(1, rows / cols))``; decoupled weight decay ``lr * wd``.
    """

    def __init__(self, muon: torch.optim.Optimizer, adamw: torch.optim.Optimizer):
        self.optimizers = (muon, adamw)

    @property
    def param_groups(self) -> list[dict]:
        return [group for optimizer in self.optimizers for group in optimizer.param_groups]

    @property
    def state(self) -> dict:
        return {p: s for optimizer in self.optimizers for p, s in optimizer.state.items()}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for optimizer in self.optimizers:
            optimizer.step()

    def state_dict(self) -> dict:
        state, groups, offset = {}, [], 0
        for optimizer in self.optimizers:
            own = optimizer.state_dict()
            state.update({index + offset: value for index, value in own["state"].items()})
            groups += [
                {**group, "params": [index + offset for index in group["params"]]} for group in own["param_groups"]
            ]
            offset += sum(len(group["params"]) for group in optimizer.param_groups)
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        groups, offset = iter(state_dict["param_groups"]), 0
        for optimizer in self.optimizers:
            own_groups = [next(groups) for _ in optimizer.param_groups]
            count = sum(len(group["params"]) for group in own_groups)
            own_state = {
                index - offset: value
                for index, value in state_dict["state"].items()
                if offset <= index < offset + count
            }
            optimizer.load_state_dict(
                {
                    "state": own_state,
                    "param_groups": [{**g, "params": [i - offset for i in g["params"]]} for g in own_groups],
                }
            )
            offset += count


def make_optimizer(model: Decoder, opts: TrainOptions, device: torch.device) -> torch.optim.Optimizer | MuonWithAdamW:
    """The optimizer ``opts.optimizer`` names for ``model``'s trainable parameters.

    ``adamw``: AdamW on every parameter, weight decay ``opts.weight_decay`` on
    matrices and tables only (not biases or norm gains), the token table (and
    so the tied head) at ``opts.embedding_lr`` when it is set. ``muon``:
    :class:`MuonWithAdamW`, Muon (peak rate ``opts.muon_lr``, momentum
    ``opts.muon_momentum``, weight decay ``opts.muon_weight_decay``) on
    :func:`muon_parameters` and that AdamW on the rest.
    """
    params = list({id(p): p for p in model.parameters() if p.requires_grad}.values())
    table = model.token_embedding.weight
    if opts.optimizer == "adamw":
        return _adamw(params, opts, device, table)
    named = dict(model.named_parameters())
    hidden = [named[name] for name in muon_parameters(model)]
    chosen = {id(p) for p in hidden}
    muon = torch.optim.Muon(
        [{"params": hidden, "peak_lr": opts.muon_lr}],
        lr=opts.muon_lr,
        weight_decay=opts.muon_weight_decay,
        momentum=opts.muon_momentum,
        adjust_lr_fn=MUON_ADJUST_LR,
    )
    return MuonWithAdamW(muon, _adamw([p for p in params if id(p) not in chosen], opts, device, table))


__all__ = ["MuonWithAdamW", "muon_parameters", "backward", "decay_progress", "lr_at", "make_optimizer", "scheduled_lr"]
