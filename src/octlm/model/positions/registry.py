"""The registry of position schemes: :data:`SCHEMES`, :func:`register`, and the questions asked of it by name.

A scheme's module registers its class here (``@register("name")``), and every
other module finds schemes through this registry: the names a flag accepts,
which schemes a study trains or a RoPE scaling applies to, and :func:`build`,
which makes a config's scheme. The classes themselves and the options each
declares are kept a floor lower, in :mod:`octlm.model.scheme_catalog`, which
:class:`~octlm.model.config.DecoderConfig` reads without importing a scheme.
The class every scheme derives from is
:class:`~octlm.model.positions.base.PositionScheme`; this module names no
scheme.

Schemes from outside octlm (``--plugin``, the ``octlm.positions`` entry points)
are imported by :mod:`octlm.model.positions.plugins`; the entry points the first
time anything reads :data:`SCHEMES`, so every question below sees them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from octlm.model.positions.facts import SchemeFacts, facts_of, record_facts
from octlm.model.scheme_catalog import (
    SCHEME_NAMES,
    SCHEMES,
    check_declaration,
    default_scheme,
    random_position_schemes,
    reads,
)

if TYPE_CHECKING:  # pragma: no cover
    from torch import nn

    from octlm.model.config import DecoderConfig


class SchemeNameTaken(ValueError):
    """A second class registered under a scheme's name."""


#: For each scheme a plug-in registered, what ``--plugin`` takes to import it again (a module name or a file's
#: absolute path); a run records it in ``config.json``. Built-in schemes are absent.
PLUGIN_SOURCES: dict[str, str] = {}


def register(name: str, facts: SchemeFacts | None = None) -> Callable[[type], type]:
    """Class decorator adding a scheme to :data:`SCHEMES` under ``name``, with what other parts read of it (``facts``,
    :func:`~octlm.model.positions.facts.facts_of`; ``None``: the defaults).

    The class's own ``options`` (a frozen dataclass of declared options, or
    none) become the flags, TOML keys and ``config.json`` keys of its options.

    Raises:
        SchemeNameTaken: when another class is registered under ``name`` already.
        TypeError: when ``facts`` is not a :class:`~octlm.model.positions.facts.SchemeFacts`.
        TypeError: when its ``options`` is no frozen dataclass of declared
            options, or declares a name another scheme's options declare.
    """

    def wrap(cls: type) -> type:
        taken = dict.get(SCHEMES, name)
        if taken is not None and taken is not cls:
            raise SchemeNameTaken(
                f"registers the position scheme {name!r}, which is already {taken.__module__}.{taken.__qualname__}; "
                "choose another name"
            )
        if facts is not None:
            record_facts(cls, facts)
        check_declaration(name, cls)
        cls.name = name
        cls.reads = reads(cls)
        SCHEMES[name] = cls
        return cls

    return wrap


def put_in_table_order(names: Sequence[str]) -> None:
    """Order :data:`SCHEMES` as the tables list the schemes: ``names`` first, then any other registered scheme in the
    order it registered (a built-in scheme missing from ``names``, a plug-in's).

    Raises:
        ValueError: for a name in ``names`` that no scheme registered, naming it.
    """
    unknown = [name for name in names if not dict.__contains__(SCHEMES, name)]
    if unknown:
        raise ValueError(f"the table order names {unknown}, which no scheme registered; register them or drop them")
    SCHEMES.put_first(names)


def unbounded_schemes() -> list[str]:
    """Names of the schemes that can address any position (no table limit)."""
    return sorted(name for name, cls in SCHEMES.items() if not cls.has_table_limit)


def length_study_schemes() -> list[str]:
    """Schemes ``octlm length`` trains by default, in table order (the order of its table)."""
    return [name for name, cls in SCHEMES.items() if facts_of(cls).in_length_study]


def task_study_schemes() -> list[str]:
    """Schemes ``octlm length --task`` trains by default, in table order (the order of its table)."""
    return [name for name, cls in SCHEMES.items() if facts_of(cls).in_task_study]


def schemes_taking(method: str) -> list[str]:
    """Names of the schemes that accept the RoPE scaling ``method`` (:data:`ROPE_SCALINGS`)."""
    return [name for name, cls in SCHEMES.items() if method in cls.scalings()]


def document_position_schemes() -> list[str]:
    """Names of the schemes that can run under ``document_mask`` (positions restarting at each document)."""
    return [name for name, cls in SCHEMES.items() if cls.takes_document_positions]


def evicting_schemes() -> list[str]:
    """Names of the schemes whose key/value cache can keep sinks and a window of recent tokens (``evicts_cache`` of
    their facts)."""
    return [name for name, cls in SCHEMES.items() if facts_of(cls).evicts_cache]


def build(config: DecoderConfig) -> nn.Module:
    """Instantiate the scheme named by ``config.position`` (a config is checked when made, so this is not again)."""
    return SCHEMES[config.position](config)


__all__ = [
    "PLUGIN_SOURCES",
    "SchemeNameTaken",
    "build",
    "default_scheme",
    "document_position_schemes",
    "evicting_schemes",
    "SCHEMES",
    "SCHEME_NAMES",
    "length_study_schemes",
    "task_study_schemes",
    "random_position_schemes",
    "register",
    "schemes_taking",
    "unbounded_schemes",
]
