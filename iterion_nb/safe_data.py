"""JSON data a run records, held to what every store and surface can keep.

A run writes its variables, answers and node outputs to the store as JSON,
and every surface reads them back. Python's own ``json`` lets through what
no store keeps: ``NaN`` and infinities (``1e400``), numbers of any size (and
raises ``ValueError`` past 4,300 digits), nesting until ``RecursionError``,
text with a lone surrogate (no UTF-8 store can hold it), objects that name a
key twice. So data from a person is parsed by :func:`loads`, and data a run
makes (an expression's result, a tool's or a model's output) is checked by
:func:`problem`, against the same bounds: finite numbers, integers within 64
bits (the language's own limit), nesting at most :data:`MAX_DEPTH` levels,
at most :data:`MAX_DATA_CHARS` characters once written out.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

#: How deeply lists and objects may nest in recorded data.
MAX_DEPTH = 64
#: Integers are signed 64-bit numbers, as in the language (``C301``).
INT_MIN, INT_MAX = -(2**63), 2**63 - 1
#: The most characters one value may take written out as JSON (16 Mi).
MAX_DATA_CHARS = 16 * 1024 * 1024

_SURROGATE = re.compile("[\ud800-\udfff]")
#: What a scalar, a comma or brackets add to the written size, at least.
_OVERHEAD = 2


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


def loads(text: str, what: str) -> Any:
    """Strict JSON: no NaN or infinities, 64-bit integers, no repeated keys, bounded.

    Args:
        text: The JSON text.
        what: How a message names it (``"request body"``, ``"--var n"``).

    Raises:
        DataError: It is not JSON, or holds what no store keeps; the message says what.
    """
    strict = _Strict(what)
    try:
        data = json.loads(
            text, parse_int=strict.number, parse_float=strict.decimal,
            parse_constant=strict.constant, object_pairs_hook=strict.mapping,
        )  # fmt: skip
    except RecursionError:
        raise DataError("too_deep", f"{what} nests deeper than {MAX_DEPTH}") from None
    except json.JSONDecodeError as err:
        raise DataError(
            "bad_json",
            f"{what} is not JSON: {err.msg} (line {err.lineno}, column {err.colno})",
            syntax=True,
        ) from None
    found = problem(data, named=False)  # its keys are the sender's text: not echoed
    if found is not None:
        code = "too_deep" if "deeper" in found else "too_large" if "larger" in found else "bad_json"
        raise DataError(code, f"{what} {found}")
    return data


class _Strict:
    """The hooks :func:`loads` gives ``json.loads``, refusing as they read."""

    def __init__(self, what: str) -> None:
        self.what = what

    def number(self, text: str) -> int:
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


def problem(value: Any, *, named: bool = True) -> str | None:
    """What keeps ``value`` from being recorded, or None: ``"'a[2]' is not a finite number"``.

    Walks the value once, without recursion, looking at each scalar where its
    container lists it; the message names the first offending place by its
    path (``a.b[2]``) unless ``named`` is false, or says it of the whole value.
    """
    if not isinstance(value, Mapping | list | tuple):
        found = _scalar_problem(value)
        if found is None and isinstance(value, str) and len(value) > MAX_DATA_CHARS:
            found = f"is larger than {MAX_DATA_CHARS:,} characters as JSON"
        return found
    return _walk(value, _path if named else _unnamed)


def _walk(
    value: Mapping[str, Any] | list[Any] | tuple[Any, ...], path: Callable[[_Trail], str]
) -> str | None:
    """:func:`problem` of a container."""
    # each entry: a container, its depth, and its trail (parent's trail, key) for the message
    stack: list[tuple[Any, int, _Trail]] = [(value, 1, None)]
    size = 0
    while stack:
        item, depth, trail = stack.pop()
        if depth > MAX_DEPTH:
            return f"{path(trail)}nests deeper than {MAX_DEPTH}"
        if isinstance(item, Mapping):
            found, keys = _keys_problem(item)
            if found is not None:
                return f"{path(trail)}{found}"
            size += keys
            pairs: Any = item.items()
        else:
            pairs = enumerate(item)
        for key, sub in pairs:
            if isinstance(sub, str):
                size += len(sub) + _OVERHEAD
                if _SURROGATE.search(sub) is None:
                    continue
            elif isinstance(sub, Mapping | list | tuple):
                stack.append((sub, depth + 1, (trail, key)))
                continue
            found = _scalar_problem(sub)
            if found is not None:
                return f"{path((trail, key))}{found}"
            size += _OVERHEAD
        if size > MAX_DATA_CHARS:
            return f"is larger than {MAX_DATA_CHARS:,} characters as JSON"
    return None


_Trail = tuple[Any, str | int] | None


def _keys_problem(item: Mapping[Any, Any]) -> tuple[str | None, int]:
    """A problem of a mapping's keys (not text, not UTF-8), and the size they add."""
    size = 0
    for key in item:
        if not isinstance(key, str):
            return f"has a key that is not text ({type(key).__name__})", size
        if _SURROGATE.search(key):
            return "has a key with a lone surrogate (not UTF-8)", size
        size += len(key) + _OVERHEAD
    return None, size


def _unnamed(trail: _Trail) -> str:
    return ""


def _path(trail: _Trail) -> str:
    """``'a.b[2]' `` for the trail of a place, cut to a sane length; "" for the whole value."""
    parts: list[str] = []
    while trail is not None:
        trail, key = trail
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key}")
    if not parts:
        return ""
    shown = "".join(reversed(parts)).removeprefix(".")
    return f"'{shown if len(shown) <= 80 else shown[:77] + '...'}' "


def _scalar_problem(item: Any) -> str | None:
    if item is None or isinstance(item, bool | Mapping | list | tuple):
        return None
    if isinstance(item, int):
        return None if INT_MIN <= item <= INT_MAX else "is an integer beyond 64 bits"
    if isinstance(item, float):
        return None if math.isfinite(item) else f"is not a finite number ({item})"
    if isinstance(item, str):
        return "holds a lone surrogate (not UTF-8)" if _SURROGATE.search(item) else None
    return f"is not JSON data ({type(item).__name__})"
