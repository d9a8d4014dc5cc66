"""How an option is declared: one dataclass field holding its default, help, bounds and resume policy.

:func:`option` makes such a field, :func:`same_as` declares another command's
option again, :class:`Bound` is a range with the message that names it, and
:func:`check_fields` checks a whole options object against its declarations.
:mod:`octlm.train.options` declares the training options with them, and each other
command's options sit beside the function that takes them.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from octlm.errors import OctlmError

#: The default of an option that must be given (a required flag, or a positional argument).
REQUIRED = dataclasses.MISSING


class Resume(enum.Enum):
    """What ``octlm train --resume`` may do with an option given again."""

    #: Must match the run (model shape, data, seed, optimiser): part of the checkpoint's config digest.
    FIXED = "fixed"
    #: How long it runs, how it reports, where it computes: taken as given, the weights stay those of an
    #: uninterrupted run (``batch_size``: the global batch is checked where the processes are known).
    FREE = "free"
    #: Allowed on purpose (say, after the loss became NaN), with a warning that the run now differs.
    RETUNABLE = "re-tunable"
    #: ``out`` and ``overwrite``: a resumed run stays in the folder it resumes.
    RUN_FOLDER = "run folder"


def flag(name: str) -> str:
    """The command-line flag of option ``name``: ``max_steps`` -> ``--max-steps``."""
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class Bound:
    """The range an option's value must lie in; ``says`` replaces the phrase derived from the limits.

    A list option's every item must lie in it, and the list must not be empty.
    """

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    note: str = ""
    says: str | None = None

    def admits(self, value) -> bool:
        if isinstance(value, list):
            return bool(value) and all(self.admits(v) for v in value)
        # written as "not (v < low)" would let NaN through; every comparison with NaN is False
        above = self.low is None or (value > self.low if self.low_open else value >= self.low)
        below = self.high is None or (value < self.high if self.high_open else value <= self.high)
        return above and below

    def phrase(self) -> str:
        if self.says is not None:
            return self.says
        low = f"{'>' if self.low_open else '>='} {self.low:g}"
        if self.high is None:
            text = low
        elif self.high == math.inf:
            text = f"a finite number {low}"
        elif self.low_open and self.high_open:
            text = f"between {self.low:g} and {self.high:g} (exclusive)"
        else:
            text = f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"
        return f"{text} {self.note}" if self.note else text

    def message(self, name: str, value) -> str:
        return f"{flag(name)} must be {self.phrase()}, got {value}"


def at_least(low: float, note: str = "") -> Bound:
    """``value >= low``."""
    return Bound(low=low, note=note)


def finite(low_open: bool = False, note: str = "", says: str | None = None) -> Bound:
    """``0 <= value < inf`` (``0 < value < inf`` with ``low_open``)."""
    return Bound(low=0, high=math.inf, low_open=low_open, high_open=True, note=note, says=says)


def option(default, help: str, *, bounds: Bound | None = None, check: Callable | None = None,
           resume: Resume = Resume.FIXED, resume_check: Callable | None = None, **cli) -> dataclasses.Field:
    """A dataclass field that is also a flag, a TOML key and a ``config.json`` key.

    Args:
        default: the value when the option is not given; :data:`REQUIRED` for
            one that must be (a positional argument with ``positional=True``);
            a callable is called for each new value (a default read from a
            registry when it is used).
        help: the ``--help`` text, with units.
        bounds: the range the value must lie in (:class:`Bound`); ``None``
            values (an unset optional option) are not checked.
        check: ``check(value)`` raising :class:`OctlmError` for rules a
            range cannot say (an unknown text encoding).
        resume: what ``octlm train --resume`` may do with it. A new option is
            kept by a resumed run unless declared otherwise: the safe side.
        resume_check: ``resume_check(name, value, then, run_dir)`` returning
            the refusal message, or ``None``, in place of the plain "must match".
        **cli: argparse keywords (``choices``, ``nargs``, ``metavar``,
            ``action``) and ``positional=True``.
    """
    meta = {"help": help, "bounds": bounds, "check": check, "resume": resume, "resume_check": resume_check, "cli": cli}
    if callable(default):
        return field(default_factory=default, metadata=meta)
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    if default is REQUIRED:
        return field(metadata=meta)
    return field(default=default, metadata=meta)


def same_as(cls, name: str, **changes) -> dataclasses.Field:
    """Field ``name`` of options dataclass ``cls`` again, for another command that takes the same option.

    ``changes`` replace parts of its declaration (``default``, ``help``,
    ``bounds``). The field remembers where it came from (``same_as`` in its
    metadata), so the other command can hand its value over by name.
    """
    source = next(f for f in dataclasses.fields(cls) if f.name == name)
    default = source.default_factory() if source.default_factory is not dataclasses.MISSING else source.default
    meta = {**source.metadata, "same_as": name}
    for key in ("help", "bounds", "check"):
        if key in changes:
            meta[key] = changes.pop(key)
    default = changes.pop("default", default)
    if changes:
        raise TypeError(f"same_as: unknown changes {sorted(changes)}")
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


def option_default(f: dataclasses.Field):
    """The default value of an option field (a fresh copy for a list)."""
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def check_fields(opts) -> None:
    """Check every option of ``opts`` against its declared bounds and check; unset (``None``) ones pass.

    Raises:
        OctlmError: for the first value out of range, naming the flag, what it
            must be and the value (``--max-steps must be >= 1, got 0``).
    """
    for f in dataclasses.fields(opts):
        value = getattr(opts, f.name)
        if value is None:
            continue
        bounds, check = f.metadata.get("bounds"), f.metadata.get("check")
        if bounds is not None and not bounds.admits(value):
            raise OctlmError(bounds.message(f.name, value))
        if check is not None:
            check(value)


__all__ = ["REQUIRED", "Bound", "Resume", "at_least", "check_fields", "finite", "flag", "option", "option_default", "same_as"]
