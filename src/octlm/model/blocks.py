"""The transformer block: causal self-attention (where a position scheme rotates or biases), the MLP, pre-LayerNorm.

Input and output of every module here are [B, T, C]. The position scheme is
handed in by the decoder (:mod:`octlm.model.positions`); attention always
goes through ``F.scaled_dot_product_attention``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from octlm.model.config import ACTIVATIONS, DecoderConfig
from octlm.model.kvcache import LayerCache

if TYPE_CHECKING:  # pragma: no cover
    from octlm.model.attention_recipes import PassPlan
    from octlm.model.positions import PositionScheme


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention through ``scaled_dot_product_attention``.

    Input and output [B, T, C]. The position scheme may rotate queries and
    keys or bias the scores; with neither, the causal mask is the only order
    information attention gets.

    Every path goes through ``F.scaled_dot_product_attention``: without a
    score bias and without a cache it passes ``is_causal=True`` and no mask
    (any fused kernel may run); a one-token cached step needs no mask at all;
    a multi-token step on top of a cache passes a boolean mask [T, S]; ALiBi
    passes its bias as an additive float mask [1, H, T, S] with ``-inf`` on
    future keys (a bias that reads the queries and keys, CoPE's, is
    [B, H, T, S]; the scheme's bias comes from ``attention_bias``, which
    gets the queries, keys and the layer's index ``layer``). Under a :class:`~octlm.model.attention_recipes.PassPlan`
    (``attention_scale``, ``document_mask``) the queries are multiplied by its
    ``query_scale`` after the scheme's rotation, and its ``visible`` keys go
    as a boolean mask [B, 1, T, S] (folded into the bias as ``-inf`` when
    there is one), which no flash kernel takes: SDPA then runs the math or
    the memory-efficient kernel.

    ``record`` is ``None`` except inside :func:`octlm.model.attention_maps.record_attention`,
    which sets it to a callable taking the queries and keys SDPA gets and the
    scheme's score bias and the offset, ``record(q, k, bias, offset)``; the output is SDPA's either way.
    """

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.n_heads = config.n_heads
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.proj = nn.Linear(config.d_model, config.d_model)
        self.dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)
        self.record: Callable[[Tensor, Tensor, Tensor | None, int], None] | None = None

    def forward(
        self,
        x: Tensor,
        positions: PositionScheme,
        offset: int = 0,
        cache: LayerCache | None = None,
        plan: PassPlan | None = None,
        layer: int = 0,
    ) -> Tensor:
        """[B, T, C] at positions ``offset ..`` -> [B, T, C]; with ``cache``, attend to its keys too and extend it.
        ``layer``: the block's index."""
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, C // self.n_heads).permute(2, 0, 3, 1, 4)
        q, k = positions.rotate(q, k, offset)
        if plan is not None and plan.query_scale is not None:
            q = q * plan.query_scale.to(q.dtype)  # the q.k logits only, not a scheme's additive bias
        if cache is not None:
            k, v = cache.append(k, v)
        S = k.shape[-2]
        bias = positions.attention_bias(q, k, offset, layer)
        dropout = self.dropout if self.training else 0.0
        if plan is not None and plan.visible is not None:
            # The bias (or zeros) with -inf on the keys of other documents: [B, 1 or H, T, S], also what the record
            # sees.
            hidden = (torch.zeros((), device=q.device) if bias is None else bias.float()).masked_fill(
                ~plan.visible, float("-inf")
            )
            if self.record is not None:
                self.record(q, k, hidden, offset)
            mask = plan.visible if bias is None else hidden.to(q.dtype)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)
            return self.resid_dropout(self.proj(y.transpose(1, 2).reshape(B, T, C)))
        if self.record is not None:
            self.record(q, k, bias, offset)
        if bias is None and (T == S or T == 1):
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=T > 1)
        else:
            causal = None if T == 1 else visible_keys(T, S, x.device)
            if bias is None:
                mask = causal
            else:
                mask = bias.to(q.dtype) if causal is None else bias.to(q.dtype).masked_fill(~causal, float("-inf"))
                mask = (
                    mask if mask.dim() == 4 else mask.unsqueeze(0)
                )  # [1, H, T, S]: the 4-D shape the CPU flash kernel also accepts
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)
        return self.resid_dropout(self.proj(y.transpose(1, 2).reshape(B, T, C)))


def visible_keys(q_len: int, k_len: int, device: torch.device | str | None = None) -> Tensor:
    """The causal mask, bool [q_len, k_len]: True where query ``i`` may see key ``j``.

    Keys end where the queries end (a cached step has ``k_len >= q_len``):
    query ``i`` sits at ``offset + i`` and key ``j`` at
    ``offset + q_len - k_len + j``, so ``i`` sees ``j`` when ``j <= i + k_len - q_len``.
    """
    return torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(k_len - q_len)


class MLP(nn.Module):
    """Position-wise feed-forward layer: C -> 4C -> GELU -> C, on [B, T, C]."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.up = nn.Linear(config.d_model, 4 * config.d_model)
        self.down = nn.Linear(4 * config.d_model, config.d_model)
        self.dropout = nn.Dropout(config.dropout)
        self.approximate = ACTIVATIONS[config.activation]

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.down(F.gelu(self.up(x), approximate=self.approximate)))


class Block(nn.Module):
    """Pre-LayerNorm transformer block: ``x + attn(ln(x))``, then ``x + mlp(ln(x))``."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.ln_attn = nn.LayerNorm(config.d_model)
        self.attn = CausalSelfAttention(config)
        self.ln_mlp = nn.LayerNorm(config.d_model)
        self.mlp = MLP(config)

    def forward(
        self,
        x: Tensor,
        positions: PositionScheme,
        offset: int = 0,
        cache: LayerCache | None = None,
        plan: PassPlan | None = None,
        layer: int = 0,
    ) -> Tensor:
        x = x + self.attn(self.ln_attn(x), positions, offset, cache, plan, layer)
        return x + self.mlp(self.ln_mlp(x))


__all__ = ["MLP", "Block", "CausalSelfAttention", "visible_keys"]
