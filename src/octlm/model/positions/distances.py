"""The arithmetic of score-bias schemes: distances between queries and keys, ALiBi's slopes, T5's buckets.

A score-bias scheme (:mod:`octlm.model.positions`) adds a number to the attention
score of query position ``i`` on key position ``j`` that depends on ``i - j``
(and, for FIRE, on ``i``). The helpers here compute those inputs; the schemes
themselves are in :mod:`octlm.model.positions`, and this module names none.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from octlm.model.positions.waves import supports_float64


def query_key_positions(
    q_len: int, k_len: int, offset: int, device: torch.device | str | None = None
) -> tuple[Tensor, Tensor]:
    """Positions of the queries [q_len] and keys [k_len], int64: queries start at ``offset``, keys end where they end.

    A cached step has ``k_len >= q_len``: the keys reach further back.
    """
    i = torch.arange(offset, offset + q_len, device=device)
    j = torch.arange(offset + q_len - k_len, offset + q_len, device=device)
    return i, j


def causal_distances(q_len: int, k_len: int, offset: int, device: torch.device | str | None = None) -> Tensor:
    """``i - j`` for every query ``i`` and key ``j`` (:func:`query_key_positions`), int64 [q_len, k_len].

    Future keys (``j > i``) get negative entries; the caller masks them out.
    """
    i, j = query_key_positions(q_len, k_len, offset, device)
    return i[:, None] - j[None, :]


def alibi_slopes(n_heads: int) -> Tensor:
    """Per-head ALiBi slopes m_h (Press et al. 2022, §3), float32 [n_heads].

    For a power of two ``n``, the slopes are the geometric sequence starting
    at ``2 ** (-8 / n)`` with that same ratio: for 8 heads, 1/2, 1/4, ...,
    1/256. For other head counts the paper's reference code takes the slopes
    of the largest power of two ``p`` below ``n`` and fills the remaining
    ``n - p`` heads with every other slope of ``2p`` heads.

    Raises:
        ValueError: when ``n_heads`` < 1.
    """
    if n_heads < 1:
        raise ValueError(f"alibi_slopes: n_heads must be >= 1, got {n_heads}")

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    p = 2 ** math.floor(math.log2(n_heads))
    slopes = power_of_two(p)
    if p < n_heads:
        slopes += power_of_two(2 * p)[0::2][: n_heads - p]
    return torch.tensor(slopes, dtype=torch.float32)


def t5_buckets(distance: Tensor, num_buckets: int, max_distance: int) -> Tensor:
    """T5's bucket of each causal distance ``i - j`` (Raffel et al. 2020 §2.1), int64, same shape.

    The decoder's buckets look one way (back), so all ``num_buckets`` cover
    distances ``>= 0``: the first half (``n < num_buckets // 2``) one distance
    each, the second half logarithmically wider bins up to ``max_distance``;
    every distance from ``max_distance`` on shares the last bucket. Negative
    distances (future keys, masked out anyway) fall into bucket 0. The
    logarithm is taken in float64 where the device has it, so a distance on a
    bin edge is not pushed into the bin below by float32 rounding.

    Raises:
        ValueError: when ``num_buckets`` < 2 or ``max_distance`` <= ``num_buckets // 2``.
    """
    exact = num_buckets // 2
    if num_buckets < 2 or max_distance <= exact:
        raise ValueError(
            "t5_buckets: need num_buckets >= 2 and max_distance > num_buckets // 2, "
            f"got {num_buckets} and {max_distance}"
        )
    n = distance.clamp(min=0)
    dtype = torch.float64 if supports_float64(distance.device) else torch.float32
    # max(n, 1) only keeps log() finite on entries the `where` below takes from the exact half.
    wide = n.to(dtype).clamp(min=1.0).div(exact).log().div(math.log(max_distance / exact)).mul(num_buckets - exact)
    wide = (exact + wide.long()).clamp(max=num_buckets - 1)
    return torch.where(n < exact, n, wide)


__all__ = ["alibi_slopes", "causal_distances", "query_key_positions", "t5_buckets"]
