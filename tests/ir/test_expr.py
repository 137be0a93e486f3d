from __future__ import annotations

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
