"""PaTH: position as a product of data-dependent Householder-like transformations between a key and its query.

Yang et al. 2025, "PaTH Attention: Position Encoding via Accumulating
Householder Transformations" (arXiv 2505.16381, NeurIPS 2025). Where RoPE
puts the rotation ``R^(i-j)`` between query ``i`` and key ``j``, PaTH puts
``H_i H_(i-1) ... H_(j+1)``, one matrix ``H_t = I - beta_t w_t w_t^T`` per
token between them, each read from that token; the softmax stays.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from octlm.model.positions.base import SCORE_BIAS_BYTES, PositionScheme
from octlm.model.positions.facts import OPT_IN, SchemeFacts
from octlm.model.positions.registry import register

if TYPE_CHECKING:  # pragma: no cover
    from octlm.model.config import DecoderConfig
    from octlm.model.kvcache import LayerCache

#: Width of the low-rank projection ``w`` is read through, as the authors' code does for multi-head attention.
DIRECTION_RANK = 32
#: Taps of the causal depthwise convolution over the projected directions (the authors' code: 3).
CONVOLUTION_TAPS = 3


class PathReading(NamedTuple):
    """What PaTH reads of one layer's input in a pass (:meth:`PaTHAttention.read_input`), handed back to its
    :meth:`~PaTHAttention.attend`."""

    #: unit directions float32 [B, H, T, D] and strengths [B, H, T] of the pass's tokens
    w: Tensor
    beta: Tensor
    #: the cache's keys carried through every ``H`` up to the token before the pass [B, H, P, D], or ``None``
    carried: Tensor | None
    #: the layer's cache, which :meth:`PaTHAttention.attend` hands the newly carried keys
    cache: LayerCache | None


def path_logits(q: Tensor, k: Tensor, w: Tensor, beta: Tensor, carried: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """PaTH's logits ``q_i^T H_i H_(i-1) ... H_(j+1) k_j / sqrt(D)``, float32 [B, H, T, S], and the keys carried to the
    pass's last token, float32 [B, H, S, D].

    ``q``, ``k``, ``w`` [B, H, T, D] are the pass's ``T`` queries, keys and
    unit directions, ``beta`` [B, H, T] in (0, 2); ``H_t = I - beta_t w_t
    w_t^T`` (Yang et al. 2025, §3: the logit of query ``i`` and key ``j`` is
    ``k_j^T (prod_{s=j+1..i} H_s) q_i``, the same number since each ``H_s`` is
    symmetric). ``carried`` [B, H, P, D] holds ``P`` earlier keys already
    carried through every ``H`` up to the token before the pass (a key/value
    cache's), so ``S = P + T``; ``None``: none. Query ``i``'s own key gets no
    ``H`` (an empty product), every earlier key gets ``H_i`` last.

    The plain sequential form: for each token ``t`` of the pass, apply
    ``H_t`` to every key carried so far (a rank-one update, ``K - beta_t (K
    w_t) w_t^T``), append ``k_t``, and read query ``t``'s row. Time O(T S D)
    per head and a Python loop of ``T`` steps; backward keeps each step's
    carried keys, O(T S D) floats per head (``T^2 D / 2`` without a cache).
    Exact (no inverse of an ``H``, which is singular at ``beta = 1``); the
    paper's blockwise UT-transform kernel computes the same numbers faster.
    """
    q, k, w, beta = q.float(), k.float(), w.float(), beta.float()
    B, H, T, D = q.shape
    keys = k.new_zeros(B, H, 0, D) if carried is None else carried.float()
    width = keys.shape[-2] + T
    rows = []
    for t in range(T):
        direction = w[:, :, t, None, :]  # [B, H, 1, D]
        if keys.shape[-2]:
            keys = keys - (beta[:, :, t, None, None] * (keys @ direction.transpose(-2, -1))) * direction
        keys = torch.cat((keys, k[:, :, t, None, :]), dim=-2)
        row = (keys @ q[:, :, t, :, None]).squeeze(-1)  # [B, H, P + t + 1]
        rows.append(F.pad(row, (0, width - row.shape[-1])))  # later keys: masked by the caller
    return torch.stack(rows, dim=-2) * D**-0.5, keys


#: What other parts of octlm read of 'pathattn' (:class:`~octlm.model.positions.facts.SchemeFacts`).
PATHATTN_FACTS = SchemeFacts(
    label="PaTH",
    description=(
        "data-dependent Householder-like matrices, one per token, multiply each key on its way to the query "
        "(Yang et al. 2025)"
    ),
    hf_refusal="no transformers architecture has PaTH's Householder products between queries and keys",
    # The cache keeps each key already carried through every H after it; a dropped token's H stays in the kept keys,
    # so keys cannot be evicted without changing what the model computes.
    eviction_refusal=(
        "each key is carried through the Householder matrix of every token after it, which a streaming cache drops"
    ),
    **OPT_IN,
    explorer_note="This run uses PaTH: each token's Householder-like matrix moves the keys before it, so no vectors.",
)


@register("pathattn", facts=PATHATTN_FACTS)
class PaTHAttention(PositionScheme):
    """PaTH attention (Yang et al. 2025, "PaTH Attention: Position Encoding via Accumulating Householder
    Transformations", §3).

    In attention layer ``l`` each token ``t`` gives each head a unit
    direction ``w_t`` and a strength ``beta_t = 2 sigmoid(u . x_t + b)`` in
    (0, 2) from the layer's input ``x_t`` [B, T, C] (the block's normed
    input): ``w_t`` is a low-rank projection of ``x_t`` (C -> 32 -> C),
    a causal depthwise convolution of 3 taps over the tokens, SiLU, then
    L2-normalised per head, as the authors' code (flash-linear-attention,
    ``fla/layers/path_attn.py``) reads it. Query ``i`` scores key ``j`` by
    ``q_i^T H_i ... H_(j+1) k_j / sqrt(D)`` with ``H_t = I - beta_t w_t w_t^T``
    (:func:`path_logits`), and the softmax over the visible keys weighs the
    values. No token index is read, no maximum length; ``beta`` near 2 makes
    ``H_t`` a reflection, which lets the model track states (the paper's synthetic state-tracking tasks).

    The logits are not ``q k^T`` plus a bias, so the scheme forms the
    weights itself (``attends``) in O(T^2 D) time per head. Under cached
    decoding the layer's :class:`~octlm.model.kvcache.LayerCache` keeps the
    keys carried through the last token (``scheme_state["path_keys"]``) and
    the convolution's last inputs (``"path_conv"``); a new token applies its
    ``H`` to every kept key, O(S D) per token per head: exact.
    """

    attends = True

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__(config)
        C, rank = config.d_model, min(DIRECTION_RANK, config.d_model)
        self.n_heads = config.n_heads
        self.head_dim = C // config.n_heads
        self.directions = nn.ModuleList(
            nn.Sequential(nn.Linear(C, rank, bias=False), nn.Linear(rank, C, bias=False))
            for _ in range(config.n_layers)
        )
        self.convolutions = nn.ModuleList(
            nn.Conv1d(C, C, CONVOLUTION_TAPS, groups=C, bias=False) for _ in range(config.n_layers)
        )
        self.strengths = nn.ModuleList(nn.Linear(C, config.n_heads) for _ in range(config.n_layers))

    def householder(self, x: Tensor, layer: int, before: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Layer ``layer``'s directions ``w`` float32 [B, H, T, D] (unit) and strengths ``beta`` [B, H, T] of the
        tokens ``x`` [B, T, C], and the convolution's input of the last ``CONVOLUTION_TAPS - 1`` tokens [B, 2, C].

        ``before`` [B, 2, C]: that input of the tokens before ``x`` (a cache's);
        ``None``: zeros, as at the start of a sequence.
        """
        B, T, C = x.shape
        projected = self.directions[layer](x).float()
        if before is None:
            before = projected.new_zeros(B, CONVOLUTION_TAPS - 1, C)
        padded = torch.cat((before.to(projected.dtype), projected), dim=1)
        mixed = F.conv1d(padded.transpose(1, 2), self.convolutions[layer].weight.float(), groups=C)
        w = F.normalize(F.silu(mixed).view(B, self.n_heads, self.head_dim, T).transpose(-2, -1), dim=-1, eps=1e-6)
        beta = 2 * torch.sigmoid(self.strengths[layer](x).float()).transpose(1, 2)
        return w, beta, padded[:, -(CONVOLUTION_TAPS - 1) :]

    def read_input(self, x: Tensor, layer: int = 0, cache: LayerCache | None = None) -> PathReading:
        """Layer ``layer``'s ``w`` and ``beta`` of the pass's tokens ``x`` [B, T, C] (:meth:`householder`), with the
        cache's carried keys cut to the keys the cache holds (a window layer's last ones), for :meth:`attend` as
        ``seen``."""
        state = {} if cache is None else cache.scheme_state
        w, beta, tail = self.householder(x, layer, state.get("path_conv"))
        carried = state.get("path_keys")
        if cache is not None:
            state["path_conv"] = tail
            carried = None if carried is None or cache.held == 0 else carried[..., -cache.held :, :]
        return PathReading(w, beta, carried, cache)

    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        visible: Tensor,
        layer: int = 0,
        dropout: float = 0.0,
        *,
        seen: PathReading | None = None,
    ) -> tuple[Tensor, Tensor]:
        """The weighted sum of ``v`` [B, H, S, D] -> [B, H, T, D], and the softmax's weights float32 [B, H, T, S].

        ``seen``: what :meth:`read_input` returned for the layer's input. The
        pass's keys are ``k``'s last ``T``; the earlier ``S - T`` come carried
        from the cache instead of ``k``'s raw ones.

        Raises:
            TypeError: without ``seen``.
            RuntimeError: when the cache's carried keys are not the ``S - T`` keys ``k`` holds before the pass's.
        """
        if seen is None:
            raise TypeError(f"PaTH's layer {layer} reads the layer's input: pass seen=read_input(x, {layer}, cache)")
        w, beta, carried, cache = seen
        T, S = q.shape[-2], k.shape[-2]
        if S - T != (held := 0 if carried is None else carried.shape[-2]):
            raise RuntimeError(f"PaTH's layer {layer} carries {held} earlier keys but attention has {S - T}")
        logits, keys = path_logits(q, k[..., S - T :, :], w, beta, carried)
        if cache is not None:
            cache.scheme_state["path_keys"] = keys
        weights = torch.softmax(logits.masked_fill(~visible, float("-inf")), dim=-1)
        used = F.dropout(weights, dropout) if dropout > 0 else weights
        return used.to(v.dtype) @ v, weights

    def score_bias_bytes(self, n_heads: int, length: int) -> int:
        """Bytes one ``length``-token sequence's attention takes: the logits and weights beside a score bias's, and the
        keys each step carries, kept for backward (about ``length^2 / 2`` keys of ``head_dim`` float32, twice)."""
        return n_heads * length**2 * (SCORE_BIAS_BYTES + 4 * self.head_dim)


__all__ = ["CONVOLUTION_TAPS", "DIRECTION_RANK", "PATHATTN_FACTS", "PaTHAttention", "PathReading", "path_logits"]
