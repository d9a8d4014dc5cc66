"""NoPE: no position signal; the causal mask alone orders the tokens (Kazemnejad et al. 2023)."""

from __future__ import annotations

from octlm.model.positions.base import PositionScheme
from octlm.model.positions.facts import SchemeFacts
from octlm.model.positions.registry import register

#: What other parts of octlm read of 'none' (:class:`~octlm.model.positions.facts.SchemeFacts`).
NONE_FACTS = SchemeFacts(
    label="NoPE",
    in_papers=("kazemnejad2023",),
    # with partial_rotary_factor 0: nothing turns
    hf_model_type="gpt_neox",
    # a control: nothing to stretch
    extension_methods=(None,),
    # nothing to place: the kept keys are just keys
    evicts_cache=True,
    explorer_note="This run uses no position signal (NoPE): only the causal mask tells positions apart.",
)


@register("none", facts=NONE_FACTS)
class NoPositions(PositionScheme):
    """NoPE: no position signal at all (Kazemnejad et al. 2023).

    The embedding is the token row alone and attention gets no rotation or
    bias; the causal mask is the only order information, which a decoder can
    still turn into a sense of position. No maximum length.
    """

    takes_document_positions = True  # nothing to restart: the document mask alone


__all__ = ["NoPositions"]
