"""Attention you can read: every layer's attention probabilities and logits, for analysis.

Training and evaluation compute attention with ``F.scaled_dot_product_attention``,
whose fused kernels never form the probability matrix. Inside
:func:`record_attention` each attention layer also forms it explicitly, from
the very queries and keys SDPA gets (after the scheme's ``rotate``, with the
cached keys of a :class:`~octlm.model.kvcache.KVCache`) and the scheme's
``score_bias``, so every registered scheme is covered without knowing it.
The model's output stays SDPA's. Outside the context a layer checks one
attribute (``CausalSelfAttention.record is not None``) and nothing else runs.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from octlm.model.blocks import visible_keys

if TYPE_CHECKING:  # pragma: no cover
    from octlm.model.decoder import Decoder


def attention_logits(q: Tensor, k: Tensor, bias: Tensor | None = None) -> Tensor:
    """The scores attention takes the softmax of, float32 [B, H, T, S] (nats: the softmax's log-odds).

    ``q · k / sqrt(head_dim)`` plus the scheme's ``bias`` [H, T, S], with
    ``-inf`` where query ``i`` may not see key ``j`` (:func:`visible_keys`):
    what ``F.scaled_dot_product_attention`` computes inside with its default
    scale (Vaswani et al. 2017, §3.2.1, eq. 1), in float32 whatever the
    inputs' dtype.

    Args:
        q: queries [B, H, T, head_dim], after the scheme's rotation.
        k: keys [B, H, S, head_dim], S >= T; they end where the queries end.
        bias: additive score bias [H, T, S] (ALiBi, T5, FIRE), or ``None``.
    """
    scores = (q.float() @ k.float().transpose(-2, -1)) * q.shape[-1] ** -0.5
    if bias is not None:
        scores = scores + bias.float()
    return scores.masked_fill(~visible_keys(q.shape[-2], k.shape[-2], q.device), float("-inf"))


@dataclass
class AttentionMaps:
    """What :func:`record_attention` recorded: the last forward pass's attention, layer by layer.

    Attributes:
        probabilities: per layer, float32 [B, H, T, S]: row ``i`` is the
            softmax over the keys query ``i`` attends to; it sums to 1 and is
            0 on the keys it may not see. A scheme that forms its weights
            itself (``PositionScheme.attend``, stick-breaking) gives those.
            With ``attention_sinks`` the softmax also counts the layer's sink
            logit, so a row sums to ``1 - sink_share``: the weights the layer
            gives its keys.
        logits: per layer, float32 [B, H, T, S]: the scores before the
            softmax (:func:`attention_logits`), ``-inf`` on hidden keys; for a
            scheme's own weights, their log (whose softmax they are when they sum to 1).
        sink_share: per layer, float32 [B, H, T]: the share of each query's
            softmax its head's sink takes (``attention_sinks``), or ``None``
            for a layer without sinks. (Not the statistics' ``sink_mass``,
            the weight on the first token, which an attention sink in Xiao
            et al. 2023's sense draws.)
        own_weights: per layer, whether the weights are the scheme's own
            (``PositionScheme.attend``): their "logits" are then only the log
            of the weights, with no scale of their own to read.
        queries, keys: per layer, float32 [B, H, T, head_dim] and [B, H, S, head_dim]: what the layer scored, after
            its scheme's rotation (a rotation keeps each turned pair's length, so per-pair norms are the unturned
            ones: :mod:`octlm.inspect.frequencies`).
        offset: the position of the first query (tokens); queries sit at
            ``offset .. offset + T - 1`` and keys at ``offset + T - S .. offset + T - 1``.

    Each forward pass replaces the previous one's entries (a cached step
    records its T new queries against all S keys). Both lists are empty
    before the first pass. Memory: ``8 B H T S`` bytes per layer.
    """

    probabilities: list[Tensor] = field(default_factory=list)
    logits: list[Tensor] = field(default_factory=list)
    sink_share: list[Tensor | None] = field(default_factory=list)
    own_weights: list[bool] = field(default_factory=list)
    queries: list[Tensor] = field(default_factory=list)
    keys: list[Tensor] = field(default_factory=list)
    offset: int = 0

    def _store(
        self,
        layer: int,
        q: Tensor,
        k: Tensor,
        bias: Tensor | None,
        offset: int,
        weights: Tensor | None = None,
        sinks: Tensor | None = None,
    ) -> None:
        if layer == 0:
            self.probabilities.clear()
            self.logits.clear()
            self.sink_share.clear()
            self.own_weights.clear()
            self.queries.clear()
            self.keys.clear()
            self.offset = offset
        self.own_weights.append(weights is not None)
        self.queries.append(q.detach().float())
        self.keys.append(k.detach().float())
        if weights is not None:  # a scheme's own weights (PositionScheme.attend); their log is a softmax's logits
            self.probabilities.append(weights.detach().float())
            self.logits.append(self.probabilities[-1].log())
            self.sink_share.append(None)
            return
        logits = attention_logits(q.detach(), k.detach(), None if bias is None else bias.detach())
        self.logits.append(logits)
        if sinks is None:
            self.probabilities.append(torch.softmax(logits, dim=-1))
            self.sink_share.append(None)
            return
        # The sink's logit [B, H, T] joins the denominator; its share is what the keys' probabilities lack.
        sink = sinks.detach().float().expand(*logits.shape[:-1]).unsqueeze(-1)
        shares = torch.softmax(torch.cat([logits, sink], dim=-1), dim=-1)
        self.probabilities.append(shares[..., :-1])
        self.sink_share.append(shares[..., -1])


@contextlib.contextmanager
def record_attention(model: Decoder) -> Iterator[AttentionMaps]:
    """Record every layer's attention probabilities and logits during the forward passes inside the block.

    ``with record_attention(model) as maps: model(ids)``, then
    ``maps.probabilities[layer]`` is float32 [B, H, T, S]
    (:class:`AttentionMaps`); with ``model(ids, offset=cache.length, cache=cache)``
    S is the cached length plus T. The model's output is unchanged: it still
    comes from ``F.scaled_dot_product_attention``; the maps are formed beside
    it (Vaswani et al. 2017, §3.2.1), detached from autograd.

    The recorded probabilities are those before attention dropout, so they
    are what the model used only in eval mode, or with ``dropout`` 0.

    Raises:
        ValueError: when the model is in training mode with ``dropout`` > 0
            (call ``model.eval()`` first), or is already recording.
    """
    if model.training and model.config.dropout > 0:
        raise ValueError(
            f"record_attention needs the model in eval mode: with dropout={model.config.dropout} the training "
            "pass drops attention weights the recorded probabilities would not show; call model.eval() first"
        )
    layers = [block.attn for block in model.blocks]
    if any(layer.record is not None for layer in layers):
        raise ValueError("record_attention: this model is already recording; leave the outer `with` block first")
    maps = AttentionMaps()
    for i, layer in enumerate(layers):
        layer.record = functools.partial(maps._store, i)
    try:
        yield maps
    finally:
        for layer in layers:
            layer.record = None


__all__ = ["AttentionMaps", "attention_logits", "record_attention"]
