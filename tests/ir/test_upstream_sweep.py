"""Constructs upstream iterion accepts that a sweep of its newest snapshot found us rejecting.

tool_policy (A1), interaction_prompt / interaction_model (A2), a workflow's
capabilities (A3), an llm router's reasoning_effort (A4), edge clauses in any
order (A5, see tests/dsl/test_parser.py), and no cascade after an undeclared schema.
"""

from __future__ import annotations

import pytest

import iterion_nb as it
from iterion_nb.ir import analyze
from iterion_nb.ir import model as m

HEAD = """\
prompt p:
  Do it.

prompt decide:
  Answer yourself unless a person is truly needed.

schema ans:
  approved: bool
"""


def codes(source: str) -> list[tuple[str, int, int, str]]:
    return [(d.code, d.line, d.column, d.message) for d in analyze(source, "t.iter").diagnostics]


def test_tool_policy_on_agents_judges_and_the_workflow() -> None:
    flow = it.compile(
        HEAD
        + """
agent a:
  model: "scripted"
  user: p
  tool_policy: [read_file, mcp.github.*, "*"]

judge j:
  model: "scripted"
  user: p
  output: ans

agent open:
  model: "scripted"
  user: p

workflow w:
  tool_policy: [read_file, memory.*]
  entry: a
  a -> j
  j -> open when approved
  j -> done when not approved
  open -> done
"""
    )
    a, j = flow.nodes["a"], flow.nodes["j"]
    assert isinstance(a, m.AgentNode) and isinstance(j, m.AgentNode)
    assert a.tool_policy == ("read_file", "mcp.github.*", "*")  # its own replaces the workflow's
    assert j.tool_policy == ("read_file", "memory.*")  # the workflow's, as it sets none
    no_policy = it.compile(HEAD + 'agent a:\n  model: "scripted"\n  user: p\n'
                           "workflow w:\n  entry: a\n  a -> done\n")  # fmt: skip
    assert no_policy.nodes["a"].tool_policy is None  # type: ignore[union-attr]


def test_a_malformed_tool_policy_entry_is_c364() -> None:
    found = codes(
        HEAD
        + """
agent a:
  model: "scripted"
  user: p
  tool_policy: ["read file"]

workflow w:
  entry: a
  a -> done
"""
    )
    assert [(c, line, col) for c, line, col, _ in found] == [("C364", 13, 16)]
    assert "tool_policy entry 'read file'" in found[0][3]


def test_router_reasoning_effort_is_for_llm_routers() -> None:
    def router(mode: str, effort: str) -> str:
        model = '  model: "scripted"\n' if mode == "llm" else ""
        return (
            HEAD
            + f"""
agent x:
  model: "scripted"
  user: p

agent y:
  model: "scripted"
  user: p

router r:
  mode: {mode}
{model}  reasoning_effort: {effort}

workflow w:
  entry: r
  r -> x
  r -> y
  x -> done
  y -> done
"""
        )

    flow = it.compile(router("llm", "low"))
    assert flow.nodes["r"].reasoning_effort == "low"  # type: ignore[union-attr]
    env = it.compile(router("llm", '"${EFFORT:-high}"'))
    assert env.nodes["r"].reasoning_effort == "${EFFORT:-high}"  # type: ignore[union-attr]
    (bad,) = codes(router("llm", "extreme"))
    assert bad[:2] == ("C027", 21) and "minimal, low, medium, high, xhigh, max" in bad[3]
    (wrong_mode,) = codes(router("fan_out_all", "low"))
    assert wrong_mode[:3] == ("C023", 20, 3)  # at the property
    assert "'reasoning_effort' only applies to routers with 'mode: llm'" in wrong_mode[3]


def test_workflow_capabilities_are_checked_and_ignored_as_on_nodes() -> None:
    def flow(caps: str) -> str:
        return (
            HEAD
            + f"""
agent a:
  model: "scripted"
  user: p

workflow w:
  entry: a
  capabilities: {caps}
  a -> done
"""
        )

    (known,) = codes(flow("[board.read, board.create]"))
    assert known[:3] == ("C363", 16, 3) and "'capabilities:' on workflow 'w'" in known[3]
    assert it.analyze(flow("[board.read]")).ok
    (unknown,) = codes(flow("[board.reed]"))
    assert unknown[0] == "C080" and "did you mean 'board.read'" in unknown[3]
    (malformed,) = codes(flow('["Board.Read"]'))
    assert malformed[0] == "C081"


HUMAN = (
    HEAD
    + """
human h:
  output: ans
  instructions: p
  interaction: {mode}
  model: "scripted/general"
  system: "General."
  interaction_prompt: {prompt}
  interaction_model: "scripted/answerer"

workflow w:
  entry: h
  h -> done when approved
  h -> fail when not approved
"""
)


def test_interaction_model_and_prompt_are_the_answering_models() -> None:
    flow = it.compile(HUMAN.format(mode="llm_or_human", prompt="decide"))
    gate = flow.nodes["h"]
    assert isinstance(gate, m.HumanNode)
    assert gate.model is not None and gate.model.render(lambda ref: "") == "scripted/answerer"
    assert gate.system == flow.prompts["decide"].template


def test_interaction_prompt_must_name_a_prompt() -> None:
    (unknown,) = codes(HUMAN.format(mode="llm", prompt="decid"))
    assert unknown[:3] == ("C003", 16, 23) and "did you mean 'decide'" in unknown[3]


@pytest.mark.parametrize("mode", ["human"])
def test_on_a_gate_a_person_answers_they_have_no_effect(mode: str) -> None:
    found = codes(HUMAN.format(mode=mode, prompt="decide"))
    assert [(c, line) for c, line, _, _ in found] == [("C366", 16), ("C366", 17)]
    assert "has no effect on human 'h' with interaction: human" in found[0][3]


@pytest.mark.parametrize(
    ("mode", "code"),
    [("none", "C366"), ("human", "C366"), ("async", "C366"), ("llm", "C363"),
     ("llm_or_human", "C363")],
)  # fmt: skip
def test_on_agents_and_judges_no_model_answers_here(mode: str, code: str) -> None:
    found = codes(
        HEAD
        + f"""
judge a:
  model: "scripted"
  user: p
  interaction: {mode}
  interaction_prompt: decide
  interaction_model: "scripted/answerer"

workflow w:
  entry: a
  a -> done
"""
    )
    assert [(c, line, col) for c, line, col, _ in found] == [(code, 14, 3), (code, 15, 3)]


def test_the_workflows_interaction_decides_whether_they_have_an_effect() -> None:
    source = HUMAN.format(mode="human", prompt="decide").replace(
        "  interaction: human\n", ""
    ).replace("  entry: h\n", "  entry: h\n  interaction: llm\n")  # fmt: skip
    assert codes(source) == []


def test_an_undeclared_schema_is_reported_once() -> None:
    """Upstream skips the field checks of a node whose schema is undeclared (C002 says it)."""
    found = codes(
        HEAD
        + """
agent a:
  model: "scripted"
  user: "{{input.task}}"
  input: task_in
  output: verdict

compute c:
  input: task_in
  expr:
    n: "length(items)"

workflow w:
  entry: a
  a -> c when approved with { feedback: "{{outputs.a.summary}}" }
  a -> done when not approved
  c -> done
"""
    )
    assert sorted({c for c, _, _, _ in found}) == ["C002"]


def test_on_a_router_they_are_one_refusal_not_two() -> None:
    """A property a router does not take is C350 alone (C366 once came with it)."""
    found = codes(
        HEAD
        + """
agent a:
  model: "scripted"
  user: p

agent b:
  model: "scripted"
  user: p

router r:
  mode: fan_out_all
  interaction_model: "x"

workflow w:
  entry: r
  r -> a
  r -> b
  a -> done
  b -> done
"""
    )
    assert [c for c, *_ in found] == ["C350"]
