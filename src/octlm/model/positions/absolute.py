"""Schemes that add a position vector to each token vector before the first block: a learned table, sinusoidal waves.

The seed's "A second table, indexed by position" and "A formula instead of a
table": the input to the first block is ``token row + position row``, the
same width, nothing concatenated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torch import Tensor, nn

from octlm.declare import option
from octlm.model.positions.base import PositionScheme
from octlm.model.positions.facts import PositionVectors, SchemeFacts
from octlm.model.positions.registry import register, unbounded_schemes
from octlm.model.positions.waves import DEFAULT_BASE, SINUSOIDAL_LAYOUTS, sinusoidal_positions

if TYPE_CHECKING:  # pragma: no cover
    from octlm.model.config import DecoderConfig


def learned_rows(scheme: PositionScheme, added: Tensor | None, length: int) -> PositionVectors:
    """The explorer's rows of the learned table: the trained rows themselves (``added`` is ``table.weight[:length]``,
    [length, C])."""
    return PositionVectors(
        added.float().cpu(),
        "learned",
        f"The run's learned table: {length} trained rows of {added.shape[1]} numbers.",
    )


#: What other parts of octlm read of 'learned' (:class:`~octlm.model.positions.facts.SchemeFacts`).
LEARNED_FACTS = SchemeFacts(
    label="the learned table",
    description="a learned row per position, added to the token vectors (GPT-2)",
    eviction_refusal="it adds position to the token vectors, so every layer's cached keys and values carry it",
    # its table interpolated to the new length (octlm.train.init_from)
    extension_methods=(None,),
    hf_model_type="gpt2",
    explorer_vectors=learned_rows,
)


@register("learned", facts=LEARNED_FACTS)
class LearnedPositions(PositionScheme):
    """A learned table of position rows, added to the token vectors (GPT-2).

    Holds ``table``: ``nn.Embedding(context_length, d_model)``, initialised
    N(0, 0.02) by the decoder. Row ``t`` is added to the token at position
    ``t``; the table stops at its last row, so position ``context_length`` has
    no vector and asking for it raises ``ValueError`` (never an invented row).
    """

    has_table_limit = True
    is_default = True  # octlm's Day-1 baseline, as GPT-2
    takes_random_positions = True
    takes_document_positions = True

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__(config)
        # Randomized positions reach past T, so the table has a row for every position they draw.
        self.table = nn.Embedding(self.random_range, config.d_model)

    @property
    def max_length(self) -> int:
        return self.table.num_embeddings

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        end = offset + x.shape[1]
        if end > self.max_length:
            raise ValueError(
                f"learned positions have {self.max_length} rows (positions 0..{self.max_length - 1}) "
                f"but the input needs positions {offset}..{end - 1} (length {end}); "
                f"crop the sequence to {self.max_length} tokens or use a scheme without a table "
                f"limit: {', '.join(unbounded_schemes())}"
            )
        return x + self.table(self.position_ids(x.shape[1], offset, x.device))


#: What other parts of octlm read of 'sinusoidal' (:class:`~octlm.model.positions.facts.SchemeFacts`).
SINUSOIDAL_FACTS = SchemeFacts(
    label="sinusoidal",
    eviction_refusal=LEARNED_FACTS.eviction_refusal,
    in_papers=("ruoss2023", "kazemnejad2023"),
    description="fixed sine/cosine rows added to the (scaled) token vectors (Vaswani et al. 2017)",
    hf_refusal="no transformers architecture adds fixed sine/cosine rows to sqrt(d_model)-scaled token vectors",
)


@dataclass(frozen=True)
class SinusoidalOptions:
    """The sinusoidal table's options: which columns hold sines and which cosines."""

    sinusoidal_layout: str = option(
        "interleaved",
        "sinusoidal columns: interleaved (sin, cos, ...) or concatenated ([sin | cos])",
        choices=list(SINUSOIDAL_LAYOUTS),
    )


@register("sinusoidal", facts=SINUSOIDAL_FACTS)
class SinusoidalPositions(PositionScheme):
    """Fixed sine/cosine rows added to the token vectors (Vaswani et al. 2017 §3.5).

    No parameters and no maximum length: the rows come from
    :func:`sinusoidal_positions` on every call, so the same model can be run
    at any length (whether it generalises there is what ``octlm length`` asks).

    The token vectors are multiplied by ``sqrt(d_model)`` before the rows are
    added, as Vaswani et al. 2017 §3.4 do. octlm's token table starts at
    N(0, 0.02), so a token row has norm ~0.02 sqrt(C) while a sinusoidal row
    has norm sqrt(C / 2): without the factor the token signal is ~35 times
    weaker than the position signal, and with octlm's AdamW weight decay the
    Day-1 model stayed at the unigram loss (training loss 5.77 nats after 420
    steps on tinyshakespeare, where the scaled model reached 3.99 after 380).
    """

    options = SinusoidalOptions
    takes_random_positions = True
    takes_document_positions = True
    scales_token_rows = True

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__(config)
        self.base = DEFAULT_BASE
        self.layout = config.sinusoidal_layout
        self.token_scale = math.sqrt(config.d_model)

    @classmethod
    def check_config(cls, config: DecoderConfig) -> None:
        if config.sinusoidal_layout not in SINUSOIDAL_LAYOUTS:
            raise ValueError(
                f"sinusoidal_layout must be one of {', '.join(SINUSOIDAL_LAYOUTS)}, got {config.sinusoidal_layout!r}"
            )

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        """``sqrt(C) * x + P[offset : offset + T]`` for token vectors ``x`` [B, T, C]."""
        # randomized positions (draw_positions) or per document (place_documents): the rows at them
        if self.drawn is not None:
            ids = self.position_ids(x.shape[1], offset, x.device)
            rows = sinusoidal_positions(
                max(self.random_range, int(ids.max()) + 1), x.shape[2], 0, self.base, x.device, self.layout
            )
            table = rows[ids]
        else:
            table = sinusoidal_positions(x.shape[1], x.shape[2], offset, self.base, x.device, self.layout)
        return x * self.token_scale + table.to(x.dtype)


__all__ = [
    "LEARNED_FACTS",
    "LearnedPositions",
    "SINUSOIDAL_FACTS",
    "SinusoidalOptions",
    "SinusoidalPositions",
    "learned_rows",
]
