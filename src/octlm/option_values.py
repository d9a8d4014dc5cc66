"""What an option's value must be where it enters: its type (a flag's, :func:`field_types`) and values read from a file
(a TOML ``--config``, a run's ``config.json``), checked against the declarations of :mod:`octlm.declare`
(:func:`checked_values`)."""

from __future__ import annotations

import dataclasses
import difflib
import json
import types
import typing
from collections.abc import Mapping

from octlm.declare import option_fields
from octlm.errors import OctlmError


def field_types(cls) -> dict[str, tuple[type, bool, bool]]:
    """``{option: (item type, is a list, may be None)}`` for every declared option of options dataclass ``cls``."""
    hints: dict[str, object] = {}
    for owner in _declaring_classes(cls):
        hints.update(typing.get_type_hints(owner))
    out = {}
    for f in option_fields(cls):
        if f.metadata.get("as_text") is not None:
            out[f.name] = (str, False, False)
            continue
        hint, optional = hints[f.name], False
        if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
            optional = type(None) in typing.get_args(hint)
            hint = next(a for a in typing.get_args(hint) if a is not type(None))
        is_list = typing.get_origin(hint) is list
        out[f.name] = (typing.get_args(hint)[0] if is_list else hint, is_list, optional)
    return out


def _declaring_classes(cls) -> list[type]:
    """``cls``, its nested options classes and the dataclasses of its groups' options, at every depth."""
    out = [cls]
    for f in dataclasses.fields(cls):
        if "nested" in f.metadata:
            out += _declaring_classes(f.metadata["nested"])
        elif "group" in f.metadata:
            out += f.metadata["group"].option_classes()
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
            # A near spelling is the likely fix; the whole list (some 70 keys) only where there is none.
            keys = " (the command's --help lists them, - written _)" if close else f": {', '.join(sorted(kinds))}"
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise OctlmError(f"{where}: unknown key {key!r}; {hint}the keys are this command's options{keys}")
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


__all__ = ["checked_values", "field_types"]
