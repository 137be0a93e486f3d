"""Property-based: no input makes the compiler raise anything but CompileError."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import iterion_nb as it
from iterion_nb.dsl.limits import MAX_DURATION_SECONDS, MAX_NESTING, MAX_NUMBER

ROOT = Path(__file__).resolve().parent
VALID = sorted(ROOT.glob("fixtures/diagnostics/*_ok.iter")) + sorted(
    (ROOT.parent / "examples").glob("*.iter")
)
VALID_TEXTS = [p.read_text() for p in VALID]

# Pieces of the language, so that mutations produce near-valid programs and
# reach deep into the parser and checker, not only the lexer.
TOKENS = [
    "->", ":", "{{", "}}", "${", "}", "{", "[", "]", "(", ")", ",", "\"", "'", "\n", "  ",
    "\t", "##", "when", "not", "as", "with", "loop", "retry(0)", "x(3)", "agent", "router",
    "workflow", "entry:", "done", "fail", "await:", "wait_all", "interaction: async",
    "timeout:", "\"30m\"", "from:", "outputs.", ".history", "vars.", "input.", "mode: llm",
    "expr:", "\"1 +\"", "= ", "string[]", "-1", "0", "\x00", "é", "\r\n",
]  # fmt: skip

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def check(text: str | bytes) -> None:
    result = it.analyze(text, "fuzz.iter")
    assert (result.workflow is None) == any(d.severity.value == "error" for d in result.diagnostics)
    for d in result.diagnostics:
        assert d.line >= 1 and d.column >= 1
    if result.workflow is not None:
        assert it.compile(text, "fuzz.iter").source_hash == result.workflow.source_hash
        return
    with pytest.raises(it.CompileError) as info:
        it.compile(text, "fuzz.iter")
    assert info.value.diagnostics == result.diagnostics
    assert "fuzz.iter:" in str(info.value)  # rendering never fails either


@SETTINGS
@given(st.text(max_size=400))
def test_arbitrary_text(text: str) -> None:
    check(text)


@SETTINGS
@given(st.binary(max_size=300))
def test_arbitrary_bytes(data: bytes) -> None:
    check(data)


@st.composite
def mutated(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(VALID_TEXTS))
    for _ in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(0, len(text)))
        action = draw(st.sampled_from(["insert", "delete", "replace", "duplicate"]))
        piece = draw(st.sampled_from(TOKENS) | st.text(max_size=3))
        if action == "insert":
            text = text[:pos] + piece + text[pos:]
        elif action == "delete":
            text = text[:pos] + text[pos + draw(st.integers(1, 20)) :]
        elif action == "replace":
            text = text[:pos] + piece + text[pos + len(piece) :]
        else:
            end = draw(st.integers(pos, min(len(text), pos + 80)))
            text = text[:end] + text[pos:end] + text[end:]
    return text


@SETTINGS
@given(mutated())
def test_mutations_of_valid_sources(text: str) -> None:
    check(text)


# -- generated hostile input: deep nesting, huge numbers, long text ----------
LIMIT_SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
NESTINGS = {
    # name: (opening, core, closing) repeated ``depth`` times around the core
    "parens": ("(", "1", ")"),
    "not": ("!", "true", ""),
    "not words": ("not ", "true", ""),
    "minus": ("-", "1", ""),
    "list": ("[", "1", "]"),
    "calls": ("length(", "'x'", ")"),
    "chain": ("", "1", " + 1"),
}
EXPR_PLACES = {
    "compute": 'compute a:\n  expr:\n    x: "{}"\n\nworkflow w:\n  entry: a\n  a -> done\n',
    "when": (
        'agent a:\n  model: "scripted"\n\nworkflow w:\n  entry: a\n'
        '  a -> done when "{}"\n  a -> done\n'
    ),
}


@LIMIT_SETTINGS
@given(
    kind=st.sampled_from(sorted(NESTINGS)),
    place=st.sampled_from(sorted(EXPR_PLACES)),
    depth=st.integers(0, 400) | st.sampled_from([MAX_NESTING - 1, MAX_NESTING, MAX_NESTING + 1]),
)
def test_deeply_nested_expressions(kind: str, place: str, depth: int) -> None:
    opening, core, closing = NESTINGS[kind]
    text = EXPR_PLACES[place].format(opening * depth + core + closing * depth)
    check(text)
    found = {d.code for d in it.analyze(text).diagnostics}
    assert ("C300" in found) == (depth > MAX_NESTING)


@LIMIT_SETTINGS
@given(
    brackets=st.lists(st.sampled_from(["[", "{k: "]), min_size=0, max_size=300),
    extra=st.sampled_from(["", "1", '"s"', ", 2", "]"]),
)
def test_deeply_nested_defaults(brackets: list[str], extra: str) -> None:
    closing = "".join("]" if b == "[" else "}" for b in reversed(brackets))
    text = (
        f"vars:\n  v: json = {''.join(brackets)}{extra}{closing}\n\n"
        'agent a:\n  model: "scripted"\n\nworkflow w:\n  entry: a\n  a -> done\n'
    )
    check(text)
    if len(brackets) > MAX_NESTING:
        assert "C300" in {d.code for d in it.analyze(text).diagnostics}


@LIMIT_SETTINGS
@given(depth=st.integers(1, 400))
def test_deeply_indented_blocks(depth: int) -> None:
    lines = ["agent a:", '  model: "scripted"', "", "workflow w:", "  entry: a", "  budget:"]
    lines += ["  " * (i + 2) + f"l{i}:" for i in range(depth - 1)]
    lines += ["  " * (depth + 1) + "max_tokens: 3", "  a -> done"]
    text = "\n".join(lines) + "\n"
    check(text)
    assert ("C300" in {d.code for d in it.analyze(text).diagnostics}) == (depth > MAX_NESTING)


NUMBER_PLACES = {
    "expression": ('compute a:\n  expr:\n    x: "{}"\n', "C301"),
    "max_tokens": ('agent a:\n  model: "scripted"\n  max_tokens: {}\n', "C301"),
    "tool_max_steps": ('agent a:\n  model: "scripted"\n  tool_max_steps: {}\n', "C301"),
    "min_answers": ("human a:\n  min_answers: {}\n", "C301"),
    "int default": ('vars:\n  v: int = {}\n\nagent a:\n  model: "scripted"\n', "C301"),
    "json default": ('vars:\n  v: json = [{}]\n\nagent a:\n  model: "scripted"\n', "C301"),
    "timeout": ('tool a:\n  command: "echo"\n  timeout: {}\n', "C302"),
    "timeout in days": ('tool a:\n  command: "echo"\n  timeout: "{}d"\n', "C302"),
}
BUDGET_PLACES = ["max_tokens", "max_parallel_branches", "max_iterations", "max_cost_usd"]


@LIMIT_SETTINGS
@given(
    place=st.sampled_from(sorted(NUMBER_PLACES) + [f"budget {p}" for p in BUDGET_PLACES]),
    digits=st.integers(1, 6000) | st.integers(17, 22),
    lead=st.integers(1, 9),
)
def test_numbers_of_any_size(place: str, digits: int, lead: int) -> None:
    number = str(lead) + "0" * (digits - 1)
    if place.startswith("budget "):
        template = 'agent a:\n  model: "scripted"\n', "C301"
        budget = f"  budget:\n    {place.split()[1]}: {number}\n"
    else:
        template, budget = NUMBER_PLACES[place], ""
    body, code = template
    text = body.format(number) + f"\nworkflow w:\n  entry: a\n{budget}  a -> done\n"
    check(text)
    found = {d.code for d in it.analyze(text).diagnostics}
    value = int(number) if digits < 25 else MAX_NUMBER + 1
    days = 86400 if "days" in place else 1
    too_large = value * days > MAX_DURATION_SECONDS if code == "C302" else value > MAX_NUMBER
    assert (code in found) == too_large


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shape=st.sampled_from(["reference", "template", "prompt", "tools", "string"]),
    size=st.integers(1, 60_000),
)
def test_long_inputs(shape: str, size: int) -> None:
    text = {
        "reference": 'compute a:\n  expr:\n    x: "vars.v' + ".b" * size + '"\n',
        "template": 'agent a:\n  model: "scripted"\n  user: "{{vars.v' + ".b" * size + '}}"\n',
        "prompt": "prompt p:\n"
        + "  words {{vars.v}} ${HOME} more\n" * (size // 20 + 1)
        + '\nagent a:\n  model: "scripted"\n  user: p\n',
        "tools": 'agent a:\n  model: "scripted"\n  tools: [' + "t, " * size + "t]\n",
        "string": 'agent a:\n  model: "' + "m" * size + '"\n',
    }[shape]
    text = "vars:\n  v: json\n\n" + text + "\nworkflow w:\n  entry: a\n  a -> done\n"
    check(text)
