"""Evaluate parsed expressions against run data. No Python ``eval`` anywhere."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from iterion_nb.ir.expr import (
    Attr,
    Binary,
    Call,
    Expr,
    Index,
    ListExpr,
    Literal,
    Ref,
    Unary,
)
from iterion_nb.safe_data import INT_MAX, INT_MIN, MAX_DATA_CHARS

#: The namespaces a dotted reference may start with.
NAMESPACES = ("vars", "input", "outputs", "artifacts", "attachments", "loop", "run")


class ExpressionError(Exception):
    """An expression that parsed but cannot be evaluated on this data."""


def truthy(value: object) -> bool:
    """Truth as a person expects it: empty, zero, null and false are false."""
    return bool(value)


def evaluate(expr: Expr, scope: Mapping[str, Any], bare: Mapping[str, Any] | None = None) -> Any:
    """Evaluate ``expr``.

    Args:
        expr: A parsed expression.
        scope: The namespaces (``vars``, ``input``, ``outputs`` …) by name.
        bare: What a bare name (not a namespace) refers to, such as the
            fields of the node output a ``when`` condition tests.

    Raises:
        ExpressionError: When a reference is missing or an operation does not
            apply to the values it meets.
    """
    return _Evaluator(scope, bare or {}).eval(expr)


class _Evaluator:
    def __init__(self, scope: Mapping[str, Any], bare: Mapping[str, Any]) -> None:
        self.scope = scope
        self.bare = bare

    def eval(self, expr: Expr) -> Any:
        if isinstance(expr, Literal):
            return expr.value
        if isinstance(expr, Ref):
            return self._ref(expr)
        if isinstance(expr, ListExpr):
            return [self.eval(item) for item in expr.items]
        if isinstance(expr, Attr):
            return _member(self.eval(expr.target), expr.name, expr.name)
        if isinstance(expr, Index):
            target = self.eval(expr.target)
            key = self.eval(expr.index)
            return _member(target, key, f"[{key!r}]")
        if isinstance(expr, Unary):
            value = self.eval(expr.operand)
            if expr.op == "!":
                return not truthy(value)
            return _bounded(-_number(value, "-"), "-")
        if isinstance(expr, Binary):
            return self._binary(expr)
        return self._call(expr)

    def _ref(self, ref: Ref) -> Any:
        head, *rest = ref.path
        if head in self.scope:
            value: Any = self.scope[head]
        elif head in self.bare:
            value = self.bare[head]
        else:
            raise ExpressionError(f"unknown reference '{'.'.join(ref.path)}'")
        for name in rest:
            value = _member(value, name, ".".join(ref.path))
        return value

    def _binary(self, expr: Binary) -> Any:
        op = expr.op
        if op == "&&":
            return truthy(self.eval(expr.left)) and truthy(self.eval(expr.right))
        if op == "||":
            return truthy(self.eval(expr.left)) or truthy(self.eval(expr.right))
        left = self.eval(expr.left)
        right = self.eval(expr.right)
        if op == "==":
            return _equal(left, right)
        if op == "!=":
            return not _equal(left, right)
        if op in ("<", "<=", ">", ">="):
            return _compare(op, left, right)
        return _arithmetic(op, left, right)

    def _call(self, call: Call) -> Any:
        if call.name == "if":
            cond, then, other = call.args
            return self.eval(then) if truthy(self.eval(cond)) else self.eval(other)
        args = [self.eval(arg) for arg in call.args]
        return _FUNCTIONS[call.name](args)


def _bounded(value: Any, op: str) -> Any:
    """``value``, the result of ``op``, if a run can hold it (as every recorded value)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and not INT_MIN <= value <= INT_MAX:
        raise ExpressionError(f"'{op}' gives an integer beyond 64 bits")
    if isinstance(value, float) and not math.isfinite(value):
        raise ExpressionError(f"'{op}' gives a number too large to hold")
    return value


def _check_length(length: int, op: str) -> None:
    """Refuse a text or list longer than a run can hold (before building it, where we can)."""
    if length > MAX_DATA_CHARS:
        raise ExpressionError(f"'{op}' gives more than {MAX_DATA_CHARS:,} characters or items")


def _arithmetic(op: str, left: object, right: object) -> Any:
    if op == "+" and (
        (isinstance(left, str) and isinstance(right, str))
        or (isinstance(left, list) and isinstance(right, list))
    ):
        _check_length(len(left) + len(right), op)
        return left + right  # type: ignore[operator]
    a, b = _number(left, op), _number(right, op)
    try:
        return _bounded(_numeric(op, a, b), op)
    except OverflowError:
        raise ExpressionError(f"'{op}' gives a number too large to hold") from None


def _numeric(op: str, a: float | int, b: float | int) -> float | int:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if b == 0:
        raise ExpressionError(f"division by zero in '{op}'")
    if op == "/":
        return a / b
    return a % b


def _member(value: Any, key: object, where: str) -> Any:
    if isinstance(value, Mapping) and isinstance(key, str):
        if key in value:
            return value[key]
        raise ExpressionError(f"'{where}': no field '{key}'")
    if isinstance(value, Sequence) and not isinstance(value, str) and isinstance(key, int):
        if -len(value) <= key < len(value):
            return value[key]
        raise ExpressionError(f"'{where}': index {key} out of range")
    raise ExpressionError(f"'{where}': cannot take {key!r} of {_kind(value)}")


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def _number(value: object, op: str) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ExpressionError(f"'{op}' needs numbers, got {_kind(value)}")
    return value


def _equal(left: object, right: object) -> bool:
    if isinstance(left, bool) != isinstance(right, bool):
        return False
    return left == right


def _compare(op: str, left: object, right: object) -> bool:
    both_str = isinstance(left, str) and isinstance(right, str)
    if not both_str:
        a, b = _number(left, op), _number(right, op)
    else:
        a, b = left, right  # type: ignore[assignment]
    if op == "<":
        return a < b
    if op == "<=":
        return a <= b
    if op == ">":
        return a > b
    return a >= b


def _length(args: list[Any]) -> int:
    (value,) = args
    if isinstance(value, str | list | tuple | Mapping):
        return len(value)
    raise ExpressionError(f"length() needs a string, list or object, got {_kind(value)}")


def _concat(args: list[Any]) -> Any:
    if all(isinstance(a, list | tuple | str) for a in args):
        _check_length(sum(len(a) for a in args), "concat()")
    if all(isinstance(a, list | tuple) for a in args):
        out: list[Any] = []
        for a in args:
            out.extend(a)
        return out
    if all(isinstance(a, str) for a in args):
        return "".join(args)
    raise ExpressionError("concat() needs all lists or all strings")


def _unique(args: list[Any]) -> list[Any]:
    (value,) = args
    if not isinstance(value, list | tuple):
        raise ExpressionError(f"unique() needs a list, got {_kind(value)}")
    out: list[Any] = []
    seen: set[str] = set()
    for item in value:
        key = json.dumps(item, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


def _contains(args: list[Any]) -> bool:
    haystack, needle = args
    if isinstance(haystack, str):
        if not isinstance(needle, str):
            raise ExpressionError("contains() on a string needs a string to look for")
        return needle in haystack
    if isinstance(haystack, list | tuple):
        return any(_equal(item, needle) for item in haystack)
    if isinstance(haystack, Mapping):
        return needle in haystack
    raise ExpressionError(f"contains() needs a string, list or object, got {_kind(haystack)}")


def _join(args: list[Any]) -> str:
    items = args[0]
    sep = args[1] if len(args) > 1 else ""
    if not isinstance(items, list | tuple) or not isinstance(sep, str):
        raise ExpressionError("join() needs a list and a string separator")
    text = sep.join(item if isinstance(item, str) else json.dumps(item) for item in items)
    _check_length(len(text), "join()")
    return text


_FUNCTIONS: dict[str, Callable[[list[Any]], Any]] = {
    "length": _length,
    "concat": _concat,
    "unique": _unique,
    "contains": _contains,
    "join": _join,
}
