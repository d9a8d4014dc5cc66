"""The registry of position schemes: :data:`SCHEMES`, :func:`register`, and the questions asked of it by name.

A scheme's module registers its class here (``@register("name")``), and every
other module finds schemes through this registry: the names a flag accepts,
which schemes a study trains or a RoPE scaling applies to, the options each
declares (fields of :class:`~octlm.model.config.DecoderConfig`), and
:func:`build`, which checks a config and makes its scheme. The class every
scheme derives from is :class:`~octlm.model.positions.base.PositionScheme`;
this module names no scheme.

Schemes from outside octlm (``--plugin``, the ``octlm.positions`` entry points)
are imported by :mod:`octlm.model.positions.plugins`; the entry points the first
time anything reads :data:`SCHEMES`, so every question below sees them.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from octlm.model.positions.facts import SchemeFacts, facts_of, record_facts

if TYPE_CHECKING:  # pragma: no cover
    from octlm.model.config import DecoderConfig
    from octlm.model.positions.base import PositionScheme


class SchemeNameTaken(ValueError):
    """A second class registered under a scheme's name."""


class _Registry(dict):
    """A dict whose every read first imports the installed ``octlm.positions`` entry points (once per process).

    Writes (:func:`register`) and ``dict.*`` calls on it do not, so registering
    a built-in scheme while the package imports never starts a plug-in.
    """

    def raw(self, name: str) -> type[PositionScheme]:
        """The class under ``name`` without looking for entry points (``KeyError`` when absent)."""
        return dict.__getitem__(self, name)

    def __getitem__(self, name):
        _load_entry_points()
        return dict.__getitem__(self, name)

    def __contains__(self, name) -> bool:
        _load_entry_points()
        return dict.__contains__(self, name)

    def __iter__(self):
        _load_entry_points()
        return dict.__iter__(self)

    def __len__(self) -> int:
        _load_entry_points()
        return dict.__len__(self)

    def get(self, name, default=None):
        _load_entry_points()
        return dict.get(self, name, default)

    def keys(self):
        _load_entry_points()
        return dict.keys(self)

    def values(self):
        _load_entry_points()
        return dict.values(self)

    def items(self):
        _load_entry_points()
        return dict.items(self)


#: Every registered scheme class by name, in registration order (the order of the studies' tables).
SCHEMES: dict[str, type[PositionScheme]] = _Registry()
#: For each scheme a plug-in registered, what ``--plugin`` takes to import it again (a module name or a file's
#: absolute path); a run records it in ``config.json``. Built-in schemes are absent.
PLUGIN_SOURCES: dict[str, str] = {}
_entry_points_loaded = False


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    config = sys.modules.get("octlm.model.config")
    if config is not None and not hasattr(config, "DecoderConfig"):
        return  # DecoderConfig's own class body is asking (built-in schemes only); plug-ins load after it exists
    _entry_points_loaded = True  # before importing: a plug-in's own reads of the registry must not start this again
    from octlm.model.positions.plugins import load_entry_points

    load_entry_points()


def register(name: str, facts: SchemeFacts | None = None) -> Callable[[type[PositionScheme]], type[PositionScheme]]:
    """Class decorator adding a scheme to :data:`SCHEMES` under ``name``, with what other parts read of it (``facts``,
    :func:`~octlm.model.positions.facts.facts_of`; ``None``: the defaults).

    Raises:
        SchemeNameTaken: when another class is registered under ``name`` already.
        TypeError: when ``facts`` is not a :class:`~octlm.model.positions.facts.SchemeFacts`.
    """

    def wrap(cls: type[PositionScheme]) -> type[PositionScheme]:
        taken = dict.get(SCHEMES, name)
        if taken is not None and taken is not cls:
            raise SchemeNameTaken(
                f"registers the position scheme {name!r}, which is already {taken.__module__}.{taken.__qualname__}; "
                "choose another name"
            )
        if facts is not None:
            record_facts(cls, facts)
        cls.name = name
        cls.reads = tuple(cls.options)
        SCHEMES[name] = cls
        return cls

    return wrap


class _SchemeNames:
    """The names in :data:`SCHEMES`, sorted and read afresh at every use, so argparse choices follow the registry."""

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in SCHEMES

    def __iter__(self):
        return iter(sorted(SCHEMES))

    def __repr__(self) -> str:
        return repr(sorted(SCHEMES))


#: Live, sorted view of the registered names (``choices`` of ``--position``).
SCHEME_NAMES = _SchemeNames()


def unbounded_schemes() -> list[str]:
    """Names of the schemes that can address any position (no table limit)."""
    return sorted(name for name, cls in SCHEMES.items() if not cls.has_table_limit)


def length_study_schemes() -> list[str]:
    """Schemes ``octlm length`` trains by default, in registration order (the order of its table)."""
    return [name for name, cls in SCHEMES.items() if facts_of(cls).in_length_study]


def task_study_schemes() -> list[str]:
    """Schemes ``octlm length --task`` trains by default, in registration order (the order of its table)."""
    return [name for name, cls in SCHEMES.items() if facts_of(cls).in_task_study]


def schemes_taking(method: str) -> list[str]:
    """Names of the schemes that accept the RoPE scaling ``method`` (:data:`ROPE_SCALINGS`)."""
    return [name for name, cls in SCHEMES.items() if method in cls.scalings()]


def document_position_schemes() -> list[str]:
    """Names of the schemes that can run under ``document_mask`` (positions restarting at each document)."""
    return [name for name, cls in SCHEMES.items() if cls.takes_document_positions]


def random_position_schemes() -> list[str]:
    """Names of the schemes that can train at randomized positions (``randomize_positions`` > 1)."""
    return [name for name, cls in SCHEMES.items() if cls.takes_random_positions]


def evicting_schemes() -> list[str]:
    """Names of the schemes whose key/value cache can keep sinks and a window of recent tokens (``evicts_cache`` of
    their facts)."""
    return [name for name, cls in SCHEMES.items() if facts_of(cls).evicts_cache]


def default_scheme() -> str:
    """The name of the scheme marked ``is_default`` (the Day-1 baseline's)."""
    return next(name for name, cls in SCHEMES.items() if cls.is_default)


def scheme_option_fields() -> dict[str, dataclasses.Field]:
    """Every registered scheme's ``options``, by name, in registration order (a subclass's inherited ones once).

    Raises:
        TypeError: when two schemes declare different options under one name.
    """
    out: dict[str, dataclasses.Field] = {}
    for cls in dict.values(SCHEMES):  # the schemes octlm is made with: a plug-in's come too late to be fields
        for name, declared in cls.options.items():
            if out.setdefault(name, declared) is not declared:
                raise TypeError(
                    f"position schemes declare the option {name!r} twice ({cls.name} and another); "
                    "share one declaration"
                )
    return out


def with_scheme_options(cls=None, *, handed_over: bool = False):
    """Class decorator (under ``@dataclass``): add every registered scheme's options to an options class as fields.

    The fields come after the class's own, typed by their defaults, so
    ``DecoderConfig(rope_theta=...)`` works and a scheme's option is a flag of
    every command that builds a model. With ``handed_over`` each field is
    marked as the model option of the same name (``same_as``), for a command
    that builds models of several schemes (``octlm length``). A scheme
    registered after the class is made (in a test, say) can have no options
    of its own.
    """

    def add(cls):
        for name, declared in scheme_option_fields().items():
            default = declared.default if declared.default is not dataclasses.MISSING else declared.default_factory()
            cls.__annotations__[name] = type(default)
            metadata = {**declared.metadata, "same_as": name} if handed_over else declared.metadata
            setattr(cls, name, dataclasses.field(default=default, metadata=metadata))
        return cls

    return add if cls is None else add(cls)


def check(config: DecoderConfig) -> None:
    """Validate ``config.position`` and the fields that scheme depends on (``ValueError`` naming them)."""
    if config.position not in SCHEMES:
        raise ValueError(
            f"position={config.position!r} is not a known scheme; choose one of: {', '.join(sorted(SCHEMES))}"
        )
    cls = SCHEMES[config.position]
    if getattr(config, "document_mask", False):  # checked here, whether or not a scheme's check_config calls its base's
        if not cls.takes_document_positions:
            takers = ", ".join(document_position_schemes())
            raise ValueError(
                f"document_mask needs a scheme whose positions can restart at each document ({takers}), "
                f"not position={cls.name!r}"
            )
        if config.randomize_positions > 1:
            raise ValueError(
                f"document_mask restarts positions at each document, randomize_positions={config.randomize_positions} "
                "draws them at random; choose one"
            )
    cls.check_config(config)


def build(config: DecoderConfig) -> PositionScheme:
    """Instantiate the scheme named by ``config.position``.

    Raises:
        ValueError: for an unknown name (listing the known ones) or a config
            the scheme cannot use.
    """
    check(config)
    return SCHEMES[config.position](config)


__all__ = [
    "PLUGIN_SOURCES",
    "SchemeNameTaken",
    "build",
    "check",
    "default_scheme",
    "document_position_schemes",
    "evicting_schemes",
    "scheme_option_fields",
    "with_scheme_options",
    "SCHEMES",
    "SCHEME_NAMES",
    "length_study_schemes",
    "task_study_schemes",
    "random_position_schemes",
    "register",
    "schemes_taking",
    "unbounded_schemes",
]
