"""The rules between the model's opt-in additions and the rest of its config, in one place.

Each addition (:mod:`~octlm.model.token_vectors`, :mod:`~octlm.model.canon`, :mod:`~octlm.model.key_offset`,
:mod:`~octlm.model.value_embeddings`) says what it cannot go with; :func:`extras_problem` asks each in turn, so the
config checks them with one call and a new addition adds one line here.
"""

from __future__ import annotations

from octlm.model.canon import canon_problem
from octlm.model.key_offset import key_offset_problem
from octlm.model.scheme_catalog import SCHEMES
from octlm.model.token_vectors import token_vectors_problem


def bigram_problem(config) -> tuple[str, str] | None:
    """``(field, what is wrong)`` for a bigram table of one row (its hash needs at least two) or one under
    ``document_mask`` (a document's first token would hash with the last of the one before); else ``None``."""
    if config.bigram_rows == 1:
        return "bigram_rows", "=1: the table needs 2 rows or more (one for a sequence's first token), or 0 for none"
    if config.bigram_rows and config.document_mask:
        return "bigram_rows", (
            f"={config.bigram_rows} with document_mask: each document's first token would hash with the last token of "
            "the one before; drop --bigram-rows or --document-mask"
        )
    return None


def extras_problem(config) -> tuple[str, str] | None:
    """``(field, what is wrong)`` for the first opt-in addition of a ``DecoderConfig`` (its layout already parsed)
    that cannot be built with the rest, else ``None``."""
    layers = [(s.position, config.layer_config(s)) for s in config.layers] or [(config.position, config)]
    passed = [(name, SCHEMES[name].passed_channels(c), hasattr(SCHEMES[name], "turning_pairs")) for name, c in layers]
    for problem in (
        token_vectors_problem(config, SCHEMES[config.position]),
        canon_problem(config),
        key_offset_problem(config, passed),
        bigram_problem(config),
    ):
        if problem:
            return problem
    return None


__all__ = ["bigram_problem", "extras_problem"]
