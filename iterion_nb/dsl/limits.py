"""The language's limits on nesting, numbers and durations, and safe number parsing.

Hostile or generated input must get a diagnostic, never a Python traceback:
the parsers recurse once per level of nesting (so deep nesting would raise
``RecursionError``), ``int()`` refuses more than 4,300 digits (``ValueError``)
and costs time quadratic in the digits below that, and ``float()`` turns a
400-digit number into infinity. Every number the compiler reads goes through
:func:`parse_int` or :func:`parse_decimal`, every nesting level is counted
against :data:`MAX_NESTING`, and every duration is held to
:data:`MAX_DURATION_SECONDS`. ``docs/language.md`` states the same limits.
"""

from __future__ import annotations

import math
import re

#: Deepest nesting of brackets, indented blocks and expression levels
#: (parentheses, brackets, calls, unary and binary operators).
MAX_NESTING = 64
#: Largest magnitude of any number: a signed 64-bit integer.
MAX_NUMBER = 2**63 - 1
#: Digits of :data:`MAX_NUMBER`; a longer integer part is too large unread.
_MAX_DIGITS = len(str(MAX_NUMBER))
#: Longest duration (a ``timeout``, a budget's ``max_duration``): 30 days.
MAX_DURATION_SECONDS = 30 * 24 * 3600

_INT = re.compile(r"-?([0-9]+)\Z")
_DECIMAL = re.compile(r"-?([0-9]+)(?:\.[0-9]+)?\Z")
_FLOAT = re.compile(r"-?([0-9]+)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?\Z")
#: Characters of a number shown in a message before it is cut.
_SHOWN = 24


class NumberTooLargeError(ValueError):
    """A well-formed number whose magnitude exceeds :data:`MAX_NUMBER`."""

    def __init__(self, text: str) -> None:
        super().__init__(too_large_message(text))
        self.text = text


def _integer_part_too_long(digits: str) -> bool:
    return len(digits) > _MAX_DIGITS and len(digits.lstrip("0")) > _MAX_DIGITS


def parse_int(text: str) -> int:
    """The whole number ``text`` (``-?[0-9]+``).

    Raises:
        NumberTooLargeError: Its magnitude exceeds :data:`MAX_NUMBER`.
        ValueError: It is not a whole number.
    """
    match = _INT.match(text)
    if match is None:
        raise ValueError(f"not a whole number: {shorten(text)}")
    digits = match.group(1)
    if _integer_part_too_long(digits):
        raise NumberTooLargeError(text)
    # int() counts leading zeros against its own 4,300-digit limit: drop them
    value = int(digits.lstrip("0") or "0")
    if value > MAX_NUMBER:
        raise NumberTooLargeError(text)
    return -value if text.startswith("-") else value


def parse_decimal(text: str, exponent: bool = False) -> int | float:
    """``text`` as an int (no ``.``) or a float (``3.5``; ``1e5`` if ``exponent``).

    Raises:
        NumberTooLargeError: Its magnitude exceeds :data:`MAX_NUMBER`.
        ValueError: It is not a number of that form.
    """
    match = (_FLOAT if exponent else _DECIMAL).match(text)
    if match is None:
        raise ValueError(f"not a number: {shorten(text)}")
    if _integer_part_too_long(match.group(1)):
        raise NumberTooLargeError(text)
    if "." not in text and "e" not in text.lower():
        return parse_int(text)
    value = float(text)
    if not math.isfinite(value) or abs(value) > MAX_NUMBER:
        raise NumberTooLargeError(text)
    return value


def shorten(text: str, limit: int = _SHOWN) -> str:
    """``text`` cut to about ``limit`` characters for a message, saying how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text):,} characters)"


def too_large_message(text: str) -> str:
    """What a diagnostic says about a number over :data:`MAX_NUMBER`."""
    return (
        f"number {shorten(text)} is too large: the limit is {MAX_NUMBER:,} (2**63 - 1) in magnitude"
    )


def too_deep_message(what: str, depth: int) -> str:
    """What a diagnostic says about nesting past :data:`MAX_NESTING`."""
    return f"{what} nest {depth} levels deep here; the limit is {MAX_NESTING} levels"


def duration_message(name: str, shown: str) -> str:
    """What a diagnostic says about a duration over :data:`MAX_DURATION_SECONDS`."""
    days = MAX_DURATION_SECONDS // 86400
    return (
        f"'{name}' is {shorten(shown)}, longer than the limit of {days} days"
        f" ({MAX_DURATION_SECONDS:,} s)"
    )
