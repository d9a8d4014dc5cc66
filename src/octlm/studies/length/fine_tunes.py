"""Which fine-tunes the length study's extension stage makes: each label (``rope+yarn``, a ``--layouts`` row) with
its base row and RoPE scaling method, read from what each scheme says it takes."""

from __future__ import annotations

from octlm.model.positions import SCHEMES, facts_of
from octlm.studies.shared.rows import layout_rows, row_extensions


def extensions() -> dict[str, tuple[str, str | None]]:
    """``label: (base scheme, RoPE scaling method or None)`` of every fine-tune the stage can make, in table order.

    Each scheme says which it takes (``extension_methods`` of its facts);
    the label is the scheme, with ``+method`` under a scaling. The scheme
    with the most methods comes first, as the study's tables have always listed it.
    """
    ordered = sorted(SCHEMES.items(), key=lambda item: -len(facts_of(item[1]).extension_methods))
    return {
        scheme if m is None else f"{scheme}+{m}": (scheme, m)
        for scheme, cls in ordered
        for m in facts_of(cls).extension_methods
    }


def labels_for(schemes: list[str]) -> list[str]:
    """The extension labels whose base scheme the study trains."""
    return [label for label, (scheme, _) in extensions().items() if scheme in schemes]


def extension_rows(opts) -> dict[str, tuple[str, str | None]]:
    """``label: (base row, RoPE scaling method or None)`` of every fine-tune the study ``opts`` makes, in table order:
    its schemes' (:func:`extensions`), then each layout row's, labelled as the row with ``+method`` under a scaling
    (:func:`~octlm.studies.shared.rows.row_extensions`)."""
    found = {label: pair for label, pair in extensions().items() if pair[0] in opts.schemes}
    for row in layout_rows(opts.layouts):
        found |= {row.label if m is None else f"{row.label}+{m}": (row.label, m) for m in row_extensions(row)}
    return found


__all__ = ["extension_rows", "extensions", "labels_for"]
