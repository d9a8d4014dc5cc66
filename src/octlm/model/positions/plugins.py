"""Position schemes from outside octlm: ``--plugin MODULE_OR_FILE`` and the ``octlm.positions`` entry point group.

A plug-in is an ordinary Python module that registers its schemes with
``@register("name")`` when imported, as octlm's own modules do. It comes in
one of two ways:

* ``--plugin`` on a command that builds or reads a model: an importable module
  name (``mypkg.schemes``) or the path of a ``.py`` file. The command line is
  read for it before the parser is built (:func:`load_plugins`), so the new
  name is one of ``--position``'s and ``--schemes``' choices.
* An installed distribution's entry point in the group ``octlm.positions``
  (``mine = mypkg.schemes``): every one is imported the first time anything asks
  the registry for its schemes (:func:`load_entry_points`, as pytest finds its
  plugins), so no flag is needed.

Each registered scheme remembers what to give ``--plugin`` to find it again
(:data:`PLUGIN_SOURCES`), which a run records in ``config.json``. A plug-in
scheme declares its options as a built-in one does (``options``, a frozen
dataclass of :func:`octlm.declare.option` fields): each is a flag of every
command that builds a model, a TOML key and a key of ``config.json``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from octlm.errors import OctlmError
from octlm.model.positions import registry
from octlm.model.scheme_catalog import BadSchemeOptions

#: The entry point group a distribution lists its scheme modules under.
ENTRY_POINT_GROUP = "octlm.positions"
#: The schemes each file registered, by resolved path: a second ``--plugin`` naming it must not register them twice.
_loaded_files: dict[Path, list[str]] = {}


def plugin_arguments(argv: list[str]) -> list[str]:
    """The values of ``--plugin X`` and ``--plugin=X`` in a command line (``argv`` without the program name), in
    order. The caller decides whether the command takes ``--plugin``. A ``--plugin`` with no value is left to the
    parser to refuse."""
    found = []
    for i, word in enumerate(argv[1:], 1):
        if word == "--":
            break
        if word == "--plugin" and i + 1 < len(argv):
            found.append(argv[i + 1])
        elif word.startswith("--plugin="):
            found.append(word.split("=", 1)[1])
    return found


def load_plugins(argv: list[str]) -> list[str]:
    """Import every ``--plugin`` of the command line ``argv``; the names of the schemes they registered.

    Raises:
        OctlmError: one line naming the plug-in when it cannot be found, raises
            while importing, registers a name octlm already has, or declares
            options wrongly (:func:`load_plugin`).
    """
    return [name for spec in plugin_arguments(argv) for name in load_plugin(spec)]


def load_plugin(spec: str) -> list[str]:
    """Import one plug-in: a module name, or a path when ``spec`` ends in ``.py`` or holds a path separator.

    Returns:
        the scheme names it registered (none when it was imported already).

    Raises:
        OctlmError: ``--plugin SPEC: ...`` when it is empty, not found, a
            folder or a file not ending in ``.py``, raises while importing (its
            exception's type and message), registers no scheme, registers a
            taken name, or declares options wrongly; nothing it registered stays
            registered.
    """
    if not spec.strip():
        raise OctlmError("--plugin needs a module name or a .py file")
    if spec.endswith(".py") or "/" in spec or "\\" in spec:
        path = Path(spec).expanduser().resolve()
        _check_plugin_file(spec, path)
        if path in _loaded_files and all(dict.__contains__(registry.SCHEMES, n) for n in _loaded_files[path]):
            return []
        added = _registering(f"--plugin {spec}", str(path), lambda: _exec_file(path))
        if not added:
            raise OctlmError(f"--plugin {spec}: {_NO_SCHEME}")
        _loaded_files[path] = added
        return added
    try:
        found = importlib.util.find_spec(spec)
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise OctlmError(
            f"--plugin {spec}: no module named {spec!r} on this Python's path; "
            "install it, or give the path of its .py file"
        )
    added = _registering(f"--plugin {spec}", spec, lambda: importlib.import_module(spec))
    # Imported before (by octlm or an earlier --plugin), a scheme module registers nothing new but has its schemes.
    if not added and not any(_defined_in(registry.SCHEMES.raw(n), spec) for n in dict.keys(registry.SCHEMES)):
        raise OctlmError(f"--plugin {spec}: {_NO_SCHEME}")
    return added


_NO_SCHEME = (
    "it registered no position scheme (did you mean another module?); a plug-in registers its schemes with "
    '@register("name") when imported'
)


def _check_plugin_file(spec: str, path: Path) -> None:
    """Refuse a ``--plugin`` path that is not an existing ``.py`` file, saying what it is instead."""
    if path.is_dir():
        raise OctlmError(
            f"--plugin {spec}: is a folder; give a .py file or an importable module name (a package folder on "
            f"sys.path is imported by its name: --plugin {path.name})"
        )
    if not path.is_file():
        raise OctlmError(f"--plugin {spec}: no such file; give the path of a .py file or an importable module name")
    if path.suffix != ".py":
        raise OctlmError(
            f"--plugin {spec}: is not a Python file (.py); give the path of a .py file that registers a scheme, or "
            "an importable module name"
        )


def _defined_in(cls: type, module: str) -> bool:
    return cls.__module__ == module or cls.__module__.startswith(f"{module}.")


def load_entry_points() -> list[str]:
    """Import the module of every installed ``octlm.positions`` entry point; the scheme names they registered.

    Raises:
        OctlmError: naming the entry point and its distribution when its module
            raises while importing or registers a taken name.
    """
    names = []
    for point in metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = f" of {point.dist.name} {point.dist.version}" if point.dist is not None else ""
        where = f"the {ENTRY_POINT_GROUP} entry point {point.name} = {point.value}{dist}"
        names += _registering(where, point.module, point.load)
    return names


# The installed entry points register the first time anything reads the catalog of schemes (once per process).
registry.SCHEMES.on_first_read = load_entry_points


def _registering(where: str, source: str, load: Callable[[], object]) -> list[str]:
    """Run ``load`` and return the schemes it registered, each remembered as coming from ``source``; on any failure
    unregister them and raise one :class:`OctlmError` starting with ``where``."""
    before = set(dict.keys(registry.SCHEMES))
    try:
        load()
        added = [name for name in dict.keys(registry.SCHEMES) if name not in before]
        for name in added:
            _check_plugin_scheme(registry.SCHEMES.raw(name))
    except Exception as err:  # a plug-in is someone else's code: whatever it raises, the command says so in one line
        for name in set(dict.keys(registry.SCHEMES)) - before:
            dict.pop(registry.SCHEMES, name)
        said = (OctlmError, registry.SchemeNameTaken, BadSchemeOptions)
        reason = str(err) if isinstance(err, said) else _raised(err)
        raise OctlmError(f"{where}: {reason}") from None
    for name in added:
        registry.PLUGIN_SOURCES[name] = source
    return added


def _raised(err: Exception) -> str:
    return f"importing it raised {type(err).__name__}: {err}"


def _check_plugin_scheme(cls) -> None:
    if cls.is_default and "is_default" not in vars(cls):
        cls.is_default = False  # inherited from the built-in it extends; octlm keeps its own default scheme
    elif cls.is_default:
        raise OctlmError(f"the scheme {cls.name!r} sets is_default; only octlm's own default scheme may")


def _exec_file(path: Path) -> None:
    name = f"octlm_plugin_{path.stem}_{len(_loaded_files)}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look their module up here
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise


__all__ = [
    "ENTRY_POINT_GROUP",
    "load_entry_points",
    "load_plugin",
    "load_plugins",
    "plugin_arguments",
]
