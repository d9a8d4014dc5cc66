"""Schemes that give attention its order from the tokens' own recency, with no position encoding: FoX and
stick-breaking.

Both read no token index. FoX (Lin et al. 2025) fades a key by the forget
gates of the tokens after it, a bias on the softmax's scores that reads the
layer's input (``read_input``); stick-breaking (Tan et al. 2025) replaces the
softmax: the nearest key takes its share of the query's attention first, and
each earlier key a share of what is left (``attend``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from octlm.model.positions.base import PositionScheme
from octlm.model.positions.facts import OPT_IN, SchemeFacts
from octlm.model.positions.registry import register

if TYPE_CHECKING:  # pragma: no cover
    from octlm.model.config import DecoderConfig
    from octlm.model.kvcache import LayerCache

#: Bytes per score entry [head, query, key] stick-breaking's weights take: the float32 scores, their two log-sigmoids,
#: the reverse sums before and after the shift, the log-weights and the weights.
STICK_BREAKING_BYTES = 7 * 4


#: Positions per block of FoX's forget bias (:func:`forget_bias`): sums inside a block stay small, so float32 keeps
#: their digits whatever the sequence's length.
FOX_BLOCK = 64


def forget_bias(log_forget: Tensor, q_len: int, k_len: int) -> Tensor:
    """FoX's ``D_ij = sum_{l=j+1..i} log f_l`` (Lin et al. 2025, §2), float32 [B, H, q_len, k_len].

    ``log_forget`` [B, H, L] holds ``log f_t`` of every key position; the
    keys are its last ``k_len`` positions and the queries the last ``q_len``
    of those. Future keys get a value the caller masks.

    Summed as ``c_i - c_j`` of running sums over the sequence, the bias
    would lose float32 digits as the sums grow (about ``|c| * 1e-7`` nats:
    9e-5 at 2,048 tokens, where ``c`` reached -1,611). So the keys are cut
    into blocks of :data:`FOX_BLOCK` positions, ending at the last key:
    ``D_ij = local_i - local_j + G[b(i), b(j)]``, with ``local`` the running
    sum inside each block and ``G[a, b]`` the sum of the totals of blocks
    ``b .. a - 1``, summed from block ``b`` on. Every term is at most one
    block's sum or the bias itself (the ``log f`` are all <= 0), so the
    error stays near float32's resolution of ``|D|`` at any length.
    """
    a = log_forget[..., -k_len:].float()
    pad = -k_len % FOX_BLOCK
    blocks = F.pad(a, (pad, 0)).unflatten(-1, (-1, FOX_BLOCK)).cumsum(-1)  # [B, H, nb, K], zeros before the keys
    totals = blocks[..., -1]  # [B, H, nb]
    nb = totals.shape[-1]
    below = torch.ones(nb, nb, dtype=torch.bool, device=a.device).tril(-1)  # [row block a, block b]: b < a
    spans = (totals[..., None, :] * below).flip(-1).cumsum(-1).flip(-1)  # G[a, b] = sum of totals b .. a-1
    rows = torch.arange(pad + k_len - q_len, pad + k_len, device=a.device)  # the queries, in padded positions
    local_q = blocks.flatten(-2)[..., rows]  # [B, H, q_len]
    bias = local_q[..., :, None, None] - blocks[..., None, :, :]  # [B, H, q_len, nb, K]
    bias += spans[..., rows // FOX_BLOCK, :, None]
    return bias.flatten(-2)[..., pad:]


#: What other parts of octlm read of 'fox' (:class:`~octlm.model.positions.facts.SchemeFacts`).
FOX_FACTS = SchemeFacts(
    label="FoX",
    # The gates between a sink and the query include those of the tokens a streaming cache drops; over the kept
    # keys alone it would be another model.
    eviction_refusal=(
        "its forget gates fade a key by every token after it, dropped tokens included: summed over the kept tokens "
        "alone it would be another model"
    ),
    description=(
        "a learned forget gate per head and token fades each key by the gates of the tokens after it, a bias on the "
        "attention scores (Lin et al. 2025)"
    ),
    hf_refusal="no transformers architecture has FoX's forget gates on the attention scores",
    **OPT_IN,
    explorer_note=(
        "This run uses FoX: forget gates read from the tokens fade earlier keys, so position is not a vector."
    ),
)


@register("fox", facts=FOX_FACTS)
class ForgettingAttention(PositionScheme):
    """Forgetting Attention, FoX (Lin et al. 2025, "Forgetting Transformer: Softmax Attention with a Forget Gate",
    ICLR 2025, §2).

    In attention layer ``l`` each head ``h`` gives each token ``t`` a
    forget gate ``f_t = sigmoid(w_h . x_t + b_h)`` from the layer's input
    ``x_t`` (the block's normed input, which the queries, keys and values
    read), and query ``i`` adds ``D_ij = sum_{l=j+1..i} log f_l`` to its
    score on key ``j`` (:func:`forget_bias`): ``softmax(q k^T / sqrt(D) + D)``.
    A key fades by the product of the gates of the tokens after it, up to
    and including the query, so a gate near 1 keeps the past and one near 0
    closes it; ``D_ii = 0``. No position encoding, no maximum length. ``w``
    and ``b`` are one ``nn.Linear(d_model, n_heads)`` per layer, started as
    the decoder starts every linear layer (N(0, 0.02), bias 0: every gate
    near 1/2), as the paper's code does by default (no special bias).

    The bias [B, H, T, S] depends on the input, so it goes to attention as a
    float mask with a gradient (SDPA's math or memory-efficient kernel).
    Under cached decoding the layer's :class:`~octlm.model.kvcache.LayerCache`
    keeps ``log f_t`` of each key it keeps (``scheme_state["fox"]``, one per
    key, so a window layer keeps its last ``window - 1`` as it keeps their
    keys) and the bias is summed from them again: exact.
    """

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__(config)
        self.gates = nn.ModuleList(nn.Linear(config.d_model, config.n_heads) for _ in range(config.n_layers))

    def read_input(self, x: Tensor, layer: int = 0, cache: LayerCache | None = None) -> Tensor:
        """Layer ``layer``'s ``log f`` of the pass's tokens ``x`` [B, T, C] after those of the keys the cache keeps:
        float32 [B, H, kept + T], one per key of the pass, for :meth:`attention_bias` as ``seen``."""
        log_forget = F.logsigmoid(self.gates[layer](x).float()).transpose(1, 2)  # [B, H, T], log f_t <= 0
        earlier = None if cache is None else cache.scheme_state.get("fox")
        if earlier is not None:
            log_forget = torch.cat((earlier, log_forget), dim=-1)
        if cache is not None:
            cache.keep_per_key("fox", log_forget)  # trimmed with the keys: a window layer keeps window - 1
        return log_forget

    def attention_bias(
        self, q: Tensor, k: Tensor, offset: int = 0, layer: int = 0, *, seen: Tensor | None = None
    ) -> Tensor:
        """``D_ij`` of layer ``layer``, float32 [B, H, Tq, Tk] (:func:`forget_bias`), from ``seen``, the ``log f``
        :meth:`read_input` returned for the layer's input.

        Raises:
            TypeError: without ``seen``.
        """
        if seen is None:
            raise TypeError(
                f"FoX's layer {layer} bias reads the layer's input: pass seen=read_input(x, {layer}, cache)"
            )
        return forget_bias(seen, q.shape[-2], k.shape[-2])


def stick_breaking_weights(q: Tensor, k: Tensor, visible: Tensor) -> Tensor:
    """Stick-breaking attention's weights, remainder on the query's own key, float32 [B, H, T, S].

    ``q`` [B, H, T, D], ``k`` [B, H, S, D], keys ending where the queries
    end; ``visible`` bool [T, S] or [B, 1, T, S]. With
    ``z_ij = q_i . k_j / sqrt(D)`` and ``beta_ij = sigmoid(z_ij)``, query
    ``i`` gives each visible key ``j`` before itself
    ``A_ij = beta_ij prod_{j<k<i, k visible} (1 - beta_ik)``: the nearest key
    breaks off its share of the stick first, each earlier key a share of
    what is left (Tan et al. 2025, §2, eq. 1, where the sum runs over keys
    before the query). The rest of the stick, ``r_i = 1 - sum_j A_ij =
    prod_j (1 - beta_ij)``, goes to the query's own key, as the authors' code
    adds ``r_i v_i`` to the output, so a row sums to 1 and the first token
    attends to itself alone. Computed in log space, as the paper's stable form: ``log beta =
    logsigmoid(z)``, ``log(1 - beta) = logsigmoid(-z)``, their reverse
    cumulative sum over the nearer keys, then one ``exp``; 0 where not visible.
    """
    scores = (q.float() @ k.float().transpose(-2, -1)) * q.shape[-1] ** -0.5
    q_len, k_len = scores.shape[-2:]
    ones = torch.ones(q_len, k_len, dtype=torch.bool, device=scores.device)
    own = ones.tril(k_len - q_len) & ones.triu(k_len - q_len)
    earlier = visible & ~own
    log_left = F.logsigmoid(-scores).masked_fill(~earlier, 0.0)  # log(1 - beta) of the keys that break the stick
    from_here = log_left.flip(-1).cumsum(-1).flip(-1)  # sum over keys j.. of log(1 - beta)
    nearer = F.pad(from_here[..., 1:], (0, 1))  # over keys after j alone: the stick key j finds left
    remainder = from_here[..., :1].expand_as(scores)  # log r_i: every key broke its share
    log_weights = torch.where(earlier, F.logsigmoid(scores) + nearer, remainder.masked_fill(~own, float("-inf")))
    return log_weights.exp()


#: What other parts of octlm read of 'stickbreaking' (:class:`~octlm.model.positions.facts.SchemeFacts`).
STICKBREAKING_FACTS = SchemeFacts(
    label="stick-breaking",
    # the stick is broken over the keys attention gets: over the cache's kept keys, nearest first
    evicts_cache=True,
    description=(
        "no softmax: the nearest key takes a sigmoid share of the attention, each earlier key a share of what is "
        "left (Tan et al. 2025)"
    ),
    hf_refusal="no transformers architecture computes stick-breaking attention",
    **OPT_IN,
    explorer_note="This run uses stick-breaking attention: order comes from the nearest keys breaking the stick first.",
)


@register("stickbreaking", facts=STICKBREAKING_FACTS)
class StickBreakingAttention(PositionScheme):
    """Stick-breaking attention (Tan et al. 2025, "Scaling Stick-Breaking Attention: An Efficient Implementation and
    In-depth Study", ICLR 2025, §2-3).

    No softmax: each head's weights come from :func:`stick_breaking_weights`
    (``attends``), the nearest key first, so attention leans to recent keys
    without a position encoding; no maximum length, no parameters of its
    own. A query's row sums to 1 once the remainder is put on its own key;
    :func:`~octlm.model.attention_maps.record_attention` records those
    weights. The weights read only the query's row of scores, so a cached
    step, which has every earlier key, computes what the full pass does:
    exact.
    """

    attends = True

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, visible: Tensor, layer: int = 0, dropout: float = 0.0
    ) -> tuple[Tensor, Tensor]:
        """The weighted sum of ``v`` [B, H, S, D] -> [B, H, T, D], and the weights float32 [B, H, T, S]."""
        weights = stick_breaking_weights(q, k, visible)
        used = F.dropout(weights, dropout) if dropout > 0 else weights
        return used.to(v.dtype) @ v, weights

    def score_bias_bytes(self, n_heads: int, length: int) -> int:
        """Bytes the weights and their intermediates take for one ``length``-token sequence."""
        return STICK_BREAKING_BYTES * n_heads * length**2


__all__ = [
    "STICK_BREAKING_BYTES",
    "FOX_BLOCK",
    "ForgettingAttention",
    "StickBreakingAttention",
    "forget_bias",
    "stick_breaking_weights",
]
