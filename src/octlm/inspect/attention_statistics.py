"""Numbers that say how a layer's heads attend: entropy, distance, the first-token sink, the largest logit.

Pure tensor functions of the maps :func:`octlm.model.attention_maps.record_attention`
records: attention probabilities ``p`` [..., T, S] whose row ``i`` is query
``i``'s softmax over the ``S`` keys, and logits of the same shape (``-inf``
on the keys a query may not see). Keys end where the queries end, so query
``i`` and key ``j`` are ``d_ij = i + S - T - j`` tokens apart (0 for the
query's own token). Nothing here leaves the tensors' device or syncs with
the host; the leading dimensions (layers, batch, heads) are kept as they come.

* entropy ``H_i = -sum_j p_ij ln p_ij`` (nats; ``0 ln 0 = 0``): ``ln n`` for
  uniform attention over ``n`` keys, 0 for attention on one key;
* mean attention distance ``D_i = sum_j p_ij d_ij`` (tokens): ``(n - 1) / 2``
  for uniform attention over the query's ``n`` visible keys, 0 for attention
  on its own token;
* sink mass ``p_i0``: the probability on the sequence's first token, where
  trained models park attention they do not need (Xiao et al. 2023,
  "Efficient Streaming Language Models with Attention Sinks", §3.1);
* the largest logit ``max_ij s_ij`` (nats, the softmax's log-odds): how far
  a head's scores grow, which softmax hides.

:func:`attention_statistics` gathers them per layer and head.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor


def attention_entropy(probabilities: Tensor) -> Tensor:
    """Entropy of each query's attention, ``-sum_j p_ij ln p_ij`` in nats: [..., T, S] -> [..., T].

    Keys with probability 0 (hidden or underflowed) add 0.
    """
    return -torch.special.xlogy(probabilities, probabilities).sum(dim=-1)


def key_distances(q_len: int, k_len: int, device: torch.device | str | None = None) -> Tensor:
    """How far back each key sits from each query, ``d_ij = i + k_len - q_len - j`` in tokens: float32 [q_len, k_len].

    Negative on the keys a query may not see (they get probability 0).
    """
    queries = torch.arange(q_len, device=device, dtype=torch.float32)[:, None] + (k_len - q_len)
    return queries - torch.arange(k_len, device=device, dtype=torch.float32)


def uniform_attention(q_len: int, k_len: int, device: torch.device | str | None = None) -> Tensor:
    """The baseline: each query spread evenly over the keys it may see, float32 [q_len, k_len].

    Its statistics are the yardstick of a trained head's: entropy ``ln n``,
    distance ``(n - 1) / 2`` and first-token mass ``1 / n`` for a query that
    sees ``n`` keys.
    """
    visible = (key_distances(q_len, k_len, device) >= 0).float()
    return visible / visible.sum(dim=-1, keepdim=True)


def attention_distance(probabilities: Tensor) -> Tensor:
    """Expected distance from each query to the key it attends to, ``sum_j p_ij d_ij`` in tokens: [..., T, S] -> [...,
    T]."""
    distance = key_distances(probabilities.shape[-2], probabilities.shape[-1], probabilities.device)
    return (probabilities * distance.clamp(min=0)).sum(dim=-1)


def sink_mass(probabilities: Tensor) -> Tensor:
    """Probability each query puts on the first key, ``p_i0`` (Xiao et al. 2023): [..., T, S] -> [..., T].

    The first key is position 0 when the keys start at the sequence's start
    (a full pass, or a cached step: the cache holds positions from 0); for
    query 0 of a full pass it is 1, its only key.
    """
    return probabilities[..., 0]


def max_logit(logits: Tensor) -> Tensor:
    """The largest attention logit over queries and keys (nats): [..., T, S] -> [...].

    Hidden keys are ``-inf`` and every query sees at least its own token, so
    the maximum is finite.
    """
    return logits.amax(dim=(-2, -1))


@dataclass
class AttentionStatistics:
    """Per layer and head statistics of a recorded forward pass, float32 tensors on the maps' device.

    Attributes:
        entropy: [L, H, T] nats, mean over the batch, by query position.
        mean_entropy: [L, H] nats, mean over the batch and the queries.
        mean_distance: [L, H] tokens, mean over the batch and the queries.
        sink_mass: [L, H] probability on the first key, mean over the batch and the queries.
        max_logit: [L, H] nats, the maximum over the batch, queries and keys.
    """

    entropy: Tensor
    mean_entropy: Tensor
    mean_distance: Tensor
    sink_mass: Tensor
    max_logit: Tensor

    def to_dict(self, digits: int = 4) -> dict:
        """JSON-ready lists, indexed ``[layer][head]`` (``entropy``: ``[layer][head][query]``), rounded to
        ``digits``."""
        return {
            name: _rounded(getattr(self, name).tolist(), digits)
            for name in ("mean_entropy", "mean_distance", "sink_mass", "max_logit", "entropy")
        }


def attention_statistics(
    probabilities: Sequence[Tensor] | Tensor, logits: Sequence[Tensor] | Tensor
) -> AttentionStatistics:
    """The statistics of every layer and head (:class:`AttentionStatistics`).

    Args:
        probabilities: per layer [B, H, T, S] (``AttentionMaps.probabilities``),
            or stacked [L, B, H, T, S].
        logits: the same layers' logits, same shapes (``AttentionMaps.logits``).

    Raises:
        ValueError: when no layer is given or the two shapes differ.
    """
    p = torch.stack(list(probabilities)) if len(probabilities) else None
    s = torch.stack(list(logits)) if len(logits) else None
    if p is None or s is None or p.shape != s.shape or p.dim() != 5:
        shapes = [None if x is None else list(x.shape) for x in (p, s)]
        raise ValueError(
            f"attention_statistics needs probabilities and logits of one shape [L, B, H, T, S], got {shapes}"
        )
    entropy = attention_entropy(p).mean(dim=1)
    return AttentionStatistics(
        entropy=entropy,
        mean_entropy=entropy.mean(dim=-1),
        mean_distance=attention_distance(p).mean(dim=(1, 3)),
        sink_mass=sink_mass(p).mean(dim=(1, 3)),
        max_logit=max_logit(s).amax(dim=1),
    )


def _rounded(value, digits: int):
    return [_rounded(v, digits) for v in value] if isinstance(value, list) else round(value, digits)


__all__ = [
    "AttentionStatistics",
    "attention_distance",
    "attention_entropy",
    "attention_statistics",
    "key_distances",
    "max_logit",
    "sink_mass",
    "uniform_attention",
]
