"""How an option is declared: one dataclass field holding its default, help, bounds and resume policy.

:func:`option` makes such a field, :func:`same_as` declares another command's
option again, :func:`nested` puts one options dataclass inside another (the
training options nest the model's :class:`~octlm.model.DecoderConfig`),
:func:`group` holds options whose declarations are known only when used (the
position schemes' options, :class:`~octlm.model.scheme_catalog.SchemeOptions`),
and :class:`Bound` is a range with the message that names it.

Nested or not, a command sees its options flat: every leaf option has one
name, which is its flag, its TOML key and its ``config.json`` key
(:func:`option_fields`, :func:`flat_values`, :func:`build`, :func:`replaced`).
:func:`check_fields` checks a whole options object against its declarations;
:mod:`octlm.option_values` checks values read from a file.
:mod:`octlm.train.options` declares the training options with these, the
model's shape on ``DecoderConfig``, each position scheme's options on the scheme,
and each other command's options sit beside the function that takes them.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from octlm.errors import OctlmError

#: The default of an option that must be given (a required flag, or a positional argument).
REQUIRED = dataclasses.MISSING


class Resume(enum.Enum):
    """What ``octlm train --resume`` may do with an option given again."""

    #: Must match the run (model shape, data, seed, optimiser): part of the checkpoint's config digest.
    FIXED = "fixed"
    #: How long it runs, how it reports, where it computes: taken as given, the weights stay those of an
    #: uninterrupted run, to the bit while where it computes (device, dtype, threads) is unchanged, since
    #: that orders the float sums (``batch_size``: the global batch is checked where the processes are known).
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


def option(
    default,
    help: str,
    *,
    bounds: Bound | None = None,
    check: Callable | None = None,
    resume: Resume = Resume.FIXED,
    resume_check: Callable | None = None,
    as_text: Callable | None = None,
    **cli,
) -> dataclasses.Field:
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
        as_text: for an option given as text (a flag, a TOML string) and held
            parsed (a layer layout): writes a held value back as that text,
            the option's value wherever options are flat (:func:`flat_values`).
        **cli: argparse keywords (``choices``, ``nargs``, ``metavar``,
            ``action``) and ``positional=True``.
    """
    meta = {
        "help": help,
        "bounds": bounds,
        "check": check,
        "resume": resume,
        "resume_check": resume_check,
        "as_text": as_text,
        "cli": cli,
    }
    if callable(default):
        return field(default_factory=default, metadata=meta)
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    if default is REQUIRED:
        return field(metadata=meta)
    return field(default=default, metadata=meta)


def nested(cls) -> dataclasses.Field:
    """A field holding a whole options dataclass ``cls``, whose options count as the outer one's (flat, by name)."""
    return field(default_factory=cls, metadata={"nested": cls})


def group(kind, *, handed_over: bool = False) -> dataclasses.Field:
    """A field holding a group of options declared elsewhere, read when used (plug-ins may add some).

    ``kind`` is a class whose ``kind()`` is the defaults, ``kind.option_fields()``
    the declared options, ``value.flat()`` their values by name,
    ``value.with_values(flat)`` a changed copy and ``kind.option_classes()``
    the dataclasses declaring them. With ``handed_over`` each option counts as
    declared again (``same_as``), for a command that hands them on by name.
    """
    return field(default_factory=kind, metadata={"group": kind, "handed_over": handed_over})


def _group_fields(f: dataclasses.Field) -> list[dataclasses.Field]:
    fields = f.metadata["group"].option_fields()
    if not f.metadata["handed_over"]:
        return fields
    out = []
    for inner in fields:
        again = field(default=inner.default, metadata={**inner.metadata, "same_as": inner.name})
        again.name = inner.name
        out.append(again)
    return out


def is_option(f: dataclasses.Field) -> bool:
    """Whether dataclass field ``f`` is a declared option (a plain field of a dataclass is not: no flag, no key)."""
    return "help" in f.metadata


def option_fields(cls) -> list[dataclasses.Field]:
    """The declared options of options dataclass ``cls`` in declaration order, those of :func:`nested` groups in place.

    Raises:
        TypeError: when two options of ``cls`` share a name (they would share a flag).
    """
    out: list[dataclasses.Field] = []
    for f in dataclasses.fields(cls):
        if "nested" in f.metadata:
            out += option_fields(f.metadata["nested"])
        elif "group" in f.metadata:
            out += _group_fields(f)
        elif is_option(f):
            out.append(f)
    names = [f.name for f in out]
    if len(set(names)) != len(names):
        raise TypeError(f"{cls.__name__}: options declared twice: {sorted({n for n in names if names.count(n) > 1})}")
    return out


def _groups(cls) -> list[tuple[str, type]]:
    return [(f.name, f.metadata["nested"]) for f in dataclasses.fields(cls) if "nested" in f.metadata]


def flat_values(opts) -> dict:
    """``{option name: value}`` of every declared option of ``opts``, nested groups flattened."""
    out = {}
    for f in dataclasses.fields(opts):
        value = getattr(opts, f.name)
        if "nested" in f.metadata:
            out.update(flat_values(value))
        elif "group" in f.metadata:
            out.update(value.flat())
        elif is_option(f):
            out[f.name] = value if f.metadata.get("as_text") is None else f.metadata["as_text"](value)
    return out


def plain_dict(opts) -> dict:
    """``dataclasses.asdict(opts)`` for a record (``study.json``), each group's options flat by name, as fields."""
    out = {}
    for f in dataclasses.fields(opts):
        value = getattr(opts, f.name)
        if "group" in f.metadata:
            out.update(value.flat())
        else:
            out[f.name] = dataclasses.asdict(value) if dataclasses.is_dataclass(value) else copy.deepcopy(value)
    return out


def build(cls, values: Mapping):
    """An instance of options dataclass ``cls`` from flat ``{option name: value}``; options left out keep their
    defaults.

    A nested group is built from the options its own class declares; its
    plain fields (:class:`~octlm.model.DecoderConfig`'s ``vocab_size``) keep
    their defaults, and an outer option of the same name stays outside.

    Raises:
        TypeError: for a name that is no field of ``cls`` or of a nested group.
    """
    values = dict(values)
    kwargs = {}
    for name, inner in _groups(cls):
        own = {f.name for f in option_fields(inner)}
        kwargs[name] = build(inner, {k: values.pop(k) for k in list(values) if k in own})
    for f in dataclasses.fields(cls):
        if "group" in f.metadata:
            own = {inner.name for inner in _group_fields(f)}
            kwargs[f.name] = f.metadata["group"]().with_values({k: values.pop(k) for k in list(values) if k in own})
    top = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - top)
    if unknown:
        raise TypeError(f"{cls.__name__}: unknown option(s) {unknown}")
    return cls(**kwargs, **values)


def replaced(opts, **changes):
    """A copy of ``opts`` with flat ``changes`` applied, each in the group that declares it (``dataclasses.replace`` for
    nested options).

    Raises:
        TypeError: for a name no field of ``opts`` or its groups has.
    """
    groups = dict(_groups(type(opts)))
    held = {inner.name: f.name for f in dataclasses.fields(opts) if "group" in f.metadata for inner in _group_fields(f)}
    top = {f.name for f in dataclasses.fields(opts)}
    inner_changes: dict[str, dict] = {}
    held_changes: dict[str, dict] = {}
    for key in list(changes):
        if key in top:
            continue
        if key in held:
            held_changes.setdefault(held[key], {})[key] = changes.pop(key)
            continue
        nest = next((g for g, c in groups.items() if key in {f.name for f in option_fields(c)}), None)
        if nest is None:
            raise TypeError(f"{type(opts).__name__}: unknown option {key!r}")
        inner_changes.setdefault(nest, {})[key] = changes.pop(key)
    for nest, values in inner_changes.items():
        changes[nest] = replaced(getattr(opts, nest), **values)
    for name, values in held_changes.items():
        changes[name] = changes.get(name, getattr(opts, name)).with_values(values)
    return dataclasses.replace(opts, **changes)


def refused(err: ValueError, name_of: Callable[[str], str] = flag) -> OctlmError:
    """The :class:`OctlmError` of a value an options class refused on construction, naming the flag where it names a
    field.

    A config that checks its own fields raises a ``ValueError`` with ``field``
    and ``rest`` attributes (:class:`~octlm.model.DecoderFieldError`): the
    message becomes ``--d-model=30 is not divisible ...``. ``name_of`` writes
    each field as the command spells it (a study chooses ``position`` by
    ``--schemes``).
    """
    said = getattr(err, "said", None)
    return OctlmError(said(name_of) if said is not None else str(err))


def same_as(cls, name: str, **changes) -> dataclasses.Field:
    """Field ``name`` of options dataclass ``cls`` again, for another command that takes the same option.

    ``changes`` replace parts of its declaration (``default``, ``help``,
    ``bounds``). The field remembers where it came from (``same_as`` in its
    metadata), so the other command can hand its value over by name.
    """
    source = next(f for f in option_fields(cls) if f.name == name)
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
    """Check every option of ``opts`` (nested ones too) against its declared bounds and check; unset (``None``) ones
    pass.

    Raises:
        OctlmError: for the first value out of range, naming the flag, what it
            must be and the value (``--max-steps must be >= 1, got 0``).
    """
    values = flat_values(opts)
    for f in option_fields(type(opts)):
        value = values[f.name]
        if value is None:
            continue
        bounds, check = f.metadata.get("bounds"), f.metadata.get("check")
        if bounds is not None and not bounds.admits(value):
            raise OctlmError(bounds.message(f.name, value))
        if check is not None:
            check(value)


__all__ = [
    "REQUIRED",
    "Bound",
    "Resume",
    "at_least",
    "build",
    "check_fields",
    "finite",
    "flag",
    "flat_values",
    "group",
    "is_option",
    "nested",
    "refused",
    "option",
    "option_default",
    "option_fields",
    "plain_dict",
    "replaced",
    "same_as",
]
