"""Opt-in readings of a finished length study: measurements of its trained models that the default study leaves out.

A reading is computed from a study's saved models and validation text, with
no training: either at the end of the study that asks for it
(``octlm length --text ... --context-curve``) or later on a finished study
folder (``octlm length --out DONE --reread --context-curve``), which loads the
models from ``DONE/runs/`` and the study's options from the ``study`` record of
``DONE/length.jsonl``, appends the reading's records to ``length.jsonl`` (those
of an earlier run of the same reading are replaced) and rewrites ``length.md``
and the figures, every file atomically (:func:`octlm.fileio.atomic_write`).

Adding a reading is one entry in :func:`~octlm.studies.length.readings.catalog.registry`. A :class:`Reading` gives

* ``name``: its flag (``--<name>``) and what ``length.md`` calls it;
* ``kinds``: the ``record`` values of the records it writes (its records are
  told from the study's by these, so they must be new kinds);
* ``compute(study, params, device, report) -> list[dict]``: its records, from a
  :class:`FinishedStudy` (the study's records and options, its base models'
  run folders, the validation targets it scored) and ``params`` (its
  :class:`Param` values by name);
* ``markdown(records, study) -> str``: its section of ``length.md``, from its
  records alone (so a reread reproduces it);
* ``figures(records, study) -> dict[str, bytes]``: PNG files by name, written
  into the study folder beside ``length.png``;
* ``params``: its own options (``--context-targets``), each with a default and
  a check; ``help`` and ``cost`` for ``octlm length --help``;
* ``check(params, train_length)``: refuses, with an :class:`OctlmError`,
  values that cannot work with models trained at ``train_length`` tokens;
  called before a study trains anything and before a reread computes;
* ``check_study(params, options)``: refuses a new study's options (its
  :class:`~octlm.studies.length.options.LengthOptions`) whose models could
  give the reading nothing, before anything trains (a reread's models are
  already there: ``compute`` says it for them).

Every reading's records carry what is needed to compute its tables again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from octlm.errors import OctlmError
from octlm.studies.length.records import StudyLengths, TrainRecord
from octlm.studies.shared.progress import PROGRESS


@dataclass(frozen=True)
class Param:
    """One option of a reading: ``--<flag>`` (``name`` with ``-`` for ``_``), an int, at least ``minimum``."""

    name: str
    default: int
    help: str
    minimum: int = 1
    metavar: str = "N"

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def check(self, value: int) -> int:
        """``value`` when it is an int of at least ``minimum``.

        Raises:
            OctlmError: naming the flag and the value.
        """
        if not isinstance(value, int) or value < self.minimum:
            raise OctlmError(f"{self.flag} must be an integer >= {self.minimum}, got {value!r}")
        return value


@dataclass(frozen=True)
class Reading:
    """A reading of a finished study's models (see the module docstring for the contract of each field)."""

    name: str
    help: str
    kinds: tuple[str, ...]
    compute: Callable[..., list[dict]]
    markdown: Callable[[list[dict], FinishedStudy], str]
    figures: Callable[[list[dict], FinishedStudy], dict[str, bytes]]
    params: tuple[Param, ...] = ()
    check: Callable[[dict, int], None] = lambda params, train_length: None
    check_study: Callable[[dict, Any], None] = lambda params, options: None

    @property
    def flag(self) -> str:
        return f"--{self.name}"

    def values(self, given: dict) -> dict:
        """Its params' values by name: those in ``given``, else their defaults, each checked (:meth:`Param.check`)."""
        return {p.name: p.check(given.get(p.name, p.default)) for p in self.params}

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")


@dataclass(frozen=True)
class StudyModel:
    """One base model of a study: its row label (a scheme or a ``--layouts`` row), seed and run folder."""

    label: str
    seed: int
    run_dir: Path


@dataclass
class FinishedStudy(StudyLengths):
    """A finished length study folder, read back: its ``length.jsonl`` records in order, and where its models are."""

    out: Path
    records: list[dict]
    _scored: np.ndarray | None = field(default=None, repr=False)

    @property
    def study(self) -> dict:
        return next(r for r in self.records if r["record"] == "study")

    @property
    def options(self) -> dict:
        """The options the study ran with (``LengthOptions`` as a dict)."""
        return self.study["options"]

    def models(self) -> list[StudyModel]:
        """The base models (not the fine-tuned ones), in the study's order: ``runs/<row>`` or ``runs/<row>-seed<s>``."""
        many = self.options["seeds"] > 1
        found = []
        for trained in (TrainRecord.from_json(r) for r in self.records if r["record"] == "train"):
            if not trained.fine_tuned:
                name = f"{trained.row}-seed{trained.seed}" if many else trained.row
                found.append(StudyModel(trained.row, trained.seed, self.out / "runs" / name))
        return found

    def scored(self) -> np.ndarray:
        """The validation stream every length scored: its first ``targets + 1`` tokens (int64 [targets + 1])."""
        if self._scored is None:
            from octlm.run.folder import RunFolder

            val = RunFolder(self.models()[0].run_dir).tokens("val")
            self._scored = np.asarray(val[: self.study["targets"] + 1], dtype=np.int64)
        return self._scored


def load_study(out: str | Path, flag: str = "--reread") -> FinishedStudy:
    """Read a finished length study folder back.

    Raises:
        OctlmError: for a folder that is no finished length study (no such folder, no ``length.jsonl`` with a
            ``study`` record, a line of it that is not JSON, an unfinished study, a missing model run folder),
            naming it and the fix.
    """
    path = Path(out)
    jsonl = path / "length.jsonl"
    if (path / PROGRESS).is_dir():
        raise OctlmError(
            f"{flag}: {path} is an unfinished length study ({PROGRESS}/ remains); run its octlm length command again "
            "to finish it first"
        )
    try:
        lines = jsonl.read_text(encoding="utf-8").splitlines()
    except (OSError, ValueError):
        lines = []
    records = []
    for number, line in enumerate(lines, 1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except ValueError as err:
                raise OctlmError(
                    f"{flag}: {jsonl} line {number} is not JSON ({err.msg}): the file was cut short or edited; restore "
                    "it, or run the study again"
                ) from None
    if not any(r.get("record") == "study" and "train_length" in r for r in records):
        raise OctlmError(
            f"{flag}: {path} is no finished length study (no length.jsonl with a study record); give --out the "
            "folder of an octlm length --text study"
        )
    study = FinishedStudy(path, records)
    missing = [m.run_dir for m in study.models() if not (m.run_dir / "config.json").is_file()]
    if missing:
        raise OctlmError(f"{flag}: {path} lacks the model {missing[0]}; a reading needs every model of the study")
    return study


__all__ = ["FinishedStudy", "Param", "Reading", "StudyModel", "load_study"]
