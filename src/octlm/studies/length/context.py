"""What every step of one length study shares, handed down as one value instead of threaded parameters."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from octlm.report import Reporter
from octlm.studies.length.options import RUNS, LengthOptions
from octlm.studies.length.records import StudyLengths, TrainRecord
from octlm.studies.shared.core import study_seeds
from octlm.studies.shared.progress import StudyProgress

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class StudyContext:
    """One length study as it runs.

    Attributes:
        opts: the study's options, resolved (with the step count every model trains for).
        progress: the records of its finished units; ``progress.out`` is the study folder.
        device: the torch device its models train and score on.
        report: where it says what it does.
        scored: the validation tokens every length scores (int64 [targets + 1]); ``None`` until the base models are
            trained (:meth:`with_scored`).
    """

    opts: LengthOptions
    progress: StudyProgress
    device: torch.device
    report: Reporter
    scored: np.ndarray | None = None

    @property
    def out(self) -> Path:
        return self.progress.out

    @property
    def train_length(self) -> int:
        """``T``, in tokens."""
        return self.opts.train_length

    @property
    def lengths(self) -> list[int]:
        """Every evaluated length in tokens, ``--multipliers`` times ``T``."""
        return [m * self.opts.train_length for m in self.opts.multipliers]

    @property
    def seeds(self) -> list[int]:
        return study_seeds(self.opts.seed, self.opts.seeds)

    def run_dir(self, name: str, seed: int) -> Path:
        """The run folder of row ``name`` (a scheme, a layout row or a fine-tune's label) and ``seed``."""
        return self.out / RUNS / (name if self.opts.seeds == 1 else f"{name}-seed{seed}")

    def with_scored(self, scored: np.ndarray) -> StudyContext:
        return replace(self, scored=scored)


@dataclass(frozen=True)
class StudyRecords(StudyLengths):
    """A length study's records by kind, as ``length.jsonl`` and ``length.md`` are written from them.

    Attributes:
        study: the ``study`` record (``train_length``, ``lengths``, ``options``, ...).
        rows: the ``eval`` rows, with their per-window nats.
        train_rows: one ``train`` record per model, base and fine-tuned.
        curves: the extension stage's ``curve`` records.
        attention: the ``attention`` records.
        readings: the opt-in readings' records (:mod:`octlm.studies.length.readings`).
    """

    study: dict
    rows: list[dict]
    train_rows: list[TrainRecord]
    curves: list[dict]
    attention: list[dict]
    readings: list[dict] = ()


__all__ = ["StudyContext", "StudyRecords"]
