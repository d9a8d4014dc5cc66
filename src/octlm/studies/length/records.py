"""The length study's records as typed values, with the one place each is written to ``length.jsonl`` and read back.

A record names its model by fields, not by a string that holds several:
``row`` is the base row (a scheme, or a ``--layouts`` row), ``scaling`` the
RoPE scaling it runs under, ``extended_to`` the multiple of ``T`` a fine-tune
trained at, and ``label`` what the tables print, made from them
(``rope+yarn@4x``). On disk the records keep the keys they always had, so a
study folder written before reads the same: a ``train`` record's ``position``
holds its label (its run folder's name), an ``eval`` record's ``position`` its
base row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: A fine-tune's label: ``<row>[+<scaling>]@<M>x`` (``rope+yarn@4x``; rows and scalings hold no ``+`` or ``@``).
_FINE_TUNE = re.compile(r"(?P<row>[^+@]+)(?:\+(?P<scaling>[^@]+))?@(?P<times>\d+)x")


def model_label(row: str, scaling: str | None = None, extended_to: int | None = None) -> str:
    """The label of a model: its row, with ``+scaling`` under a RoPE scaling and ``@Mx`` for a fine-tune at M x T."""
    label = row if scaling is None else f"{row}+{scaling}"
    return label if extended_to is None else f"{label}@{extended_to}x"


class StudyLengths:
    """``T`` and the evaluated lengths of a length study, read from its ``study`` record (the attribute ``study``):
    what the records of a study being written and those of a finished one read back both answer."""

    study: dict

    @property
    def train_length(self) -> int:
        """``T``, in tokens."""
        return self.study["train_length"]

    @property
    def lengths(self) -> list[int]:
        """Every evaluated length, in tokens."""
        return self.study["lengths"]


#: What a ``train`` record keeps of a model's training, in the order it is written.
TRAIN_FIGURES = ("run_dir", "steps", "train_seconds", "tokens_per_second", "val_bpb")


@dataclass(frozen=True)
class TrainRecord:
    """One model the study trained (a base model) or fine-tuned (the extension stage).

    Attributes:
        row: its base row: a scheme (``rope``) or a ``--layouts`` row (``rope-nope``).
        seed: its seed.
        scaling: the RoPE scaling a fine-tune trained under (``yarn``), else ``None``.
        extended_to: the multiple M of ``T`` a fine-tune trained at, ``None`` for a base model.
        run_dir: its run folder, as it was written.
        steps: optimiser steps taken.
        train_seconds: seconds of training (a clock: differs between runs).
        tokens_per_second: training throughput (a clock).
        val_bpb: validation bits per byte at its training length.
    """

    row: str
    seed: int | None
    scaling: str | None = None
    extended_to: int | None = None
    run_dir: str | None = None
    steps: int | None = None
    train_seconds: float | None = None
    tokens_per_second: float | None = None
    val_bpb: float | None = None

    @classmethod
    def of_result(
        cls, row: str, seed: int, result: dict, scaling: str | None = None, extended_to: int | None = None
    ) -> TrainRecord:
        """The record of a training ``result`` (``train_unit``'s: :data:`TRAIN_FIGURES` and more)."""
        return cls(row, seed, scaling, extended_to, **{k: result.get(k) for k in TRAIN_FIGURES})

    @property
    def label(self) -> str:
        """Its name in the tables and its run folder's (``-seed<s>`` aside): ``rope``, ``rope+yarn@4x``."""
        return model_label(self.row, self.scaling, self.extended_to)

    @property
    def fine_tuned(self) -> bool:
        return self.extended_to is not None

    def to_json(self) -> dict:
        """The record as ``length.jsonl`` holds it: ``position`` is the label; figures not known are left out."""
        figures = {k: getattr(self, k) for k in TRAIN_FIGURES if getattr(self, k) is not None}
        return {"record": "train", "position": self.label, "seed": self.seed, **figures}

    @classmethod
    def from_json(cls, record: dict) -> TrainRecord:
        """Read a ``train`` record back (any study's: the key ``position`` holds the label since the first)."""
        label = record["position"]
        found = _FINE_TUNE.fullmatch(label)
        row, scaling, times = (label, None, None) if found is None else (found["row"], found["scaling"], found["times"])
        figures = {k: record.get(k) for k in TRAIN_FIGURES}
        return cls(row, record.get("seed"), scaling, None if times is None else int(times), **figures)


@dataclass(frozen=True)
class ScoredModel:
    """Which model an ``eval`` (or ``attention``) record scored, and in which state.

    Attributes:
        label: the table's row: ``rope``, ``rope+yarn`` (a base model under a scaling), ``rope+logn``, ``rope@4x``.
        row: the base row: a scheme or a ``--layouts`` row (the key ``position`` on disk).
        seed: the model's seed (``None`` in a study that did not record one).
        scaling: the RoPE scaling it was scored under (or, fine-tuned, trained under), else ``None``.
        factor: that scaling's factor, ``None`` without one.
        attention_scale: ``log`` for a row scored with log-scaled logits past ``T``, else ``None``.
        extended_to: the multiple M of ``T`` a fine-tuned model trained at, ``None`` for a base model.
    """

    label: str
    row: str
    seed: int | None = None
    scaling: str | None = None
    factor: float | None = None
    attention_scale: str | None = None
    extended_to: int | None = None

    @classmethod
    def of(cls, record: dict) -> ScoredModel:
        """Read an ``eval`` or ``attention`` record's model (keys it lacks: ``None``)."""
        return cls(
            record["label"],
            record["position"],
            record.get("seed"),
            record.get("rope_scaling"),
            record.get("rope_factor"),
            record.get("attention_scale"),
            record.get("extended_to"),
        )

    @property
    def fine_tuned(self) -> bool:
        return self.extended_to is not None

    @property
    def run_name(self) -> str:
        """The name of its run folder (``-seed<s>`` aside): a fine-tune's own label, else its base row's."""
        return self.label if self.fine_tuned else self.row


__all__ = ["TRAIN_FIGURES", "ScoredModel", "StudyLengths", "TrainRecord", "model_label"]
