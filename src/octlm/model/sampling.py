"""Picking the next token from logits: greedy, temperature and top-k."""

from __future__ import annotations

import torch
from torch import Tensor


def sample_next(
    logits: Tensor, temperature: float, top_k: int | None, generator: torch.Generator | None = None
) -> Tensor:
    """Pick one token per row of ``logits`` [B, V]; returns int64 [B, 1].

    ``temperature`` 0 is greedy (argmax). Any positive temperature samples from
    softmax(logits / temperature), however small: the row's maximum is taken
    off before dividing, so every scaled logit is <= 0 and the largest is 0,
    where dividing raw logits by 1e-38 overflows float32 to inf and softmax to
    NaN; and the division is in float64, where every positive Python float is
    still positive (5e-324 is 0 in float32). As the temperature goes to 0 the
    draw becomes the argmax.
    """
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = (logits - logits.amax(dim=-1, keepdim=True)).double() / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs, 1, generator=generator)


__all__ = ["sample_next"]
