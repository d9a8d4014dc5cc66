"""NoPE: no position signal; the causal mask alone orders the tokens (Kazemnejad et al. 2023)."""

from __future__ import annotations

from octlm.model.positions.base import PositionScheme
from octlm.model.positions.registry import register


@register("none")
class NoPositions(PositionScheme):
    """NoPE: no position signal at all (Kazemnejad et al. 2023).

    The embedding is the token row alone and attention gets no rotation or
    bias; the causal mask is the only order information, which a decoder can
    still turn into a sense of position. No maximum length.
    """

    label = "NoPE"
    in_papers = ("kazemnejad2023",)
    description = PositionScheme.description
    hf_model_type = "gpt_neox"  # with partial_rotary_factor 0: nothing turns
    extension_methods = (None,)  # a control: nothing to stretch
    takes_document_positions = True  # nothing to restart: the document mask alone
    evicts_cache = True  # nothing to place: the kept keys are just keys

    @classmethod
    def explorer_note(cls) -> str:
        return "This run uses no position signal (NoPE): only the causal mask tells positions apart."


__all__ = ["NoPositions"]
