"""What the rest of octlm asks about a position scheme besides its arithmetic: a record beside each scheme's class.

A scheme's class holds its math (the hooks of
:class:`~octlm.model.positions.base.PositionScheme`); what export, the studies,
the page and streaming need to know of it (a name for people, which
transformers model holds it, whether a study trains it, what the page shows,
whether its cache can evict) is a :class:`SchemeFacts` handed to
``register(name, facts=...)`` and read back with :func:`facts_of`. A scheme
registered without one (a plug-in) gets the defaults, with the class
attributes of the same names read instead where it sets them, as plug-ins
written before the record did.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torch import Tensor

from octlm.model.scheme_catalog import SCHEMES

if TYPE_CHECKING:  # pragma: no cover
    from octlm.model.positions.base import PositionScheme


@dataclass
class PositionVectors:
    """Position vectors of a run, [length, width], and where they come from (for the explorer).

    ``source`` is ``"learned"`` (trained rows) or ``"computed"`` (from a
    formula); ``description`` says what they are in a sentence.
    """

    vectors: Tensor
    source: str
    description: str


def added_rows(scheme: PositionScheme, added: Tensor | None, length: int) -> PositionVectors | None:
    """The explorer's default: the rows the scheme adds to zero token vectors, ``added`` [length, C], computed by
    formula; ``None`` when it adds nothing."""
    if added is None:
        return None
    return PositionVectors(
        added.float().cpu(),
        "computed",
        f"The {scheme.name} rows this run adds, computed by formula: {length} rows of {added.shape[1]}.",
    )


#: ``(scheme, added, length) -> PositionVectors | None``: what the page's embedding explorer shows for positions
#: ``0 .. length - 1``, from the model's scheme and what it adds to zero token vectors there ([length, C] or None)
ExplorerVectors = Callable[["PositionScheme", "Tensor | None", int], "PositionVectors | None"]


@dataclass(frozen=True)
class SchemeFacts:
    """What other parts of octlm read of a scheme; every field has the default a plug-in gets.

    Attributes:
        label: what people call it, in messages ("ALiBi's bias ..."); ``None``: its registered name.
        description: one line for people: where the scheme puts position.
        in_length_study: trained by ``octlm length`` unless ``--schemes`` says otherwise.
        in_task_study: trained by ``octlm length --task`` unless ``--schemes`` says otherwise (the measured minutes
            of docs/tasks.md are for these).
        in_papers: the task-study presets (``--preset``, :mod:`octlm.studies.task_presets`) whose paper compares it.
        extension_methods: the length study's extension-stage fine-tunes: the RoPE scaling each trains under
            (``None``: plain fine-tuning); empty: the stage leaves the scheme out.
        times_length_study: the length study's time budget is turned into steps on this scheme (a slower one).
        hf_model_type: the transformers ``model_type`` export-hf writes it as (a mapper in :mod:`octlm.export.hf`),
            or ``None``: then ``hf_refusal`` says why (a clause).
        evicts_cache: a key/value cache of it can evict tokens (StreamingLLM, Xiao et al. 2023 §3.2): its position
            acts inside attention alone, so kept keys can be placed at their positions within the cache; else
            ``eviction_refusal`` says why, for ``--cache-window``'s one-line refusal (a clause: "it ...").
        explorer_vectors: what the page's embedding explorer shows (:data:`ExplorerVectors`); ``explorer_note``
            says why it shows nothing when that gives ``None`` (``None``: a sentence naming the scheme).
    """

    label: str | None = None
    description: str = "no position signal: the causal mask is the only order information"
    in_length_study: bool = True
    in_task_study: bool = True
    in_papers: tuple[str, ...] = ()
    extension_methods: tuple[str | None, ...] = ()
    times_length_study: bool = False
    hf_model_type: str | None = None
    hf_refusal: str = "no transformers architecture computes this scheme"
    evicts_cache: bool = False
    eviction_refusal: str = "it does not declare that its position acts inside attention alone (evicts_cache)"
    explorer_vectors: ExplorerVectors = added_rows
    explorer_note: str | None = None


#: The study facts of a scheme neither default study trains (``--schemes`` names it): the default text study's 30
#: minutes hold five models, and the default task study's measured minutes are for the eight schemes before these.
#: ``SchemeFacts(..., **OPT_IN)``.
OPT_IN = {"in_length_study": False, "in_task_study": False}

#: The record each class was registered with (not inherited by name: :func:`facts_of` walks the classes it derives
#: from, so a plug-in extending a built-in scheme answers as that scheme did).
_RECORDS: dict[type, SchemeFacts] = {}
_FIELDS = tuple(field.name for field in dataclasses.fields(SchemeFacts))


def record_facts(cls: type, facts: SchemeFacts) -> None:
    """Keep ``facts`` as the record of ``cls`` (called by ``register``).

    Raises:
        TypeError: when ``facts`` is not a :class:`SchemeFacts`.
    """
    if not isinstance(facts, SchemeFacts):
        raise TypeError(f"register(facts={facts!r}): give a SchemeFacts(...) from octlm.model.positions")
    _RECORDS[cls] = facts


def facts_of(scheme: str | type | PositionScheme) -> SchemeFacts:
    """The record of a scheme, by registered name, class or instance, with ``label`` and ``explorer_note`` filled in.

    A scheme made of others (a layer layout's) holds its own record as its
    ``facts``. Otherwise the record registered with the class, or with the
    nearest class it derives from, or the defaults; a field the class sets
    as a class attribute of the same name (a plug-in written before the
    record) overrides it.

    Raises:
        KeyError: for a name no scheme is registered under.
    """
    if isinstance(scheme, str):
        scheme = SCHEMES[scheme]
    if not isinstance(scheme, type) and isinstance(own := getattr(scheme, "facts", None), SchemeFacts):
        return own
    cls = scheme if isinstance(scheme, type) else type(scheme)
    record = next((_RECORDS[klass] for klass in cls.__mro__ if klass in _RECORDS), SchemeFacts())
    record = dataclasses.replace(record, **_class_attributes(cls))
    return dataclasses.replace(
        record,
        label=record.label or cls.name,
        explorer_note=record.explorer_note or f"This run's scheme ({cls.name}) adds no position vectors.",
    )


def _class_attributes(cls: type) -> dict[str, object]:
    """The record's fields ``cls`` sets as class attributes, as values of the record's fields."""
    found = {name: getattr(cls, name) for name in _FIELDS if hasattr(cls, name)}
    if "explorer_note" in found and callable(found["explorer_note"]):
        found["explorer_note"] = found["explorer_note"]()
    if "explorer_vectors" in found:
        found["explorer_vectors"] = _legacy_vectors
    return found


def _legacy_vectors(scheme: PositionScheme, added: Tensor | None, length: int) -> PositionVectors | None:
    # A plug-in's own method, as the page asked before the record.
    return scheme.explorer_vectors(added, length)


__all__ = ["ExplorerVectors", "PositionVectors", "SchemeFacts", "added_rows", "facts_of", "record_facts"]
