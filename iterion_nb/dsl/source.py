"""Source text and positions inside it.

A :class:`Span` is 1-based (line and column, as an editor shows them) and
half-open on the end column, so a caret line can be drawn from it directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


class Span(NamedTuple):
    """A region of source text: ``line:column`` up to ``end_line:end_column``.

    A named tuple rather than a dataclass: the lexer makes one per token, and
    tuples are immutable and several times cheaper to build.
    """

    line: int
    column: int
    end_line: int
    end_column: int

    @classmethod
    def point(cls, line: int, column: int, width: int = 1) -> Span:
        """A span on one line starting at ``column`` and ``width`` characters wide."""
        return cls(line, column, line, column + max(width, 1))

    def to(self, other: Span) -> Span:
        """The span from the start of ``self`` to the end of ``other``."""
        return Span(self.line, self.column, other.end_line, other.end_column)


@dataclass(frozen=True)
class Source:
    r"""A named piece of workflow text.

    Attributes:
        name: What diagnostics call the source (a path, or ``<cell>``).
        text: The decoded text, with newlines normalised to ``\\n``.
    """

    name: str
    text: str
    _lines: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        normalised = self.text.replace("\r\n", "\n").replace("\r", "\n")
        object.__setattr__(self, "text", normalised)
        object.__setattr__(self, "_lines", tuple(normalised.split("\n")))

    @property
    def lines(self) -> tuple[str, ...]:
        """The source split into lines (without their newline)."""
        return self._lines

    def line_text(self, line: int) -> str:
        """The text of 1-based ``line``, or ``""`` when out of range."""
        if 1 <= line <= len(self._lines):
            return self._lines[line - 1]
        return ""
