"""The opt-in readings a length study knows, in the order ``length.md`` shows them, and their sections of it.

Adding a reading is one entry in :func:`registry` (:mod:`~octlm.studies.length.readings.reading` says what a
:class:`~octlm.studies.length.readings.reading.Reading` gives).
"""

from __future__ import annotations

from octlm.studies.length.readings.context_curve import CONTEXT_CURVE
from octlm.studies.length.readings.long_token_scoring import LONG_TOKENS
from octlm.studies.length.readings.reading import FinishedStudy, Reading
from octlm.studies.length.readings.streaming import STREAMING


def registry() -> dict[str, Reading]:
    """Every reading, by name, in the order ``length.md`` shows them."""
    return {reading.name: reading for reading in (CONTEXT_CURVE, LONG_TOKENS, STREAMING)}


def reading_records(readings: dict[str, Reading], records: list[dict]) -> dict[str, list[dict]]:
    """The records of each reading among ``records``, by reading name (readings with none left out)."""
    found = {name: [r for r in records if r["record"] in reading.kinds] for name, reading in readings.items()}
    return {name: got for name, got in found.items() if got}


def sections(study: FinishedStudy, records: list[dict]) -> tuple[str, dict[str, bytes]]:
    """The ``length.md`` sections and the figures of every reading whose records are among ``records``."""
    readings = registry()
    text, figures = "", {}
    for name, got in reading_records(readings, records).items():
        text += "\n" + readings[name].markdown(got, study)
        figures.update(readings[name].figures(got, study))
    return text, figures


__all__ = ["reading_records", "registry", "sections"]
