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

Nesting (parentheses, brackets, calls, unary operators) and the depth of the
tree (a chain ``a + b + …`` is one level per operator) are each limited to
:data:`~iterion_nb.dsl.limits.MAX_NESTING`, numbers to
:data:`~iterion_nb.dsl.limits.MAX_NUMBER`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from iterion_nb.dsl.limits import (
    MAX_NESTING,
    NumberTooLargeError,
    parse_decimal,
    too_deep_message,
)

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
    """An expression that does not parse; ``offset`` is 0-based in its text.

    ``code`` is the diagnostic it becomes: C040, or C300/C301 for a limit.
    """

    def __init__(self, message: str, offset: int, code: str = "C040") -> None:
        super().__init__(message)
        self.message = message
        self.offset = offset
        self.code = code


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
  | (?P<str>'[^'\\]*+(?:\\.[^'\\]*+)*+'|"[^"\\]*+(?:\\.[^"\\]*+)*+")
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


def _lex(text: str) -> Iterator[_Tok]:
    """The tokens of ``text``, made as the parser asks for them.

    Lazily, so that a parse that stops early (too deep, a syntax error) does
    not first lex megabytes it will never look at.
    """
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
            yield _Tok(kind, value, pos)
        pos = m.end()
    yield _Tok("end", "", len(text))


def _unquote(text: str) -> str:
    body = text[1:-1]
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), body)


#: Binding power of each binary operator; higher binds tighter. ``!`` sits
#: between ``&&`` and the comparisons, ``-`` (unary) above ``*``.
_BINDING = {
    "||": 1, "&&": 2,
    "==": 4, "!=": 4, "<": 4, "<=": 4, ">": 4, ">=": 4,
    "+": 5, "-": 5, "*": 6, "/": 6, "%": 6,
}  # fmt: skip
_NOT_BINDING = 3
_COMPARE_BINDING = 4


class _ExprParser:
    """Precedence climbing, so one level of nesting costs a few Python frames at most.

    ``depth`` counts the nesting being parsed (parentheses, brackets, call
    arguments, unary operators) against :data:`MAX_NESTING`, so that no input
    can exhaust Python's recursion limit.
    """

    def __init__(self, text: str) -> None:
        self._tokens = _lex(text)
        self.tok = next(self._tokens)
        self.depth = 0

    def _take(self) -> _Tok:
        tok = self.tok
        if tok.kind != "end":
            self.tok = next(self._tokens)
        return tok

    def _found(self) -> str:
        return f"'{self.tok.text}'" if self.tok.kind != "end" else "the end of the expression"

    def _is_op(self, *ops: str) -> bool:
        return self.tok.kind == "op" and self.tok.text in ops

    def _expect_op(self, op: str) -> _Tok:
        if not self._is_op(op):
            raise ExprSyntaxError(f"expected '{op}', found {self._found()}", self.tok.offset)
        return self._take()

    def _enter(self, tok: _Tok) -> None:
        if self.depth >= MAX_NESTING:
            message = too_deep_message("parentheses, brackets and operators", self.depth + 1)
            raise ExprSyntaxError(message, tok.offset, "C300")
        self.depth += 1

    def parse(self) -> Expr:
        if self.tok.kind == "end":
            raise ExprSyntaxError("empty expression", 0)
        expr = self._expr(0)
        if self.tok.kind != "end":
            raise ExprSyntaxError(f"unexpected {self._found()}", self.tok.offset)
        _check_depth(expr)
        return expr

    def _expr(self, min_binding: int) -> Expr:
        """Operators binding at least ``min_binding``, around prefix operands."""
        if min_binding <= _NOT_BINDING and self._is_op("!"):
            op = self._take()
            self._enter(op)
            left: Expr = Unary("!", self._expr(_NOT_BINDING), op.offset)
            self.depth -= 1
        else:
            left = self._unary()
        compared = False
        while self.tok.kind == "op" and _BINDING.get(self.tok.text, 0) >= max(min_binding, 1):
            binding = _BINDING[self.tok.text]
            if binding == _COMPARE_BINDING and compared:
                raise ExprSyntaxError(
                    "comparisons do not chain; combine them with '&&'", self.tok.offset
                )
            compared = binding == _COMPARE_BINDING
            op = self._take()
            left = Binary(op.text, left, self._expr(binding + 1), op.offset)
        return left

    def _unary(self) -> Expr:
        if self._is_op("-"):
            op = self._take()
            self._enter(op)
            operand = self._unary()
            self.depth -= 1
            return Unary("-", operand, op.offset)
        return self._postfix()

    def _postfix(self) -> Expr:
        expr = self._primary()
        # A dotted reference collects its names in a list: rebuilding the
        # tuple at every '.' made a long a.b.b.b... quadratic.
        path: list[str] | None = list(expr.path) if isinstance(expr, Ref) else None
        end = 0
        while True:
            if self._is_op("."):
                dot = self._take()
                if self.tok.kind != "name":
                    raise ExprSyntaxError("expected a name after '.'", self.tok.offset)
                name = self._take()
                if path is not None:
                    path.append(name.text)
                    end = name.offset + len(name.text)
                else:
                    expr = Attr(expr, name.text, dot.offset)
            elif self._is_op("["):
                expr = self._finish_ref(expr, path, end)
                path = None
                open_ = self._take()
                self._enter(open_)
                index = self._expr(0)
                self._expect_op("]")
                self.depth -= 1
                expr = Index(expr, index, open_.offset)
            else:
                return self._finish_ref(expr, path, end)

    @staticmethod
    def _finish_ref(expr: Expr, path: list[str] | None, end: int) -> Expr:
        if path is None or not isinstance(expr, Ref) or len(path) == len(expr.path):
            return expr
        return Ref(tuple(path), expr.offset, end - expr.offset)

    def _primary(self) -> Expr:
        tok = self.tok
        if tok.kind == "num":
            self._take()
            try:
                value: object = parse_decimal(tok.text)
            except NumberTooLargeError as err:
                raise ExprSyntaxError(str(err), tok.offset, "C301") from None
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
            self._enter(self._take())
            inner = self._expr(0)
            self._expect_op(")")
            self.depth -= 1
            return inner
        if self._is_op("["):
            open_ = self._take()
            self._enter(open_)
            items = self._items("]")
            self.depth -= 1
            return ListExpr(tuple(items), open_.offset)
        raise ExprSyntaxError(f"expected a value, found {self._found()}", tok.offset)

    def _items(self, close: str) -> list[Expr]:
        """Comma-separated expressions up to and including ``close``."""
        items: list[Expr] = []
        while not self._is_op(close):
            items.append(self._expr(0))
            if not self._is_op(","):
                break
            self._take()
        self._expect_op(close)
        return items

    def _call(self, name: _Tok) -> Call:
        self._enter(self._expect_op("("))
        args = self._items(")")
        self.depth -= 1
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


def _children(node: Expr) -> tuple[Expr, ...]:
    if isinstance(node, Index):
        return (node.target, node.index)
    if isinstance(node, Attr):
        return (node.target,)
    if isinstance(node, Unary):
        return (node.operand,)
    if isinstance(node, Binary):
        return (node.left, node.right)
    if isinstance(node, Call):
        return node.args
    if isinstance(node, ListExpr):
        return node.items
    return ()


def _check_depth(expr: Expr) -> None:
    """Refuse a tree deeper than :data:`MAX_NESTING` (a long ``a + b + …`` chain).

    Parsing such a chain needs no recursion, but evaluating, comparing or
    printing the tree does, one level per operator.
    """
    deepest, first = 0, None
    stack: list[tuple[Expr, int]] = [(expr, 0)]
    while stack:
        node, level = stack.pop()
        if level > MAX_NESTING and (first is None or node.offset < first.offset):
            first = node
        deepest = max(deepest, level)
        stack += [(child, level + 1) for child in _children(node)]
    if first is not None:
        message = too_deep_message("operators, calls and brackets", deepest)
        raise ExprSyntaxError(message, first.offset, "C300")


def references(expr: Expr) -> list[Ref]:
    """Every reference inside ``expr``, in source order."""
    found: list[Ref] = []
    stack: list[Expr] = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, Ref):
            found.append(node)
        else:
            stack += _children(node)
    return sorted(found, key=lambda r: r.offset)
