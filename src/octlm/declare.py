"""How an option is declared: one dataclass field holding its default, help, bounds and resume policy.

:func:`option` makes such a field, :func:`same_as` declares another command's
option again, :func:`nested` puts one options dataclass inside another (the
training options nest the model's :class:`~octlm.model.DecoderConfig`), and
:class:`Bound` is a range with the message that names it.

Nested or not, a command sees its options flat: every leaf option has one
name, which is its flag, its TOML key and its ``config.json`` key
(:func:`option_fields`, :func:`flat_values`, :func:`build`, :func:`replaced`).
:func:`check_fields` checks a whole options object against its declarations
and :func:`checked_values` checks values read from a file.
:mod:`octlm.train.options` declares the training options with these, the
model's shape and position options live on ``DecoderConfig`` and its schemes,
and each other command's options sit beside the function that takes them.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import json
import math
import types
import typing
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


def nested(cls) -> dataclasses.Field:
    """A field holding a whole options dataclass ``cls``, whose options count as the outer one's (flat, by name)."""
    return field(default_factory=cls, metadata={"nested": cls})


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
        elif is_option(f):
            out[f.name] = value
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
    top = {f.name for f in dataclasses.fields(opts)}
    inner_changes: dict[str, dict] = {}
    for key in list(changes):
        if key in top:
            continue
        group = next((g for g, c in groups.items() if key in {f.name for f in option_fields(c)}), None)
        if group is None:
            raise TypeError(f"{type(opts).__name__}: unknown option {key!r}")
        inner_changes.setdefault(group, {})[key] = changes.pop(key)
    for group, values in inner_changes.items():
        changes[group] = replaced(getattr(opts, group), **values)
    return dataclasses.replace(opts, **changes)


def refused(err: ValueError) -> OctlmError:
    """The :class:`OctlmError` of a value an options class refused on construction, naming the flag where it names a
    field.

    A config that checks its own fields raises a ``ValueError`` with ``field``
    and ``rest`` attributes (:class:`~octlm.model.DecoderFieldError`): the
    message becomes ``--d-model=30 is not divisible ...``.
    """
    field_name, rest = getattr(err, "field", None), getattr(err, "rest", None)
    return OctlmError(flag(field_name) + rest if field_name else str(err))


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


def field_types(cls) -> dict[str, tuple[type, bool, bool]]:
    """``{option: (item type, is a list, may be None)}`` for every declared option of options dataclass ``cls``."""
    hints: dict[str, object] = {}
    for owner in [cls, *(inner for _, inner in _groups(cls))]:
        hints.update(typing.get_type_hints(owner))
    out = {}
    for f in option_fields(cls):
        hint, optional = hints[f.name], False
        if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
            optional = type(None) in typing.get_args(hint)
            hint = next(a for a in typing.get_args(hint) if a is not type(None))
        is_list = typing.get_origin(hint) is list
        out[f.name] = (typing.get_args(hint)[0] if is_list else hint, is_list, optional)
    return out


def _is_a(value, kind: type) -> bool:
    if isinstance(value, bool):  # bool is an int to Python, never to a person
        return kind is bool
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(value, kind)


def checked_values(values: Mapping, where: str, cls, stored: bool = False) -> dict:
    """Option values read from a file, checked against the options of ``cls`` and keyed by option name.

    Keys may be spelled with dashes or underscores (``max-steps``,
    ``max_steps``). Values are shown back as JSON (``true``, ``[5]``), the
    way the person wrote them. ``stored`` marks a run's own ``config.json``:
    there ``null`` stands for an unset option, an empty ``text`` list for the
    default corpus, and keys this version no longer has are ignored.

    Raises:
        OctlmError: naming ``where`` and the key: an unknown key (with the
            closest option name), one option given twice, a value of the
            wrong type or outside the option's choices.
    """
    kinds = field_types(cls)
    choices = {f.name: f.metadata["cli"].get("choices") for f in option_fields(cls)}
    checked: dict = {}
    spelled: dict[str, str] = {}
    for key, value in values.items():
        name = str(key).replace("-", "_")
        shown = json.dumps(value, ensure_ascii=False, default=str)
        if name not in kinds:
            if stored:
                continue
            close = difflib.get_close_matches(name, kinds, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise OctlmError(
                f"{where}: unknown key {key!r}; {hint}the keys are this command's options: {', '.join(sorted(kinds))}"
            )
        if name in spelled:
            raise OctlmError(f"{where}: {spelled[name]!r} and {key!r} are the same option; keep one of them")
        spelled[name] = key
        kind, is_list, optional = kinds[name]
        if value is None and stored and (optional or is_list):
            checked[name] = [] if is_list else None
            continue
        if is_list and not isinstance(value, list):
            value = [value]
        items = value if is_list else [value]
        if not all(_is_a(v, kind) for v in items):
            expected = f"a list of {kind.__name__}" if is_list else kind.__name__
            raise OctlmError(f"{where}: key {key!r} must be {expected}, got {shown}")
        if is_list and not items and not stored:
            raise OctlmError(
                f"{where}: key {key!r} is an empty list; give at least one value, or leave the key out for the default"
            )
        if choices[name] and any(v not in choices[name] for v in items):
            raise OctlmError(f"{where}: key {key!r} must be one of {', '.join(choices[name])}, got {shown}")
        checked[name] = kind(value) if kind is float else value
    return checked


__all__ = [
    "REQUIRED",
    "Bound",
    "Resume",
    "at_least",
    "build",
    "check_fields",
    "checked_values",
    "field_types",
    "finite",
    "flag",
    "flat_values",
    "is_option",
    "nested",
    "refused",
    "option",
    "option_default",
    "option_fields",
    "replaced",
    "same_as",
]
