"""Reading property values of the syntax tree into typed Python values.

Each reader records a diagnostic and returns ``None`` when the value is not of
the expected kind, so the builder keeps going and reports every problem.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from iterion_nb.dsl import ast
from iterion_nb.dsl.diagnostics import Diagnostics
from iterion_nb.ir.model import SCALAR_TYPES, TypeSpec
from iterion_nb.ir.templates import Template, parse_template

_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float | None:
    """Seconds in ``"30m"``, ``"1h30m"``, ``"500ms"`` or a plain number; else None."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    total = 0.0
    pos = 0
    for m in _DURATION_PART.finditer(text):
        if m.start() != pos:
            return None
        total += float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
        pos = m.end()
    if pos != len(text) or pos == 0:
        return None
    return total


def describe(value: ast.Value) -> str:
    """How an error message names a value."""
    if isinstance(value, ast.StringValue):
        return f'the string "{value.text}"'
    if isinstance(value, ast.NumberValue):
        return f"the number {value.text}"
    if isinstance(value, ast.IdentValue):
        return f"'{value.name}'"
    if isinstance(value, ast.ListValue):
        return "a list"
    if isinstance(value, ast.MapValue):
        return "a map"
    return "a block"


class ValueReader:
    """Typed readers over property values; problems go to ``diags``."""

    def __init__(self, diags: Diagnostics) -> None:
        self.diags = diags

    def _wrong(self, prop: ast.Property, expected: str) -> None:
        self.diags.add(
            "C052",
            f"'{prop.name}' expects {expected}, found {describe(prop.value)}",
            prop.value.span,
        )

    def name(self, prop: ast.Property) -> str | None:
        """A bare name (quoted is accepted too)."""
        value = prop.value
        if isinstance(value, ast.IdentValue):
            return value.name
        if isinstance(value, ast.StringValue) and value.text:
            return value.text
        self._wrong(prop, "a name")
        return None

    def choice(self, prop: ast.Property, allowed: Iterable[str], code: str = "C054") -> str | None:
        """One of ``allowed``."""
        options = tuple(allowed)
        word = self.name(prop)
        if word is None:
            return None
        if word not in options:
            self.diags.add(
                code,
                f"'{prop.name}' must be one of {', '.join(options)}; found '{word}'",
                prop.value.span,
            )
            return None
        return word

    def integer(self, prop: ast.Property, minimum: int = 1, code: str = "C052") -> int | None:
        """A whole number no smaller than ``minimum``."""
        value = prop.value
        if isinstance(value, ast.NumberValue) and re.fullmatch(r"-?[0-9]+", value.text):
            number = int(value.text)
            if number >= minimum:
                return number
            self.diags.add(
                code, f"'{prop.name}' must be at least {minimum}; found {number}", value.span
            )
            return None
        self._wrong(prop, "a whole number")
        return None

    def number(self, prop: ast.Property) -> float | None:
        """Any number (as a float)."""
        value = prop.value
        if isinstance(value, ast.NumberValue):
            try:
                return float(value.text)
            except ValueError:
                pass
        self._wrong(prop, "a number")
        return None

    def boolean(self, prop: ast.Property) -> bool | None:
        """``true`` or ``false``."""
        value = prop.value
        if isinstance(value, ast.IdentValue) and value.name in ("true", "false"):
            return value.name == "true"
        self._wrong(prop, "true or false")
        return None

    def duration(self, prop: ast.Property) -> float | None:
        """A duration such as ``"30m"``; None (with C055) if it is not one."""
        value = prop.value
        text = value.text if isinstance(value, ast.StringValue | ast.NumberValue) else None
        seconds = parse_duration(text) if text is not None else None
        if seconds is None:
            self.diags.add(
                "C055",
                f'\'{prop.name}\' expects a duration such as "30s", "10m" or "1h30m",'
                f" found {describe(value)}",
                value.span,
            )
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
        """A declared type; unknown names get C056."""
        if ref.name not in SCALAR_TYPES:
            self.diags.add(
                "C056",
                f"unknown type '{ref.name}'; expected one of {', '.join(SCALAR_TYPES)}"
                " (add [] for a list)",
                ref.span,
            )
            return None
        return TypeSpec(ref.name, ref.is_list)


def string_template(value: ast.StringValue, diags: Diagnostics) -> Template:
    """Parse a string literal's text as a template located inside its quotes."""
    return parse_template(value.text, value.span.line, value.span.column + 1, diags)


def literal(value: ast.Value) -> tuple[bool, object]:
    """A plain data literal as Python data; ``(False, None)`` if it is not one."""
    if isinstance(value, ast.StringValue):
        return True, value.text
    if isinstance(value, ast.NumberValue):
        try:
            return True, int(value.text)
        except ValueError:
            try:
                return True, float(value.text)
            except ValueError:
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
