"""The language's limits: safe number parsing, nesting of brackets and blocks, rendering."""

from __future__ import annotations

import pytest

import iterion_nb as it
from iterion_nb.dsl import ast, parse_source
from iterion_nb.dsl.diagnostics import Diagnostics, render_all
from iterion_nb.dsl.limits import (
    MAX_NESTING,
    MAX_NUMBER,
    NumberTooLargeError,
    parse_decimal,
    parse_int,
    shorten,
)
from iterion_nb.dsl.source import Source


def codes(text: str) -> list[str]:
    diags = Diagnostics()
    parse_source(Source("t.iter", text), diags)
    return [d.code for d in diags]


@pytest.mark.parametrize(
    ("text", "value"),
    [("0", 0), ("-12", -12), (str(MAX_NUMBER), MAX_NUMBER), ("-" + str(MAX_NUMBER), -MAX_NUMBER),
     ("0" * 5000 + "7", 7)],
)  # fmt: skip
def test_parse_int_reads_numbers_within_the_limit(text: str, value: int) -> None:
    assert parse_int(text) == value


@pytest.mark.parametrize(
    "text", [str(MAX_NUMBER + 1), "-" + str(MAX_NUMBER + 1), "9" * 5000, "1" + "0" * 1_000_000]
)
def test_parse_int_refuses_larger_numbers_without_converting_them(text: str) -> None:
    # 5,000 digits would be a ValueError from int() itself; a million, seconds of work
    with pytest.raises(NumberTooLargeError) as info:
        parse_int(text)
    assert f"{MAX_NUMBER:,}" in str(info.value)
    assert len(str(info.value)) < 200


@pytest.mark.parametrize("text", ["", "1.5", "1e3", "inf", "nan", "١٢", " 1", "1_000", "--1"])
def test_parse_int_refuses_what_is_not_a_whole_number(text: str) -> None:
    with pytest.raises(ValueError, match="not a whole number") as info:
        parse_int(text)
    assert not isinstance(info.value, NumberTooLargeError)


def test_parse_decimal_floats_and_exponents() -> None:
    assert parse_decimal("2.5") == 2.5
    assert parse_decimal("3") == 3 and isinstance(parse_decimal("3"), int)
    assert parse_decimal("1e3", exponent=True) == 1000.0
    with pytest.raises(ValueError, match="not a number"):
        parse_decimal("1e3")
    for text in ("1e400", "9" * 400 + ".5", "1e19"):
        with pytest.raises(NumberTooLargeError):
            parse_decimal(text, exponent=True)
    for text in ("inf", "nan", "Infinity", "1e", ".5"):
        with pytest.raises(ValueError, match="not a number"):
            parse_decimal(text, exponent=True)


def test_shorten_says_how_long_the_text_was() -> None:
    assert shorten("short") == "short"
    assert shorten("x" * 5000) == "x" * 24 + "… (5,000 characters)"


def nested_default(depth: int) -> str:
    return f"vars:\n  v: json = {'[' * depth}{']' * depth}\n"


def test_brackets_nest_up_to_the_limit() -> None:
    assert codes(nested_default(MAX_NESTING)) == []
    assert codes(nested_default(MAX_NESTING + 1)) == ["C300"]


def test_maps_count_as_brackets() -> None:
    text = "vars:\n  v: json = " + "{a: " * (MAX_NESTING + 1) + "1" + "}" * (MAX_NESTING + 1) + "\n"
    assert codes(text) == ["C300"]


def test_two_thousand_levels_are_one_diagnostic_not_a_recursion_error() -> None:
    diags = Diagnostics()
    module = parse_source(Source("t.iter", nested_default(2000) + "  w: int = 3\n"), diags)
    ((diag,),) = [[d for d in diags]]
    assert (diag.code, diag.line, diag.column) == ("C300", 2, 13 + MAX_NESTING)
    assert f"the limit is {MAX_NESTING}" in diag.message and "65 levels" in diag.message
    # the variable stays declared (without its default) and parsing goes on
    (block,) = module.declarations
    assert isinstance(block, ast.VarsDecl)
    assert [(v.name, v.default is None) for v in block.vars] == [("v", True), ("w", False)]


def test_the_depth_is_restored_after_an_error() -> None:
    # a statement aborted deep inside brackets must not leave levels behind
    text = nested_default(MAX_NESTING + 1) + nested_default(MAX_NESTING).replace("vars:\n", "")
    assert codes(text) == ["C300"]
    broken = "vars:\n  a: json = [[[[ , ]]]]\n" + nested_default(MAX_NESTING).replace("vars:\n", "")
    assert codes(broken) == ["S001"]


def blocks(depth: int) -> str:
    lines = ["workflow w:", "  entry: a", "  budget:"]
    lines += ["  " * (i + 2) + f"level{i}:" for i in range(depth - 1)]
    lines.append("  " * (depth + 1) + "max_tokens: 3")
    return "\n".join(lines) + "\n"


def test_indented_blocks_count_too() -> None:
    assert codes(blocks(MAX_NESTING)) == []
    assert codes(blocks(MAX_NESTING + 1)) == ["C300"]
    assert codes(blocks(3000)) == ["C300"]


def test_a_diagnostic_on_a_very_long_line_renders_a_window_around_it() -> None:
    expr = "1 + " * 50_000 + "(" * (MAX_NESTING + 1) + "1" + ")" * (MAX_NESTING + 1)
    text = f'compute c:\n  expr:\n    x: "{expr}"\n\nworkflow w:\n  entry: c\n  c -> done\n'
    result = it.analyze(text, "long.iter")
    (diag,) = result.diagnostics
    rendered = render_all(result.diagnostics, result.source)
    assert len(rendered) < 1000
    _, shown, caret = rendered.splitlines()
    assert shown[caret.index("^")] == "("  # the caret is under the 65th parenthesis
    assert diag.column == len('    x: "') + 1 + len("1 + ") * 50_000 + MAX_NESTING
