"""Picking the next token from logits: greedy, temperature and top-k."""

from __future__ import annotations

import torch
from torch import Tensor


def top_k_mask(logits: Tensor, top_k: int) -> Tensor:
    """Which tokens top-k keeps: bool [B, V], True for exactly ``min(top_k, V)`` ids in each row of ``logits`` [B, V].

    The kept ids are the ``top_k`` largest logits; where several tie at the
    k-th largest value, the lowest ids among them are kept (as greedy's argmax
    takes the lowest id). ``torch.topk`` promises no order among ties (on CPU
    it returns ids 1 and 3 of ``[1, 3, 3, 3, 0.5]`` for k=2), so only its
    k-th value is used here, and the tie is settled by position.
    """
    if top_k >= logits.shape[-1]:
        return torch.ones_like(logits, dtype=torch.bool)
    kth = logits.topk(top_k, dim=-1).values[..., -1:]
    above = logits > kth
    tied = logits == kth
    room = top_k - above.sum(dim=-1, keepdim=True)  # places left for the tied, >= 1
    return above | (tied & (tied.cumsum(dim=-1) <= room))


def sample_next(
    logits: Tensor, temperature: float, top_k: int | None, generator: torch.Generator | None = None
) -> Tensor:
    """Pick one token per row of ``logits`` [B, V]; returns int64 [B, 1].

    ``temperature`` 0 is greedy (argmax; the lowest id among equal maxima).
    Any positive temperature samples from softmax(logits / temperature),
    however small: the row's maximum is taken off before dividing, so every
    scaled logit is <= 0 and the largest is 0, where dividing raw logits by
    1e-38 overflows float32 to inf and softmax to NaN; and the division is in
    float64, where every positive Python float is still positive (5e-324 is 0
    in float32). As the temperature goes to 0 the draw becomes the argmax.

    ``top_k`` keeps exactly k tokens (:func:`top_k_mask`: the k largest
    logits, ties at the k-th broken toward the lowest id), chosen on the
    logits as given, before any scaling could make two of them equal.
    """
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    if top_k is not None:
        logits = logits.masked_fill(~top_k_mask(logits, top_k), float("-inf"))
    logits = (logits - logits.amax(dim=-1, keepdim=True)).double() / temperature
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs, 1, generator=generator)


__all__ = ["sample_next", "top_k_mask"]
