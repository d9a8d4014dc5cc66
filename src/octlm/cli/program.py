"""The ``octlm`` command line; each subcommand lives in :mod:`octlm.cli.commands`.

Every subcommand shows its defaults in ``--help``, takes ``--json`` (one JSON
object per line on stdout, the last one the result) and reports bad input as
one line naming the value and the fix, never as a traceback.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import re
import signal
import sys
import tomllib
from pathlib import Path

from octlm.data.tokenizer import left_running
from octlm.declare import REQUIRED, build, checked_values, field_types, flag, option_default, option_fields, refused
from octlm.errors import OctlmError
from octlm.report import Reporter
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


class Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors: what was wrong, a close spelling when there is one, where the options are
    listed.

    argparse prints the whole usage block (twenty lines for ``octlm train``)
    above its error; the error is the line a person needs. Exit status 2, as argparse.
    """

    def error(self, message: str) -> None:  # type: ignore[override]
        hint = self._spelling_hint(message)
        self.exit(2, f"{self.prog}: error: {message}{hint}\n`{self.prog} --help` lists every option\n")

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


def apply_toml_config(parser: argparse.ArgumentParser, argv: list[str], cls) -> None:
    """Make the keys of ``--config FILE.toml`` the parser's defaults, so command-line flags still win.

    Keys are the option names, with dashes or underscores.

    Raises:
        OctlmError: when the file is missing or not TOML, or a key is unknown
            or has the wrong type (:func:`octlm.train.options.checked_values`).
    """
    pre = argparse.ArgumentParser(add_help=False)
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

#: Subcommands that write no files: on Ctrl-C they say only "interrupted",
#: since the promise about complete and half-written files means nothing there.
WRITE_NO_FILES = {"sample", "bench", "serve"}


def build_parser() -> argparse.ArgumentParser:
    from octlm import __version__

    parser = Parser(
        prog="octlm",
        description="octlm: train small decoders and look inside their token embeddings and position encodings.",
        formatter_class=Formatter,
    )
    parser.add_argument("--version", action="version", version=f"octlm {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    parser.subcommands = sub.choices
    for name in COMMANDS:
        importlib.import_module(f"octlm.cli.commands.{name.replace('-', '_')}").add_parser(sub)
    return parser


def given_options(parser: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """Names of the options the person gave, on the command line or in ``--config``.

    argparse fills in a default only for names the namespace lacks, so parsing
    into a namespace pre-filled with a marker leaves the marker exactly where
    nothing was given.
    """
    marker = object()
    names = [a.dest for a in parser._actions if a.dest not in ("help", argparse.SUPPRESS)]
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
    argv = list(sys.argv[1:] if argv is None else argv)
    json_mode = "--json" in argv
    report = Reporter(json_mode=json_mode, quiet="--quiet" in argv)
    command = parser = None
    try:
        parser = build_parser()  # imports torch: seconds in which a Ctrl-C must end as cleanly as later
        if argv and argv[0] in parser.subcommands and hasattr(parser.subcommands[argv[0]], "options_class"):
            sub = parser.subcommands[argv[0]]
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
        _terminate_as_interrupt()
        return args.func(args, report)
    except OctlmError as err:
        return _fail(report, str(err), 1)
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
