"""The transformer block: causal self-attention (where a position scheme rotates or biases), the MLP, pre-LayerNorm.

Input and output of every module here are [B, T, C]. The position scheme is
handed in by the decoder (:mod:`octlm.model.positions`); attention always
goes through ``F.scaled_dot_product_attention``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from octlm.model.band import band_block, banded
from octlm.model.block_recipes import BLOCKS, RMS_EPS, SwiGLU, norm
from octlm.model.canon import canon_at
from octlm.model.config import ACTIVATIONS, DecoderConfig
from octlm.model.key_offset import shift_keys
from octlm.model.kvcache import LayerCache
from octlm.model.layout import LayerSpec
from octlm.model.scheme_catalog import SCHEMES
from octlm.model.streaming import SinkWindowCache, streamed_attention

if TYPE_CHECKING:  # pragma: no cover
    from octlm.model.attention_recipes import PassPlan
    from octlm.model.positions import PositionScheme


@dataclass(frozen=True)
class LayerPass:
    """What one block reads of the decoder's forward pass besides its input ``x`` [B, T, C].

    Attributes:
        scheme: the layer's position scheme (a layout's scheme for this layer).
        layer: the block's index (0-based), for a scheme with parameters per layer (KERPLE's, FoX's gates).
        offset: the absolute position of the pass's first token (tokens), ``cache.length`` with a cache.
        cache: the layer's key/value cache (:class:`~octlm.model.kvcache.LayerCache`, or a stream's
            :class:`~octlm.model.streaming.SinkWindowCache`), or ``None``.
        plan: the pass's masks and query scale (:class:`~octlm.model.attention_recipes.PassPlan`), or ``None``.
        scale_queries: whether the plan's ``query_scale`` applies to this layer (a layout scales its own).
        values: adds the layer's value table to its values, ``values(v [B, H, T, D], x [B, T, C]) -> v``
            (:mod:`octlm.model.value_embeddings`), or ``None``.
    """

    scheme: PositionScheme
    layer: int = 0
    offset: int = 0
    cache: LayerCache | SinkWindowCache | None = None
    plan: PassPlan | None = None
    scale_queries: bool = True
    values: Callable[[Tensor, Tensor], Tensor] | None = None


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
    gets the queries, keys and the layer's index). Under a :class:`~octlm.model.attention_recipes.PassPlan`
    (``attention_scale``, ``document_mask``) the queries are multiplied by its
    ``query_scale`` after the scheme's rotation, and its ``visible`` keys go
    as a boolean mask [B, 1, T, S] (folded into the bias as ``-inf`` when
    there is one), which no flash kernel takes: SDPA then runs the math or
    the memory-efficient kernel.

    ``record`` is ``None`` except inside :func:`octlm.model.attention_maps.record_attention`,
    which sets it to a callable taking the queries and keys SDPA gets and the
    scheme's score bias and the offset, ``record(q, k, bias, offset)``; the output is SDPA's either way.
    A scheme that forms its own weights (``attends``: stick-breaking) replaces SDPA by its ``attend`` and
    hands the recorder those weights, ``record(q, k, None, offset, weights)``; every scheme's
    ``read_input`` sees the layer's input ``x`` first, and what it returns goes back to the same scheme's
    ``attention_bias`` or ``attend`` as ``seen``.

    With ``attention_sinks`` each head has a learned logit ``sinks[h]`` that
    joins the softmax's denominator (GPT-OSS): every pass then goes to SDPA
    with one more key, all zeros, whose value is zero and whose score is the
    sink logit, in a float mask [1 or B, H, T, S + 1]
    (:meth:`_attend_with_sinks`), which no flash kernel takes; the recorder
    also gets the sink logits [B, H, T], ``record(q, k, bias, offset,
    sinks=...)``. With ``output_gate`` the heads' output [B, T, C] is
    multiplied by ``sigmoid(gate(x))``, one gate per channel of each head
    computed from the layer's input ``x``, before ``proj`` (Qiu et al. 2025,
    "Gated Attention for Large Language Models", arXiv 2505.06708: the gate
    after SDPA, head-specific and elementwise, their best).

    A layer of a layout (:class:`~octlm.model.layout.LayerSpec`) may have a
    ``window``: each query sees its last ``window`` keys, itself included,
    in every pass (a boolean band mask [T, S], :func:`window_keys`, joined
    to the causal and document masks), and a key/value cache keeps only the
    last ``window - 1`` keys between passes. ``qk_norm`` puts an RMSNorm over
    ``head_dim`` on the queries and keys before the scheme rotates them.
    """

    def __init__(self, config: DecoderConfig, spec: LayerSpec | None = None) -> None:
        super().__init__()
        bias = BLOCKS[config.block].bias
        self.n_heads = config.n_heads
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model, bias=bias)
        self.proj = nn.Linear(config.d_model, config.d_model, bias=bias)
        self.dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)
        self.window = None if spec is None else spec.window
        qk_norm = config.qk_norm if spec is None or spec.qk_norm is None else spec.qk_norm
        self.q_norm = nn.RMSNorm(config.head_dim, eps=RMS_EPS) if qk_norm else None
        self.k_norm = nn.RMSNorm(config.head_dim, eps=RMS_EPS) if qk_norm else None
        # One logit per head; zeros to start (exp(0) = 1: the "+1 in the denominator" softmax), no random draw, so
        # the other parameters start as without sinks.
        self.sinks = nn.Parameter(torch.zeros(config.n_heads)) if config.attention_sinks else None
        self.gate = nn.Linear(config.d_model, config.d_model, bias=bias) if config.output_gate else None
        self.canon_b = canon_at(config, "B", 3 * config.d_model)
        self.key_offset = 0  # channels each key takes from its predecessor (--key-offset), 0 for none
        if config.key_offset:
            layer = config if spec is None else config.layer_config(spec)
            self.key_offset = SCHEMES[layer.position].passed_channels(layer)
        self.record: Callable[..., None] | None = None

    def forward(self, x: Tensor, step: LayerPass) -> Tensor:
        """[B, T, C] at positions ``step.offset ..`` -> [B, T, C]; with ``step.cache``, attend to its keys too and
        extend it."""
        B, T, C = x.shape
        scheme, cache, plan, offset = step.scheme, step.cache, step.plan, step.offset
        # A scheme that reads the tokens (FoX's gates, PaTH's directions) reads them here; this call holds what it
        # read and hands it back to the same scheme's bias or weights, so the scheme keeps nothing between the calls.
        seen = scheme.read_input(x, step.layer, cache)
        handed = {} if seen is None else {"seen": seen}
        qkv = self.qkv(x)
        if self.canon_b is not None:
            qkv = self.canon_b(qkv, None if cache is None else cache.canon_state)
        q, k, v = qkv.view(B, T, 3, self.n_heads, C // self.n_heads).permute(2, 0, 3, 1, 4)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.key_offset:  # only channels the scheme leaves unturned: before or after its rotation is the same
            k = shift_keys(k, self.key_offset, cache)
        if step.values is not None:
            v = step.values(v, x)
        if cache is not None and cache.repositions:  # a stream's cache: sinks and a window, placed within it
            return self._output(streamed_attention(q, k, v, scheme, cache, step.layer, handed), x)
        q, k = scheme.rotate(q, k, offset)
        if step.scale_queries and plan is not None and plan.query_scale is not None:
            q = q * plan.query_scale.to(q.dtype)  # the q.k logits only, not a scheme's additive bias
        if cache is not None:
            k, v = cache.append(k, v, self.window)
        dropout = self.dropout if self.training else 0.0
        if self._banded(T, k.shape[-2], step, seen):
            return self._output(self._band_attention(q, k, v, step, plan, dropout), x)
        if self.window is not None:
            plan = self._windowed(plan, T, k.shape[-2], x.device)
        if scheme.attends:  # the scheme forms the weights itself (stick-breaking): no softmax, no SDPA
            return self._output(self._scheme_attends(q, k, v, step, plan, dropout, handed), x)
        bias = scheme.attention_bias(q, k, offset, step.layer, **handed)
        if self.sinks is not None:
            y = self._attend_with_sinks(q, k, v, bias, None if plan is None else plan.visible, offset, dropout)
        elif plan is not None and plan.visible is not None:
            # The bias (or zeros) with -inf on the keys of other documents: [B, 1 or H, T, S], also what the record
            # sees.
            hidden = (torch.zeros((), device=q.device) if bias is None else bias.float()).masked_fill(
                ~plan.visible, float("-inf")
            )
            if self.record is not None:
                self.record(q, k, hidden, offset)
            mask = plan.visible if bias is None else hidden.to(q.dtype)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)
        else:
            if self.record is not None:
                self.record(q, k, bias, offset)
            y = _causal_attention(q, k, v, bias, dropout)
        return self._output(y, x)

    def _output(self, y: Tensor, x: Tensor) -> Tensor:
        """The heads' output [B, H, T, D] through the gate (``output_gate``, from the layer's input ``x`` [B, T, C])
        and the output projection: [B, T, C]."""
        y = y.transpose(1, 2).reshape(x.shape)
        if self.gate is not None:
            y = y * torch.sigmoid(self.gate(x))  # Qiu et al. 2025's G1: per channel of each head, from the input
        return self.resid_dropout(self.proj(y))

    def _attend_with_sinks(
        self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, visible: Tensor | None, offset: int, dropout: float
    ) -> Tensor:
        """Attention [B, H, T, head_dim] whose softmax also counts a learned sink logit per head.

        ``p_ij = exp(s_ij) / (exp(sink_h) + sum_j' exp(s_ij'))`` (GPT-OSS's
        ``sinks``; Xiao et al. 2023 for attention sinks): SDPA gets one more
        key, all zeros, with value zero, and the sink logit in its float mask
        column (the key's own score ``q . 0`` is 0), so the sink takes its
        share of the softmax and adds nothing to the output; ``visible`` [B,
        1, T, S] or the causal mask hides the other keys as without sinks.
        Dropout may drop the sink's weight too: its value is zero, so the
        output is the same either way.
        """
        B, H, T, S = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
        scores = torch.zeros((), device=q.device) if bias is None else bias.float()
        shown = visible_keys(T, S, q.device) if visible is None else visible
        scores = scores.masked_fill(~shown, float("-inf"))
        scores = scores.expand(scores.shape[0] if scores.dim() == 4 else 1, H, T, S)
        sink = self.sinks.float().view(1, H, 1, 1).expand(scores.shape[0], H, T, 1)
        if self.record is not None:
            self.record(q, k, scores, offset, sinks=sink[..., 0])
        mask = torch.cat([scores, sink], dim=-1).to(q.dtype)
        zero = q.new_zeros(B, H, 1, q.shape[-1])
        return F.scaled_dot_product_attention(
            q, torch.cat([k, zero], dim=-2), torch.cat([v, zero], dim=-2), attn_mask=mask, dropout_p=dropout
        )

    def _scheme_attends(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        step: LayerPass,
        plan: PassPlan | PassView | None,
        dropout: float,
        handed: dict[str, object],
    ) -> Tensor:
        """[B, H, T, D] from the scheme's :meth:`~octlm.model.positions.PositionScheme.attend`, under the pass's
        visible keys (the plan's, with the window joined, or causal); its weights go to the recorder. ``handed``: the
        scheme's reading of the layer's input, ``{"seen": ...}``, or empty."""
        T, S = q.shape[-2], k.shape[-2]
        visible = visible_keys(T, S, q.device) if plan is None or plan.visible is None else plan.visible
        y, weights = step.scheme.attend(q, k, v, visible, step.layer, dropout, **handed)
        if self.record is not None:
            self.record(q, k, None, step.offset, weights)
        return y

    def _banded(self, T: int, S: int, step: LayerPass, seen: object) -> bool:
        """Whether this pass attends block by block (:meth:`_band_attention`): a window layer whose whole score
        matrix would pass :data:`~octlm.model.band.BAND_CELLS`, under a scheme that forms no weights of its own and
        reads nothing of the input, with no recorder and no learned sinks (those paths keep the whole matrix)."""
        return (
            self.window is not None
            and banded(T, S, self.window)
            and seen is None
            and not step.scheme.attends
            and self.record is None
            and self.sinks is None
        )

    def _band_attention(
        self, q: Tensor, k: Tensor, v: Tensor, step: LayerPass, plan: PassPlan | None, dropout: float
    ) -> Tensor:
        """Window attention [B, H, T, D], a block of :func:`~octlm.model.band.band_block` queries at a time, each
        against only the keys its window reaches: the scores take ``H * block * (block + window - 1)`` floats at a
        time instead of ``H * T * S``.

        Keys end where the queries end, so the block of queries ``i0 .. i1 - 1`` reads keys ``i0 + S - T - window + 1
        .. i1 + S - T - 1``, and within it keys again end where its queries end: the scheme's bias is asked for the
        block as for a cached step (:meth:`~octlm.model.positions.PositionScheme.attention_bias`'s placement, with
        the block's first position ``offset + i0``), and :func:`window_keys` gives its band.
        """
        T, S, W = q.shape[-2], k.shape[-2], self.window
        visible = _kept_keys(plan, S)
        out = []
        for i0 in range(0, T, band_block(W)):
            i1 = min(T, i0 + band_block(W))
            k0, k1 = max(0, i0 + S - T - W + 1), i1 + S - T
            qb, kb, vb = q[..., i0:i1, :], k[..., k0:k1, :], v[..., k0:k1, :]
            shown = window_keys(i1 - i0, k1 - k0, W, q.device)
            if visible is not None:
                shown = shown & visible[..., i0:i1, k0:k1]
            bias = step.scheme.attention_bias(qb, kb, step.offset + i0, step.layer)
            mask = shown if bias is None else bias.float().masked_fill(~shown, float("-inf")).to(q.dtype)
            out.append(F.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask, dropout_p=dropout))
        return torch.cat(out, dim=-2)

    def _windowed(self, plan: PassPlan | None, T: int, S: int, device: torch.device) -> PassPlan | PassView | None:
        """The pass's masks for this window layer: the plan's ``visible`` cut to the S keys a window cache kept, and
        the band wherever a query has more than ``window`` keys before it."""
        visible = _kept_keys(plan, S)
        if S > self.window:
            band = window_keys(T, S, self.window, device)
            visible = band if visible is None else visible & band
        return plan if visible is None else PassView(visible)


def _kept_keys(plan: PassPlan | None, S: int) -> Tensor | None:
    """The plan's ``visible`` keys [B, 1, T, S] cut to the last ``S``, the ones a window cache kept; ``None`` without
    a plan or a mask."""
    visible = None if plan is None else plan.visible
    return visible[..., -S:] if visible is not None and visible.shape[-1] != S else visible


def _causal_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, dropout: float) -> Tensor:
    """SDPA [B, H, T, head_dim] over keys that end where the queries end: ``is_causal`` when it can, else a mask."""
    T, S = q.shape[-2], k.shape[-2]
    if bias is None and (T == S or T == 1):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=T > 1)
    causal = None if T == 1 else visible_keys(T, S, q.device)
    if bias is None:
        mask = causal
    else:
        mask = bias.to(q.dtype) if causal is None else bias.to(q.dtype).masked_fill(~causal, float("-inf"))
        mask = mask if mask.dim() == 4 else mask.unsqueeze(0)  # [1, H, T, S]: the 4-D shape the CPU flash kernel takes
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)


class PassView:
    """The part of a :class:`~octlm.model.attention_recipes.PassPlan` one layer reads once its window is joined in."""

    def __init__(self, visible: Tensor) -> None:
        self.visible = visible
        self.query_scale = None


def window_keys(q_len: int, k_len: int, window: int, device: torch.device | str | None = None) -> Tensor:
    """Causal sliding-window mask, bool [q_len, k_len]: True where query ``i`` may see key ``j`` within ``window``.

    Keys end where the queries end (as :func:`visible_keys`): query ``i``
    sees key ``j`` when ``0 <= (i + k_len - q_len) - j < window``, its last
    ``window`` keys, itself included. Sliding-window (local) attention:
    Child et al. 2019 (sparse transformers' local pattern), Beltagy et al.
    2020 (Longformer, §3.1), Mistral 7B (Jiang et al. 2023).
    """
    ones = torch.ones(q_len, k_len, dtype=torch.bool, device=device)
    return ones.tril(k_len - q_len) & ones.triu(k_len - q_len - window + 1)


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
        self.canon_d = canon_at(config, "D", 4 * config.d_model)

    def forward(self, x: Tensor, canon_state: dict[str, Tensor] | None = None) -> Tensor:
        """[B, T, C] -> [B, T, C]; ``canon_state``: the layer cache's Canon inputs (Canon-D), or ``None``."""
        h = self.up(x)
        if self.canon_d is not None:
            h = self.canon_d(h, canon_state)
        return self.dropout(self.down(F.gelu(h, approximate=self.approximate)))


class Block(nn.Module):
    """Pre-norm transformer block: ``x + attn(norm(x))``, then ``x + mlp(norm(x))``.

    ``config.block`` picks the norm and the MLP (:data:`~octlm.model.block_recipes.BLOCKS`:
    GPT-2's LayerNorm and GELU MLP, or Llama's RMSNorm and SwiGLU); ``spec``
    is the block's layer of a layout, or ``None``. ``config.canon`` adds Canon layers after each norm (A, C), on
    the queries, keys and values (B) and inside the MLP (D) (:mod:`octlm.model.canon`).
    """

    def __init__(self, config: DecoderConfig, spec: LayerSpec | None = None) -> None:
        super().__init__()
        recipe = BLOCKS[config.block]
        self.ln_attn = norm(recipe.norm, config.d_model)
        self.attn = CausalSelfAttention(config, spec)
        self.ln_mlp = norm(recipe.norm, config.d_model)
        if recipe.mlp == "gelu":
            self.mlp = MLP(config)
        else:
            self.mlp = SwiGLU(config.d_model, config.dropout, recipe.bias, config.canon)
        self.canon_a = canon_at(config, "A", config.d_model)
        self.canon_c = canon_at(config, "C", config.d_model)

    def forward(self, x: Tensor, step: LayerPass) -> Tensor:
        """[B, T, C] -> [B, T, C], the block's layer of the pass ``step``."""
        state = None if step.cache is None else step.cache.canon_state
        h = self.ln_attn(x)
        if self.canon_a is not None:
            h = self.canon_a(h, state)
        x = x + self.attn(h, step)
        h = self.ln_mlp(x)
        if self.canon_c is not None:
            h = self.canon_c(h, state)
        return x + self.mlp(h, state)


__all__ = ["MLP", "Block", "CausalSelfAttention", "LayerPass", "PassView", "visible_keys", "window_keys"]
