"""Tokens produced by the lexer."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

from iterion_nb.dsl.limits import shorten
from iterion_nb.dsl.source import Span


class TokenKind(StrEnum):
    """What a token is."""

    IDENT = "identifier"
    DOTTED = "dotted name"
    STRING = "string"
    NUMBER = "number"
    RAW = "text block"
    ARROW = "'->'"
    COLON = "':'"
    COMMA = "','"
    EQUALS = "'='"
    LBRACKET = "'['"
    RBRACKET = "']'"
    LBRACE = "'{'"
    RBRACE = "'}'"
    LPAREN = "'('"
    RPAREN = "')'"
    NEWLINE = "end of line"
    INDENT = "indent"
    DEDENT = "dedent"
    EOF = "end of file"


@dataclass(frozen=True, slots=True)
class RawLine:
    """One line of a text block, with where its first kept character sits."""

    text: str
    line: int
    column: int


class Token(NamedTuple):
    """A token: its kind, its text (decoded for strings) and its span.

    ``lines`` is only set for :attr:`TokenKind.RAW` text blocks. A named tuple
    because the lexer makes tens of thousands of them.
    """

    kind: TokenKind
    text: str
    span: Span
    lines: tuple[RawLine, ...] = ()

    def describe(self) -> str:
        """How an error message names this token."""
        if self.kind in (TokenKind.IDENT, TokenKind.NUMBER, TokenKind.DOTTED):
            return f"'{shorten(self.text)}'"
        if self.kind is TokenKind.STRING:
            return "a string"
        return self.kind.value
