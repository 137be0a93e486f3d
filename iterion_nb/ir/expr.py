"""The expression language of ``compute`` nodes and quoted ``when`` conditions.

Our own small parser (never Python ``eval``)::

    expr    := or
    or      := and (("||" | "or") and)*
    and     := not (("&&" | "and") not)*
    not     := ("!" | "not") not | compare
    compare := sum (("==" | "!=" | "<" | "<=" | ">" | ">=") sum)?
    sum     := product (("+" | "-") product)*
    product := unary (("*" | "/" | "%") unary)*
    unary   := "-" unary | postfix
    postfix := primary ("." name | "[" expr "]")*
    primary := number | string | true | false | null | name | call
             | "(" expr ")" | "[" (expr ("," expr)*)? "]"
    call    := name "(" (expr ("," expr)*)? ")"

Strings use single or double quotes. A reference is a dotted path whose first
name is a namespace (``vars``, ``input``, ``outputs``, ``artifacts``,
``loop``, ``run``) or, for a bare name, a field of the current object.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

#: name -> (minimum arguments, maximum arguments or None for any number)
BUILTINS: dict[str, tuple[int, int | None]] = {
    "length": (1, 1),
    "concat": (1, None),
    "unique": (1, 1),
    "contains": (2, 2),
    "join": (1, 2),
    "if": (3, 3),
}


class ExprSyntaxError(Exception):
    """An expression that does not parse; ``offset`` is 0-based in its text."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.message = message
        self.offset = offset


@dataclass(frozen=True, slots=True)
class Literal:
    """A constant: number, string, bool or null."""

    value: object
    offset: int


@dataclass(frozen=True, slots=True)
class Ref:
    """A reference such as ``outputs.review.score`` (``path[0]`` is the head name)."""

    path: tuple[str, ...]
    offset: int
    length: int


@dataclass(frozen=True, slots=True)
class Index:
    """``target[index]``."""

    target: Expr
    index: Expr
    offset: int


@dataclass(frozen=True, slots=True)
class Attr:
    """``target.name`` on a value that is not a plain reference."""

    target: Expr
    name: str
    offset: int


@dataclass(frozen=True, slots=True)
class Unary:
    """``!x``, ``not x`` or ``-x``."""

    op: str
    operand: Expr
    offset: int


@dataclass(frozen=True, slots=True)
class Binary:
    """``left op right``."""

    op: str
    left: Expr
    right: Expr
    offset: int


@dataclass(frozen=True, slots=True)
class Call:
    """A built-in call such as ``length(xs)``."""

    name: str
    args: tuple[Expr, ...]
    offset: int


@dataclass(frozen=True, slots=True)
class ListExpr:
    """``[a, b]``."""

    items: tuple[Expr, ...]
    offset: int


Expr = Literal | Ref | Index | Attr | Unary | Binary | Call | ListExpr

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<num>[0-9]+(?:\.[0-9]+)?)
  | (?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>==|!=|<=|>=|&&|\|\||[<>!+\-*/%().,\[\]])
    """,
    re.VERBOSE,
)
_WORD_OPS = {"and": "&&", "or": "||", "not": "!"}
_CONSTANTS: dict[str, object] = {"true": True, "false": False, "null": None}
_ESCAPES = {"n": "\n", "t": "\t"}


@dataclass(frozen=True, slots=True)
class _Tok:
    kind: str  # num | str | name | op | end
    text: str
    offset: int


def _lex(text: str) -> list[_Tok]:
    toks: list[_Tok] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            ch = text[pos]
            if ch in "'\"":
                raise ExprSyntaxError("unterminated string in expression", pos)
            raise ExprSyntaxError(f"unexpected character {ch!r} in expression", pos)
        kind = m.lastgroup or ""
        if kind != "ws":
            value = m.group()
            if kind == "name" and value in _WORD_OPS:
                kind, value = "op", _WORD_OPS[value]
            toks.append(_Tok(kind, value, pos))
        pos = m.end()
    toks.append(_Tok("end", "", len(text)))
    return toks


def _unquote(text: str) -> str:
    body = text[1:-1]
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), body)


class _ExprParser:
    def __init__(self, text: str) -> None:
        self.toks = _lex(text)
        self.i = 0

    @property
    def tok(self) -> _Tok:
        return self.toks[self.i]

    def _take(self) -> _Tok:
        tok = self.toks[self.i]
        self.i = min(self.i + 1, len(self.toks) - 1)
        return tok

    def _found(self) -> str:
        return f"'{self.tok.text}'" if self.tok.kind != "end" else "the end of the expression"

    def _is_op(self, *ops: str) -> bool:
        return self.tok.kind == "op" and self.tok.text in ops

    def _expect_op(self, op: str) -> _Tok:
        if not self._is_op(op):
            raise ExprSyntaxError(f"expected '{op}', found {self._found()}", self.tok.offset)
        return self._take()

    def parse(self) -> Expr:
        if self.tok.kind == "end":
            raise ExprSyntaxError("empty expression", 0)
        expr = self._or()
        if self.tok.kind != "end":
            raise ExprSyntaxError(f"unexpected {self._found()}", self.tok.offset)
        return expr

    def _binary_level(self, ops: tuple[str, ...], sub: Callable[[], Expr]) -> Expr:
        left = sub()
        while self._is_op(*ops):
            op = self._take()
            left = Binary(op.text, left, sub(), op.offset)
        return left

    def _or(self) -> Expr:
        return self._binary_level(("||",), self._and)

    def _and(self) -> Expr:
        return self._binary_level(("&&",), self._not)

    def _not(self) -> Expr:
        if self._is_op("!"):
            op = self._take()
            return Unary("!", self._not(), op.offset)
        return self._compare()

    def _compare(self) -> Expr:
        left = self._sum()
        if self._is_op("==", "!=", "<", "<=", ">", ">="):
            op = self._take()
            left = Binary(op.text, left, self._sum(), op.offset)
            if self._is_op("==", "!=", "<", "<=", ">", ">="):
                raise ExprSyntaxError(
                    "comparisons do not chain; combine them with '&&'", self.tok.offset
                )
        return left

    def _sum(self) -> Expr:
        return self._binary_level(("+", "-"), self._product)

    def _product(self) -> Expr:
        return self._binary_level(("*", "/", "%"), self._unary)

    def _unary(self) -> Expr:
        if self._is_op("-"):
            op = self._take()
            return Unary("-", self._unary(), op.offset)
        return self._postfix()

    def _postfix(self) -> Expr:
        expr = self._primary()
        while True:
            if self._is_op("."):
                dot = self._take()
                if self.tok.kind != "name":
                    raise ExprSyntaxError("expected a name after '.'", self.tok.offset)
                name = self._take()
                if isinstance(expr, Ref):
                    end = name.offset + len(name.text)
                    expr = Ref((*expr.path, name.text), expr.offset, end - expr.offset)
                else:
                    expr = Attr(expr, name.text, dot.offset)
            elif self._is_op("["):
                open_ = self._take()
                index = self._or()
                self._expect_op("]")
                expr = Index(expr, index, open_.offset)
            else:
                return expr

    def _primary(self) -> Expr:
        tok = self.tok
        if tok.kind == "num":
            self._take()
            value: object = float(tok.text) if "." in tok.text else int(tok.text)
            return Literal(value, tok.offset)
        if tok.kind == "str":
            self._take()
            return Literal(_unquote(tok.text), tok.offset)
        if tok.kind == "name":
            self._take()
            if self._is_op("("):
                return self._call(tok)
            if tok.text in _CONSTANTS:
                return Literal(_CONSTANTS[tok.text], tok.offset)
            return Ref((tok.text,), tok.offset, len(tok.text))
        if self._is_op("("):
            self._take()
            inner = self._or()
            self._expect_op(")")
            return inner
        if self._is_op("["):
            open_ = self._take()
            items: list[Expr] = []
            while not self._is_op("]"):
                items.append(self._or())
                if not self._is_op(","):
                    break
                self._take()
            self._expect_op("]")
            return ListExpr(tuple(items), open_.offset)
        raise ExprSyntaxError(f"expected a value, found {self._found()}", tok.offset)

    def _call(self, name: _Tok) -> Call:
        self._expect_op("(")
        args: list[Expr] = []
        while not self._is_op(")"):
            args.append(self._or())
            if not self._is_op(","):
                break
            self._take()
        self._expect_op(")")
        arity = BUILTINS.get(name.text)
        if arity is None:
            known = ", ".join(BUILTINS)
            raise ExprSyntaxError(f"unknown function '{name.text}' (known: {known})", name.offset)
        low, high = arity
        if len(args) < low or (high is not None and len(args) > high):
            want = (
                str(low) if low == high else f"{low} or more" if high is None else f"{low}-{high}"
            )
            raise ExprSyntaxError(
                f"{name.text}() takes {want} argument(s), got {len(args)}", name.offset
            )
        return Call(name.text, tuple(args), name.offset)


def parse_expression(text: str) -> Expr:
    """Parse ``text``; raises :class:`ExprSyntaxError` with an offset."""
    return _ExprParser(text).parse()


def references(expr: Expr) -> list[Ref]:
    """Every reference inside ``expr``, in source order."""
    found: list[Ref] = []
    stack: list[Expr] = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, Ref):
            found.append(node)
        elif isinstance(node, Index):
            stack += [node.index, node.target]
        elif isinstance(node, Attr):
            stack.append(node.target)
        elif isinstance(node, Unary):
            stack.append(node.operand)
        elif isinstance(node, Binary):
            stack += [node.right, node.left]
        elif isinstance(node, Call):
            stack += reversed(node.args)
        elif isinstance(node, ListExpr):
            stack += reversed(node.items)
    return sorted(found, key=lambda r: r.offset)
