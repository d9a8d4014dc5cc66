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
from octlm.model.positions.facts import SchemeFacts
from octlm.model.positions.registry import register

if TYPE_CHECKING:  # pragma: no cover
    from octlm.model.config import DecoderConfig
    from octlm.model.kvcache import LayerCache

#: Bytes per score entry [head, query, key] stick-breaking's weights take: the float32 scores, their two log-sigmoids,
#: the reverse sums before and after the shift, the log-weights and the weights.
STICK_BREAKING_BYTES = 7 * 4


def forget_bias(cumulative: Tensor, q_len: int, k_len: int) -> Tensor:
    """FoX's ``D_ij = sum_{l=j+1..i} log f_l`` (Lin et al. 2025, §2), float32 [B, H, q_len, k_len].

    ``cumulative`` [B, H, L] holds ``c_t = sum_{l<=t} log f_l`` for every
    position of the sequence up to the pass's last query; queries are its
    last ``q_len`` positions and keys its last ``k_len`` (keys end where the
    queries end), so ``D_ij = c_i - c_j``. Future keys get ``c_i - c_j >= 0``,
    masked by the caller. Past some thousands of positions the difference of
    two large sums loses float32 digits (about ``|c| * 1e-7`` nats).
    """
    return cumulative[..., -q_len:, None] - cumulative[..., None, -k_len:]


#: What other parts of octlm read of 'fox' (:class:`~octlm.model.positions.facts.SchemeFacts`).
FOX_FACTS = SchemeFacts(
    label="FoX",
    # The sum of gates between a key and the query lives in the ordinary cache's scheme_state, which a streaming
    # cache does not keep; over the kept keys alone it would be another model.
    eviction_refusal=(
        "its forget gates fade a key by every token after it, and octlm keeps their running sum, not each token's "
        "gate: summed over the kept tokens alone it would be another model"
    ),
    description=(
        "a learned forget gate per head and token fades each key by the gates of the tokens after it, a bias on the "
        "attention scores (Lin et al. 2025)"
    ),
    hf_refusal="no transformers architecture has FoX's forget gates on the attention scores",
    # opt-in, as CoPE: the default study's 30 minutes hold five models
    in_length_study=False,
    # opt-in: the default task study's measured minutes are for the 8 schemes before it
    in_task_study=False,
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
    keeps ``c_t`` of every earlier token (``scheme_state["fox"]``) and a new
    token continues the sum: exact.
    """

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__(config)
        self.gates = nn.ModuleList(nn.Linear(config.d_model, config.n_heads) for _ in range(config.n_layers))

    def read_input(self, x: Tensor, layer: int = 0, cache: LayerCache | None = None) -> Tensor:
        """Layer ``layer``'s running sum of ``log f`` over the pass's tokens ``x`` [B, T, C], continuing the cache's,
        which keeps every position's: float32 [B, H, length], for :meth:`attention_bias` as ``seen``."""
        log_forget = F.logsigmoid(self.gates[layer](x).float()).transpose(1, 2)  # [B, H, T], log f_t <= 0
        earlier = None if cache is None else cache.scheme_state.get("fox")
        if earlier is None:
            cumulative = log_forget.cumsum(-1)
        else:
            cumulative = torch.cat((earlier, earlier[..., -1:] + log_forget.cumsum(-1)), dim=-1)
        if cache is not None:
            cache.scheme_state["fox"] = cumulative
        return cumulative

    def attention_bias(
        self, q: Tensor, k: Tensor, offset: int = 0, layer: int = 0, *, seen: Tensor | None = None
    ) -> Tensor:
        """``D_ij`` of layer ``layer``, float32 [B, H, Tq, Tk] (:func:`forget_bias`), from ``seen``, the running sum
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
    # opt-in, as CoPE: the default study's 30 minutes hold five models
    in_length_study=False,
    # opt-in: the default task study's measured minutes are for the 8 schemes before it
    in_task_study=False,
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
    "ForgettingAttention",
    "StickBreakingAttention",
    "forget_bias",
    "stick_breaking_weights",
]
