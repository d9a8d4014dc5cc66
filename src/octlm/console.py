"""The ``octlm`` command's entry point: the program, and a clean stop for a Ctrl-C while it is still importing torch."""

from __future__ import annotations

import sys


def main() -> int:
    """Run :func:`octlm.cli.main`; a Ctrl-C before it starts (torch takes seconds to import) exits 130 without a
    traceback."""
    try:
        from octlm.cli import main as run
    except KeyboardInterrupt:
        print("octlm: interrupted before it started; nothing was written", file=sys.stderr)
        return 130
    return run()


__all__ = ["main"]
