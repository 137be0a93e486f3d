"""Parser: tokens to the typed syntax tree, with error recovery.

Recursive descent over the lexer's tokens. A syntax error is recorded and the
parser skips the offending statement (its line and any block indented under
it), so one pass reports every independent problem. Brackets and indented
blocks nest at most :data:`~iterion_nb.dsl.limits.MAX_NESTING` levels (C300),
so that no input can exhaust Python's recursion limit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TypeVar, cast

from iterion_nb.dsl import ast
from iterion_nb.dsl.diagnostics import Diagnostics, closest
from iterion_nb.dsl.limits import MAX_NESTING, too_deep_message
from iterion_nb.dsl.source import Source, Span
from iterion_nb.dsl.tokens import Token, TokenKind

T = TypeVar("T")

_DECL_KEYWORDS = (
    "vars", "presets", "attachments", "prompt", "schema", "workflow", *ast.NODE_KEYWORDS,
)  # fmt: skip
#: The ``dsl: N`` versions this parser reads: upstream iterion's 1 and 2 mean the same here.
SUPPORTED_DSL = ("1", "2")
#: The words that open an edge's clauses (``else`` takes the place of a ``when``).
_EDGE_CLAUSES = ("when", "else", "as", "with")


class _Abort(Exception):  # noqa: N818 - unwinds, is never shown
    """Unwinds the current statement after a syntax error was recorded."""


class _TooDeep(_Abort):
    """Unwinds a value nested past the limit after C300 was recorded."""


class _Full(Exception):  # noqa: N818 - unwinds, is never shown
    """Stops parsing: the diagnostics are at their cap, so nothing more would be shown."""


class Parser:
    """Builds an :class:`ast.Module` from tokens."""

    def __init__(self, tokens: list[Token], diagnostics: Diagnostics) -> None:
        self.toks = tokens
        self.pos = 0
        self.diags = diagnostics
        # Lines that already have a problem (from the lexer, or an earlier
        # syntax error) get no further syntax error: one cause, one report.
        self._error_lines: set[int] = {d.line for d in diagnostics}
        #: Brackets and indented blocks open around the current token.
        self.depth = 0
        #: The version a ``dsl: N`` header named.
        self._dsl: int | None = None

    # -- helpers ---------------------------------------------------------
    @property
    def tok(self) -> Token:
        """The current token."""
        return self.toks[self.pos]

    def _peek(self, offset: int = 1) -> Token:
        index = min(self.pos + offset, len(self.toks) - 1)
        return self.toks[index]

    def _advance(self) -> Token:
        token = self.toks[self.pos]
        if token.kind is not TokenKind.EOF:
            self.pos += 1
        return token

    def _at(self, kind: TokenKind, text: str | None = None) -> bool:
        return self.tok.kind is kind and (text is None or self.tok.text == text)

    def _error(self, message: str, span: Span) -> _Abort:
        """Record a syntax error unless this line already has one."""
        if span.line not in self._error_lines:
            self._error_lines.add(span.line)
            self.diags.add("S001", message, span)
        return _Abort()

    def _too_deep(self, token: Token) -> bool:
        """Whether one more level at ``token`` passes the limit (then C300 is recorded)."""
        if self.depth < MAX_NESTING:
            return False
        self._error_lines.add(token.span.line)
        message = too_deep_message("brackets and indented blocks", self.depth + 1)
        self.diags.add("C300", message, token.span)
        return True

    def _enter(self, token: Token) -> None:
        """One level deeper at ``token``; past the limit, C300 and abort the statement."""
        if self._too_deep(token):
            raise _TooDeep()
        self.depth += 1

    def _expect(self, kind: TokenKind, what: str | None = None) -> Token:
        if self.tok.kind is kind:
            return self._advance()
        wanted = what or kind.value
        raise self._error(f"expected {wanted}, found {self.tok.describe()}", self.tok.span)

    def _expect_ident(self, what: str) -> Token:
        return self._expect(TokenKind.IDENT, what)

    def _end_of_line(self) -> None:
        if self._at(TokenKind.NEWLINE):
            self._advance()
        elif not self._at(TokenKind.EOF) and not self._at(TokenKind.DEDENT):
            raise self._error(f"expected end of line, found {self.tok.describe()}", self.tok.span)

    def _skip_statement(self) -> None:
        """Skip the rest of the current line and any block indented under it."""
        while not self._at(TokenKind.EOF):
            kind = self._advance().kind
            if kind is TokenKind.NEWLINE:
                break
            if kind is TokenKind.DEDENT:
                self.pos -= 1
                return
        if self._at(TokenKind.RAW):
            self._advance()
        if self._at(TokenKind.INDENT):
            self._skip_block()

    def _skip_block(self) -> None:
        depth = 0
        while not self._at(TokenKind.EOF):
            kind = self._advance().kind
            if kind is TokenKind.INDENT:
                depth += 1
            elif kind is TokenKind.DEDENT:
                depth -= 1
                if depth == 0:
                    return

    def _block(self, parse_line: Callable[[], T], header: Token, nested: bool = False) -> list[T]:
        """Parse ``NEWLINE INDENT line* DEDENT`` calling ``parse_line`` per line.

        A ``nested`` block (under a property) is one level of nesting; past
        the limit it is skipped whole after C300.
        """
        items: list[T] = []
        if self._at(TokenKind.NEWLINE):
            self._advance()
        if not self._at(TokenKind.INDENT):
            raise self._error(f"'{header.text}:' needs an indented block below it", header.span)
        if not nested:
            self._block_lines(parse_line, items)
            return items
        if self._too_deep(header):
            self._skip_block()
            return items
        self.depth += 1
        try:
            self._block_lines(parse_line, items)
        finally:
            self.depth -= 1
        return items

    def _block_lines(self, parse_line: Callable[[], T], items: list[T]) -> None:
        """The lines of a block, from its ``INDENT`` to its ``DEDENT``."""
        self._advance()
        while not self._at(TokenKind.DEDENT) and not self._at(TokenKind.EOF):
            if self.diags.full:
                raise _Full()
            if self._at(TokenKind.INDENT):
                self._error("unexpected indentation", self.tok.span)
                self._skip_block()
                continue
            start = self.pos
            try:
                items.append(parse_line())
            except _Abort:
                if self.pos == start or self.toks[self.pos - 1].kind is not TokenKind.NEWLINE:
                    self._skip_statement()
        if self._at(TokenKind.DEDENT):
            self._advance()

    # -- module ----------------------------------------------------------
    def parse_module(self, source: Source) -> ast.Module:
        """Parse every declaration of the file (until the diagnostics are at their cap)."""
        decls: list[ast.Declaration] = []
        with contextlib.suppress(_Full):
            self._declarations(decls)
        last = max(len(source.lines), 1)
        span = Span(1, 1, last, len(source.line_text(last)) + 1)
        return ast.Module(tuple(decls), span, self._dsl)

    def _declarations(self, decls: list[ast.Declaration]) -> None:
        while not self._at(TokenKind.EOF):
            if self.diags.full:
                raise _Full()
            if self._at(TokenKind.NEWLINE) or self._at(TokenKind.DEDENT):
                self._advance()
                continue
            if self._at(TokenKind.INDENT):
                self._error("unexpected indentation at top level", self.tok.span)
                self._skip_block()
                continue
            start = self.pos
            try:
                if self._at(TokenKind.IDENT, "dsl") and self._peek().kind is TokenKind.COLON:
                    self._dsl_header()
                    continue
                decls.append(self._declaration())
            except _Abort:
                if self.pos == start or self.toks[self.pos - 1].kind is not TokenKind.NEWLINE:
                    self._skip_statement()

    def _dsl_header(self) -> None:
        """``dsl: 1`` or ``dsl: 2``: the language version (upstream iterion's header)."""
        head = self._advance()
        self._advance()  # the ':'
        version = self._expect(TokenKind.NUMBER, "the language version after 'dsl:' (1 or 2)")
        if self._dsl is not None:
            self.diags.add("C358", "'dsl:' is given twice", head.span)
        elif version.text not in SUPPORTED_DSL:
            self.diags.add(
                "S009",
                f"dsl {version.text} is not a version this build reads (it reads"
                f" {' and '.join(SUPPORTED_DSL)})",
                version.span,
            )
        else:
            self._dsl = int(version.text)
        if not (self._at(TokenKind.NEWLINE) or self._at(TokenKind.EOF)):
            raise self._error(
                f"expected the end of the line after 'dsl: {version.text}'", self.tok.span
            )

    def _declaration(self) -> ast.Declaration:
        head = self.tok
        if head.kind is not TokenKind.IDENT or head.text not in _DECL_KEYWORDS:
            head = self._misspelt_keyword(head)
        self._advance()
        if head.text == "vars":
            return self._vars_block(head)
        if head.text == "attachments":
            return self._attachments_block(head)
        if head.text == "presets":
            self._header_colon("'presets'")
            entries = self._block(self._property, head)
            return ast.PresetsDecl(tuple(entries), head.span.to(self._prev_span()))
        name = self._expect_ident(f"a name after '{head.text}'")
        if head.text == "prompt":
            self._expect(TokenKind.COLON, f"':' after '{head.text} {name.text}'")
            return self._prompt(head, name)
        self._header_colon(f"'{head.text} {name.text}'")
        if head.text == "schema":
            fields = self._block(self._field, name)
            return ast.SchemaDecl(
                name.text, name.span, tuple(fields), head.span.to(self._prev_span())
            )
        if head.text == "workflow":
            return self._workflow(head, name)
        props = self._block(self._property, name)
        kind = cast("ast.NodeKeyword", head.text)
        return ast.NodeDecl(
            kind, name.text, name.span, tuple(props), head.span.to(self._prev_span())
        )

    def _misspelt_keyword(self, head: Token) -> Token:
        """A declaration's keyword misspelt (``agnet poet:``): S001, then read as the meant one.

        The error names the keyword it is close to; the declaration is then
        parsed as if that keyword were written (as a header missing only its
        colon is), so the node the workflow names is not reported missing as
        well. Anything else is an S001 and the statement is skipped.
        """
        hint, meant = "", None
        if head.kind is TokenKind.IDENT and self._peek().kind is TokenKind.ARROW:
            hint = "; edges go inside the workflow block"
        elif head.kind is TokenKind.IDENT and head.text == "join":
            hint = "; declare 'await: wait_all' on the node that joins branches"
        elif head.kind is TokenKind.IDENT:
            meant = closest(head.text, _DECL_KEYWORDS)
            hint = f"; did you mean '{meant}'?" if meant else ""
        message = (
            f"expected a declaration ({', '.join(_DECL_KEYWORDS)}), found {head.describe()}{hint}"
        )
        # the shape of the meant declaration: 'vars:' (no name) or 'agent NAME'
        unnamed = meant in ("vars", "presets", "attachments")
        after = TokenKind.COLON if unnamed else TokenKind.IDENT
        if meant is None or self._peek().kind is not after:
            raise self._error(message, head.span)
        self._error(message, head.span)  # recorded; parsing goes on
        return head._replace(text=meant)

    def _header_colon(self, header: str) -> None:
        """The ':' ending a declaration's header; without it, an S001, and the block is read.

        A header missing only its colon, above an indented block, is reported
        once: its block is parsed as if the colon were there, so what is in it
        (the node the workflow's edges name) is not reported missing as well.
        """
        if self._at(TokenKind.COLON):
            self._advance()
            return
        found = f"expected ':' after {header}, found {self.tok.describe()}"
        if self._at(TokenKind.NEWLINE) and self._peek().kind is TokenKind.INDENT:
            self._error(found, self.tok.span)  # recorded; parsing goes on
            return
        raise self._error(found, self.tok.span)

    def _prev_span(self) -> Span:
        for index in range(self.pos - 1, -1, -1):
            token = self.toks[index]
            if token.kind not in (TokenKind.NEWLINE, TokenKind.INDENT, TokenKind.DEDENT):
                return token.span
        return self.tok.span

    def _prompt(self, head: Token, name: Token) -> ast.PromptDecl:
        self._end_of_line()
        if self._at(TokenKind.RAW):
            raw = self._advance()
            return ast.PromptDecl(name.text, name.span, raw.text, raw.lines, head.span.to(raw.span))
        return ast.PromptDecl(name.text, name.span, "", (), head.span.to(name.span))

    # -- vars and schemas ------------------------------------------------
    def _vars_block(self, head: Token) -> ast.VarsDecl:
        self._header_colon("'vars'")
        items = self._block(self._var, head)
        return ast.VarsDecl(tuple(items), head.span.to(self._prev_span()))

    def _attachments_block(self, head: Token) -> ast.AttachmentsDecl:
        self._header_colon("'attachments'")
        items = self._block(self._attachment, head)
        return ast.AttachmentsDecl(tuple(items), head.span.to(self._prev_span()))

    def _attachment(self) -> ast.AttachmentDecl:
        name = self._expect_ident("an attachment name")
        self._expect(TokenKind.COLON, f"':' after attachment '{name.text}'")
        kind = self._expect_ident("the attachment's kind (file or image)")
        props: list[ast.Property] = []
        if self._at(TokenKind.NEWLINE) and self._peek().kind is TokenKind.INDENT:
            props = self._block(self._property, name, nested=True)
        else:
            self._end_of_line()
        return ast.AttachmentDecl(
            name.text, name.span, kind.text, kind.span, tuple(props),
            name.span.to(self._prev_span()),
        )  # fmt: skip

    def _var(self) -> ast.VarDecl:
        name = self._expect_ident("a variable name")
        self._expect(TokenKind.COLON, f"':' after variable '{name.text}'")
        type_ref = self._type_ref()
        default: ast.Value | None = None
        if self._at(TokenKind.EQUALS):
            self._advance()
            try:
                default = self._value()
            except _TooDeep:
                # The variable stays declared (without its default), so that
                # its uses do not each report it as undeclared.
                while not self._at(TokenKind.EOF) and not self._at(TokenKind.DEDENT):
                    if self._advance().kind is TokenKind.NEWLINE:
                        break
                return ast.VarDecl(name.text, name.span, type_ref, None, name.span)
        end = self._prev_span()
        self._end_of_line()
        return ast.VarDecl(name.text, name.span, type_ref, default, name.span.to(end))

    def _type_ref(self) -> ast.TypeRef:
        name = self._expect_ident("a type (string, bool, int, float, json, string[])")
        if self._at(TokenKind.LBRACKET) and self._peek().kind is TokenKind.RBRACKET:
            self._advance()
            close = self._advance()
            return ast.TypeRef(name.text, True, name.span.to(close.span))
        return ast.TypeRef(name.text, False, name.span)

    def _field(self) -> ast.FieldDecl:
        name = self._expect_ident("a field name")
        self._expect(TokenKind.COLON, f"':' after field '{name.text}'")
        type_ref = self._type_ref()
        enum: list[ast.StringValue] = []
        if self._at(TokenKind.LBRACKET):
            self._advance()
            word = self._expect_ident("'enum'")
            if word.text != "enum":
                raise self._error(f"expected 'enum', found '{word.text}'", word.span)
            self._expect(TokenKind.COLON, "':' after 'enum'")
            while True:
                value = self._expect(TokenKind.STRING, "a quoted enum value")
                enum.append(ast.StringValue(value.text, value.span))
                if not self._at(TokenKind.COMMA):
                    break
                self._advance()
            self._expect(TokenKind.RBRACKET, "']' to close the enum")
        end = self._prev_span()
        self._end_of_line()
        return ast.FieldDecl(name.text, name.span, type_ref, tuple(enum), name.span.to(end))

    # -- properties and values -------------------------------------------
    def _property(self) -> ast.Property:
        # a quoted key too: a cursor's bands are written "0.0..0.33": "…"
        name = (
            self._advance() if self._at(TokenKind.STRING) else self._expect_ident("a property name")
        )
        if name.text == "with" and self._at(TokenKind.LBRACE):
            value: ast.Value = self._map()
            self._end_of_line()
            return ast.Property(name.text, name.span, value, name.span.to(value.span))
        self._expect(TokenKind.COLON, f"':' after '{name.text}'")
        if self._at(TokenKind.NEWLINE) and self._peek().kind is TokenKind.INDENT:
            entries = self._block(self._property, name, nested=True)
            span = name.span.to(self._prev_span())
            return ast.Property(name.text, name.span, ast.BlockValue(tuple(entries), span), span)
        if self._at(TokenKind.NEWLINE) or self._at(TokenKind.EOF):
            raise self._error(f"'{name.text}:' needs a value", self.tok.span)
        value = self._value()
        self._end_of_line()
        return ast.Property(name.text, name.span, value, name.span.to(value.span))

    def _value(self) -> ast.Value:
        token = self.tok
        if token.kind is TokenKind.STRING:
            self._advance()
            return ast.StringValue(token.text, token.span, token.lines)
        if token.kind is TokenKind.NUMBER:
            self._advance()
            return ast.NumberValue(token.text, token.span)
        if token.kind is TokenKind.IDENT:
            self._advance()
            if self._at(TokenKind.LPAREN):
                return self._call(token)
            return ast.IdentValue(token.text, token.span)
        if token.kind is TokenKind.DOTTED:  # only values may be dotted names
            self._advance()
            return ast.IdentValue(token.text, token.span)
        if token.kind is TokenKind.LBRACKET:
            return self._list()
        if token.kind is TokenKind.LBRACE:
            return self._map()
        raise self._error(f"expected a value, found {token.describe()}", token.span)

    def _call(self, name: Token) -> ast.CallValue:
        open_ = self._advance()
        self._enter(open_)
        try:
            args: list[ast.Value] = []
            while not self._at(TokenKind.RPAREN):
                args.append(self._value())
                if not self._at(TokenKind.COMMA):
                    break
                self._advance()
            close = self._expect(TokenKind.RPAREN, f"',' or ')' to close '{name.text}('")
        finally:
            self.depth -= 1
        return ast.CallValue(name.text, name.span, tuple(args), name.span.to(close.span))

    def _list(self) -> ast.ListValue:
        open_ = self._advance()
        self._enter(open_)
        try:
            items: list[ast.Value] = []
            while not self._at(TokenKind.RBRACKET):
                items.append(self._value())
                if not self._at(TokenKind.COMMA):
                    break
                self._advance()
            close = self._expect(TokenKind.RBRACKET, "',' or ']'")
        finally:
            self.depth -= 1
        return ast.ListValue(tuple(items), open_.span.to(close.span))

    def _map(self) -> ast.MapValue:
        open_ = self._expect(TokenKind.LBRACE, "'{'")
        self._enter(open_)
        try:
            return self._map_entries(open_)
        finally:
            self.depth -= 1

    def _map_entries(self, open_: Token) -> ast.MapValue:
        entries: list[ast.MapEntry] = []
        while not self._at(TokenKind.RBRACE):
            key = self.tok
            if key.kind not in (TokenKind.IDENT, TokenKind.STRING):
                raise self._error(f"expected a key, found {key.describe()}", key.span)
            self._advance()
            self._expect(TokenKind.COLON, f"':' after key '{key.text}'")
            value = self._value()
            entries.append(ast.MapEntry(key.text, key.span, value, key.span.to(value.span)))
            if not self._at(TokenKind.COMMA):
                break
            self._advance()
        close = self._expect(TokenKind.RBRACE, "',' or '}'")
        return ast.MapValue(tuple(entries), open_.span.to(close.span))

    # -- workflow ----------------------------------------------------------
    def _workflow(self, head: Token, name: Token) -> ast.WorkflowDecl:
        props: list[ast.Property] = []
        var_blocks: list[ast.VarsDecl] = []
        attachments: list[ast.AttachmentsDecl] = []
        edges: list[ast.EdgeDecl] = []

        def line() -> None:
            if self._at(TokenKind.IDENT) and self._peek().kind is TokenKind.ARROW:
                edges.append(self._edge())
            elif self._at(TokenKind.IDENT, "vars") and self._peek().kind is TokenKind.COLON:
                var_blocks.append(self._vars_block(self._advance()))
            elif self._at(TokenKind.IDENT, "attachments") and self._peek().kind is TokenKind.COLON:
                attachments.append(self._attachments_block(self._advance()))
            else:
                props.append(self._property())

        self._block(line, name)
        return ast.WorkflowDecl(
            name.text,
            name.span,
            tuple(props),
            tuple(var_blocks),
            tuple(edges),
            head.span.to(self._prev_span()),
            tuple(attachments),
        )

    def _edge(self) -> ast.EdgeDecl:
        """``SRC -> DST`` then ``when``/``else``, ``as`` and ``with``, each once, in any order."""
        src = self._advance()
        self._expect(TokenKind.ARROW)
        dst = self._expect_ident("a node name after '->'")
        clauses: dict[str, object] = {}
        while self.tok.kind is TokenKind.IDENT and self.tok.text in _EDGE_CLAUSES:
            word = self.tok
            slot = "when" if word.text == "else" else word.text
            clause = self._edge_clause(self._advance())
            if slot not in clauses:
                clauses[slot] = clause
            elif (word.text == "else") != (clauses[slot] is True):
                # recorded; parsing goes on, so the edge is kept with its first clause
                self._error("an edge has 'when' or 'else', not both", word.span)
            else:
                self._error(
                    f"duplicate '{word.text}' clause on edge: an edge has at most one",
                    word.span,
                )
        end = self._prev_span()
        if not self._at(TokenKind.NEWLINE) and not self._at(TokenKind.EOF):
            raise self._error(
                f"expected 'when', 'else', 'as', 'with' or end of line, found"
                f" {self.tok.describe()}",
                self.tok.span,
            )
        self._end_of_line()
        when = clauses.get("when")
        return ast.EdgeDecl(
            src.text, src.span, dst.text, dst.span,
            None if isinstance(when, bool) else cast("ast.WhenField | ast.WhenExpr | None", when),
            cast("ast.LoopDecl | None", clauses.get("as")),
            cast("ast.MapValue | None", clauses.get("with")),
            src.span.to(end), when is True,
        )  # fmt: skip

    def _edge_clause(self, kw: Token) -> object:
        """The clause after ``kw``: a condition, True for ``else``, a loop, or a mapping."""
        if kw.text == "when":
            return self._when(kw)
        if kw.text == "else":
            return True
        if kw.text == "as":
            return self._loop(kw)
        return self._map()

    def _loop(self, as_: Token) -> ast.LoopDecl:
        """``as NAME(BOUND)`` (``as_`` read)."""
        loop_name = self._expect_ident("a loop name after 'as'")
        self._expect(TokenKind.LPAREN, f"'(' and a bound after loop '{loop_name.text}'")
        bound: ast.NumberValue | ast.StringValue
        if self._at(TokenKind.STRING):  # upstream's "{{outputs.x.cap}}": read at run time
            text = self._advance()
            bound = ast.StringValue(text.text, text.span)
        else:
            number = self._expect(TokenKind.NUMBER, "the loop's iteration bound")
            bound = ast.NumberValue(number.text, number.span)
        close = self._expect(TokenKind.RPAREN, "')'")
        return ast.LoopDecl(loop_name.text, loop_name.span, bound, as_.span.to(close.span))

    def _when(self, kw: Token) -> ast.WhenField | ast.WhenExpr:
        if self._at(TokenKind.STRING):
            text = self._advance()
            inner = Span.point(text.span.line, text.span.column + 1, len(text.text))
            return ast.WhenExpr(text.text, inner, kw.span.to(text.span))
        negated = False
        if self._at(TokenKind.IDENT, "not") and self._peek().kind is TokenKind.IDENT:
            self._advance()
            negated = True
        field = self._expect_ident("a field name or a quoted expression after 'when'")
        return ast.WhenField(field.text, negated, kw.span.to(field.span))


def parse(tokens: list[Token], source: Source, diagnostics: Diagnostics) -> ast.Module:
    """Parse ``tokens`` of ``source`` into a module, recording syntax errors."""
    return Parser(tokens, diagnostics).parse_module(source)
