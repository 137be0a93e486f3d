"""What the magics show: diagnostics and run lists as tables (HTML in Jupyter, text elsewhere)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from iterion_nb.dsl.diagnostics import Diagnostic


class Table:
    """Rows under a title; displays as an HTML table, prints as aligned text."""

    def __init__(self, title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        self.title = title
        self.header = list(header)
        self.rows = [[str(cell) for cell in row] for row in rows]

    def __repr__(self) -> str:
        widths = [
            max(len(h), *(len(r[i]) for r in self.rows)) if self.rows else len(h)
            for i, h in enumerate(self.header)
        ]
        lines = [
            self.title,
            "  ".join(h.ljust(w) for h, w in zip(self.header, widths, strict=True)),
        ]
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in self.rows]
        return "\n".join(line.rstrip() for line in lines)

    def _repr_html_(self) -> str:
        head = "".join(f"<th style='text-align:left'>{html.escape(h)}</th>" for h in self.header)
        body = "".join(
            "<tr>" + "".join(f"<td style='text-align:left'>{html.escape(c)}</td>" for c in row)
            + "</tr>"
            for row in self.rows
        )  # fmt: skip
        return (
            f"<div><b>{html.escape(self.title)}</b><table><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table></div>"
        )


def diagnostics_table(
    name: str, source: str, diagnostics: Sequence[Diagnostic], *, first_line: int = 1
) -> Table:
    """The compiler's findings with line numbers as the user sees them, and the offending line.

    ``first_line`` is the number the editor shows on the first line of
    ``source``: 2 for the body of a ``%%iterion`` cell, whose magic line is 1.
    """
    lines = source.splitlines()
    rows = []
    for d in diagnostics:
        text = lines[d.line - 1].strip() if 0 < d.line <= len(lines) else ""
        line = d.line + first_line - 1
        rows.append([f"{line}:{d.column}", d.severity.value, d.code, d.message, text])
    errors = sum(1 for d in diagnostics if d.severity.value == "error")
    title = f"{name}: {errors} error(s), {len(diagnostics) - errors} warning(s)"
    return Table(title, ["line:col", "severity", "code", "message", "source"], rows)
