"""Schemes that add a number to every attention score, by the distance between query and key: ALiBi, T5's bias, FIRE,
KERPLE.

Their arithmetic (distances, ALiBi's slopes, T5's buckets) is in
:mod:`octlm.model.positions.distances`. Each returns a bias [H, Tq, Tk] that
attention adds to its scores as a float mask, so these schemes take the
masked SDPA path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from octlm.declare import at_least, option
from octlm.model.positions.base import PositionScheme
from octlm.model.positions.distances import alibi_slopes, t5_buckets
from octlm.model.positions.facts import OPT_IN, SchemeFacts
from octlm.model.positions.registry import register

if TYPE_CHECKING:  # pragma: no cover
    from octlm.model.config import DecoderConfig


def causal_distances(scheme: PositionScheme, q_len: int, k_len: int, offset: int, device: torch.device) -> Tensor:
    """``i - j`` for the pass's query positions ``i`` and key positions ``j`` (``scheme.pass_positions``: randomized
    ones
    where the run draws them, Ruoss et al. 2023), int64 [q_len, k_len]; future keys get negative entries, masked by the
    caller."""
    query, key = scheme.pass_positions(q_len, k_len, offset, device)
    return query[:, None] - key[None, :]


#: What other parts of octlm read of 'alibi' (:class:`~octlm.model.positions.facts.SchemeFacts`).
ALIBI_FACTS = SchemeFacts(
    label="ALiBi",
    # a bias of the distance within the pass: distances within the cache
    evicts_cache=True,
    in_papers=("ruoss2023", "kazemnejad2023"),
    description="a penalty growing linearly with distance, added to the attention scores (Press et al. 2022)",
    hf_refusal=(
        "transformers' MPT and BLOOM share octlm's ALiBi slopes for 1 to 16 heads, "
        "but MPT has no biases in its linear layers and LayerNorms, which octlm's blocks have, "
        "and BLOOM normalises the token rows before the first block and has only tanh GELU"
    ),
    # a control: ALiBi needs no change to run longer
    extension_methods=(None,),
    explorer_note="This run uses ALiBi: position is a distance penalty on attention scores, not a vector.",
)


@register("alibi", facts=ALIBI_FACTS)
class ALiBiPositions(PositionScheme):
    """Attention with Linear Biases, ALiBi (Press et al. 2022).

    Adds nothing to the embedding and rotates nothing. Head ``h`` adds
    ``-m_h * (i - j)`` to the score of query position ``i`` on key position
    ``j <= i`` (:func:`alibi_slopes`), so attention fades with distance at a
    per-head rate. No table, so no maximum length; the bias goes to
    ``scaled_dot_product_attention`` as an additive float mask.
    """

    takes_document_positions = True  # its bias reads i - j alone, the same within a document wherever it starts
    takes_random_positions = (
        True  # distances between drawn positions (Ruoss et al. 2023 randomize relative schemes too)
    )

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__(config)
        self.register_buffer("slopes", alibi_slopes(config.n_heads), persistent=False)

    def score_bias(self, q_len: int, k_len: int, offset: int = 0) -> Tensor:
        """Bias [H, q_len, k_len]: queries at ``offset .. offset+q_len-1``, keys ending where the queries end.

        Entries for future keys (``j > i``) are ``-m (i - j) > 0``; the caller
        masks them out.
        """
        distance = causal_distances(self, q_len, k_len, offset, self.slopes.device).float()
        return -self.slopes[:, None, None] * distance


#: What other parts of octlm read of 't5' (:class:`~octlm.model.positions.facts.SchemeFacts`).
T5_FACTS = SchemeFacts(
    label="the T5 bias",
    # a bias of the distance within the pass: distances within the cache
    evicts_cache=True,
    in_papers=("kazemnejad2023",),
    description="a learned bias per head and bucket of distance, added to the attention scores (Raffel et al. 2020)",
    # opt-in: the default study's 30 minutes hold five models
    in_length_study=False,
    explorer_note=(
        "This run uses the T5 bias: position is a learned number per distance bucket on attention scores, not a vector."
    ),
)


@dataclass(frozen=True)
class T5Options:
    """The T5 bias's options: its distance buckets (Raffel et al. 2020: 32 and 128)."""

    t5_num_buckets: int = option(32, "distance buckets of the t5 bias (Raffel et al. 2020)", bounds=at_least(2))
    t5_max_distance: int = option(
        128, "distance (tokens) where the t5 bias's last bucket starts", bounds=at_least(2, "tokens")
    )


@register("t5", facts=T5_FACTS)
class T5RelativeBias(PositionScheme):
    """T5's relative position bias (Raffel et al. 2020 §2.1).

    A learned scalar per head and distance bucket is added to the attention
    score of query ``i`` on key ``j``: ``bias[h, i, j] = table[bucket(i - j), h]``
    (:func:`octlm.model.positions.distances.t5_buckets`: exact buckets for the nearest
    ``num_buckets // 2`` distances, logarithmic ones up to ``max_distance``,
    then one shared bucket). Causal, so buckets look back only. As in T5, one
    table (``bias_table``: ``nn.Embedding(t5_num_buckets, n_heads)``) serves
    every layer, and no vector is added to the embedding; no maximum length,
    since every distance past ``max_distance`` shares the last bucket. The
    bias goes to attention as an additive float mask [1, H, Tq, Tk].
    """

    options = T5Options
    takes_document_positions = True  # its bias reads i - j alone, the same within a document wherever it starts
    takes_random_positions = True

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__(config)
        self.num_buckets, self.max_distance = config.t5_num_buckets, config.t5_max_distance
        self.bias_table = nn.Embedding(config.t5_num_buckets, config.n_heads)

    @classmethod
    def check_config(cls, config: DecoderConfig) -> None:
        super().check_config(config)
        if config.t5_num_buckets < 2 or config.t5_max_distance <= config.t5_num_buckets // 2:
            raise ValueError(
                f"t5_max_distance must exceed t5_num_buckets // 2 (= {config.t5_num_buckets // 2}) "
                f"and t5_num_buckets must be >= 2, got {config.t5_max_distance} and {config.t5_num_buckets}"
            )

    def score_bias(self, q_len: int, k_len: int, offset: int = 0) -> Tensor:
        """Bias [H, q_len, k_len]: queries at ``offset ..``, keys ending where the queries end (future keys: bucket 0,
        masked by the caller)."""
        buckets = t5_buckets(
            causal_distances(self, q_len, k_len, offset, self.bias_table.weight.device),
            self.num_buckets,
            self.max_distance,
        )
        return self.bias_table(buckets).permute(2, 0, 1)


#: FIRE's MLP width and initial values (Li et al. 2023, appendix: 32 hidden units, c = 0.1, L = 512).
FIRE_HIDDEN, FIRE_C, FIRE_THRESHOLD = 32, 0.1, 512.0


#: What other parts of octlm read of 'fire' (:class:`~octlm.model.positions.facts.SchemeFacts`).
FIRE_FACTS = SchemeFacts(
    label="FIRE",
    # a bias of the pass's positions: the query's and keys' positions within the cache
    evicts_cache=True,
    description=(
        "a learned MLP of the distance over the query's position, added to the attention scores (Li et al. 2023)"
    ),
    # opt-in: the default study's 30 minutes hold five models
    in_length_study=False,
    explorer_note=(
        "This run uses FIRE: position is a learned function of relative distance on attention scores, not a vector."
    ),
)


@register("fire", facts=FIRE_FACTS)
class FIREBias(PositionScheme):
    """FIRE: functional interpolation for relative positions (Li et al. 2023, §3.2, eq. 4).

    ``bias[h, i, j] = f(psi(i - j) / psi(max(L, i)))[h]`` with
    ``psi(x) = log(|c| x + 1)``. The distance is divided by (a transform of)
    the query's own position, so every bias input lies in [0, 1] at any
    length ("progressive interpolation"); the threshold ``L`` keeps short
    sequences from being stretched. ``c`` and ``L = |l| * 512`` are learned
    (``l`` starts at 1, so that ``L`` moves at the pace of the other
    weights), and ``f`` is a two-layer ReLU MLP ``1 -> 32 -> n_heads``, one
    for all layers. Future keys get distance 0 and are masked by the caller.
    Shapes: bias [H, Tq, Tk]; no maximum length. The bias goes to attention as
    an additive float mask [1, H, Tq, Tk].
    """

    takes_random_positions = True

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__(config)
        self.c = nn.Parameter(torch.tensor(FIRE_C))
        self.threshold_scale = nn.Parameter(torch.tensor(1.0))
        self.mlp = nn.Sequential(nn.Linear(1, FIRE_HIDDEN), nn.ReLU(), nn.Linear(FIRE_HIDDEN, config.n_heads))

    def psi(self, x: Tensor) -> Tensor:
        """``log(|c| x + 1)``, elementwise on float ``x`` >= 0."""
        return torch.log1p(self.c.abs() * x)

    def interpolated(self, q_len: int, k_len: int, offset: int = 0) -> Tensor:
        """The MLP's input ``psi(i - j) / psi(max(L, i))`` [q_len, k_len], in [0, 1]; the explainer page draws it."""
        query, key = self.pass_positions(q_len, k_len, offset, self.c.device)
        distance = query[:, None] - key[None, :]
        query = query.float()
        threshold = self.threshold_scale.abs() * FIRE_THRESHOLD
        return self.psi(distance.clamp(min=0).float()) / self.psi(torch.maximum(query, threshold))[:, None]

    def score_bias(self, q_len: int, k_len: int, offset: int = 0) -> Tensor:
        """Bias [H, q_len, k_len]: queries at ``offset ..``, keys ending where the queries end."""
        return self.mlp(self.interpolated(q_len, k_len, offset).unsqueeze(-1)).permute(2, 0, 1)


#: KERPLE's floor on r1 and r2 (Chi et al. 2022's code clamps both to it after every update), and the
#: ranges they start uniform in, (0, 2) and (0, 1), as that code draws them.
KERPLE_EPS, KERPLE_R1_INIT, KERPLE_R2_INIT = 1e-2, 2.0, 1.0


#: What other parts of octlm read of 'kerple' (:class:`~octlm.model.positions.facts.SchemeFacts`).
KERPLE_FACTS = SchemeFacts(
    label="KERPLE",
    # a bias of the distance within the pass: distances within the cache
    evicts_cache=True,
    description=(
        "a learned logarithmic penalty -r1 log(1 + r2 distance) per layer and head on the attention scores "
        "(Chi et al. 2022)"
    ),
    hf_refusal="no transformers architecture adds KERPLE's learned logarithmic distance bias",
    **OPT_IN,
    explorer_note=(
        "This run uses KERPLE: position is a learned logarithmic distance penalty on attention scores, not a vector."
    ),
)


@register("kerple", facts=KERPLE_FACTS)
class KERPLEBias(PositionScheme):
    """KERPLE, logarithmic variant (Chi et al. 2022, "KERPLE: Kernelized Relative Positional Embedding for Length
    Extrapolation", §3-4).

    Attention layer ``l``, head ``h`` adds ``-r1 * log(1 + r2 * (i - j))`` to
    the score of query position ``i`` on key position ``j <= i``, with
    ``r1, r2 > 0`` learned per layer and head: a conditionally positive
    definite kernel of the distance (the paper's "log" kernel, its best on
    length extrapolation). ``r1`` starts uniform in (0, 2) and ``r2`` in
    (0, 1), and both are held at ``KERPLE_EPS`` or above: the bias reads
    them clamped, and before every training pass they are projected back
    (as the paper's code does after each update). Parameters ``r1``, ``r2``
    (per layer and head); bias [H, Tq, Tk]; no maximum length. With
    randomized positions the distances are those between the drawn positions.
    They are stored flat, [n_layers * n_heads], so that AdamW's weight decay,
    which takes matrices and tables only, leaves them alone, as FIRE's ``c``.
    """

    takes_random_positions = True

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__(config)
        self.n_heads, count = config.n_heads, config.n_layers * config.n_heads
        self.r1 = nn.Parameter(torch.rand(count) * KERPLE_R1_INIT)
        self.r2 = nn.Parameter(torch.rand(count) * KERPLE_R2_INIT)

    def start_pass(self, length: int, offset: int, cached: bool) -> None:
        """Project ``r1`` and ``r2`` onto ``>= KERPLE_EPS`` before a training pass (the paper's constraint r1, r2 > 0),
        then place the tokens."""
        if self.training:
            with torch.no_grad():
                self.r1.clamp_(min=KERPLE_EPS)
                self.r2.clamp_(min=KERPLE_EPS)
        super().start_pass(length, offset, cached)

    def attention_bias(self, q: Tensor, k: Tensor, offset: int = 0, layer: int = 0) -> Tensor:
        """Bias [H, Tq, Tk] of layer ``layer``: queries at ``offset ..``, keys ending where the queries end (future
        keys: distance 0, masked by the caller)."""
        distance = causal_distances(self, q.shape[-2], k.shape[-2], offset, self.r1.device).clamp(min=0).float()
        heads = slice(layer * self.n_heads, (layer + 1) * self.n_heads)
        r1, r2 = (r[heads].clamp(min=KERPLE_EPS)[:, None, None] for r in (self.r1, self.r2))
        return -r1 * torch.log1p(r2 * distance)


__all__ = [
    "FIRE_C",
    "FIRE_HIDDEN",
    "FIRE_THRESHOLD",
    "KERPLE_EPS",
    "ALiBiPositions",
    "FIREBias",
    "KERPLEBias",
    "T5Options",
    "T5RelativeBias",
    "causal_distances",
]
