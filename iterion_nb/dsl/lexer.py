"""Lexer: source text to tokens, with the indentation pass.

The language is line-oriented and indentation-significant. At bracket depth
zero each logical line ends with ``NEWLINE`` and changes of indentation become
``INDENT``/``DEDENT`` tokens; inside ``[...]``, ``{...}`` or ``(...)`` lines
continue freely. The body of a ``prompt NAME:`` declaration is not tokenised:
every following line indented deeper than the header (and blank lines between
them) becomes one ``RAW`` token, so prompt text may contain any characters.

Problems never raise: they are added to the :class:`Diagnostics` and the lexer
carries on, so that one run reports every problem.
"""

from __future__ import annotations

import re

from iterion_nb.dsl.diagnostics import Diagnostics
from iterion_nb.dsl.source import Source, Span
from iterion_nb.dsl.tokens import RawLine, Token, TokenKind

# Possessive quantifiers (*+) keep no backtracking state per repetition, so a
# string token of several MB is matched in linear time and constant memory.
_TOKEN_RE = re.compile(
    r"""
    (?P<space>[ \t]+)
  | (?P<comment>\#\#.*)
  | (?P<arrow>->)
  | (?P<number>-?[0-9]+(?:\.[0-9]+)?[A-Za-z0-9_]*)
  | (?P<dotted>[A-Za-z_][A-Za-z0-9_]*+(?:(?:\.[A-Za-z_][A-Za-z0-9_]*+)++(?:\.\*)?+|\.\*))
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<string>"[^"\\]*+(?:\\.[^"\\]*+)*+")
  | (?P<open_string>".*)
  | (?P<raw>`[^`]*+`)
  | (?P<open_raw>`.*)
  | (?P<block>\|[ \t]*+(?:\#\#.*)?\Z)
  | (?P<punct>[:,=\[\]{}()])
  | (?P<bad>.)
    """,
    re.VERBOSE,
)
_SIMPLE = {
    "arrow": TokenKind.ARROW,
    "number": TokenKind.NUMBER,
    "ident": TokenKind.IDENT,
    "dotted": TokenKind.DOTTED,  # a value only: `tools: [mcp.server.tool]`, `board.read`
}
_ESCAPE_RE = re.compile(r"\\(.)")

_PUNCT = {
    ":": TokenKind.COLON,
    ",": TokenKind.COMMA,
    "=": TokenKind.EQUALS,
    "[": TokenKind.LBRACKET,
    "]": TokenKind.RBRACKET,
    "{": TokenKind.LBRACE,
    "}": TokenKind.RBRACE,
    "(": TokenKind.LPAREN,
    ")": TokenKind.RPAREN,
}
_OPENERS = {"[": "]", "{": "}", "(": ")"}
_LAYOUT = frozenset((TokenKind.NEWLINE, TokenKind.INDENT, TokenKind.DEDENT))
#: Builds a named tuple without its keyword-handling ``__new__``: the lexer
#: makes two per token, and this halves their cost.
_new = tuple.__new__
_ESCAPES = {'"': '"', "\\": "\\", "n": "\n", "t": "\t"}


def _decode(body: str) -> str:
    r"""Decode the escapes of a string's body (``\"``, ``\\``, ``\n``, ``\t``)."""
    if "\\" not in body:
        return body
    return _ESCAPE_RE.sub(lambda m: _ESCAPES.get(m.group(1), m.group()), body)


def _indent_width(text: str) -> tuple[int, int | None]:
    """Width of the leading whitespace, and the column of a tab in it if any."""
    width = 0
    tab_col: int | None = None
    for ch in text:
        if ch == " ":
            width += 1
        elif ch == "\t":
            if tab_col is None:
                tab_col = width + 1
            width += 2
        else:
            break
    return width, tab_col


class Lexer:
    """Turns a :class:`Source` into a list of tokens."""

    def __init__(self, source: Source, diagnostics: Diagnostics) -> None:
        self.source = source
        self.diags = diagnostics
        self.tokens: list[Token] = []
        self._indents = [0]
        self._brackets: list[tuple[str, Span]] = []
        #: A backtick string still open at the end of a line: where it started, its lines.
        self._raw: tuple[int, int, list[str]] | None = None
        #: Where a ``key: |`` block opener stands, until its block is read.
        self._block: Span | None = None
        self._bracket_indent = 0

    def tokenize(self) -> list[Token]:
        """Produce every token, ending with ``EOF``."""
        lines = self.source.lines
        i = 0
        # Past the cap on diagnostics nothing more can be shown: a garbage
        # file of a million bad lines stops here instead of being lexed whole.
        while i < len(lines) and not self.diags.full:
            text = lines[i]
            line_no = i + 1
            if self._raw is not None:  # inside a backtick string that spans lines
                self._raw_line(text, line_no)
                i += 1
                continue
            if self._brackets and self._continues(text):
                self._scan(text, 0, line_no)
            else:
                self._close_dangling(line_no)
                start = len(text) - len(text.lstrip(" \t"))
                rest = text[start:]
                if not rest or rest.startswith("##"):
                    i += 1
                    continue
                width, tab_col = _indent_width(text)
                if tab_col is not None:
                    self.diags.add(
                        "S002",
                        "tab used for indentation; indent with 2 spaces",
                        Span.point(line_no, tab_col),
                    )
                self._indent_to(width, line_no, start + 1)
                first = len(self.tokens)
                self._scan(text, start, line_no)
                if self._is_prompt_header(first):
                    self._block = None  # `prompt p: |`: a prompt's text is a block anyway
                    i = self._raw_block(i + 1, width)
                    continue
                if self._block is not None:
                    i = self._block_scalar(i + 1, width)
                    continue
            i += 1
        self._finish()
        return self.tokens

    # -- bracket continuation -------------------------------------------
    def _continues(self, text: str) -> bool:
        """Whether a line inside open brackets continues them.

        A continuation is indented deeper than the line that opened the
        bracket, or starts by closing it; anything else is a new statement
        and the bracket was left open by mistake.
        """
        stripped = text.lstrip(" \t")
        if not stripped or stripped[0] in ")]}" or stripped.startswith("##"):
            return True
        width, _ = _indent_width(text)
        return width > self._bracket_indent

    def _close_dangling(self, line_no: int) -> None:
        if not self._brackets:
            return
        self._report_unclosed()
        prev = self.source.line_text(line_no - 1)
        self._newline(Span.point(line_no - 1, len(prev) + 1))

    def _report_unclosed(self) -> None:
        for opener, span in self._brackets:
            if self.diags.full:
                break  # a line of a million '(' is not a million diagnostics
            self.diags.add("S001", f"'{opener}' is never closed", span)
        self._brackets.clear()

    # -- indentation ----------------------------------------------------
    def _indent_to(self, width: int, line_no: int, column: int) -> None:
        if width == self._indents[-1]:
            return  # the common case: the same block goes on
        here = Span.point(line_no, column)
        if width > self._indents[-1]:
            self._indents.append(width)
            self.tokens.append(Token(TokenKind.INDENT, "", here))
            return
        while width < self._indents[-1]:
            self._indents.pop()
            self.tokens.append(Token(TokenKind.DEDENT, "", here))
        if width != self._indents[-1]:
            self.diags.add(
                "S005",
                f"inconsistent dedent: indentation of {width} matches no enclosing"
                f" block (expected {self._indents[-1]})",
                Span.point(line_no, 1, column - 1),
            )
            self._indents.append(width)
            self.tokens.append(Token(TokenKind.INDENT, "", here))

    def _finish(self) -> None:
        end_line = len(self.source.lines)
        end = Span.point(end_line, len(self.source.line_text(end_line)) + 1)
        if self._raw is not None:
            start_line, start_col, parts = self._raw
            self._raw = None
            self.diags.add(
                "S003",
                "unterminated string: the '`' opened here is never closed",
                Span.point(start_line, start_col),
            )
            self.tokens.append(Token(TokenKind.STRING, "\n".join(parts), end))
            self._newline(end)
        if self._brackets:
            self._report_unclosed()
            self._newline(end)
        while len(self._indents) > 1:
            self._indents.pop()
            self.tokens.append(Token(TokenKind.DEDENT, "", end))
        self.tokens.append(Token(TokenKind.EOF, "", end))

    def _newline(self, span: Span) -> None:
        if self.tokens and self.tokens[-1].kind not in _LAYOUT:
            self.tokens.append(Token(TokenKind.NEWLINE, "", span))

    # -- one line -------------------------------------------------------
    def _scan(self, text: str, pos: int, line_no: int) -> None:
        append = self.tokens.append
        for m in _TOKEN_RE.finditer(text, pos):
            group = m.lastgroup
            if group == "space":
                continue
            if group == "comment":
                break
            value = m.group()
            col = m.start() + 1
            span = _new(Span, (line_no, col, line_no, col + len(value)))
            kind = _SIMPLE.get(group or "")
            if kind is not None:
                append(_new(Token, (kind, value, span, ())))
            elif group == "punct":
                self._punct(value, span)
            elif group == "string":
                append(Token(TokenKind.STRING, _decode(value[1:-1]), span))
            elif group == "raw":  # `raw`: backslashes are text (upstream's raw strings)
                append(Token(TokenKind.STRING, value[1:-1], span))
            elif group == "open_raw":  # a backtick string may span lines (upstream's)
                self._raw = (line_no, col, [value[1:]])
                return
            elif self._odd(group, value, span):
                break
        if not self._brackets and self.tokens and self.tokens[-1].kind not in _LAYOUT:
            end = len(text) + 1
            newline = _new(Span, (line_no, end, line_no, end + 1))
            append(_new(Token, (TokenKind.NEWLINE, "", newline, ())))

    def _odd(self, group: str | None, value: str, span: Span) -> bool:
        """A token that is rare or wrong (True: the rest of the line is not scanned)."""
        if group == "open_string":
            self.diags.add(
                "S003", "unterminated string: add a closing '\"' on the same line",
                Span.point(span.line, span.column),
            )  # fmt: skip
            self.tokens.append(Token(TokenKind.STRING, _decode(value[1:]), span))
            return False
        if group == "block":  # `key: |`, upstream's YAML-style block of text
            if self.tokens and self.tokens[-1].kind is TokenKind.COLON and not self._brackets:
                self._block = span
            else:
                self.diags.add(
                    "S008", "unexpected character '|': a block of text is written 'key: |' at the"
                    " end of its line", span,
                )  # fmt: skip
            return True
        if value == "#":
            self.diags.add("S008", "unexpected character '#': comments start with '##'", span)
            return True
        if value == "|":
            self.diags.add(
                "S008", "unexpected character '|': a block of text is written 'key: |' at the"
                " end of its line", span,
            )  # fmt: skip
            return False
        self.diags.add("S008", f"unexpected character {value!r}", span)
        return False

    def _block_scalar(self, index: int, key_width: int) -> int:
        """The lines of a ``key: |`` block, as one string (upstream's block scalar).

        The first line sets the margin, which must be deeper than the key's; the
        block ends at the first line less indented. Lines keep their indentation
        beyond the margin and end with one newline (YAML's "clip").
        """
        opener, self._block = self._block, None
        assert opener is not None
        raw = self._indented(index, key_width, to_first=True)
        if not raw:
            self.diags.add(
                "S003", "empty block: the lines after '|' must be indented deeper than the key",
                opener,
            )  # fmt: skip
            self.tokens.insert(len(self.tokens) - 1, Token(TokenKind.STRING, "", opener))
            return index
        text = "\n".join(r.text for r in raw) + "\n"
        end = Span(opener.line, opener.column, raw[-1].line, raw[-1].column + len(raw[-1].text))
        newline = self.tokens.pop()  # the opener line's end comes after its string
        self.tokens.append(Token(TokenKind.STRING, text, end, raw))
        self.tokens.append(newline)
        return index + len(raw)

    def _raw_line(self, text: str, line_no: int) -> None:
        """One more line of a backtick string; the one with the closing '`' ends it."""
        assert self._raw is not None
        start_line, start_col, parts = self._raw
        end = text.find("`")
        if end < 0:
            parts.append(text)
            return
        parts.append(text[:end])
        self._raw = None
        span = Span(start_line, start_col, line_no, end + 2)
        self.tokens.append(Token(TokenKind.STRING, "\n".join(parts), span))
        self._scan(text, end + 1, line_no)

    def _punct(self, value: str, span: Span) -> None:
        if value in _OPENERS:
            if not self._brackets:
                self._bracket_indent = _indent_width(self.source.line_text(span.line))[0]
            self._brackets.append((value, span))
        elif value in ")]}":
            if self._brackets and _OPENERS[self._brackets[-1][0]] == value:
                self._brackets.pop()
            elif self._brackets:
                opener = self._brackets[-1][0]
                self.diags.add(
                    "S001",
                    f"'{value}' closes '{opener}'; expected '{_OPENERS[opener]}'",
                    span,
                )
                self._brackets.pop()
            else:
                self.diags.add("S001", f"'{value}' has no matching opener", span)
                return
        self.tokens.append(Token(_PUNCT[value], value, span))

    # -- prompt text blocks ---------------------------------------------
    def _is_prompt_header(self, first: int) -> bool:
        if first >= len(self.tokens) or self.tokens[first].text != "prompt":
            return False
        line = self.tokens[first:]
        kinds = [t.kind for t in line]
        return (
            kinds == [TokenKind.IDENT, TokenKind.IDENT, TokenKind.COLON, TokenKind.NEWLINE]
            and line[0].text == "prompt"
        )

    def _raw_block(self, index: int, header_width: int) -> int:
        """Collect the indented text block after a prompt header."""
        raw = self._indented(index, header_width, to_first=False)
        if not raw:
            return index
        span = Span(raw[0].line, raw[0].column, raw[-1].line, raw[-1].column + len(raw[-1].text))
        text = "\n".join(r.text for r in raw)
        self.tokens.append(Token(TokenKind.RAW, text, span, raw))
        return index + len(raw)

    def _indented(self, index: int, outer: int, *, to_first: bool) -> tuple[RawLine, ...]:
        """The lines from ``index`` indented deeper than ``outer``, common margin removed.

        Blank lines inside are kept, trailing ones not; tabs are S002 and count as
        two columns. ``to_first``: a line less indented than the first also ends it.
        """
        lines = self.source.lines
        body: list[tuple[int, str]] = []
        first: int | None = None
        for k in range(index, len(lines)):
            text = lines[k]
            if text.strip() == "":
                body.append((k + 1, ""))
                continue
            width, tab_col = _indent_width(text)
            first = width if first is None else first
            if width <= outer or (to_first and width < first):
                break
            if tab_col is not None:
                self.diags.add(
                    "S002", "tab used for indentation; indent with 2 spaces",
                    Span.point(k + 1, tab_col),
                )  # fmt: skip
            lead = len(text) - len(text.lstrip(" \t"))
            body.append((k + 1, text[:lead].replace("\t", "  ") + text[lead:]))
        while body and body[-1][1] == "":
            body.pop()
        if not body:
            return ()
        margin = min(_indent_width(t)[0] for _, t in body if t)
        return tuple(RawLine(t[margin:] if t else "", no, margin + 1) for no, t in body)


def tokenize(source: Source, diagnostics: Diagnostics) -> list[Token]:
    """Tokenise ``source``, adding any problems to ``diagnostics``."""
    return Lexer(source, diagnostics).tokenize()
