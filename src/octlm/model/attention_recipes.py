"""Recipes that act on attention whatever the position scheme: logits scaled with length, and document masking.

Both are options of :class:`~octlm.model.config.DecoderConfig`, computed once
per forward pass by :func:`plan_pass` and read by every attention layer
(:class:`~octlm.model.blocks.CausalSelfAttention`):

* ``attention_scale="log"``: the query at 1-based position ``n`` (the number
  of keys it attends to, itself included) has its query-key logits
  multiplied by ``max(1, log(n) / log(T))``, ``T`` being the training
  ``context_length``. Chiang & Cholak 2022 ("Overcoming a theoretical
  limitation of self-attention": scaling the logits by ``log n`` keeps
  attention from flattening as the length grows), Qwen's "LogN-Scaling"
  (Bai et al. 2023, Qwen technical report, context length extension; its
  code multiplies the query by ``log_T(n)`` past the training length, ``n``
  1-based) and Nakanishi 2025's scalable softmax (``s log n`` with a learned
  ``s``; here ``s = 1 / log T``, fixed, and only past ``T``). Within the training length the factor is exactly 1, so
  training and every score up to ``T`` are unchanged; ``"none"`` never
  touches the queries.
* ``document_mask``: in a packed block ``doc0 <eot> doc1 <eot> ...`` a token
  attends only to the tokens of its own document, and positions restart at
  each document. The end-of-text token opens the document after it (it plays
  the part of a beginning-of-sequence token: it sits at position 0 and sees
  only itself), so the first token of a document is predicted from the
  marker alone. A block's first tokens, cut out of a document that began
  before the block, form a document starting at the block's start.
  Sampling begins as one document; a generated marker opens a new one, as in
  training. Llama 3 trains so (Grattafiori et al. 2024, "The Llama 3 herd of
  models", §3.2); Zhao et al. 2024 ("Analysing the impact of sequence
  composition on language model pre-training") call it intra-document
  causal masking.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from octlm.model.config import ATTENTION_SCALES, NO_SCALE, DecoderConfig

if TYPE_CHECKING:  # pragma: no cover
    from octlm.model.kvcache import KVCache


def log_length_scale(n: Tensor, train_length: int) -> Tensor:
    """``max(1, log(n) / log(T))`` for 1-based query positions ``n`` (any shape), float32.

    Computed in float64 and exactly 1.0 wherever ``n <= T``.

    Raises:
        ValueError: when ``train_length`` < 2 (``log 1 = 0``).
    """
    if train_length < 2:
        raise ValueError(
            f"attention_scale='log' divides by log(context_length), so context_length must be >= 2, got {train_length}"
        )
    n = n.to(torch.float64)
    return torch.where(n > train_length, torch.log(n) / math.log(train_length), torch.ones_like(n)).float()


def document_starts(token_ids: Tensor, eot_id: int, offset: int, carried: Tensor) -> Tensor:
    """Index (tokens from the sequence's start) of the first token of each token's document, int64 [B, T].

    ``token_ids`` [B, T] sit at ``offset .. offset + T - 1``; an end-of-text
    token opens a document at its own index; ``carried`` [B] is where the
    document open before ``offset`` began (``offset`` itself for a pass that
    sees nothing earlier).
    """
    index = torch.arange(offset, offset + token_ids.shape[1], device=token_ids.device)
    opened = torch.where(token_ids == eot_id, index, torch.full_like(index, -1)).cummax(dim=1).values
    return torch.maximum(opened, carried.to(token_ids.device)[:, None])


@dataclass
class PassPlan:
    """What every attention layer of one forward pass shares under the recipes.

    Attributes:
        visible: bool [B, 1, T, S], True where query ``i`` may see key ``j``
            (causal and the same document), or ``None`` (the causal mask alone).
        query_scale: float32, broadcastable to the queries [B, H, T, head_dim]:
            [T, 1] or [B, 1, T, 1]; ``None`` leaves them alone.
        positions: int64 [B, T], each token's position within its document,
            for the scheme (``PositionScheme.place_documents``), or ``None``.
    """

    visible: Tensor | None = None
    query_scale: Tensor | None = None
    positions: Tensor | None = None


def plan_pass(config: DecoderConfig, token_ids: Tensor, offset: int, cache: KVCache | None) -> PassPlan | None:
    """The recipes' share of a pass of ``token_ids`` [B, T] from position ``offset``, or ``None`` when none is on.

    With a cache the keys are positions ``0 .. offset + T - 1`` and the cache
    carries where each row's open document began (``cache.document_start``,
    updated here); without one the keys are the pass's own tokens.
    """
    scaled = config.attention_scale == "log" or any(spec.log_scale for spec in config.layers)
    if not config.document_mask and not scaled:
        return None
    B, T = token_ids.shape
    device = token_ids.device
    query = torch.arange(offset, offset + T, device=device)
    plan = PassPlan()
    n = query + 1  # 1-based position: the keys the query sees without a document mask
    if config.document_mask:
        first_key = 0 if cache is not None else offset
        carried = getattr(cache, "document_start", None)
        carried = torch.full((B,), first_key, dtype=torch.int64) if carried is None else carried
        starts = document_starts(token_ids, config.eot_id, offset, carried)
        if cache is not None:
            cache.document_start = starts[:, -1].cpu()
        keys = torch.arange(first_key, offset + T, device=device)
        plan.visible = ((keys >= starts[..., None]) & (keys <= query[:, None])).unsqueeze(1)
        plan.positions = query - starts
        n = plan.positions + 1
    if scaled:
        scale = log_length_scale(n, config.context_length).unsqueeze(-1)
        plan.query_scale = scale if scale.dim() == 2 else scale.unsqueeze(1)
    return plan


__all__ = ["ATTENTION_SCALES", "NO_SCALE", "PassPlan", "document_starts", "log_length_scale", "plan_pass"]
