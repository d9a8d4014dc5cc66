"""What a command tells the person at the terminal, or the script reading --json.

Human mode prints readable lines to stdout (through tqdm so a progress bar on
stderr is not torn). JSON mode prints one JSON object per line on stdout and
nothing else there; the last line is the result.
"""

from __future__ import annotations

import codecs
import json
import math
import sys
from typing import Any

from tqdm import tqdm


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False


class Reporter:
    """Routes events to the terminal or to JSON lines.

    Args:
        json_mode: print JSON objects instead of text.
        quiet: in human mode, print only warnings and the result.
    """

    def __init__(self, json_mode: bool = False, quiet: bool = False) -> None:
        self.json_mode = json_mode
        self.quiet = quiet

    def event(self, kind: str, text: str | None = None, **fields: Any) -> None:
        """One step of progress: ``text`` for people, ``{"event": kind, **fields}`` for scripts."""
        if self.json_mode:
            self._json({"event": kind, **fields})
        elif text is not None and not self.quiet:
            tqdm.write(text, file=sys.stdout)

    def log_line(self, text: str) -> None:
        """A plain progress line (``step N: loss X, ...``) for logs: printed in human mode when stderr is no
        terminal, where the progress bar is hidden (nohup, CI, a log file); never in JSON or quiet mode."""
        if not (self.json_mode or self.quiet or _is_terminal(sys.stderr)):
            tqdm.write(text, file=sys.stdout)
            sys.stdout.flush()

    def warn(self, text: str, **fields: Any) -> None:
        if self.json_mode:
            self._json({"event": "warning", "message": text, **fields})
        else:
            tqdm.write(f"warning: {text}", file=sys.stderr)

    def error(self, message: str) -> None:
        """In JSON mode, the error as the last line on stdout (people get it on stderr from the CLI)."""
        if self.json_mode:
            self._json({"event": "error", "message": message})

    def result(self, fields: dict, text: str | None = None) -> None:
        """The command's result: the last JSON line, or ``text`` for people."""
        if self.json_mode:
            self._json({"event": "result", **fields})
        elif text is not None:
            print(text, flush=True)

    def progress(self, total: int | float | None, desc: str, unit: str = "step") -> tqdm:
        """A progress bar on stderr (hidden in JSON or quiet mode and when stderr is not a terminal)."""
        disable = True if (self.json_mode or self.quiet) else None
        return tqdm(total=total, desc=desc, unit=unit, disable=disable, dynamic_ncols=True, file=sys.stderr)

    def _json(self, obj: dict) -> None:
        line = json.dumps(_jsonable(obj), ensure_ascii=False)
        if not _takes(sys.stdout, line):
            line = json.dumps(_jsonable(obj))  # \u escapes: ASCII, which every stdout takes, and the same JSON
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def _takes(stream, text: str) -> bool:
    """Whether ``stream`` can encode ``text`` as it is, without an error handler's stand-ins."""
    try:
        text.encode(getattr(stream, "encoding", None) or "utf-8")
    except (UnicodeError, LookupError):
        return False
    return True


def _escape_for_terminal(err: UnicodeError) -> tuple[str | bytes, int]:
    """The ``octlm.terminal`` error handler: a byte of argv that was no text (a surrogate, PEP 383) goes out as that
    byte, as the C locale writes it; any other character the terminal cannot take as ``\\xNN``/``\\uNNNN``."""
    try:
        return codecs.lookup_error("surrogateescape")(err)
    except UnicodeError:
        return codecs.lookup_error("backslashreplace")(err)


codecs.register_error("octlm.terminal", _escape_for_terminal)


def terminal_output() -> None:
    """Let stdout and stderr write what their encoding cannot take (an ASCII or C-locale terminal, an accented
    letter of the corpus or the model's text) as escapes, where Python's default raises UnicodeEncodeError.

    For the program itself, not for callers of :func:`octlm.cli.main`, whose streams are their own. JSON lines
    need none of it: :class:`Reporter` writes ``\\u`` escapes where the encoding falls short.
    """
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "errors", None) in ("strict", "surrogateescape") and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="octlm.terminal")


class TaggedReporter(Reporter):
    """Passes the events of one training run inside a study (``octlm length``) to the study's reporter, tagged.

    The run's result becomes a ``trained`` event, so the study's own result
    stays the last JSON line.
    """

    def __init__(self, parent: Reporter, scheme: str) -> None:
        super().__init__(parent.json_mode, parent.quiet)
        self.parent, self.scheme = parent, scheme

    def event(self, kind: str, text: str | None = None, **fields: Any) -> None:
        self.parent.event(kind, None if text is None else f"[{self.scheme}] {text}", scheme=self.scheme, **fields)

    def warn(self, text: str, **fields: Any) -> None:
        self.parent.warn(f"[{self.scheme}] {text}", scheme=self.scheme, **fields)

    def result(self, fields: dict, text: str | None = None) -> None:
        keep = ("steps", "train_seconds", "tokens_per_second", "val_bpb", "val_loss", "interrupted", "run_dir")
        summary = {k: fields[k] for k in keep if k in fields}
        self.parent.event(
            "trained",
            f"[{self.scheme}] trained: {summary['steps']} steps in {summary['train_seconds']:.0f}s, "
            f"val {summary['val_bpb']:.4f} bits per byte at its training length",
            scheme=self.scheme,
            **summary,
        )


class HeldResult(Reporter):
    """Passes every event and warning to ``parent`` but keeps the result (``fields``, ``text``), for a command that
    reports one result after more work."""

    def __init__(self, parent: Reporter) -> None:
        super().__init__(parent.json_mode, parent.quiet)
        self.parent, self.fields, self.text = parent, None, ""

    def event(self, kind: str, text: str | None = None, **fields) -> None:
        self.parent.event(kind, text, **fields)

    def log_line(self, text: str) -> None:
        self.parent.log_line(text)

    def warn(self, text: str, **fields) -> None:
        self.parent.warn(text, **fields)

    def result(self, fields: dict, text: str | None = None) -> None:
        self.fields, self.text = fields, text or ""


class SilentReporter(Reporter):
    """Says nothing: what a process other than rank 0 reports (rank 0 speaks for the run), and a study's timing run.

    With ``warnings_to``, warnings still reach that reporter, tagged with
    ``tag`` (a study's timing run may meet a problem the person must see);
    events and the result never do, so a study's own result stays the last
    line of ``--json``.
    """

    def __init__(self, warnings_to: Reporter | None = None, tag: str = "") -> None:
        super().__init__(json_mode=False, quiet=True)
        self.warnings_to, self.tag = warnings_to, tag

    def event(self, kind: str, text: str | None = None, **fields: Any) -> None:
        pass

    def warn(self, text: str, **fields: Any) -> None:
        if self.warnings_to is not None:
            self.warnings_to.warn(f"[{self.tag}] {text}" if self.tag else text, **fields)

    def error(self, message: str) -> None:
        pass

    def result(self, fields: dict, text: str | None = None) -> None:
        pass


def memory_size(n_bytes: float, digits: int = 0) -> str:
    """``n_bytes`` in GiB to ``digits`` decimals, or in MiB where GiB would read 0 (a small machine, a short length):
    a figure a person can compare with what they have."""
    if round(n_bytes / 2**30, digits) == 0:
        return f"{n_bytes / 2**20:,.{digits}f} MiB"
    return f"{n_bytes / 2**30:,.{digits}f} GiB"


__all__ = ["HeldResult", "Reporter", "SilentReporter", "TaggedReporter", "memory_size", "terminal_output"]
