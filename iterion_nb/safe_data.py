"""JSON data a run records, held to what every store and surface can keep.

A run writes its variables, answers and node outputs to the store as JSON,
and every surface reads them back. Two rules:

- What a person types (a ``--var``, a ``--json-value`` answer, a REST body)
  is parsed by :func:`loads`, strictly: no ``NaN`` or infinities, integers
  within 64 bits (the language's own numbers), no key twice in an object,
  nesting at most :data:`MAX_DEPTH` levels, no lone surrogate.
- What a run makes or is given from Python (a tool's or a model's output, an
  expression's result, ``Session`` variables and answers) is checked by
  :func:`problem` against what the store can write at all: finite numbers,
  integers Python can write out (4,300 digits), text without a lone
  surrogate (no UTF-8 store holds one), ``dict`` objects (keys that are not
  text are written as text, as ``json`` always does), at most
  :data:`MAX_DATA_CHARS` characters written out.

Python's own ``json`` would let NaN and 1e400 through, raise ``ValueError``
past 4,300 digits and ``RecursionError`` when nested deep, and no store
could then record the run's next step.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: How deeply lists and objects may nest in what a person types.
MAX_DEPTH = 64
#: How deeply they may nest in what a run records (reports and views walk it back).
MAX_RECORDED_DEPTH = 200
#: Levels a store call adds around the records it carries (args, a batch, a checkpoint).
_WRAPPING = 16
#: Integers a person types are signed 64-bit numbers, as in the language (``C301``).
INT_MIN, INT_MAX = -(2**63), 2**63 - 1
#: The most characters one recorded value may take written out as JSON (64 Mi).
MAX_DATA_CHARS = 64 * 1024 * 1024
#: Integers Python writes out: fewer than 4,300 digits (``sys.get_int_max_str_digits``).
_WRITABLE = 10**4300

_SURROGATE = re.compile("[\ud800-\udfff]")
#: What written-out JSON shows of what the walk refuses: a lone surrogate, an escaped
#: U+0000 (in a key, refused; in a value, fine).
_SUSPECT = re.compile("[\ud800-\udfff]|\\\\u0000")
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_SAME_BRACKETS = str.maketrans("{}", "[]")
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False)


class DataError(ValueError):
    """Data refused; the message names what (``what``) and the problem.

    Attributes:
        code: ``bad_json`` (not JSON, or JSON no store keeps), ``too_deep`` or
            ``too_large``.
        syntax: Whether the text is not JSON at all (rather than JSON refused).
    """

    def __init__(self, code: str, message: str, *, syntax: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.syntax = syntax


def loads(text: str, what: str, *, typed: bool = True) -> Any:
    """Strict JSON: no NaN or infinities, 64-bit integers, no repeated keys, bounded.

    Args:
        text: The JSON text.
        what: How a message names it (``"request body"``, ``"--var n"``).
        typed: What a person typed (the default): held to the language's values.
            False for records a process sends another (a store call to its
            holder): held only to what a run may record, as :func:`problem`
            holds them, and not walked (they can be large).

    Raises:
        DataError: It is not JSON, or holds what no store keeps; the message says what.
    """
    if typed and len(text) > MAX_DATA_CHARS:
        raise DataError("too_large", f"{what} is larger than {MAX_DATA_CHARS:,} characters")
    if not typed and _too_deep(text, MAX_RECORDED_DEPTH + _WRAPPING):
        deepest = MAX_RECORDED_DEPTH + _WRAPPING
        raise DataError("too_deep", f"{what} nests deeper than {deepest}")
    strict = _Strict(what, typed)
    try:
        data = json.loads(
            text, parse_int=strict.number, parse_float=strict.decimal,
            parse_constant=strict.constant, object_pairs_hook=strict.mapping,
        )  # fmt: skip
    except RecursionError:
        deepest = MAX_DEPTH if typed else MAX_RECORDED_DEPTH + _WRAPPING
        raise DataError("too_deep", f"{what} nests deeper than {deepest}") from None
    except json.JSONDecodeError as err:
        raise DataError(
            "bad_json",
            f"{what} is not JSON: {err.msg} (line {err.lineno}, column {err.colno})",
            syntax=True,
        ) from None
    found = _walk(data, _unnamed, _TYPED) if typed else None  # (keys not echoed: theirs)
    if found is not None:
        raise DataError("too_deep" if "deeper" in found else "bad_json", f"{what} {found}")
    return data


class _Strict:
    """The hooks :func:`loads` gives ``json.loads``, refusing as they read."""

    def __init__(self, what: str, typed: bool) -> None:
        self.what = what
        self.typed = typed

    def number(self, text: str) -> int:
        if not self.typed:  # what Python writes out: fewer than 4,300 digits
            if len(text.lstrip("-")) >= 4300:
                raise DataError("bad_json", f"a number in {self.what} has 4,300 digits or more")
            return int(text)
        if len(text.lstrip("-")) > 19 or not INT_MIN <= int(text) <= INT_MAX:
            raise DataError("bad_json", f"a number in {self.what} is out of range (64 bits)")
        return int(text)

    def decimal(self, text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            raise DataError("bad_json", f"a number in {self.what} is out of range")
        return value

    def constant(self, text: str) -> Any:
        raise DataError(
            "bad_json", f"{self.what} is not JSON: {text} is not a JSON value", syntax=True
        )

    def mapping(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        data = dict(pairs)
        if len(data) < len(pairs):
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    shown = json.dumps(key)[:80]
                    raise DataError(
                        "bad_json", f"{self.what} repeats the key {shown} in one object"
                    )
                seen.add(key)
        return data


def printable(text: str) -> str:
    """``text`` as every store keeps it in a text column: U+0000 and lone surrogates escaped.

    For messages built from what others said (a backend's exception, a key).
    """
    if "\x00" not in text and not _SURROGATE.search(text):
        return text
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text.replace("\x00", "\\u0000"))


def problem(value: Any, *, named: bool = True) -> str | None:
    """What keeps ``value`` from being recorded, or None: ``"'a[2]' is not a finite number"``.

    Written out once (as the store will): most values pass at that cost. When
    that fails, or the text holds a lone surrogate, the value is walked to name
    the first offending place by its path (``a.b[2]``) unless ``named`` is false.
    """
    try:
        text = _ENCODER.encode(value)
    except (ValueError, TypeError, RecursionError) as err:
        found = _walk(value, _path if named else _unnamed, _WRITTEN)
        return found or f"cannot be written as JSON ({type(err).__name__})"
    if len(text) > MAX_DATA_CHARS:
        return f"is larger than {MAX_DATA_CHARS:,} characters as JSON"
    if _SUSPECT.search(text) or _too_deep(text):  # name it (or find it harmless)
        return _walk(value, _path if named else _unnamed, _WRITTEN)
    return None


def _too_deep(text: str, limit: int = MAX_RECORDED_DEPTH) -> bool:
    """Whether written-out JSON nests deeper than ``limit`` (strings aside).

    Its brackets alone, each pass dropping the innermost level: C-speed passes,
    as many as the value is deep (two for a long list of records).
    """
    if text.count("[") + text.count("{") <= limit:
        return False
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text)).translate(_SAME_BRACKETS)
    for _ in range(limit):
        inner = brackets.replace("[]", "")
        if not inner or len(inner) == len(brackets):
            return False
        brackets = inner
    return True


@dataclass(frozen=True, slots=True)
class _Rules:
    """What a walk refuses: how deep, which integers, which keys."""

    depth: int | None
    number: Callable[[int], str | None]
    any_key: bool  # keys that are not text are written as text (json's way); none with U+0000


def _typed_number(item: int) -> str | None:
    return None if INT_MIN <= item <= INT_MAX else "is an integer beyond 64 bits"


def _written_number(item: int) -> str | None:
    return None if -_WRITABLE < item < _WRITABLE else "is an integer of 4,300 digits or more"


_TYPED = _Rules(MAX_DEPTH, _typed_number, any_key=False)
_WRITTEN = _Rules(MAX_RECORDED_DEPTH, _written_number, any_key=True)

_Trail = tuple[Any, str | int] | None


def _walk(value: Any, path: Callable[[_Trail], str], rules: _Rules) -> str | None:
    """The first place in ``value`` (and why) that ``rules`` refuse, without recursion."""
    # each entry: a value, its depth, and its trail (parent's trail, key) for the message
    stack: list[tuple[Any, int, _Trail]] = [(value, 1, None)]
    while stack:
        item, depth, trail = stack.pop()
        if isinstance(item, dict | list | tuple):
            if rules.depth is not None and depth > rules.depth:
                return f"{path(trail)}nests deeper than {rules.depth}"
            if isinstance(item, dict):
                found = _keys_problem(item, rules)
                if found is not None:
                    return f"{path(trail)}{found}"
                pairs: Any = item.items()
            else:
                pairs = enumerate(item)
            stack.extend((sub, depth + 1, (trail, key)) for key, sub in pairs)
            continue
        found = _scalar_problem(item, rules)
        if found is not None:
            return f"{path(trail)}{found}"
    return None


def _keys_problem(item: dict[Any, Any], rules: _Rules) -> str | None:
    """A problem of a mapping's keys (not text, not UTF-8)."""
    for key in item:
        if isinstance(key, str):
            if _SURROGATE.search(key):
                return "has a key with a lone surrogate (not UTF-8)"
            if rules.any_key and "\x00" in key:  # (typed text: its own checks say where)
                return "has a key holding U+0000"
        elif not (rules.any_key and (key is None or isinstance(key, int | float))):
            return f"has a key that is not text ({type(key).__name__})"
        elif isinstance(key, float) and not math.isfinite(key):
            return f"has a key that is not a finite number ({key})"
    return None


def _scalar_problem(item: Any, rules: _Rules) -> str | None:
    if item is None or isinstance(item, bool):
        return None
    if isinstance(item, int):
        return rules.number(item)
    if isinstance(item, float):
        return None if math.isfinite(item) else f"is not a finite number ({item})"
    if isinstance(item, str):
        return "holds a lone surrogate (not UTF-8)" if _SURROGATE.search(item) else None
    return f"is not JSON data ({type(item).__name__})"


def _unnamed(trail: _Trail) -> str:
    return ""


def _path(trail: _Trail) -> str:
    """``'a.b[2]' `` for the trail of a place, cut to a sane length; "" for the whole value."""
    parts: list[str] = []
    while trail is not None:
        trail, key = trail
        if isinstance(key, int):
            parts.append(f"[{key}]")
        elif key.isidentifier():
            parts.append(f".{key}")
        else:  # escaped: a key may hold anything (U+0000, a terminal's escapes, quotes)
            parts.append(f"[{json.dumps(key)[:60]}]")
    if not parts:
        return ""
    shown = "".join(reversed(parts)).removeprefix(".")
    return f"'{shown if len(shown) <= 80 else shown[:77] + '...'}' "
