"""An unfinished study's records, so that the same command continues it where it stopped.

While a study runs, its folder holds ``progress/``: ``study.json`` (every
option of the study, as it records them) and one JSON file per finished
*unit* of work (a model trained, a model scored, a curve point), each
written atomically once the unit is done. The tables are written from those
records when every unit is done, and ``progress/`` is removed after them: a
finished study folder holds what it always did.

Running the same command on a folder with ``progress/`` continues the
study (one stopped while writing its tables writes them all again): units
with a record are read back, never recomputed; a model stopped
mid-training resumes from its checkpoint. Options that differ
from ``study.json`` are refused, naming the first that differs, so a study
never mixes results from different options.

"""

from __future__ import annotations

import json
import shlex
import shutil
from collections.abc import Callable
from pathlib import Path

from octlm.declare import flag
from octlm.errors import OctlmError
from octlm.fileio import atomic_write_json

#: The folder of an unfinished study's records, inside the study folder.
PROGRESS = "progress"
#: The options of the study, in ``progress/``.
STUDY = "study.json"
#: Options that name where the study is, not what it computes: a continued study may give them anew.
FREE_OPTIONS = frozenset({"out", "overwrite", "shard", "processes"})
#: Options that say how the study's processes shared its work: left out of the study's record of its options.
PLACEMENT = frozenset({"shard", "processes"})


def option_defaults(cls) -> dict:
    """Each declared option of options class ``cls`` at its default, by name."""
    from octlm.declare import option_default, option_fields

    return {f.name: option_default(f) for f in option_fields(cls)}


def comparable(options: dict) -> dict:
    """``options`` as ``study.json`` holds them (JSON's lists, not tuples), those in :data:`FREE_OPTIONS` left out."""
    return {k: v for k, v in json.loads(json.dumps(options)).items() if k not in FREE_OPTIONS}


def first_difference(recorded: dict, options: dict, defaults: dict | None = None) -> str | None:
    """The first option (sorted by name) whose value in ``options`` differs from ``recorded``, or ``None``.

    An option ``recorded`` lacks that ``defaults`` holds came to octlm after the study began: the study ran without
    it, as the option's default does, so it differs only when ``options`` gives another value."""
    now, then = comparable(options), recorded_with_defaults(recorded, defaults)
    return next((name for name in sorted(set(then) | set(now)) if then.get(name) != now.get(name)), None)


def recorded_with_defaults(recorded: dict, defaults: dict | None) -> dict:
    """``recorded`` with each option of ``defaults`` it lacks at its default (as ``study.json`` holds values)."""
    return {**comparable(defaults or {}), **recorded}


def as_given(name: str, value) -> str:
    """Option ``name`` with ``value`` as a command line writes it: ``--schemes rope alibi``, ``--document-mask``;
    ``no --max-steps`` for an option left out (``None``, ``""``) or off (``False``); ``--layouts (none)`` for an
    empty list (given with no values, or left at an empty default)."""
    if value is None or value is False or value == "":
        return f"no {flag(name)}"
    if value == []:
        return f"{flag(name)} (none)"
    if value is True:
        return flag(name)
    values = value if isinstance(value, list) else [value]
    return " ".join([flag(name), *(shlex.quote(str(v)) for v in values)])


class StudyProgress:
    """The records of one study folder's finished units (``out/progress/<unit>.json``).

    Attributes:
        out: the study folder.
        continuing: whether the study began in an earlier command.
    """

    def __init__(self, out: Path, continuing: bool) -> None:
        self.out = Path(out)
        self.continuing = continuing
        #: Called with each unit's name once it is recorded (a spread study's count of models done).
        self.recorded: Callable[[str], None] = lambda unit: None
        #: Told of each damaged record set aside (the study's reporter's ``warn`` once it is opened).
        self.warn: Callable[[str], None] = lambda message: None

    @property
    def folder(self) -> Path:
        return self.out / PROGRESS

    def start(self, options: dict) -> None:
        """Record the study's options: the folder is an unfinished study from now on."""
        self.folder.mkdir(exist_ok=True)
        atomic_write_json(self.folder / STUDY, comparable(options))

    def get(self, unit: str) -> dict | None:
        """The record of ``unit``, or ``None`` when it is not done, or its record is not complete (then set aside,
        with a warning naming it, so the unit is done again)."""
        path = self.folder / f"{unit}.json"
        if not path.is_file():
            return None
        record = _record(path)
        if record is None:
            self._set_aside(path)
        return record

    def set_aside_damaged(self) -> int:
        """Set aside every record that is not complete (cut short, edited, not a JSON object), so the units they
        stood for are done again, as if never recorded; returns how many. The damaged bytes are kept beside, as
        ``<unit>.json.damaged``, until the study finishes."""
        damaged = [p for p in sorted(self.folder.glob("*.json")) if p.name != STUDY and _record(p) is None]
        for path in damaged:
            self._set_aside(path)
        return len(damaged)

    def _set_aside(self, path: Path) -> None:
        try:
            path.replace(path.with_name(path.name + ".damaged"))
        except FileNotFoundError:
            return  # another share of the study set it aside first
        self.warn(f"{path} is not a complete record (cut short or edited); its unit {path.stem} will be done again")

    def put(self, unit: str, record: dict) -> dict:
        """Record ``unit`` as done (atomically: a kill leaves the record whole or absent); returns ``record``."""
        atomic_write_json(self.folder / f"{unit}.json", record)
        self.recorded(unit)
        return record

    def done(self) -> int:
        """How many units are recorded."""
        return sum(1 for p in self.folder.glob("*.json") if p.name != STUDY)

    def finish(self) -> None:
        """Remove the records once the study's tables are written: the folder is a finished study."""
        shutil.rmtree(self.folder, ignore_errors=True)


def _record(path: Path) -> dict | None:
    """The record in ``path``, or ``None`` when it is not a whole, non-empty JSON object (every record is one)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
        return None
    return record if isinstance(record, dict) and record else None


def unfinished_options(out: Path) -> dict | None:
    """The options of the unfinished study in ``out`` (it holds ``progress/study.json``), or ``None``.

    A study stays unfinished until every table is written: ``progress/`` goes
    last, so a study stopped while writing its tables writes them all again.
    """
    path = Path(out) / PROGRESS / STUDY
    if not path.is_file():
        return None
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        recorded = None
    if not isinstance(recorded, dict):
        raise OctlmError(
            f"--out {out}: {path} is damaged, so the unfinished study cannot be continued; "
            "pass --overwrite to start it again"
        )
    return recorded


def continue_study(out: Path, kind: str, recorded: dict, options: dict, defaults: dict | None = None) -> StudyProgress:
    """The progress of the unfinished study in ``out``, after checking that ``options`` are the ones it began with
    (``defaults``: each option's default, for the options added to octlm after it began: :func:`first_difference`).

    Raises:
        OctlmError: naming the first option that differs, its value then and now, and the fix.
    """
    name = first_difference(recorded, options, defaults)
    if name is not None:
        then, now = recorded_with_defaults(recorded, defaults).get(name), comparable(options).get(name)
        raise OctlmError(
            f"--out {out}: holds an unfinished {kind} begun with {as_given(name, then)}, "
            f"but this command gives {as_given(name, now)}; give the same options to continue it, "
            "--overwrite to start it again, or another --out"
        )
    return StudyProgress(out, continuing=True)


def open_study(
    out: str,
    overwrite: bool,
    kind: str,
    options: dict,
    prepare: Callable[[], Path],
    report,
    defaults: dict | None = None,
) -> StudyProgress:
    """The progress of the study at ``out``: the unfinished study there when it began with ``options`` (continued),
    else a new study folder made by ``prepare`` (which refuses an occupied folder without ``overwrite``).

    Raises:
        OctlmError: for an unfinished study begun with other options (:func:`continue_study`), or what ``prepare``
            raises.
    """
    recorded = None if overwrite else unfinished_options(Path(out))
    if recorded is not None:
        progress = continue_study(Path(out), kind, recorded, options, defaults)
        progress.warn = report.warn
        progress.set_aside_damaged()
        report.event(
            "continue",
            f"continuing the unfinished {kind} in {out}: {progress.done()} finished parts kept",
            kept=progress.done(),
        )
        return progress
    progress = StudyProgress(prepare(), continuing=False)
    progress.warn = report.warn
    progress.start(options)
    return progress


__all__ = [
    "FREE_OPTIONS",
    "PROGRESS",
    "STUDY",
    "StudyProgress",
    "as_given",
    "comparable",
    "continue_study",
    "first_difference",
    "option_defaults",
    "recorded_with_defaults",
    "open_study",
    "unfinished_options",
]
