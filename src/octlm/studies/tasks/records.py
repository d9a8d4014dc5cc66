"""Which row a task study's record is about, as a typed value, with the one place it is written and read back.

The scheme and the row's label are separate fields: a scheme trained at
randomized positions is the row ``rope+rand`` of the scheme ``rope``, and a
``--layouts`` row has a label and layers but no one scheme. On disk the keys
stay those of every earlier study (``position``: the scheme, or a layout row's
label as in the text study; ``label``; ``randomized``; ``layers``), so an older
study folder reads the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from octlm.studies.tasks.options import Variant


@dataclass(frozen=True)
class TaskRow:
    """The row of a ``train``, ``eval`` or ``depth`` record.

    Attributes:
        label: the row's name in the tables: ``rope``, ``rope+rand``, a layout row's label.
        scheme: its position scheme; ``None`` for a layout row, whose layers carry theirs.
        randomized: trained at randomized positions (Ruoss et al. 2023).
        layers: a layout row's layout, as ``--layers`` takes it; ``None`` otherwise.
    """

    label: str
    scheme: str | None
    randomized: bool = False
    layers: str | None = None

    @classmethod
    def of_variant(cls, variant: Variant) -> TaskRow:
        if variant.layout is not None:
            return cls(variant.label, None, layers=variant.layout.layers)
        return cls(variant.label, variant.scheme, variant.randomized)

    def to_json(self) -> dict:
        """The keys every record of the row holds, in their order on disk."""
        if self.layers is not None:
            return {"position": self.label, "label": self.label, "randomized": False, "layers": self.layers}
        return {"position": self.scheme, "label": self.label, "randomized": self.randomized}

    @classmethod
    def from_json(cls, record: dict) -> TaskRow:
        """Read a record's row (one from before ``label`` was written: its ``position``, a scheme)."""
        label = record.get("label", record["position"])
        if record.get("layers") is not None:
            return cls(label, None, layers=record["layers"])
        return cls(label, record["position"], bool(record.get("randomized", False)))


def row_label(record: dict) -> str:
    """The label of a record's row (:class:`TaskRow`)."""
    return TaskRow.from_json(record).label


__all__ = ["TaskRow", "row_label"]
