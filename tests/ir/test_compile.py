from __future__ import annotations

from pathlib import Path

import pytest

import iterion_nb as it
from iterion_nb.ir import model as m

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.iter"))


def test_there_are_examples() -> None:
    names = {p.name for p in EXAMPLE_FILES}
    assert {"minimal.iter", "fanout_retry.iter", "async_questions.iter"} <= names


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_every_example_compiles_cleanly(path: Path) -> None:
    result = it.analyze(path.read_bytes(), str(path))
    assert [(d.code, d.message) for d in result.diagnostics] == []
    assert result.workflow is not None


def test_async_example_exposes_interaction_and_gate() -> None:
    wf = it.compile_file(EXAMPLES / "async_questions.iter")
    gatherer = wf.nodes["gatherer"]
    gate = wf.nodes["gate"]
    assert isinstance(gatherer, m.AgentNode) and gatherer.interaction == "async"
    assert isinstance(gate, m.AwaitAnswersNode)
    assert gate.from_node == "gatherer"
    assert gate.timeout_seconds == 30 * 60
    finalizer = wf.nodes["finalizer"]
    assert isinstance(finalizer, m.AgentNode) and finalizer.user is not None
    refs = [r.path for r in finalizer.user.refs]
    assert ("outputs", "gate", "answers") in refs


def test_fanout_example_has_join_loop_and_budget() -> None:
    wf = it.compile_file(EXAMPLES / "fanout_retry.iter")
    assert wf.nodes["decide"].await_mode == "wait_all"
    router = wf.nodes["reviews"]
    assert isinstance(router, m.RouterNode) and router.mode == "fan_out_all"
    assert wf.loops["revise"].max_iterations == 3
    back = next(e for e in wf.outgoing("decide") if e.loop)
    assert back.dst == "writer"
    assert back.condition == m.FieldCondition("approved", True, back.condition.span)  # type: ignore[union-attr]
    assert wf.budget == m.Budget(
        max_parallel_branches=2, max_duration_seconds=600.0, max_iterations=20
    )
    mapped = dict(next(e for e in wf.outgoing("reviews") if e.dst == "style").mapping)
    assert mapped["focus"].render(lambda p: None) == "clarity and tone"
    summary = wf.nodes["summary"]
    assert isinstance(summary, m.ComputeNode)
    assert [e.field for e in summary.exprs] == ["mean_score", "issues", "headline"]
    assert [e.src for e in wf.incoming("decide")] == ["accuracy", "style"]


def test_compile_raises_one_error_carrying_every_problem() -> None:
    text = (
        'agent a:\n  model: "scripted"\n  user: nope\n  output: missing\n\n'
        "workflow w:\n  entry: a\n  a -> b\n"
    )
    with pytest.raises(it.CompileError) as info:
        it.compile(text, "flow.iter")
    codes = [(d.code, d.line, d.column) for d in info.value.diagnostics]
    assert codes == [("C003", 3, 9), ("C002", 4, 11), ("C001", 8, 3)]
    message = str(info.value)
    assert message.startswith("flow.iter: 3 errors\n")
    assert "flow.iter:8:3: error[C001]: unknown node 'b' in edge" in message
    assert "    8 |   a -> b\n      |   ^^^^^^" in message


def test_warnings_do_not_stop_compilation() -> None:
    text = (
        'agent a:\n  model: "scripted"\n\nagent stray:\n  model: "scripted"\n\n'
        "workflow w:\n  entry: a\n  a -> done\n  stray -> done\n"
    )
    result = it.analyze(text)
    assert result.ok
    assert [(d.code, d.severity.value) for d in result.diagnostics] == [("C016", "warning")]


def test_vars_types_defaults_and_env() -> None:
    text = (
        'vars:\n  n: int = 3\n  ratio: float = 2\n  tags: string[] = ["a"]\n'
        '  cfg: json = {k: [1, true]}\n  model: string = "${MODEL:-scripted}"\n  req: string\n\n'
        'agent a:\n  model: "${AGENT_MODEL}"\n\nworkflow w:\n  entry: a\n  a -> done\n'
    )
    wf = it.compile(text)
    assert {k: (str(v.type), v.has_default, v.default) for k, v in wf.vars.items()} == {
        "n": ("int", True, 3),
        "ratio": ("float", True, 2),
        "tags": ("string[]", True, ["a"]),
        "cfg": ("json", True, {"k": [1, True]}),
        "model": ("string", True, "${MODEL:-scripted}"),
        "req": ("string", False, None),
    }
    assert wf.env_names == ("AGENT_MODEL",)


def test_a_quoted_environment_default_of_a_number_or_bool_is_read_when_the_run_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """language.md's `"${N:-3}"` for an int: once refused as not an int (C357)."""
    from iterion_nb.errors import VarsError
    from iterion_nb.runtime.values import resolve_vars

    text = (
        'vars:\n  n: int = "${N:-3}"\n  r: float = "${R:-0.5}"\n  b: bool = "${B:-false}"\n'
        '  bad: int = "three"\n  worse: int = "${W:-three}"\n\n'
        'tool t:\n  command: "echo {{vars.n}}"\n\nworkflow w:\n  entry: t\n  t -> done\n'
    )
    said = it.analyze(text)
    assert [(d.code, d.message) for d in said.diagnostics] == [
        ("C357", "default of 'bad' does not match its type int"),  # quoted, not the environment
        ("C357", "default of 'worse' does not match its type int"),  # its fallback is no int
    ]
    wf = it.compile(text.replace('  bad: int = "three"\n  worse: int = "${W:-three}"\n', ""))
    monkeypatch.delenv("N", raising=False)
    monkeypatch.setenv("B", "true")
    assert resolve_vars(wf, {}) == {"n": 3, "r": 0.5, "b": True}
    monkeypatch.setenv("N", "abc")
    with pytest.raises(VarsError, match="variable 'n' should be int, got the text 'abc'"):
        resolve_vars(wf, {})


def test_source_hash_tracks_the_text() -> None:
    base = (EXAMPLES / "minimal.iter").read_text()
    one = it.compile(base)
    assert it.compile(base).source_hash == one.source_hash
    assert it.compile(base + "\n## changed\n").source_hash != one.source_hash


def test_field_condition_on_router_checks_its_predecessors() -> None:
    text = (
        "schema v:\n  ok: bool\n\nagent a:\n  output: v\n\nrouter r:\n  mode: condition\n\n"
        "workflow w:\n  entry: a\n  a -> r\n  r -> done when ok\n  r -> fail when not ok\n"
    )
    assert it.analyze(text).ok
    bad = text.replace("when ok", "when good").replace("when not ok", "when not good")
    assert {d.code for d in it.analyze(bad).diagnostics} == {"C014"}


def test_expression_conditions_check_bare_fields() -> None:
    text = (
        "schema v:\n  score: int\n\nagent a:\n  output: v\n\n"
        'workflow w:\n  entry: a\n  a -> done when "score >= 8"\n  a -> fail\n'
    )
    assert it.analyze(text).ok
    bad = it.analyze(text.replace("score >= 8", "grade >= 8"))
    (diag,) = bad.diagnostics
    assert (diag.code, diag.line, diag.column) == ("C014", 9, 19)


def test_every_node_kind_compiles_to_its_ir_class() -> None:
    text = (EXAMPLES / "fanout_retry.iter").read_text()
    wf = it.compile(text)
    assert {type(n).__name__ for n in wf.nodes.values()} == {
        "AgentNode", "RouterNode", "ComputeNode"
    }  # fmt: skip
    extra = (
        'human h:\n  instructions: "Approve {{vars.brief}}?"\n  interaction: llm_or_human\n'
        "  min_answers: 2\n\n"
        'tool t:\n  command: "echo {{vars.brief}}"\n  timeout: 90s\n\n'
        'workflow w:\n  entry: h\n  h -> t\n  t -> done when "exit_code == 0"\n  t -> fail\n'
    )
    wf2 = it.compile('vars:\n  brief: string = "x"\n\n' + extra)
    human = wf2.nodes["h"]
    tool = wf2.nodes["t"]
    assert isinstance(human, m.HumanNode) and human.interaction == "llm_or_human"
    assert human.min_answers == 2
    assert isinstance(tool, m.ToolNode) and tool.timeout_seconds == 90.0
    assert tool.command.render(lambda p: "hi") == "echo hi"


def test_with_keys_are_checked_against_the_destination_input() -> None:
    text = (
        (EXAMPLES / "fanout_retry.iter")
        .read_text()
        .replace('focus: "clarity and tone"', 'topic: "clarity and tone"')
    )
    result = it.analyze(text, "f.iter")
    (diag,) = result.diagnostics
    # a warning (upstream passes such a key along): the workflow still compiles
    assert (diag.code, diag.severity, diag.line, diag.column) == ("C362", "warning", 95, 5)
    assert "'topic' is not a field of the input schema of 'style'" in diag.message
    assert result.workflow is not None


JOINS = """\
schema v:
  ok: bool

agent a:
  model: "scripted"

router split:
  mode: fan_out_all

agent left:
  output: v

agent left_fix:
  model: "scripted"

agent left_end:
  model: "scripted"

agent right:
  model: "scripted"

agent merge:
  await: wait_all

agent after:
  model: "scripted"

workflow w:
  entry: a
  a -> split
  split -> left
  split -> right
  left -> left_fix when not ok
  left -> left_end when ok
  left_fix -> left_end
  left_end -> merge
  right -> merge
  merge -> after
  after -> done
"""


def test_joins_inside_a_branch_and_after_an_await_need_no_await() -> None:
    # left_end merges two paths of the same branch; after follows the join
    assert [(d.code, d.message) for d in it.analyze(JOINS).diagnostics] == []


def test_a_missing_await_is_reported_once_at_the_meeting_point() -> None:
    result = it.analyze(
        JOINS.replace("agent merge:\n  await: wait_all", 'agent merge:\n  model: "scripted"')
    )
    assert [(d.code, d.line) for d in result.diagnostics] == [("C360", 22)]


@pytest.mark.parametrize(("fixture", "code"), [("C241_ok.iter", "C241"), ("C197_ok.iter", "C197")])
def test_zero_timeouts_are_refused(fixture: str, code: str) -> None:
    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "diagnostics"
    text = (fixtures / fixture).read_text()
    text = text.replace('timeout: "30m"', "timeout: 0s").replace('timeout: "5m"', 'timeout: "0m"')
    (diag,) = it.analyze(text).diagnostics
    assert diag.code == code
    assert "positive timeout, found 0s" in diag.message


def test_a_stored_source_is_compiled_once_and_named_per_run() -> None:
    """Runs resumed from one recorded source share its compiled workflow (a worker takes many)."""
    from iterion_nb.ir import compile_stored

    text = 'compute c:\n  expr:\n    v: "1 + 1"\n\nworkflow stored_once:\n  entry: c\n  c -> done\n'
    first = compile_stored(text, "<run r1>")
    again = compile_stored(text, "<run r2>")
    assert (first.source_name, again.source_name) == ("<run r1>", "<run r2>")
    assert again.nodes is first.nodes  # not compiled again
    assert again == it.compile(text, "<run r2>")


def test_a_stored_source_that_does_not_compile_fails_every_time() -> None:
    from iterion_nb.ir import compile_stored

    text = "workflow w:\n  entry: nowhere\n"
    for name in ("<run r1>", "<run r2>"):
        with pytest.raises(it.CompileError) as info:
            compile_stored(text, name)
        assert str(info.value).startswith(f"{name}: ")
