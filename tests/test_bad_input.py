"""Bad input gets a diagnostic with a position, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import iterion_nb as it
from iterion_nb.dsl.diagnostics import render_all
from iterion_nb.dsl.loading import MAX_SOURCE_BYTES

CASES: dict[str, tuple[bytes, str, int, int]] = {
    # name: (content, code, line, column)
    "empty": (b"", "C006", 1, 1),
    "only comments": (b"## nothing here\n\n", "C006", 1, 1),
    "binary": (b"\x7fELF\x02\x01\x01\x00\x00garbage", "S006", 1, 8),
    "latin-1": ("workflow w:\n  entry: caf\xe9\n".encode("latin-1"), "S006", 2, 13),
    "tabs": (b'agent a:\n\tmodel: "x"\n\nworkflow w:\n  entry: a\n  a -> done\n', "S002", 2, 1),
    "unterminated string": (
        b'agent a:\n  model: "x\n\nworkflow w:\n  entry: a\n  a -> done\n',
        "S003",
        2,
        10,
    ),
    "unterminated template": (
        b"prompt p:\n  hi {{vars.x\n\nagent a:\n  user: p\n\n"
        b"workflow w:\n  entry: a\n  a -> done\n",
        "S004",
        2,
        6,
    ),
    "inconsistent dedent": (
        b'agent a:\n    model: "x"\n  tools: [t]\n\nworkflow w:\n  entry: a\n  a -> done\n',
        "S005",
        3,
        1,
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_a_positioned_diagnostic(name: str) -> None:
    data, code, line, column = CASES[name]
    result = it.analyze(data, "bad.iter")
    assert result.workflow is None
    assert (code, line, column) in [(d.code, d.line, d.column) for d in result.diagnostics]
    with pytest.raises(it.CompileError) as info:
        it.compile(data, "bad.iter")
    assert f"bad.iter:{line}:{column}: error[{code}]" in str(info.value)


def test_ten_megabyte_file_is_refused_quickly_with_a_position(tmp_path: Path) -> None:
    big = tmp_path / "big.iter"
    line = b'agent a:\n  model: "scripted"\n'
    big.write_bytes(line * (10 * 1024 * 1024 // len(line) + 1))
    assert big.stat().st_size > MAX_SOURCE_BYTES
    result = it.analyze(big.read_bytes(), str(big))
    ((code, ln, col),) = [(d.code, d.line, d.column) for d in result.diagnostics]
    assert (code, ln, col) == ("S007", 1, 1)


def test_huge_text_string_is_refused_too() -> None:
    text = "## x\n" * (MAX_SOURCE_BYTES // 5 + 10)
    assert [d.code for d in it.analyze(text).diagnostics] == ["S007"]


def test_nul_in_text_is_binary() -> None:
    assert [d.code for d in it.analyze("agent a:\x00\n").diagnostics] == ["S006"]


@pytest.mark.parametrize("name", ["empty", "binary", "tabs", "unterminated string"])
def test_cli_reports_without_traceback(name: str, tmp_path: Path) -> None:
    data, code, line, column = CASES[name]
    path = tmp_path / "bad.iter"
    path.write_bytes(data)
    proc = subprocess.run(
        [sys.executable, "-m", "iterion_nb.cli", "validate", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stdout + proc.stderr
    assert f"{path}:{line}:{column}: error[{code}]" in proc.stdout


BIG = "9" * 5000
TOOL = 'tool a:\n  command: "echo"\n  timeout: {}\n\nworkflow w:\n  entry: a\n  a -> done\n'
AGENT = 'agent a:\n  model: "scripted"\n  {}\n\nworkflow w:\n  entry: a\n  a -> done\n'
BUDGET = (
    'agent a:\n  model: "scripted"\n\nworkflow w:\n  entry: a\n  budget:\n    {}\n  a -> done\n'
)
WHEN = (
    'schema o:\n  ok: bool\n\nagent a:\n  model: "scripted"\n  output: o\n\n'
    'workflow w:\n  entry: a\n  a -> done when "{}"\n  a -> done\n'
)
EXPR = 'compute a:\n  expr:\n    x: "{}"\n\nworkflow w:\n  entry: a\n  a -> done\n'
VARS = 'vars:\n  v: {}\n\nagent a:\n  model: "scripted"\n\nworkflow w:\n  entry: a\n  a -> done\n'

#: Each input of issue 15 that raised a Python exception (or was silently
#: accepted as infinite), and the diagnostic it gets now.
CRASHERS: dict[str, tuple[str, str]] = {
    "75 nested parentheses": (EXPR.format("(" * 75 + "1" + ")" * 75), "C300"),
    "75 nested parentheses in when": (WHEN.format("(" * 75 + "ok" + ")" * 75), "C300"),
    "1,000 !": (WHEN.format("!" * 1000 + "ok"), "C300"),
    "1,000 not": (WHEN.format("not " * 1000 + "ok"), "C300"),
    "1,000 unary -": (EXPR.format("-" * 1000 + "1"), "C300"),
    "10,000 terms": (EXPR.format("1" + " + 1" * 10_000), "C300"),
    "2,000-deep JSON default": (VARS.format("json = " + "[" * 2000 + "]" * 2000), "C300"),
    "2,000-deep map default": (VARS.format("json = " + "{a: " * 2000 + "1" + "}" * 2000), "C300"),
    "5,000-digit expression": (EXPR.format(BIG), "C301"),
    "5,000-digit decimal": (EXPR.format(BIG + ".5"), "C301"),
    "5,000-digit loop bound": (
        WHEN.replace('"{}"', "ok").replace("a -> done\n", f"a -> a when not ok as l({BIG})\n"),
        "C301",
    ),
    "5,000-digit max_tokens": (AGENT.format(f"max_tokens: {BIG}"), "C301"),
    "5,000-digit tool_max_steps": (AGENT.format(f"tool_max_steps: {BIG}"), "C301"),
    "5,000-digit min_answers": (
        f"human a:\n  min_answers: {BIG}\n\nworkflow w:\n  entry: a\n  a -> done\n",
        "C301",
    ),
    "5,000-digit budget max_tokens": (BUDGET.format(f"max_tokens: {BIG}"), "C301"),
    "5,000-digit max_parallel_branches": (BUDGET.format(f"max_parallel_branches: {BIG}"), "C301"),
    "5,000-digit max_iterations": (BUDGET.format(f"max_iterations: {BIG}"), "C301"),
    "5,000-digit max_cost_usd": (BUDGET.format(f"max_cost_usd: {BIG}"), "C301"),
    "1e400 max_cost_usd": (BUDGET.format('max_cost_usd: "1e400"'), "C301"),
    "5,000-digit int default": (VARS.format(f"int = {BIG}"), "C301"),
    "1e400 float default": (VARS.format("float = 1e400"), "C301"),
    "5,000-digit number in a JSON default": (VARS.format(f"json = {{a: [{BIG}]}}"), "C301"),
    "400-digit timeout": (TOOL.format("9" * 400), "C302"),
    "400-digit timeout in seconds": (TOOL.format(f'"{"9" * 400}s"'), "C302"),
    "5,000-digit timeout": (TOOL.format(BIG), "C302"),
    "huge tool timeout": (TOOL.format('"100000d"'), "C302"),
    "huge wait timeout": (
        'emit e:\n  event: go\n\nwait a:\n  event: go\n  timeout: "31d"\n\n'
        "workflow w:\n  entry: e\n  e -> a\n  a -> done\n",
        "C302",
    ),
    "huge await_answers timeout": (
        'await_answers a:\n  timeout: "720h1s"\n\nworkflow w:\n  entry: a\n  a -> done\n',
        "C302",
    ),
    "huge budget max_duration": (BUDGET.format(f'max_duration: "{BIG}h"'), "C302"),
    "infinite timeout": (TOOL.format('"inf"'), "C355"),
    "not-a-number timeout": (TOOL.format('"nan"'), "C355"),
    "exponent timeout": (TOOL.format('"1e9"'), "C355"),
}


@pytest.mark.parametrize("name", list(CRASHERS))
def test_hostile_input_is_a_diagnostic_never_a_traceback(name: str) -> None:
    text, code = CRASHERS[name]
    result = it.analyze(text, "hostile.iter")
    assert result.workflow is None
    found = [d for d in result.diagnostics if d.code == code]
    assert found, [(d.code, d.message) for d in result.diagnostics]
    assert all(d.severity.value == "error" and d.line >= 1 and d.column >= 1 for d in found)
    # one problem, one report: no cascade of follow-up errors
    assert {d.code for d in result.diagnostics} == {code}
    with pytest.raises(it.CompileError) as info:
        it.compile(text, "hostile.iter")
    assert f"error[{code}]" in str(info.value)
    assert len(str(info.value)) < 2000  # a 5,000-digit number is not echoed whole


@pytest.mark.parametrize(
    ("timeout", "seconds"),
    [('"30d"', 2_592_000.0), ('"720h"', 2_592_000.0), ("2592000", 2_592_000.0), ('"1.5s"', 1.5)],
)
def test_durations_up_to_thirty_days_are_accepted(timeout: str, seconds: float) -> None:
    node = it.compile(TOOL.format(timeout)).nodes["a"]
    assert getattr(node, "timeout_seconds", None) == seconds


def test_numbers_at_the_limit_are_accepted() -> None:
    wf = it.compile(AGENT.format("max_tokens: 9223372036854775807"))
    assert getattr(wf.nodes["a"], "max_tokens", None) == 2**63 - 1


#: Inputs that a regex or a scan made quadratic, each at a size where that took
#: minutes; linear, they take a few milliseconds, so the bound is generous.
SLOW_SHAPES: dict[str, tuple[str, str]] = {
    "'${' without '}' many times": ("prompt p:\n  " + "${" * 200_000 + "\n", "C359"),
    "a long number before a wrong unit": (TOOL.format('"' + "9" * 200_000 + 'x"'), "C355"),
    "a long number in a duration": (TOOL.format('"' + "1" * 200_000 + 's"'), "C302"),
    "'{{' without '}}' many times": ("prompt p:\n  " + "{{" * 100_000 + "\n", "S004"),
    "a deep expression": (EXPR.format("(" * 1_000_000), "C300"),
}


@pytest.mark.parametrize("name", list(SLOW_SHAPES))
def test_no_quadratic_scan(name: str) -> None:
    import time

    text, code = SLOW_SHAPES[name]
    start = time.perf_counter()
    result = it.analyze(text)
    assert time.perf_counter() - start < 5
    assert code in {d.code for d in result.diagnostics}
    assert len(render_all(result.diagnostics, result.source)) < 5000


def loop_chain(count: int) -> str:
    """``count`` compute nodes, each pair joined by a loop of its own: one big cycle."""
    nodes = "".join(f'compute n{i}:\n  expr:\n    x: "1"\n\n' for i in range(count))
    edge = "  n{i} -> n{j}\n  n{j} -> n{i} as l{i}(2)\n"
    edges = "".join(edge.format(i=i, j=i + 1) for i in range(count - 1))
    return f"{nodes}workflow w:\n  entry: n0\n{edges}  n{count - 1} -> done\n"


def test_many_loops_in_one_cycle_compile_in_linear_memory() -> None:
    """Each loop once kept its own copy of the whole cycle: 8,000 loops took 2 GB."""
    import tracemalloc

    def peak(count: int) -> int:
        text = loop_chain(count)
        tracemalloc.start()
        try:
            result = it.analyze(text)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
            assert result.workflow is not None, result.diagnostics[:3]

    small, large = peak(1000), peak(4000)
    # linear: 4x the loops take about 4x the memory (quadratic took 16x)
    assert large < 6 * small, (small, large)


def test_long_words_are_cut_in_messages() -> None:
    result = it.analyze("a" * 100_000 + "\n")
    assert all(len(d.message) < 300 for d in result.diagnostics)


def test_past_the_cap_the_rest_is_dropped_and_not_worked_on() -> None:
    many = "x\n" * 250
    first = it.analyze(many).diagnostics
    assert len(first) == 200 and {d.code for d in first} == {"S001"}
    assert [d.line for d in first] == list(range(1, 201))
    # later syntax and property errors cannot change what is reported
    assert it.analyze(many + "agent a:\n  bogus: 1\n" + "y z\n" * 1000).diagnostics == first


def test_a_lone_surrogate_in_a_source_string_is_s006_where_it_stands() -> None:
    """A str from Python is not decoded: once it compiled, and then no store took the run."""
    text = "compute a:\n  expr:\n    x: \"'\ud800'\"\n\nworkflow w:\n  entry: a\n  a -> done\n"
    (diag,) = it.analyze(text).diagnostics
    assert (diag.code, diag.line, diag.column) == ("S006", 3, 10)
    assert diag.message == "source is not UTF-8 text: it holds a lone surrogate (U+D800)"
