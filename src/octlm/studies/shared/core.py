"""What every study shares: a folder of its own, several schemes and seeds trained alike, and mean ± sd over seeds.

A study trains one model per position scheme and seed under one protocol,
with the same steps for all, and writes ``<name>.jsonl`` (every record),
``<name>.md`` (its tables) and ``<name>.png`` (its figure) into its folder.
The text study (:mod:`octlm.studies.length.study`) and the task study
(:mod:`octlm.studies.tasks.study`) are two protocols on this core: each declares
its options, trains and scores its models, and hands its records, tables
and figure to :func:`write_study`.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from octlm.declare import flag
from octlm.errors import OctlmError
from octlm.fileio import atomic_write
from octlm.run.folder import RunFolder
from octlm.run.outputs import check_out_spares


@dataclass(frozen=True)
class StudyFiles:
    """The names of a study's own files, and what it is called in messages."""

    kind: str  #: "length study", "task study"
    jsonl: str
    table: str
    plot: str
    extra: tuple[str, ...] = ()  #: other files and folders the study writes at its top

    @property
    def names(self) -> frozenset[str]:
        return frozenset({self.jsonl, self.table, self.plot, *self.extra})


def study_seeds(seed: int, count: int) -> list[int]:
    """The seeds of a study with ``count`` seeds from ``seed``: ``seed, seed + 1, ...``."""
    return [seed + i for i in range(count)]


def check_schemes(schemes: Sequence[str]) -> None:
    """Refuse a list of schemes that names one twice (its models would be trained twice and overwrite each other).

    Raises:
        OctlmError: naming the list.
    """
    if len(set(schemes)) != len(schemes):
        raise OctlmError(f"--schemes lists a scheme twice: {list(schemes)}")


def study_flag(name: str) -> str:
    """The flag a study takes for field ``name`` (its models' ``position`` is chosen by ``--schemes``), for
    :func:`octlm.declare.refused`: ``partial_rotary_factor`` -> ``--partial-rotary-factor``."""
    return "--schemes" if name == "position" else flag(name)


def prepare_study_folder(
    out: str,
    overwrite: bool,
    files: StudyFiles,
    inputs: Iterable[tuple[str, str]] = (),
    foreign: Callable[[RunFolder], list[str]] | None = None,
    is_study: Callable[[Path], bool] | None = None,
) -> Path:
    """Create the study folder ``out`` (empty); an earlier study of this kind is replaced only with ``overwrite``,
    anything else never.

    Args:
        inputs: ``(flag, path)`` of what the study reads (``--text``), which
            ``out`` must not be or hold.
        foreign: what inside an earlier study octlm did not write (a person's
            notes in a model's run folder), which ``--overwrite`` refuses to delete.
        is_study: whether the folder holds this kind of study (default: it
            holds only the study's own files).

    Raises:
        OctlmError: for an ``out`` that holds other files, an earlier study
            without ``overwrite``, or an ``out`` that is one of ``inputs``.
    """
    path = Path(out)
    check_out_spares(path, "--out", list(inputs))
    looks_like = is_study or (lambda p: all(child.name in files.names for child in p.iterdir()))

    def refuse(folder: RunFolder) -> str | None:
        if looks_like(path):
            return None
        return (
            f"--out {path}: holds files that are not an octlm {files.kind}, which octlm never replaces; "
            "choose a new or empty folder"
        )

    study = RunFolder(path)
    study.check_target(
        overwrite,
        refuse,
        f"--out {path}: already holds a {files.kind}; choose another --out or pass --overwrite to replace it",
        foreign=foreign,
    )
    study.recreate()
    return path


def mean_std(values: Sequence[float]) -> tuple[float, float | None]:
    """The mean of ``values`` and their sample standard deviation (``None`` for a single value: no spread to show)."""
    mean = statistics.fmean(values)
    return mean, (statistics.stdev(values) if len(values) > 1 else None)


def write_study(out: Path, files: StudyFiles, records: Iterable[dict], table: str, figure: bytes) -> dict[str, str]:
    """Write the study's JSON Lines, Markdown table and PNG figure atomically; returns their paths by kind."""
    atomic_write(out / files.jsonl, "\n".join(json.dumps(r) for r in records) + "\n")
    atomic_write(out / files.table, table)
    atomic_write(out / files.plot, figure)
    return {"jsonl": str(out / files.jsonl), "table": str(out / files.table), "plot": str(out / files.plot)}


def wrote_line(paths: Iterable[str], seconds: float) -> str:
    """The study's last line: every file it wrote, and its wall time (``seconds``, shown in minutes)."""
    names = list(paths)
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    return f"wrote {listed} in {seconds / 60:.1f} minutes"


__all__ = [
    "StudyFiles",
    "check_schemes",
    "mean_std",
    "prepare_study_folder",
    "study_flag",
    "study_seeds",
    "write_study",
    "wrote_line",
]
