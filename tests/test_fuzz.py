"""Property-based: no input makes the compiler raise anything but CompileError."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import iterion_nb as it

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
