"""argparse types the commands share: a bad number is refused, saying what was expected."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def number(kind: type, low: float, high: float, expected: str) -> Callable[[str], float]:
    """An argparse type accepting ``kind`` values in the open interval (low, high); NaN and
    infinities never pass (no comparison with them holds)."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not low < value < high:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return parse


def positive(kind: type) -> Callable[[str], float]:
    """A positive finite ``kind`` (int or float)."""
    what = "a positive integer" if kind is int else "a positive number"
    return number(kind, 0, math.inf, what)
