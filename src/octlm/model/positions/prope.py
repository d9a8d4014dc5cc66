"""p-RoPE: RoPE without its slowest channel pairs (Barbero et al. 2024)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from octlm.declare import option
from octlm.model.positions.facts import OPT_IN
from octlm.model.positions.registry import register
from octlm.model.positions.rotary import ROPE_FACTS, RotaryPositions, rotary_dim

if TYPE_CHECKING:  # pragma: no cover
    from octlm.model.config import DecoderConfig


def kept_pairs(pairs: int, fraction: float) -> int:
    """How many of ``pairs`` channel pairs p-RoPE keeps turning: ``floor(fraction * pairs)`` (the paper's code).

    The small slack keeps a product like ``0.7 * 10`` that float rounding puts
    just under an integer from losing a pair.
    """
    return int(fraction * pairs + 1e-9)


#: What other parts of octlm read of 'prope' (:class:`~octlm.model.positions.facts.SchemeFacts`).
PROPE_FACTS = dataclasses.replace(
    ROPE_FACTS,  # RoPE's cache eviction and explorer rows
    label="p-RoPE",
    description="RoPE whose slowest channel pairs are not rotated (Barbero et al. 2024)",
    # the papers compare RoPE itself
    in_papers=(),
    **OPT_IN,
    # RoPE's fine-tunes are RoPE's: the stage leaves p-RoPE out
    extension_methods=(),
    times_length_study=False,
    # GPT-NeoX partial rotary over the 2k turning channels (k = turning_pairs) with base rope_theta ** (2k / rotary_dim)
    # computes the same frequencies, rope_theta ** (-2i / rotary_dim), once the query and key rows are reordered
    # (octlm.export.hf_neox).
    hf_model_type="gpt_neox",
)


@dataclass(frozen=True)
class PRoPEOptions:
    """p-RoPE's option beside RoPE's own: the fraction of the channel pairs that turn (Barbero et al. 2024: 0.75)."""

    rope_fraction: float = option(
        0.75, "p-RoPE: fraction of RoPE's channel pairs (the fastest) that turn; the rest are not rotated"
    )


@register("prope", facts=PROPE_FACTS)
class PartialFrequencyRoPE(RotaryPositions):
    """p-RoPE (Barbero et al. 2024, "Round and round we go! What makes Rotary Positional Encodings useful?", §6).

    RoPE (:class:`RotaryPositions`, with its layouts, ``rope_theta`` and
    scalings) whose lowest frequencies are removed: of the ``d / 2`` channel
    pairs, with ``inv_freq[i] = rope_theta ** (-2i / d)``, the first
    ``floor(rope_fraction * d / 2)`` (the fastest) turn as in RoPE and the
    rest get frequency 0, so they are never rotated and carry content alone.
    ``rope_fraction`` 1 is RoPE, 0 is NoPE; the paper's 0.75 is the default.
    The paper finds the slow pairs act as position-free "semantic channels"
    that RoPE still slowly turns, which hurts over long distances.

    This is not ``partial_rotary_factor`` (GPT-NeoX's partial rotary), which
    rotates fewer channels but spaces the frequencies anew over them
    (``rope_theta ** (-2i / rotary_dim)``), so its slowest pair is as slow as
    RoPE's; p-RoPE keeps RoPE's fastest frequencies unchanged and drops the
    slow end. (The two compose: p-RoPE's ``d`` is ``rotary_dim``.) Shapes as
    RoPE: queries and keys [B, H, T, head_dim].
    """

    options = PRoPEOptions  # with RoPE's, which it reads as a RotaryPositions

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__(config)
        pairs = self.rotary_dim // 2
        self.register_buffer(
            "turning", (torch.arange(pairs) < kept_pairs(pairs, config.rope_fraction)).double(), persistent=False
        )
        self.inv_freq.mul_(self.turning)

    @classmethod
    def turning_pairs(cls, config: DecoderConfig) -> int:
        """The first ``floor(rope_fraction * rotary_dim / 2)`` pairs turn (:func:`kept_pairs`); the rest have frequency
        0."""
        return kept_pairs(rotary_dim(config) // 2, config.rope_fraction)

    @classmethod
    def check_config(cls, config: DecoderConfig) -> None:
        super().check_config(config)
        if not 0.0 <= config.rope_fraction <= 1.0:
            raise ValueError(
                f"rope_fraction must be in [0, 1] (0: no pair turns, NoPE; 1: RoPE), got {config.rope_fraction}"
            )

    def frequencies(self, seq_len: int) -> tuple[Tensor, float]:
        """RoPE's (scaled) inverse frequencies, float64 [rotary_dim // 2], with the dropped pairs' set to 0, and the
        attention factor."""
        inv_freq, attention = super().frequencies(seq_len)
        return inv_freq * self.turning.to(inv_freq.device), attention


__all__ = ["PRoPEOptions", "PartialFrequencyRoPE", "kept_pairs"]
