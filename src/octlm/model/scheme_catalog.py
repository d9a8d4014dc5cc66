"""The catalog of position schemes, below the model's config: each registered scheme by name, and its options.

A scheme registers itself here (:func:`octlm.model.positions.registry.register`)
and declares its options as its own small frozen dataclass, the class
attribute ``options`` (RoPE's :class:`~octlm.model.positions.rotary.RopeOptions`).
:class:`SchemeOptions` holds one such object per scheme that declares one,
which is what :class:`~octlm.model.config.DecoderConfig` keeps in its
``scheme_options`` field. This module imports no scheme, so the config can
read the catalog without the schemes importing the config back.

Each option's field name is its one flat name (``rope_theta``): its flag, its
TOML key and its key in ``config.json``'s ``model`` section; two schemes may
not declare one name twice.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence

from octlm.declare import option_fields


class BadSchemeOptions(TypeError):
    """A scheme's ``options`` that cannot be declared: not a frozen dataclass of options, or a name taken."""


class _Registry(dict):
    """A dict whose every read first runs :attr:`on_first_read` (once per process): the entry point loader.

    :mod:`octlm.model.positions.registry` sets it, so installed ``octlm.positions``
    entry points register before any question is answered. Writes and ``dict.*``
    calls on it do not run it, so registering a built-in scheme while the
    package imports never starts a plug-in.
    """

    def __init__(self) -> None:
        super().__init__()
        self.on_first_read: Callable[[], None] | None = None

    def _first_read(self) -> None:
        load, self.on_first_read = self.on_first_read, None  # cleared first: a plug-in's own reads must not load again
        if load is not None:
            load()

    def raw(self, name: str) -> type:
        """The class under ``name`` without looking for entry points (``KeyError`` when absent)."""
        return dict.__getitem__(self, name)

    def put_first(self, names: Sequence[str]) -> None:
        """Reorder in place: the schemes in ``names`` first, in that order, then the rest in the order they came.
        Reads nothing through the entry point loader."""
        rank = {name: i for i, name in enumerate(names)}
        held = sorted(dict.items(self), key=lambda item: rank.get(item[0], len(rank)))  # stable: the rest keep theirs
        dict.clear(self)
        dict.update(self, held)

    def __getitem__(self, name):
        self._first_read()
        return dict.__getitem__(self, name)

    def __contains__(self, name) -> bool:
        self._first_read()
        return dict.__contains__(self, name)

    def __iter__(self):
        self._first_read()
        return dict.__iter__(self)

    def __len__(self) -> int:
        self._first_read()
        return dict.__len__(self)

    def get(self, name, default=None):
        self._first_read()
        return dict.get(self, name, default)

    def keys(self):
        self._first_read()
        return dict.keys(self)

    def values(self):
        self._first_read()
        return dict.values(self)

    def items(self):
        self._first_read()
        return dict.items(self)


#: Every registered scheme class by name, in table order (the studies' tables, the page's list): the built-in schemes
#: in the order :mod:`octlm.model.positions` gives, then any other in the order it registered.
SCHEMES: dict[str, type] = _Registry()


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


def default_scheme() -> str:
    """The name of the scheme marked ``is_default`` (the Day-1 baseline's)."""
    return next(name for name, cls in SCHEMES.items() if cls.is_default)


def own_options(cls: type) -> type | None:
    """The options dataclass scheme class ``cls`` declares itself (not one it inherits), or ``None``."""
    return vars(cls).get("options")


def reads(cls: type) -> tuple[str, ...]:
    """The flat option names scheme class ``cls`` reads: its own options' and those of the schemes it extends."""
    return tuple(
        f.name
        for owner in reversed(cls.__mro__)
        if own_options(owner) is not None
        for f in option_fields(own_options(owner))
    )


def declaring() -> dict[str, type]:
    """``{scheme name: its own options dataclass}`` for every registered scheme that declares one, in registration
    order."""
    return _declaring(SCHEMES.items())


def _declaring(items) -> dict[str, type]:
    return {name: own_options(cls) for name, cls in items if own_options(cls) is not None}


def check_declaration(name: str, cls: type) -> None:
    """Refuse a scheme whose options are not a frozen dataclass of declared options, or reuse a name another scheme
    declares.

    Raises:
        BadSchemeOptions: naming the scheme and the fix.
    """
    options = own_options(cls)
    if options is None:
        return
    if not (dataclasses.is_dataclass(options) and options.__dataclass_params__.frozen):
        raise BadSchemeOptions(
            f"the scheme {name!r} declares options={options!r}; make it a @dataclass(frozen=True) of "
            "octlm.declare.option fields"
        )
    mine = {f.name for f in dataclasses.fields(options)}
    undeclared = mine - {f.name for f in option_fields(options)}
    if undeclared:
        raise BadSchemeOptions(
            f"the scheme {name!r} declares options {sorted(undeclared)} without octlm.declare.option(...); "
            "declare each with a default and a help text"
        )
    for other, declared in _declaring(dict.items(SCHEMES)).items():  # raw: registering must not start a plug-in
        taken = mine & {f.name for f in dataclasses.fields(declared)}
        if other != name and taken:
            raise BadSchemeOptions(
                f"the scheme {name!r} declares the option {sorted(taken)[0]!r}, which {other} declares already; "
                "choose another name, or extend that scheme's class to share its options"
            )


class SchemeOptions(Mapping[str, object]):
    """The options of every scheme that declares some: ``{scheme name: its frozen options object}``, read-only.

    Every scheme a model names (its ``position`` and each layer's) finds its
    own here, whichever it is: the options of all of them are kept, so a
    config's flat keys are the same whatever scheme it names, and a layer
    layout mixing schemes needs nothing more (a layer's own RoPE base is its
    :class:`~octlm.model.layout.LayerSpec`'s). A scheme registered after the
    object was made (a plug-in) reads its declared defaults.
    """

    __slots__ = ("_by_scheme",)

    def __init__(self, by_scheme: Mapping[str, object] | None = None) -> None:
        made = {name: options() for name, options in declaring().items()}
        made.update(by_scheme or {})
        object.__setattr__(self, "_by_scheme", made)

    def __reduce__(self):  # pickled by its options (a worker process, a deep copy); its slot is not settable
        return (SchemeOptions, (self._by_scheme,))

    def __setattr__(self, name, value):
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __getitem__(self, scheme: str) -> object:
        return self._by_scheme[scheme]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_scheme)

    def __len__(self) -> int:
        return len(self._by_scheme)

    def __eq__(self, other) -> bool:
        return isinstance(other, SchemeOptions) and self._by_scheme == other._by_scheme

    def __hash__(self) -> int:
        return hash(tuple(self._by_scheme.items()))

    def __repr__(self) -> str:
        return f"SchemeOptions({self._by_scheme!r})"

    def of(self, scheme: str) -> object | None:
        """The options object scheme ``scheme`` declares (its defaults when it registered after this was made), or
        ``None`` for a scheme without options of its own."""
        if scheme in self._by_scheme:
            return self._by_scheme[scheme]
        options = own_options(SCHEMES[scheme]) if scheme in SCHEMES else None
        return None if options is None else options()

    def flat(self) -> dict[str, object]:
        """``{option name: value}`` of every option held, the flat names of flags and ``config.json``."""
        return {f.name: getattr(obj, f.name) for obj in self._by_scheme.values() for f in dataclasses.fields(obj)}

    def with_values(self, values: Mapping[str, object]) -> SchemeOptions:
        """A copy with flat ``values`` (``{"rope_theta": 5e5}``) set in the options of the scheme that declares each.

        Raises:
            TypeError: for a name no registered scheme declares, naming it (as a dataclass refuses an unknown
                argument).
        """
        owner = {f.name: scheme for scheme, options in declaring().items() for f in dataclasses.fields(options)}
        unknown = sorted(set(values) - set(owner))
        if unknown:
            raise TypeError(f"unknown option(s) {unknown}; the position schemes declare {sorted(owner)}")
        changes: dict[str, dict[str, object]] = {}
        for name, value in values.items():
            changes.setdefault(owner[name], {})[name] = value
        by_scheme = dict(self._by_scheme)
        for scheme, change in changes.items():
            by_scheme[scheme] = dataclasses.replace(self.of(scheme), **change)
        return SchemeOptions(by_scheme)

    @classmethod
    def option_fields(cls) -> list[dataclasses.Field]:
        """The declared options of every scheme, in table order: the flags, TOML and ``config.json`` keys."""
        return [f for options in declaring().values() for f in option_fields(options)]

    @classmethod
    def option_classes(cls) -> list[type]:
        """The options dataclasses of the registered schemes (for their type hints)."""
        return list(declaring().values())


def random_position_schemes() -> list[str]:
    """Names of the schemes that can train at randomized positions (``randomize_positions`` > 1)."""
    return [name for name, cls in SCHEMES.items() if cls.takes_random_positions]


def check_scheme_rules(config) -> None:
    """Check a ``DecoderConfig`` of one scheme (no layout) against its scheme's rules: the document mask's, then the
    scheme's own ``check_config``.

    Raises:
        ValueError: naming the fields that cannot go together.
    """
    cls = SCHEMES[config.position]
    if config.document_mask:  # checked here, whether or not a scheme's check_config calls its base's
        if not cls.takes_document_positions:
            takers = ", ".join(name for name, c in SCHEMES.items() if c.takes_document_positions)
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


__all__ = [
    "check_scheme_rules",
    "random_position_schemes",
    "BadSchemeOptions",
    "SCHEMES",
    "SCHEME_NAMES",
    "SchemeOptions",
    "check_declaration",
    "declaring",
    "default_scheme",
    "own_options",
    "reads",
]
