"""Cursors (upstream iterion's prompt-engineering dials): declarations and settings.

``cursor NAME:`` declares named ``values:`` or numeric ``bands:`` over [0, 1],
each with a prompt fragment; an agent's ``cursors:`` block (``enabled: true``)
sets some of them, and the fragments they pick are appended to its system
prompt under ``## Calibration``. Codes as upstream: C083 (a setting of an
undeclared cursor, warning), C084 (a value it does not accept), C085 (a
malformed declaration), C086 (a cursor declared twice).
"""

from __future__ import annotations

from dataclasses import dataclass

from iterion_nb.dsl import ast
from iterion_nb.dsl.diagnostics import Diagnostics, did_you_mean
from iterion_nb.dsl.source import Span
from iterion_nb.ir import model as m
from iterion_nb.ir.values import ValueReader


@dataclass(frozen=True, slots=True)
class CursorUse:
    """One setting of an agent's ``cursors:`` block, where it is written."""

    node: str
    cursor: str
    value: str
    span: Span
    key_span: Span


def declare(
    decl: ast.NodeDecl, props: dict[str, ast.Property], cursors: dict[str, m.Cursor],
    read: ValueReader, diags: Diagnostics, rejected: set[str],
) -> None:  # fmt: skip
    """``cursor NAME:`` into ``cursors`` (C086 twice, C085 malformed: then in ``rejected``)."""
    if decl.name in cursors:
        diags.add("C086", f"cursor '{decl.name}' is declared twice", decl.name_span)
        return
    values, bands = props.get("values"), props.get("bands")
    problem = None
    if (values is None) == (bands is None):
        problem = "declare either 'values:' (names) or 'bands:' (numbers), not " + (
            "neither" if values is None else "both"
        )
    written = [e for p in (values, bands) if isinstance(p and p.value, ast.BlockValue)
               for e in p.value.entries]  # type: ignore[union-attr]  # fmt: skip
    parsed_values = _entries(values, read, diags) if values is not None else []
    parsed_band_entries = _entries(bands, read, diags) if bands is not None else []
    if len(parsed_values) + len(parsed_band_entries) != len(written) or not written:
        if problem is None and not written:
            diags.add("C085", f"cursor '{decl.name}' has no values or bands", decl.name_span)
        rejected.add(decl.name)
        return  # (what was wrong is reported; a cursor half declared is not one)
    parsed_bands = []
    for key, text, span in parsed_band_entries:
        band, why = _band(key)
        if band is None:
            diags.add("C085", f"cursor '{decl.name}': band \"{key}\": {why}", span)
            rejected.add(decl.name)
            return
        parsed_bands.append((*band, text))
    problem = problem or _overlap(parsed_bands) or _duplicate(parsed_values)
    if problem is not None:
        diags.add("C085", f"cursor '{decl.name}': {problem}", decl.name_span)
        rejected.add(decl.name)
        return
    description = props.get("description")
    cursors[decl.name] = m.Cursor(
        decl.name, decl.name_span,
        description=(read.name(description) or "") if description is not None else "",
        values=tuple((k, t) for k, t, _ in parsed_values),
        bands=tuple(parsed_bands),
    )  # fmt: skip


def settings(
    node: str, prop: ast.Property, read: ValueReader, diags: Diagnostics
) -> tuple[tuple[tuple[str, str], ...], list[CursorUse]]:
    """An agent's ``cursors:`` block: its settings when enabled, and every use to check."""
    if not isinstance(prop.value, ast.BlockValue):
        diags.add("C352", "'cursors' expects an indented block (enabled: true, then settings)",
                  prop.value.span)  # fmt: skip
        return (), []
    enabled = False
    uses: list[CursorUse] = []
    for entry in prop.value.entries:
        if entry.name == "enabled":
            enabled = bool(read.boolean(entry))
            continue
        value = entry.value
        if isinstance(value, ast.IdentValue | ast.StringValue | ast.NumberValue):
            text = value.name if isinstance(value, ast.IdentValue) else value.text
            uses.append(CursorUse(node, entry.name, text, value.span, entry.name_span))
        else:
            diags.add("C084", f"cursor '{entry.name}': a setting is a name, a number or a"
                      " string", value.span)  # fmt: skip
    chosen = tuple((u.cursor, u.value) for u in uses) if enabled else ()
    return chosen, uses


def check_uses(
    uses: list[CursorUse], cursors: dict[str, m.Cursor], diags: Diagnostics,
    rejected: set[str] = frozenset(),  # type: ignore[assignment]
) -> None:  # fmt: skip
    """C083 for a setting of an undeclared cursor, C084 for a value it does not accept.

    (A cursor whose declaration was refused has its C085 already: not repeated.)
    """
    for use in uses:
        cursor = cursors.get(use.cursor)
        if cursor is None and use.cursor in rejected:
            continue
        if cursor is None:
            diags.add(
                "C083",
                f"'{use.node}' sets cursor '{use.cursor}', which is not declared"
                f"{did_you_mean(use.cursor, cursors)} (declare it with 'cursor {use.cursor}:')",
                use.key_span,
            )
            continue
        if "${" in use.value:
            continue  # read from the environment when the node runs
        fragment, why = cursor.fragment(use.value)
        if fragment is None:
            diags.add(
                "C084", f"'{use.node}': cursor '{use.cursor}' value '{use.value}': {why}",
                use.span,
            )  # fmt: skip


def calibration(cursors: dict[str, m.Cursor], chosen: dict[str, str]) -> str:
    """The ``## Calibration`` section for settings already read (empty when none picks one).

    Fragments are sorted by cursor name (a stable prompt, as upstream), each as
    ``**Name:** fragment``; a setting that picks nothing is left out.
    """
    lines = []
    for name in sorted(chosen):
        cursor = cursors.get(name)
        fragment = cursor.fragment(chosen[name])[0] if cursor is not None else None
        if fragment is not None:
            lines.append(f"**{name[:1].upper()}{name[1:]}:** {fragment}")
    return "## Calibration\n\n" + "\n".join(lines) if lines else ""


def _entries(
    prop: ast.Property, read: ValueReader, diags: Diagnostics
) -> list[tuple[str, str, Span]]:
    if not isinstance(prop.value, ast.BlockValue):
        diags.add("C352", f"'{prop.name}' expects an indented block of name: \"text\" lines",
                  prop.value.span)  # fmt: skip
        return []
    found = []
    for entry in prop.value.entries:
        text = entry.value.text if isinstance(entry.value, ast.StringValue) else None
        if not text:
            diags.add("C085", f"'{entry.name}' needs its prompt text (a non-empty string)",
                      entry.value.span)  # fmt: skip
            continue
        found.append((entry.name, text, entry.name_span))
    return found


def _band(key: str) -> tuple[tuple[float, float] | None, str]:
    lo_text, sep, hi_text = key.partition("..")
    if not sep:
        return None, 'a band is written "lo..hi"'
    try:
        lo, hi = float(lo_text), float(hi_text)
    except ValueError:
        return None, "its bounds are not numbers"
    if not (0 <= lo <= 1 and 0 <= hi <= 1):
        return None, "a band must lie in [0.0, 1.0]"
    if lo > hi:
        return None, "its lower bound is above its upper bound"
    return (lo, hi), ""


def _overlap(bands: list[tuple[float, float, str]]) -> str | None:
    for i, (lo, hi, _) in enumerate(bands):
        for lo2, hi2, _ in bands[i + 1 :]:
            if lo <= hi2 and lo2 <= hi:
                return f"bands overlap: {lo:g}..{hi:g} and {lo2:g}..{hi2:g} (bounds are inclusive)"
    return None


def _duplicate(values: list[tuple[str, str, Span]]) -> str | None:
    seen: set[str] = set()
    for name, _, _ in values:
        if name in seen:
            return f"value '{name}' is declared twice"
        seen.add(name)
    return None
