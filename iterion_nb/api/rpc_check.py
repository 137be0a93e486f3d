"""Checking a store RPC call against the Store protocol, before the store sees it.

The protocol's signatures and the records' field types are the contract:
arguments are bound to the signature, then every value is checked against
its annotation (records field by field). Text may not hold U+0000, times
must carry a zone and lie within years 1 to 9999; lists stand for the tuples a
signature declares (JSON has no tuples) and become tuples.
"""

from __future__ import annotations

import inspect
import json
import types
import typing
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Union

from iterion_nb.api.handlers import ApiError
from iterion_nb.runtime.ports import Store

#: Nesting of type annotations followed at most (records hold records).
MAX_DEPTH = 20
_EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
_LATEST = datetime(9999, 12, 30, tzinfo=UTC)
#: ``write_batch`` rows: [run_id, type, data (JSON text), node_id, branch_id]
#: and [run_id, checkpoint, owner, durable], and (optional) [run_id, claimant] held.
_BATCH_ROWS: dict[str, tuple[Any, ...]] = {
    "events": (str, str, str, str | None, str | None),
    "checkpoints": (str, dict[str, Any], str | None, bool),
    "held": (str, str),
}


#: Whole-number arguments and their least value: a count or a position, never negative
#: (the store would hand a negative LIMIT, or one past 64 bits, to its database).
_COUNTS: dict[tuple[str, str], int] = {
    ("list_runs", "limit"): 1,
    ("events", "after"): 0,
    ("events", "limit"): 0,
    ("get_artifact", "version"): 0,
}
_LARGEST = 2**63 - 1


class Call:
    """A call's arguments once checked."""

    def __init__(self, args: list[Any], kwargs: dict[str, Any]) -> None:
        self.args = args
        self.kwargs = kwargs


def checked_call(method: str, args: list[Any], kwargs: dict[str, Any]) -> Call:
    """Bind and type-check a call of ``method``.

    Raises:
        ApiError: 400 ``bad_request`` naming the argument that does not fit.
    """
    if method == "write_batch":
        return _checked_batch(args, kwargs)
    spec = getattr(Store, method)
    try:
        bound = inspect.signature(spec).bind(None, *args, **kwargs)
    except TypeError as err:
        raise ApiError(400, "bad_request", f"{method}: {err}") from None
    hints = typing.get_type_hints(spec)
    for name, value in list(bound.arguments.items())[1:]:
        bound.arguments[name] = check(value, hints.get(name, Any), f"{method}: {name}")
        low = _COUNTS.get((method, name))
        if low is not None and value is not None and not low <= value <= _LARGEST:
            raise ApiError(400, "bad_request", f"{method}: {name} must be a whole number"
                           f" from {low} to {_LARGEST}, not {value}")  # fmt: skip
    return Call(list(bound.args[1:]), dict(bound.kwargs))


def _checked_batch(args: list[Any], kwargs: dict[str, Any]) -> Call:
    if kwargs or len(args) not in (2, 3):
        raise ApiError(400, "bad_request", "write_batch: expects [events, checkpoints, held]")
    shapes = list(_BATCH_ROWS.items())[: len(args)]
    for (name, shape), rows in zip(shapes, args, strict=True):
        if not isinstance(rows, list):
            raise ApiError(400, "bad_request", f"write_batch: {name} must be a list")
        for row in rows:
            if not isinstance(row, list) or len(row) != len(shape):
                raise ApiError(400, "bad_request", f"write_batch: a malformed row of {name}")
            for value, hint in zip(row, shape, strict=True):
                check(value, hint, f"write_batch: {name}")
    for row in args[0]:
        try:
            data = json.loads(row[2])
        except (ValueError, RecursionError):
            data = None
        if not isinstance(data, dict):
            raise ApiError(400, "bad_request", "write_batch: event data is not a JSON object")
        check(data, dict[str, Any], "write_batch: events")
    return Call(args, {})


def check(value: Any, hint: Any, where: str, depth: int = 0) -> Any:
    """``value`` if it fits ``hint`` (lists made tuples where tuples are declared).

    Raises:
        ApiError: 400 ``bad_request`` saying where it does not fit.
    """
    if depth > MAX_DEPTH:
        raise ApiError(400, "bad_request", f"{where}: nested too deep")
    if hint is Any:
        return value
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        return _union(value, hint, where, depth)
    if origin is Literal:
        if not isinstance(value, str) or value not in typing.get_args(hint):
            raise _wrong(where, hint)
        return value
    if origin in (list, tuple):
        return _sequence(value, hint, where, depth)
    if origin is dict:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise _wrong(where, hint)
        _no_nul_keys(value, where)
        return value
    if isinstance(hint, type) and is_dataclass(hint):
        return _record(value, hint, where, depth)
    return _scalar(value, hint, where)


def _scalar(value: Any, hint: Any, where: str) -> Any:
    checker = _SCALARS.get(hint)
    if checker is None or not checker(value):
        raise _wrong(where, hint)
    if isinstance(value, str) and "\x00" in value:
        raise ApiError(400, "bad_request", f"{where}: text cannot hold U+0000")
    if isinstance(value, datetime):
        _in_range(value, where)
    return value


def _union(value: Any, hint: Any, where: str, depth: int) -> Any:
    for option in typing.get_args(hint):
        try:
            return check(value, option, where, depth + 1)
        except ApiError:
            continue
    raise _wrong(where, hint)


def _sequence(value: Any, hint: Any, where: str, depth: int) -> Any:
    if not isinstance(value, list | tuple):
        raise _wrong(where, hint)
    items = typing.get_args(hint)
    if typing.get_origin(hint) is list:
        return [check(v, items[0], where, depth + 1) for v in value]
    if len(items) == 2 and items[1] is Ellipsis:
        return tuple(check(v, items[0], where, depth + 1) for v in value)
    if len(value) != len(items):
        raise _wrong(where, hint)
    return tuple(check(v, h, where, depth + 1) for v, h in zip(value, items, strict=True))


def _record(value: Any, hint: type[Any], where: str, depth: int) -> Any:
    if type(value) is not hint:
        raise _wrong(where, hint)
    hints = typing.get_type_hints(hint)
    for field in fields(hint):
        check(getattr(value, field.name), hints[field.name], f"{where}.{field.name}", depth + 1)
    return value


def _in_range(value: datetime, where: str) -> None:
    try:
        ok = value.tzinfo is not None and _EARLIEST <= value <= _LATEST
    except OverflowError:
        ok = False
    if not ok:
        raise ApiError(400, "bad_request", f"{where}: expects a time with its zone, years 1-9999")


def _no_nul_keys(data: Any, where: str) -> None:
    """JSON data for the store: no U+0000 in its keys."""
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            if any("\x00" in k for k in value):
                raise ApiError(400, "bad_request", f"{where}: a key holds U+0000")
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)


def _wrong(where: str, hint: Any) -> ApiError:
    return ApiError(400, "bad_request", f"{where}: expects {describe(hint)[:300]}")


_NAMES: dict[Any, str] = {
    str: "text", int: "a whole number", float: "a number", bool: "true or false",
    datetime: "a time with its zone", None: "null", type(None): "null", Any: "any JSON value",
}  # fmt: skip


def describe(hint: Any, depth: int = 0) -> str:
    """An annotation as a client reads it: ``one of 'running', 'failed' or null``, ``text``."""
    origin = typing.get_origin(hint)
    if depth > 3:
        return "a value"
    if origin in (Union, types.UnionType):
        options = typing.get_args(hint)
        values = [a for o in options if typing.get_origin(o) is Literal for a in typing.get_args(o)]
        rest = [describe(o, depth + 1) for o in options if typing.get_origin(o) is not Literal]
        shown = ([f"one of {', '.join(map(repr, values))}"] if values else []) + rest
        return ", or ".join(shown) if values else " or ".join(shown)
    if origin is Literal:
        return "one of " + ", ".join(map(repr, typing.get_args(hint)))
    if origin is list or (origin is tuple and Ellipsis in typing.get_args(hint)):
        item = typing.get_args(hint)[0]
        if isinstance(item, type) and is_dataclass(item):
            return f"a list of {item.__name__} records"
        return f"a list, each item {describe(item, depth + 1)}"
    if origin is tuple:
        return f"a list of {len(typing.get_args(hint))} items"
    if origin is dict or hint is dict:
        return "an object"
    if isinstance(hint, type) and is_dataclass(hint):
        article = "an" if hint.__name__[:1] in "AEIOU" else "a"
        return f"{article} {hint.__name__} record"
    return _NAMES.get(hint, getattr(hint, "__name__", str(hint).replace("typing.", "")))


_SCALARS: dict[Any, Callable[[Any], bool]] = {
    bool: lambda v: isinstance(v, bool),
    int: lambda v: type(v) is int,
    float: lambda v: type(v) in (int, float),
    str: lambda v: isinstance(v, str),
    datetime: lambda v: isinstance(v, datetime),
    None: lambda v: v is None,
    type(None): lambda v: v is None,
}
