from __future__ import annotations

import contextlib
from typing import Any

import pytest

from iterion_nb.ir.evaluate import ExpressionError, evaluate
from iterion_nb.ir.expr import ExprSyntaxError, parse_expression, references

SCOPE: dict[str, Any] = {
    "vars": {"mode": "strict", "limit": 3},
    "outputs": {"review": {"score": 8, "issues": ["a", "b", "a"], "approved": True}},
    "loop": {"retry": {"iteration": 2, "max": 3}},
    "input": {},
    "artifacts": {},
    "run": {"id": "r1"},
}


def ev(text: str, bare: dict[str, Any] | None = None) -> Any:
    return evaluate(parse_expression(text), SCOPE, bare)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("7 % 4 - 1", 2),
        ("10 / 4", 2.5),
        ("-vars.limit + 1", -2),
        ("outputs.review.score >= 8 && vars.mode == 'strict'", True),
        ("outputs.review.score > 8 or not outputs.review.approved", False),
        ("!(1 == 1) || 2 != 2", False),
        ("'a' < 'b'", True),
        ("length(outputs.review.issues)", 3),
        ("unique(outputs.review.issues)", ["a", "b"]),
        ("concat(outputs.review.issues, ['c'])", ["a", "b", "a", "c"]),
        ("concat('x', \"y\")", "xy"),
        ("contains(outputs.review.issues, 'b')", True),
        ("contains('haystack', 'st')", True),
        ("join(unique(outputs.review.issues), ', ')", "a, b"),
        ("if(loop.retry.iteration < loop.retry.max, 'again', 'stop')", "again"),
        ("outputs.review.issues[1]", "b"),
        ("[1, 2][0] + 1", 2),
        ("null == null", True),
        ("1 == true", False),
        ("run.id", "r1"),
    ],
)
def test_evaluates(text: str, expected: object) -> None:
    assert ev(text) == expected


def test_bare_names_read_the_current_object() -> None:
    assert ev("approved && score > 5", {"approved": True, "score": 6}) is True


def test_if_is_lazy() -> None:
    # the branch not taken would fail (no such field) if it were evaluated
    assert ev("if(true, 1, outputs.missing.x)") == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("outputs.nope", "no field 'nope'"),
        ("1 + 'a'", "needs numbers"),
        ("1 / 0", "division by zero"),
        ("length(3)", "length()"),
        ("outputs.review.issues[9]", "out of range"),
        ("missing_name", "unknown reference"),
    ],
)
def test_runtime_errors_are_expression_errors(text: str, message: str) -> None:
    with pytest.raises(ExpressionError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ev(text)


@pytest.mark.parametrize(
    ("text", "offset", "message"),
    [
        ("", 0, "empty expression"),
        ("1 +", 3, "expected a value"),
        ("(1 + 2", 6, "expected ')'"),
        ("a == b == c", 7, "do not chain"),
        ("'open", 0, "unterminated string"),
        ("1 $ 2", 2, "unexpected character"),
        ("__import__('os')", 0, "unknown function '__import__'"),
        ("length(1, 2)", 0, "takes 1 argument"),
        ("a.", 2, "expected a name"),
    ],
)
def test_syntax_errors_carry_an_offset(text: str, offset: int, message: str) -> None:
    with pytest.raises(ExprSyntaxError) as info:
        parse_expression(text)
    assert info.value.offset == offset
    assert message in info.value.message


def test_references_are_listed_in_order_with_positions() -> None:
    refs = references(parse_expression("if(vars.a, outputs.n.f, score)"))
    assert [(r.path, r.offset, r.length) for r in refs] == [
        (("vars", "a"), 3, 6),
        (("outputs", "n", "f"), 11, 11),
        (("score",), 24, 5),
    ]


@pytest.mark.parametrize(
    ("text", "shape"),
    [
        ("!a == b", "(! (== a b))"),
        ("!a && b", "(&& (! a) b)"),
        ("a || b && c", "(|| a (&& b c))"),
        ("a && !b || !!c", "(|| (&& a (! b)) (! (! c)))"),
        ("-a * b - c % -d", "(- (* (- a) b) (% c (- d)))"),
        ("a - b - c", "(- (- a b) c)"),
        ("a == b + c * d", "(== a (+ b (* c d)))"),
        ("x.y[i].z", "(. ([] x.y i) z)"),
        ("f.g.h", "f.g.h"),
        ("length([a, b]) > 1 and not c", "(&& (> (length ([ a b)) 1) (! c))"),
    ],
)
def test_precedence_and_associativity(text: str, shape: str) -> None:
    def show(e: object) -> str:
        from iterion_nb.ir import expr as x

        if isinstance(e, x.Ref):
            return ".".join(e.path)
        if isinstance(e, x.Literal):
            return repr(e.value)
        if isinstance(e, x.Unary):
            return f"({e.op} {show(e.operand)})"
        if isinstance(e, x.Binary):
            return f"({e.op} {show(e.left)} {show(e.right)})"
        if isinstance(e, x.Index):
            return f"([] {show(e.target)} {show(e.index)})"
        if isinstance(e, x.Attr):
            return f"(. {show(e.target)} {e.name})"
        if isinstance(e, x.Call):
            return f"({e.name} {' '.join(show(a) for a in e.args)})"
        assert isinstance(e, x.ListExpr)
        return f"([ {' '.join(show(i) for i in e.items)})"

    assert show(parse_expression(text)) == shape


@pytest.mark.parametrize("text", ["a == !b", "-!a", "a + not b", "a < b < c"])
def test_misplaced_not_and_chained_comparisons_stay_errors(text: str) -> None:
    with pytest.raises(ExprSyntaxError) as info:
        parse_expression(text)
    assert info.value.code == "C040"


def nest(kind: str, depth: int) -> str:
    return {
        "parens": "(" * depth + "1" + ")" * depth,
        "not": "!" * depth + "true",
        "not words": "not " * depth + "true",
        "minus": "-" * depth + "1",
        "lists": "[" * depth + "]" * depth,
        "calls": "length(" * depth + "'x'" + ")" * depth,
        "index": "[1]" + "[0]" * depth,
        "index inside": "v" + "[v" * depth + "]" * depth,
        "chain": "1" + " + 1" * depth,
        "right chain": "1 + (" * depth + "1" + ")" * depth,
    }[kind]


KINDS = ["parens", "not", "not words", "minus", "lists", "calls", "index", "index inside",
         "chain", "right chain"]  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
def test_nesting_up_to_the_limit_parses_and_one_more_level_is_c300(kind: str) -> None:
    from iterion_nb.dsl.limits import MAX_NESTING

    parse_expression(nest(kind, MAX_NESTING - 1))
    with pytest.raises(ExprSyntaxError) as info:
        parse_expression(nest(kind, 3000))
    assert info.value.code == "C300"
    assert f"the limit is {MAX_NESTING} levels" in info.value.message


def run_with_stack_used(frames: int, fn: Any) -> Any:
    """Call ``fn`` with ``frames`` Python frames already on the stack."""
    if frames == 0:
        return fn()
    return run_with_stack_used(frames - 1, fn)


@pytest.mark.parametrize("kind", ["parens", "not", "minus", "calls", "index inside", "right chain"])
def test_the_deepest_expression_parses_and_evaluates_on_a_busy_stack(kind: str) -> None:
    # A kernel or a test runner is already some hundreds of frames deep when it
    # compiles: what the limit allows must leave room for that.
    import sys

    from iterion_nb.dsl.limits import MAX_NESTING

    text = nest(kind, MAX_NESTING - 1)
    busy = sys.getrecursionlimit() - 600
    expr = run_with_stack_used(busy, lambda: parse_expression(text))
    scope = {**SCOPE, "v": [0, 1]}
    # some of these shapes are nonsense to evaluate; the point is no RecursionError
    with contextlib.suppress(ExpressionError):
        run_with_stack_used(busy, lambda: evaluate(expr, scope, {"v": [0, 1]}))


def test_numbers_past_the_limit_are_c301_not_a_value_error() -> None:
    for text in ("9" * 5000, "9223372036854775808", "1" * 30 + ".5", "x + " + "9" * 20):
        with pytest.raises(ExprSyntaxError) as info:
            parse_expression(text)
        assert info.value.code == "C301", text
    assert ev("9223372036854775807 - 1") == 9223372036854775806


def test_a_long_dotted_reference_is_one_reference() -> None:
    text = "outputs" + ".b" * 100_000
    (ref,) = references(parse_expression(text))
    assert len(ref.path) == 100_001 and ref.offset == 0 and ref.length == len(text)


def test_results_a_run_cannot_hold_are_expression_errors_built_or_not() -> None:
    """Numbers stay 64-bit and finite; text and lists are refused before they are built."""
    big = "x" * (2**25)
    scope = {"input": {"s": big, "xs": [0] * (2**25), "n": 2**62}}

    def fails(text: str, message: str) -> None:
        with pytest.raises(ExpressionError, match=message):
            evaluate(parse_expression(text), scope)

    fails("input.n * 2", "'\\*' gives an integer beyond 64 bits")
    fails("-(input.n * -2)", "'-' gives an integer beyond 64 bits")
    fails(" * ".join(["1000000000000000000.5"] * 18), "'\\*' gives a number too large to hold")
    fails("input.s + input.s + 'y'", "'\\+' gives more than 67,108,864 characters or items")
    fails("input.xs + input.xs + [1]", "'\\+' gives more than 67,108,864")
    fails("concat(input.s, input.s, 'z')", "'concat\\(\\)' gives more than 67,108,864")
    fails("join([input.s, input.s, input.s], '')", "'join\\(\\)' gives more than 67,108,864")
    # up to the limits, the results are what they always were
    assert evaluate(parse_expression("input.s + input.s"), scope) == big * 2
    assert evaluate(parse_expression("input.n + (input.n - 1)"), scope) == 2**63 - 1
    fails("input.n + (input.n - 1) + input.n - input.n", "'\\+' gives an integer beyond 64 bits")
