"""Argument types the benchmarks share: an integer with a floor and a positive number, each refused by argparse in one
line naming the value (exit status 2), never a traceback."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``low``."""

    def integer(text: str) -> int:  # argparse names the type by this name: "invalid integer value: 'abc'"
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value

    return integer


def number(text: str) -> float:
    """An argparse type: a number > 0 (not NaN); argparse names it "number" when the text is none."""
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value
