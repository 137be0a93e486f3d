"""Checking data against declared types: run variables and node outputs."""

from __future__ import annotations

import os
import re
from typing import Any

from iterion_nb import safe_data
from iterion_nb.errors import VarsError
from iterion_nb.ir import model as m
from iterion_nb.ir.values import ENV_REF
from iterion_nb.ir.values import matches_type as fits


def check_record(value: Any, schema: m.Schema) -> list[str]:
    """Problems of ``value`` as a record of ``schema`` (empty when it fits)."""
    if not isinstance(value, dict):
        return [f"expected an object with fields {', '.join(schema.fields)}, got {_kind(value)}"]
    problems = []
    for name, field in schema.fields.items():
        if name not in value:
            problems.append(f"field '{name}' is missing")
        elif not fits(value[name], field.type):
            problems.append(f"field '{name}' should be {field.type}, got {_kind(value[name])}")
        elif field.enum and value[name] not in field.enum:
            allowed = ", ".join(field.enum)
            problems.append(f"field '{name}' is {value[name]!r}, not one of {allowed}")
    return problems


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, int):
        return "an int"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def expand_env(text: str) -> str:
    """Replace ``${NAME}`` / ``${NAME:-default}`` from the environment."""

    def one(match: re.Match[str]) -> str:
        value = os.environ.get(match.group(1))
        if value is None:
            if match.group(2) is None:
                raise VarsError(f"environment variable {match.group(1)} is not set")
            return match.group(2)
        return value

    return ENV_REF.sub(one, text)


def _coerce(name: str, raw: Any, spec: m.TypeSpec) -> Any:
    if isinstance(raw, str) and not (spec.name == "string" and not spec.is_list):
        try:
            raw = safe_data.loads(raw, f"variable '{name}'")
        except safe_data.DataError as err:
            if not err.syntax:  # JSON no run can hold: NaN, 1e400, 2**64, nested 65 deep
                raise VarsError(str(err)) from None
            if safe_data.problem(raw) is not None:  # bytes that are not UTF-8, as for a string
                raise VarsError(f"variable '{name}' {safe_data.problem(raw)}") from None
            shown = raw if len(raw) <= 80 else raw[:77] + "..."
            raise VarsError(f"variable '{name}' should be {spec}, got the text {shown!r}") from None
    if isinstance(raw, tuple):  # a list given from Python as a tuple: recorded as a list
        raw = list(raw)
    unfit = safe_data.problem(raw)
    if unfit is not None:
        raise VarsError(f"variable '{name}'{':' if unfit.startswith(chr(39)) else ''} {unfit}")
    if spec.name == "float" and not spec.is_list and isinstance(raw, int):
        raw = float(raw) if not isinstance(raw, bool) else raw
    if not fits(raw, spec):
        raise VarsError(f"variable '{name}' should be {spec}, got {_kind(raw)}")
    return raw


def preset_values(wf: m.Workflow, preset: str | None) -> dict[str, Any]:
    """The variable values of one of the workflow's ``presets:`` (none for None).

    Raises:
        VarsError: The workflow has no preset of that name (the message lists them).
    """
    if preset is None:
        return {}
    if preset not in wf.presets:
        known = ", ".join(wf.presets) or "none"
        raise VarsError(f"no preset {preset!r} in workflow '{wf.name}' (presets: {known})")
    return dict(wf.presets[preset])


def resolve_vars(wf: m.Workflow, given: dict[str, Any] | None) -> dict[str, Any]:
    """The run's variables: defaults, overridden by ``given``, all type-checked.

    Strings given for non-string variables are read as JSON (so the CLI's
    ``--var n=3`` works). Raises :class:`VarsError` naming the variable.
    """
    given = dict(given or {})
    unknown = sorted(set(given) - set(wf.vars))
    if unknown:
        known = ", ".join(wf.vars) or "none"
        raise VarsError(f"unknown variable {', '.join(map(repr, unknown))} (declared: {known})")
    values: dict[str, Any] = {}
    for name, var in wf.vars.items():
        if name in given:
            values[name] = _coerce(name, given[name], var.type)
        elif var.has_default:
            default = var.default
            if isinstance(default, str) and "${" in default:
                default = _coerce(name, expand_env(default), var.type)
            values[name] = default
        else:
            raise VarsError(f"variable '{name}' ({var.type}) has no default and was not given")
    return values
