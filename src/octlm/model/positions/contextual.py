"""CoPE: positions counted by the context, through gates on query-key scores (Golovneva et al. 2024).

Every other scheme places a token by its index; CoPE lets each query count
the keys it finds relevant, so a position can mean "the third sentence back"
as well as "the 30th token back". The count reads the queries and keys, so
CoPE overrides ``attention_bias`` (which gets them) rather than ``score_bias``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from octlm.declare import at_least, option
from octlm.model.positions.base import SCORE_BIAS_BYTES, PositionScheme
from octlm.model.positions.facts import OPT_IN, SchemeFacts
from octlm.model.positions.registry import register

if TYPE_CHECKING:  # pragma: no cover
    from octlm.model.config import DecoderConfig

#: Bytes per score entry [head, query, key] that CoPE takes beside the bias: the scores, gates and counted
#: positions (float32), the two neighbouring integer positions (int64) and the two embeddings gathered at them.
COPE_EXTRA_BYTES = 3 * 4 + 2 * 8 + 2 * 4


def contextual_positions(q: Tensor, k: Tensor, visible: Tensor | None) -> Tensor:
    """CoPE's positions ``p_ij = sum_{t=j..i} sigmoid(q_i . k_t / sqrt(D))`` (Golovneva et al. 2024, eq. 3-4), float32
    [B, H, Tq, Tk].

    ``q`` [B, H, Tq, D] and ``k`` [B, H, Tk, D], keys ending where the
    queries end; ``visible`` bool [Tq, Tk] (``None``: every key) zeroes the
    gates of keys a query may not see, so the sum runs from key ``j`` up to
    the query itself and is 0 on future keys. The scores are attention's
    (scaled by ``1 / sqrt(D)``, as the paper's code takes them). A query's row
    reads only its own gates, so a cached step, which has every earlier key,
    counts exactly what the full pass counts.
    """
    gates = torch.sigmoid((q.float() @ k.float().transpose(-2, -1)) * q.shape[-1] ** -0.5)
    if visible is not None:
        gates = gates.masked_fill(~visible, 0.0)
    return gates.flip(-1).cumsum(-1).flip(-1)  # the sum from key j to the last key, of which those past i are 0


def interpolated_logits(q: Tensor, table: Tensor, positions: Tensor) -> Tensor:
    """``q_i . e[p_ij]`` with ``e`` interpolated between integer positions (Golovneva et al. 2024, eq. 5), float32 [B,
    H, Tq, Tk].

    ``table`` holds ``e[0] .. e[npos - 1]`` as columns, [D, npos];
    ``positions`` [B, H, Tq, Tk] are clamped to ``npos - 1``. With
    ``w = p - floor(p)``: ``(1 - w) q . e[floor p] + w q . e[ceil p]``, the
    score the interpolated vector gives, computed from the ``npos`` scores
    ``q . e[n]`` (cheaper than forming the vectors).
    """
    positions = positions.clamp(max=table.shape[-1] - 1)
    floor, ceil = positions.floor(), positions.ceil()
    scores = q.float() @ table.float()  # [B, H, Tq, npos]: q_i . e[n] for every integer n
    low, high = scores.gather(-1, floor.long()), scores.gather(-1, ceil.long())
    weight = positions - floor
    return low * (1 - weight) + high * weight


#: What other parts of octlm read of 'cope' (:class:`~octlm.model.positions.facts.SchemeFacts`).
COPE_FACTS = SchemeFacts(
    label="CoPE",
    # counts positions over the keys attention gets: over the cache's kept keys
    evicts_cache=True,
    description=(
        "positions counted by sigmoid gates on query-key scores, with interpolated learned embeddings "
        "(Golovneva et al. 2024)"
    ),
    hf_refusal="no transformers architecture counts positions with CoPE's gates on query-key scores",
    # opt-in (OPT_IN says why), the more so as CoPE forms every score twice
    **OPT_IN,
    explorer_note=(
        "This run uses CoPE: a position is counted by gates on attention scores, "
        "so it depends on the text, not the index."
    ),
)


@dataclass(frozen=True)
class CoPEOptions:
    """CoPE's options: the learned position embeddings of each layer (Golovneva et al. 2024's ``npos_max``)."""

    cope_npos_max: int = option(
        64,
        "CoPE: learned position embeddings per layer (counted positions past the last share it)",
        bounds=at_least(2),
    )


@register("cope", facts=COPE_FACTS)
class ContextualPositions(PositionScheme):
    """Contextual Position Encoding, CoPE (Golovneva et al. 2024, "Contextual Position Encoding: Learning to Count
    What's Important", §3).

    In attention layer ``l``, query ``i`` gives each key ``j <= i`` a gate
    ``g_ij = sigmoid(q_i . k_j / sqrt(D))`` and counts the key's position as
    ``p_ij = sum_{t=j..i} g_it`` (:func:`contextual_positions`): a real
    number, which grows only over the keys the query finds relevant. Its
    embedding is interpolated between learned rows ``e[floor p]`` and
    ``e[ceil p]`` of the layer's table ``e`` [head_dim, cope_npos_max] (one
    table per layer, shared by its heads, zero at the start as in the paper),
    and ``q_i . e(p_ij)`` is added to the score (:func:`interpolated_logits`).
    Positions past ``cope_npos_max - 1`` share the last row, so there is no
    maximum length. The bias [B, H, Tq, Tk] depends on the input, so it goes
    to attention as a float mask with a gradient (the math kernel), and the
    scores are formed twice (once here for the gates, once in attention).

    CoPE reads no token index, so randomized positions mean nothing to it
    and are refused. Under cached decoding the count of a new query runs
    over the cached keys, which are all there: exact.
    """

    options = CoPEOptions

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__(config)
        self.npos_max = config.cope_npos_max
        self.embeddings = nn.Parameter(torch.zeros(config.n_layers, config.head_dim, config.cope_npos_max))

    def attention_bias(self, q: Tensor, k: Tensor, offset: int = 0, layer: int = 0) -> Tensor:
        """``q_i . e(p_ij)`` of layer ``layer``, float32 [B, H, Tq, Tk]; keys end where the queries end, future keys get
        0 (masked by the caller)."""
        q_len, k_len = q.shape[-2], k.shape[-2]
        visible = (
            None if q_len == 1 else torch.ones(q_len, k_len, dtype=torch.bool, device=q.device).tril(k_len - q_len)
        )
        return interpolated_logits(q, self.embeddings[layer], contextual_positions(q, k, visible))

    def score_bias_bytes(self, n_heads: int, length: int) -> int:
        """Bytes the bias and its intermediates take for one ``length``-token sequence (:data:`COPE_EXTRA_BYTES` beside
        the usual)."""
        return (SCORE_BIAS_BYTES + COPE_EXTRA_BYTES) * n_heads * length**2


__all__ = ["COPE_EXTRA_BYTES", "CoPEOptions", "ContextualPositions", "contextual_positions", "interpolated_logits"]
