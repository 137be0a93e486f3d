"""Reading property values of the syntax tree into typed Python values.

Each reader records a diagnostic and returns ``None`` when the value is not of
the expected kind, so the builder keeps going and reports every problem.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from iterion_nb.dsl import ast
from iterion_nb.dsl.diagnostics import Diagnostics, did_you_mean
from iterion_nb.dsl.limits import (
    MAX_DURATION_SECONDS,
    NumberTooLargeError,
    duration_message,
    parse_decimal,
    parse_int,
    shorten,
)
from iterion_nb.ir.model import SCALAR_TYPES, TypeSpec
from iterion_nb.ir.templates import Template, TextPart, parse_lines, parse_template

# Matched at each position in turn (not finditer, which would rescan a long
# run of digits from every start, quadratically), possessive so that a part
# that fails fails at once.
_DURATION_PART = re.compile(r"([0-9]++(?:\.[0-9]++)?+)(ms|s|m|h|d)")
#: ``${NAME}`` or ``${NAME:-fallback}`` in a variable's default: the compiler checks the
#: fallback against the type, and the runtime reads the environment with it.
ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _amount(text: str) -> float:
    """A decimal amount; one too large to read is infinitely long, never an exception."""
    try:
        return float(parse_decimal(text))
    except NumberTooLargeError:
        return math.inf


def parse_duration(text: str) -> float | None:
    """Seconds in ``"30m"``, ``"1h30m"``, ``"500ms"`` or a plain number; else None.

    A plain number is seconds (``-?[0-9]+(.[0-9]+)?``: no ``inf``, ``nan`` or
    exponent). A number too large to read gives ``math.inf``, which the
    callers refuse as longer than :data:`MAX_DURATION_SECONDS`.
    """
    text = text.strip()
    try:
        return _amount(text)
    except ValueError:
        pass
    total = 0.0
    pos = 0
    while pos < len(text):
        m = _DURATION_PART.match(text, pos)
        if m is None:
            return None
        total += _amount(m.group(1)) * _UNIT_SECONDS[m.group(2)]
        pos = m.end()
    return total if pos else None


def describe(value: ast.Value) -> str:
    """How an error message names a value (long text is cut)."""
    if isinstance(value, ast.StringValue):
        return f'the string "{shorten(value.text)}"'
    if isinstance(value, ast.NumberValue):
        return f"the number {shorten(value.text)}"
    if isinstance(value, ast.IdentValue):
        return f"'{shorten(value.name)}'"
    if isinstance(value, ast.ListValue):
        return "a list"
    if isinstance(value, ast.MapValue):
        return "a map"
    if isinstance(value, ast.CallValue):
        return f"'{shorten(value.name)}(...)'"
    return "a block"


class ValueReader:
    """Typed readers over property values; problems go to ``diags``."""

    def __init__(self, diags: Diagnostics) -> None:
        self.diags = diags

    def _wrong(self, prop: ast.Property, expected: str, known: tuple[str, ...] = ()) -> None:
        value = prop.value
        word = value.name if isinstance(value, ast.IdentValue) else ""
        self.diags.add(
            "C352",
            f"'{prop.name}' expects {expected}, found {describe(value)}{did_you_mean(word, known)}",
            value.span,
        )

    def name(self, prop: ast.Property) -> str | None:
        """A bare name (quoted is accepted too); a dotted one is not a name."""
        value = prop.value
        if isinstance(value, ast.IdentValue) and "." not in value.name:
            return value.name
        if isinstance(value, ast.StringValue) and value.text:
            return value.text
        self._wrong(prop, "a name")
        return None

    def choice(self, prop: ast.Property, allowed: Iterable[str], code: str = "C354") -> str | None:
        """One of ``allowed``."""
        options = tuple(allowed)
        word = self.name(prop)
        if word is None:
            return None
        if word not in options:
            self.diags.add(
                code,
                f"'{prop.name}' must be one of {', '.join(options)}; found '{word}'"
                f"{did_you_mean(word, options)}",
                prop.value.span,
            )
            return None
        return word

    def integer(self, prop: ast.Property, minimum: int = 1, code: str = "C352") -> int | None:
        """A whole number no smaller than ``minimum`` nor larger than the limit (C301)."""
        value = prop.value
        try:
            number = parse_int(value.text) if isinstance(value, ast.NumberValue) else None
        except NumberTooLargeError as err:
            self.diags.add("C301", f"'{prop.name}': {err}", value.span)
            return None
        except ValueError:
            number = None
        if number is None:
            self._wrong(prop, "a whole number")
            return None
        if number < minimum:
            self.diags.add(
                code, f"'{prop.name}' must be at least {minimum}; found {number}", value.span
            )
            return None
        return number

    def numbers_fit(self, value: ast.Value) -> bool:
        """Whether every number inside ``value`` is within the limit (else C301 for each)."""
        fit = True
        todo = [value]
        while todo:
            item = todo.pop()
            if isinstance(item, ast.ListValue):
                todo += item.items
            elif isinstance(item, ast.MapValue):
                todo += [entry.value for entry in item.entries]
            elif isinstance(item, ast.NumberValue):
                try:
                    parse_decimal(item.text, exponent=True)
                except NumberTooLargeError as err:
                    self.diags.add("C301", str(err), item.span)
                    fit = False
                except ValueError:
                    pass
        return fit

    def boolean(self, prop: ast.Property) -> bool | None:
        """``true`` or ``false``."""
        value = prop.value
        if isinstance(value, ast.IdentValue) and value.name in ("true", "false"):
            return value.name == "true"
        self._wrong(prop, "true or false", ("true", "false"))
        return None

    def duration(self, prop: ast.Property) -> float | None:
        """A duration such as ``"30m"``; None after C355 (not one) or C302 (too long)."""
        value = prop.value
        text = value.text if isinstance(value, ast.StringValue | ast.NumberValue) else None
        seconds = parse_duration(text) if text is not None else None
        if seconds is None:
            self.diags.add(
                "C355",
                f'\'{prop.name}\' expects a duration such as "30s", "10m" or "1h30m",'
                f" found {describe(value)}",
                value.span,
            )
        elif seconds > MAX_DURATION_SECONDS:
            self.diags.add("C302", duration_message(prop.name, text or ""), value.span)
            return None
        return seconds

    def template(self, prop: ast.Property) -> Template | None:
        """A quoted string parsed as a template."""
        value = prop.value
        if isinstance(value, ast.StringValue):
            return string_template(value, self.diags)
        self._wrong(prop, "a quoted string")
        return None

    def names(self, prop: ast.Property) -> tuple[str, ...] | None:
        """``[a, b]`` (a single name is accepted as a list of one)."""
        value = prop.value
        items = value.items if isinstance(value, ast.ListValue) else (value,)
        out: list[str] = []
        for item in items:
            if isinstance(item, ast.IdentValue):
                out.append(item.name)
            elif isinstance(item, ast.StringValue) and item.text:
                out.append(item.text)
            else:
                self._wrong(prop, "a list of names")
                return None
        return tuple(out)

    def type_spec(self, ref: ast.TypeRef) -> TypeSpec | None:
        """A declared type; unknown names get C356."""
        if ref.name not in SCALAR_TYPES:
            hint = did_you_mean(ref.name, SCALAR_TYPES)
            self.diags.add(
                "C356",
                f"unknown type '{ref.name}'"
                f"{hint or '; expected one of ' + ', '.join(SCALAR_TYPES)} (add [] for a list)",
                ref.span,
            )
            return None
        return TypeSpec(ref.name, ref.is_list)


def string_template(value: ast.StringValue, diags: Diagnostics) -> Template:
    """Parse a string literal's text as a template located inside its quotes.

    A ``|`` block is parsed line by line, each where it stands in the file.
    """
    if value.lines:
        rows = [(r.text, r.line, r.column) for r in value.lines]
        return Template((*parse_lines(rows, diags).parts, TextPart("\n")))
    return parse_template(value.text, value.span.line, value.span.column + 1, diags)


def literal(value: ast.Value) -> tuple[bool, object]:
    """A plain data literal as Python data; ``(False, None)`` if it is not one."""
    if isinstance(value, ast.StringValue):
        return True, value.text
    if isinstance(value, ast.NumberValue):
        try:
            return True, parse_decimal(value.text, exponent=True)
        except ValueError:  # not a number, or too large (ValueReader.numbers_fit says so)
            return False, None
    if isinstance(value, ast.IdentValue):
        constants: dict[str, object] = {"true": True, "false": False, "null": None}
        if value.name in constants:
            return True, constants[value.name]
        return False, None
    if isinstance(value, ast.ListValue | ast.MapValue):
        return _collection(value)
    return False, None


def _collection(value: ast.ListValue | ast.MapValue) -> tuple[bool, object]:
    if isinstance(value, ast.ListValue):
        pairs = [(str(i), item) for i, item in enumerate(value.items)]
    else:
        pairs = [(entry.key, entry.value) for entry in value.entries]
    out: dict[str, object] = {}
    for key, item in pairs:
        ok, data = literal(item)
        if not ok:
            return False, None
        out[key] = data
    if isinstance(value, ast.ListValue):
        return True, list(out.values())
    return True, out


def matches_type(data: object, spec: TypeSpec) -> bool:
    """Whether a literal fits a declared type."""
    if spec.is_list:
        return isinstance(data, list) and all(
            matches_type(item, TypeSpec(spec.name)) for item in data
        )
    if spec.name == "json":
        return True
    if spec.name == "string":
        return isinstance(data, str)
    if spec.name == "bool":
        return isinstance(data, bool)
    if spec.name == "int":
        return isinstance(data, int) and not isinstance(data, bool)
    return isinstance(data, int | float) and not isinstance(data, bool)
