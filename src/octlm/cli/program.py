"""The ``octlm`` command line; each subcommand lives in :mod:`octlm.cli.commands`.

Every subcommand shows its defaults in ``--help``, takes ``--json`` (one JSON
object per line on stdout, the last one the result) and reports bad input as
one line naming the value and the fix, never as a traceback.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import itertools
import os
import re
import signal
import sys
import tomllib
from pathlib import Path

from octlm.data.token_display import argv_text
from octlm.data.tokenizer import left_running
from octlm.declare import REQUIRED, build, flag, option_default, option_fields, refused
from octlm.errors import OctlmError
from octlm.option_values import checked_values, field_types
from octlm.report import Reporter, terminal_output
from octlm.train.signals import STOP_SIGNALS, survive_hangup


class Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    def _get_help_string(self, action: argparse.Action) -> str | None:
        # Help texts that explain their own default already say "default".
        if action.help and "default" in action.help:
            return action.help
        # "(default: None)", "(default: )" or "(default: [])" tells nothing (a required option has none);
        # the help text says what "unset" means.
        if action.required or action.default in (None, "", []):
            return action.help
        return super()._get_help_string(action)


class _Version(argparse.Action):
    """``--version``: computed when asked, not when the parser is built (it runs git, and every command builds one)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace, values, option_string=None) -> None:
        from octlm.version import build_version

        print(f"octlm {build_version()}")  # on stdout, as argparse's own version action
        parser.exit()


class UsageError(SystemExit):
    """A command line argparse refused: exit status 2, as argparse's own, with the line said kept for ``--json``."""

    def __init__(self, message: str) -> None:
        super().__init__(2)
        self.message = message


class Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors: what was wrong, a close spelling when there is one, where the options are
    listed; and no abbreviated options.

    argparse prints the whole usage block (twenty lines for ``octlm train``)
    above its error; the error is the line a person needs. Exit status 2, as argparse.
    A prefix of an option (``--js`` for ``--json``) is refused with the full
    name as its hint, never taken: :func:`main` reads ``--json``, ``--quiet``
    and ``--config`` from the words before argparse does, and an abbreviation
    there would mean one thing early and another later.
    """

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)  # every subcommand's parser is one of these
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        self._words = list(sys.argv[1:] if args is None else args)  # for the hint on a value that starts with '-'
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> None:  # type: ignore[override]
        said = message + (self._spelling_hint(message) or self._dash_hint(message))
        sys.stderr.write(f"{self.prog}: error: {said}\n`{self.prog} --help` lists every option\n")
        raise UsageError(said)

    def _dash_hint(self, message: str) -> str:
        """For ``--prompt -ROMEO``: argparse takes a word that starts with '-' for an option, so the value must be
        joined to its option with '='."""
        missing = re.match(r"argument ([^:]+): expected (?:one|at least one) argument", message)
        if missing is None:
            return ""
        names, words = missing.group(1).split("/"), getattr(self, "_words", [])
        for word, value in itertools.pairwise(words):
            if word in names and value.startswith("-"):
                return f"; a value that starts with '-' goes after '=': write it as {word}={value}"
        return ""

    def _spelling_hint(self, message: str) -> str:
        if message.startswith("unrecognized arguments:"):
            given = [word.split("=", 1)[0] for word in message.split(":", 1)[1].split() if word.startswith("--")]
            known, quote = [name for name in self._option_string_actions if name.startswith("--")], "{}"
        elif (choice := re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)) is not None:
            # Python 3.11 quotes the choices and later versions do not; a choice is quoted in the hint either way.
            given, known, quote = (
                [choice.group(1)],
                [name.strip().strip("'") for name in choice.group(2).split(",")],
                "'{}'",
            )
        else:
            return ""
        guesses = [quote.format(close[0]) for word in given if (close := difflib.get_close_matches(word, known, n=1))]
        return f"; did you mean {' or '.join(guesses)}?" if guesses else ""


def add_dataclass_options(parser: argparse.ArgumentParser, cls, only: list | None = None) -> None:
    """One argument per field of options dataclass ``cls`` (:func:`octlm.train.options.option`), in field order.

    The flag is the field name with dashes (``--max-steps``), or the bare name
    for a ``positional`` field; help, type, choices and default come from the
    declaration, a :data:`~octlm.train.options.REQUIRED` default makes the flag
    required, and a ``bool`` field is a switch. ``only`` limits it to those
    fields (a command whose flags are the union of two options classes).
    """
    kinds = field_types(cls)
    for f in option_fields(cls) if only is None else only:
        cli = dict(f.metadata["cli"])
        kind, default = kinds[f.name][0], option_default(f)
        if cli.pop("positional", False):
            parser.add_argument(f.name, help=f.metadata["help"], **cli)
            continue
        if default is REQUIRED:
            cli["required"] = True
        else:
            cli["default"] = default
        if kind is bool:
            parser.add_argument(flag(f.name), action="store_true", help=f.metadata["help"], **cli)
        else:
            parser.add_argument(flag(f.name), type=kind, help=f.metadata["help"], **cli)


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object per line on stdout; the last is the result"
    )
    parser.add_argument("--quiet", action="store_true", help="print only warnings and the result")


def add_plugin_option(parser: argparse.ArgumentParser) -> None:
    """``--plugin MODULE``, for a command that builds or reads a model; :func:`main` imports it before parsing, so its
    schemes are choices of ``--position`` and ``--schemes`` (:mod:`octlm.model.positions.plugins`)."""
    parser.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE",
        help="import a module that registers position schemes first: an importable name or a .py file's path "
        "(repeatable); installed octlm.positions entry points need none",
    )


def apply_toml_config(parser: argparse.ArgumentParser, argv: list[str], cls) -> None:
    """Make the keys of ``--config FILE.toml`` the parser's defaults, so command-line flags still win.

    Keys are the option names, with dashes or underscores.

    Raises:
        OctlmError: when the file is missing or not TOML, or a key is unknown
            or has the wrong type (:func:`octlm.train.options.checked_values`).
    """
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)  # --conf is no --config here either
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(argv)
    if known.config == "":
        raise OctlmError("--config got an empty path ''; give a TOML file, or leave --config out")
    if known.config is None:
        return
    path = Path(known.config)
    try:
        values = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise OctlmError(f"--config {path}: no such file") from None
    except OSError as err:
        raise OctlmError(f"--config {path}: cannot read it: {err.strerror or err}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise OctlmError(f"--config {path}: not valid TOML ({err})") from None
    defaults = checked_values(values, f"--config {path}", cls)
    parser.set_defaults(**defaults)
    parser.toml_options = set(defaults)


#: Subcommands in the order ``octlm --help`` lists them; each module under
#: ``octlm.cli.commands`` defines ``add_parser(subparsers)`` and sets ``func``.
COMMANDS = [
    "train",
    "sample",
    "bench",
    "length",
    "compare",
    "embeddings",
    "attention",
    "serve",
    "export-web",
    "export-hf",
    "import-hf",
]
#: Subcommands that build or read an octlm model, and so take ``--plugin`` (import-hf reads a transformers
#: checkpoint, whose architecture names its own positions).
PLUGIN_COMMANDS = [name for name in COMMANDS if name != "import-hf"]

#: Subcommands that write no files: on Ctrl-C they say only "interrupted",
#: since the promise about complete and half-written files means nothing there.
WRITE_NO_FILES = {"sample", "bench", "serve"}


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="octlm",
        description="octlm: train small decoders and look inside their token embeddings and position encodings.",
        formatter_class=Formatter,
    )
    parser.add_argument(
        "--version",
        action=_Version,
        help="show octlm's version (with its git commit when run from a checkout) and exit",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    parser.subcommands = sub.choices
    for name in COMMANDS:
        importlib.import_module(f"octlm.cli.commands.{name.replace('-', '_')}").add_parser(sub)
        if name in PLUGIN_COMMANDS:
            add_plugin_option(sub.choices[name])
    return parser


def given_options(parser: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """Names of the options the person gave, on the command line or in ``--config``.

    argparse fills in a default only for names the namespace lacks, so parsing
    into a namespace pre-filled with a marker leaves the marker exactly where
    nothing was given.
    """
    marker = object()
    # --plugin says where a scheme's code is, not how a run is made: no run or study option depends on it
    names = [a.dest for a in parser._actions if a.dest not in ("help", "plugin", argparse.SUPPRESS)]
    namespace = argparse.Namespace(**{name: marker for name in names})
    parser.parse_args(argv, namespace=namespace)
    return {name for name in names if getattr(namespace, name) is not marker} | getattr(parser, "toml_options", set())


def options_from(args: argparse.Namespace, cls):
    """Build options dataclass ``cls`` (nested groups too) from the parsed flags of the same names.

    Raises:
        OctlmError: when the options refuse a value on construction (the
            model's shape: ``--d-model=30 is not divisible by n_heads=4``),
            naming its flag.
    """
    try:
        return build(cls, {f.name: getattr(args, f.name) for f in option_fields(cls)})
    except ValueError as err:
        raise refused(err) from None


def main(argv: list[str] | None = None) -> int:
    program = argv is None  # run as the octlm program, not called from Python
    if program:
        terminal_output()
    argv = list(sys.argv[1:] if argv is None else argv)
    json_mode = "--json" in argv
    report = Reporter(json_mode=json_mode, quiet="--quiet" in argv)
    command = parser = None
    try:
        from octlm.model.positions.plugins import load_plugins

        if argv and argv[0] in PLUGIN_COMMANDS:
            load_plugins(argv)  # before the parser: a plug-in's schemes are choices of --position and --schemes
        parser = build_parser()  # imports torch: seconds in which a Ctrl-C must end as cleanly as later
        if argv and argv[0] in parser.subcommands and hasattr(parser.subcommands[argv[0]], "options_class"):
            sub = parser.subcommands[argv[0]]
            _refuse_abbreviations(sub, argv[1:])  # before --config, whose errors would otherwise come first
            apply_toml_config(sub, argv[1:], sub.options_class)
        args, unknown = parser.parse_known_args(argv)
        command = args.command
        if command is None:
            parser.print_help()
            return 2
        if unknown:
            # The subcommand's usage line helps more than the top-level one.
            parser.subcommands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
        report = Reporter(json_mode=args.json, quiet=args.quiet)
        args.argv = argv
        _decode_argv_text(args)
        _terminate_as_interrupt()
        return args.func(args, report)
    except OctlmError as err:
        return _fail(report, str(err), 1)
    except UsageError as err:
        report.error(err.message)  # a script reading --json's stdout learns why, as for any other error
        raise
    except KeyboardInterrupt:
        message = (
            "interrupted"
            if command in WRITE_NO_FILES
            else "interrupted; files already complete are kept, nothing is half-written"
        )
        if parser is None:
            message = "interrupted before it started; nothing was written"
        code = _fail(report, message, 130, prefix="octlm: ")
        if program and left_running():
            # Its clean-up done, the program ends before Python's shutdown, which would
            # abort when the interrupted tokenizers worker returns into it.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        return code
    except OSError as err:
        # The file system said no (a parent that is a file, a read-only or full disk, ...).
        where = f"{err.filename}: " if err.filename else ""
        return _fail(report, f"{where}{err.strerror or err}", 1)


def _refuse_abbreviations(parser: argparse.ArgumentParser, words: list[str]) -> None:
    """Exit 2 on a word before ``--`` that is a prefix of one of ``parser``'s options but no option itself (``--js``),
    as argparse would once it parses (:class:`Parser`), with the full name as a hint."""
    known = [name for name in parser._option_string_actions if name.startswith("--")]
    for word in itertools.takewhile(lambda w: w != "--", words):
        name = word.split("=", 1)[0]
        if name.startswith("--") and name not in known and any(option.startswith(name) for option in known):
            parser.error(f"unrecognized arguments: {word}")


#: Options whose values are text for the tokenizer, not paths: their command-line bytes are read as UTF-8.
TEXT_OPTIONS = ("prompt", "token")


def _decode_argv_text(args: argparse.Namespace) -> None:
    """Replace each :data:`TEXT_OPTIONS` value by the text its bytes spell in UTF-8 (:func:`argv_text`).

    Raises:
        OctlmError: naming the option, its value and the first byte that is not UTF-8.
    """
    for name in TEXT_OPTIONS:
        value = getattr(args, name, None)
        if isinstance(value, str):
            setattr(args, name, argv_text(value, flag(name)))
        elif isinstance(value, list):
            setattr(args, name, [argv_text(v, flag(name)) if isinstance(v, str) else v for v in value])


def _terminate_as_interrupt() -> None:
    """Let SIGTERM, SIGHUP and SIGUSR1 unwind like Ctrl-C, so cleanup (temporary folders, checkpoints) runs; training
    installs its own handler."""

    def handler(signum, frame):
        survive_hangup(signum)
        raise KeyboardInterrupt

    try:
        for signum in STOP_SIGNALS:
            signal.signal(signum, handler)
    except ValueError:  # not the main thread (main() called from a thread, e.g. in tests)
        pass


def _fail(report: Reporter, message: str, code: int, prefix: str = "octlm: error: ") -> int:
    if os.environ.get("RANK", "0") != "0":
        # Under torchrun every process meets the same bad input; rank 0 says it once.
        return code
    report.error(message)
    print(f"{prefix}{message}", file=sys.stderr)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
