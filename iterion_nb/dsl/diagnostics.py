"""Diagnostics: problems found in a workflow source, as data.

The compiler collects every problem it can find (never only the first) into a
:class:`Diagnostics` list; rendering them for a person is a separate function
so that the CLI, the magics and the JSON output share one representation.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum

from iterion_nb.dsl.codes import CODES
from iterion_nb.dsl.source import Source, Span

#: Past this many problems the rest are summarised, so garbage input cannot
#: produce an unreadable wall of text.
MAX_DIAGNOSTICS = 200
#: Characters of a source line shown under a diagnostic, and how many of them
#: come before the problem when the line is cut.
SHOWN_CHARS = 400
CONTEXT_CHARS = 80


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """``"; did you mean 'model'?"`` when a known name is close to ``word``, else ``""``.

    Close: as :func:`closest` finds.
    """
    close = closest(word, known)
    return f"; did you mean '{close}'?" if close is not None else ""


def closest(word: str, known: Iterable[str]) -> str | None:
    """The known name closest to ``word``, if one is close enough to be what was meant.

    Close: the same name in another case, the same letters in another order,
    or one difflib finds similar (ratio 0.75 or more; for names of four
    letters or more, 0.6).
    """
    names = [k for k in dict.fromkeys(known) if k and k != word]
    if not word or not names:
        return None
    folded = {k.lower(): k for k in names}
    if word.lower() in folded:
        return folded[word.lower()]
    swapped = [
        k for k in names if len(k) == len(word) and sorted(k.lower()) == sorted(word.lower())
    ]
    if len(swapped) == 1:  # two letters swapped ('itn', 'ture')
        return swapped[0]
    cutoff = 0.6 if len(word) >= 4 else 0.75
    close = difflib.get_close_matches(word, names, n=1, cutoff=cutoff)
    return close[0] if close else None


class Severity(StrEnum):
    """How bad a diagnostic is: errors stop compilation, warnings do not."""

    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One problem: a code, a severity, a message and where it is."""

    code: str
    severity: Severity
    message: str
    span: Span

    @property
    def line(self) -> int:
        """1-based line of the start of the problem."""
        return self.span.line

    @property
    def column(self) -> int:
        """1-based column of the start of the problem."""
        return self.span.column

    def to_json(self) -> dict[str, str | int]:
        """The JSON shape used by ``iterion-nb validate --json``."""
        return {
            "code": self.code,
            "severity": self.severity.value,
            "message": self.message,
            "line": self.line,
            "column": self.column,
        }


class Diagnostics:
    """An ordered collection that stage code appends problems to."""

    def __init__(self) -> None:
        self._items: list[Diagnostic] = []
        self._seen: set[tuple[str, Span, str]] = set()
        self.truncated = 0
        self._warnings = 0  # kept problems that are not errors

    def add(
        self,
        code: str,
        message: str,
        span: Span,
        severity: Severity | None = None,
    ) -> None:
        """Record a problem; the severity defaults to the code's own."""
        sev = Severity(severity or CODES[code].severity)
        key = (code, span, message)
        if len(self._items) >= MAX_DIAGNOSTICS:
            # Past the cap only a count is kept (duplicates included): no set
            # of every message of a garbage file. An error still takes the
            # place of a warning: a list full of warnings must not hide that
            # the source does not compile.
            self.truncated += 1
            if sev is not Severity.ERROR or not self._warnings or key in self._seen:
                return
            last = max(i for i, d in enumerate(self._items) if d.severity is not Severity.ERROR)
            del self._items[last]
            self._warnings -= 1
        if key in self._seen:
            return
        self._seen.add(key)
        self._items.append(Diagnostic(code, sev, message, span))
        if sev is not Severity.ERROR:
            self._warnings += 1

    def extend(self, other: Iterable[Diagnostic]) -> None:
        """Append already-built diagnostics."""
        for d in other:
            self.add(d.code, d.message, d.span, d.severity)

    @property
    def full(self) -> bool:
        """Whether the cap is reached: further problems are only counted."""
        return len(self._items) >= MAX_DIAGNOSTICS

    def __iter__(self) -> Iterator[Diagnostic]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    @property
    def has_errors(self) -> bool:
        """Whether any collected problem is an error."""
        return any(d.severity is Severity.ERROR for d in self._items)

    def sorted(self) -> list[Diagnostic]:
        """The problems in source order (stable for the same position)."""
        return sorted(self._items, key=lambda d: (d.span.line, d.span.column, d.code))


def render(diagnostic: Diagnostic, source: Source) -> str:
    """Render one diagnostic as ``file:line:col``, the line, and a caret.

    Example::

        flow.iter:7:9: error[C001]: unknown node 'reviwer' in edge
            7 |   plan -> reviwer
              |           ^^^^^^^
    """
    span = diagnostic.span
    head = (
        f"{source.name}:{span.line}:{span.column}: "
        f"{diagnostic.severity.value}[{diagnostic.code}]: {diagnostic.message}"
    )
    if not source.text:
        return head
    text = source.line_text(span.line)
    # A very long line is shown as a window around the column, so that the
    # rendering stays short whatever the input (and the caret lines up).
    start = 0
    if span.column > SHOWN_CHARS - CONTEXT_CHARS:
        start = span.column - 1 - CONTEXT_CHARS
    shown = ("…" if start else "") + _printable(text[start : start + SHOWN_CHARS])
    shift = start - (1 if start else 0)
    column = span.column - shift
    end = (span.end_column if span.end_line == span.line else len(text) + 1) - shift
    width = max(1, min(end, len(shown) + 1) - column)
    gutter = str(span.line).rjust(5)
    pad = " " * (len(gutter) + 1)
    caret = " " * (column - 1) + "^" * width
    return f"{head}\n{gutter} | {shown}\n{pad}| {caret}"


def more_not_shown(shown: int, truncated: int) -> str:
    """What a count of problems adds when more were found than are kept ("" when none were)."""
    if not truncated:
        return ""
    return f" (only the first {shown} problems are shown: fix them and check again for the rest)"


def render_all(diagnostics: Iterable[Diagnostic], source: Source) -> str:
    """Render several diagnostics, separated by blank lines."""
    return "\n\n".join(render(d, source) for d in diagnostics)


def _printable(text: str) -> str:
    """Show control characters as spaces so the caret stays aligned."""
    return "".join(ch if ch.isprintable() else " " for ch in text[:SHOWN_CHARS])
