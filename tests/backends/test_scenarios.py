"""Scenario mistakes are refused where they are made, naming what is wrong and where."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

import pytest

import iterion_nb as it
from iterion_nb.backends.providers import ProviderRequest, ScenarioError, ScriptedProvider
from iterion_nb.backends.providers.scripted import load_scenario
from iterion_nb.errors import RunError
from iterion_nb.session.launch import scenario_data

HAIKU = """\
agent poet:
  model: "scripted"

agent critic:
  model: "scripted"

workflow haiku:
  entry: poet
  poet -> critic
  critic -> done
"""


@pytest.mark.parametrize(
    ("nodes", "said"),
    [
        (
            {"poet": [{"text": "hi"}, {"outptu": {"ok": True}}]},
            "node 'poet', turn 1: unknown key 'outptu'; did you mean 'output'? (a turn may"
            " hold: text, output, tool_calls, tokens, cost_usd, delay, fail_first)",
        ),
        (
            {"poet": {"visits": [[{"output": 1}], [{"txet": "x"}]]}},
            "node 'poet', run 2, turn 0: unknown key 'txet'; did you mean 'text'?",
        ),
        (
            {"poet": [{"tool_calls": [{"name": "read_file", "inptu": {}}]}]},
            "node 'poet', turn 0: unknown key 'inptu'; did you mean 'input'? (tool call 0 may"
            " hold: name, input, id)",
        ),
        ({"poet": [{"tool_calls": [{"input": {}}]}]}, "node 'poet', turn 0: tool call 0 needs"),
        ({"poet": ["hello"]}, "node 'poet', turn 0: a turn is a mapping"),
        ({"poet": {"runs": [[]]}}, "node 'poet': its runs go under 'visits:'"),
        ({"poet": "hello"}, "node 'poet': its turns must be a list"),
    ],
)
def test_a_malformed_turn_is_refused_naming_node_turn_and_key(
    nodes: dict[str, Any], said: str
) -> None:
    with pytest.raises(ScenarioError) as caught:
        load_scenario({"nodes": nodes})
    assert said in str(caught.value)


BAD_VALUES: list[tuple[dict[str, Any], str]] = [
    ({"tokens": {"in": -5, "out": "a"}},
     "'tokens.in' must be a whole number from 0 to 1,000,000,000; got -5"),
    ({"tokens": {"in": 5, "out": "a"}},
     "'tokens.out' must be a whole number from 0 to 1,000,000,000; got 'a' (a string)"),
    ({"tokens": {"in": -5, "out": 3}},
     "'tokens.in' must be a whole number from 0 to 1,000,000,000; got -5"),
    ({"tokens": {"in": 1.5}}, "'tokens.in' must be a whole number from 0 to 1,000,000,000;"
     " got 1.5"),
    ({"tokens": {"in": True}}, "'tokens.in' must be a whole number from 0 to 1,000,000,000;"
     " got true (a boolean)"),
    ({"tokens": {"in": 10**10}}, "'tokens.in' must be a whole number from 0 to 1,000,000,000;"
     " got 10000000000"),
    ({"tokens": 5}, "'tokens' must be a mapping such as {in: 120, out: 40}; got 5"),
    ({"tokens": {"inn": 5}},
     "'tokens': unknown key 'inn'; did you mean 'in'? ('tokens' may hold: in, out)"),
    ({"cost_usd": "abc"},
     "'cost_usd' must be a number of dollars from 0 to 1,000,000; got 'abc' (a string)"),
    ({"cost_usd": -0.5}, "'cost_usd' must be a number of dollars from 0 to 1,000,000; got -0.5"),
    ({"cost_usd": float("nan")},
     "'cost_usd' must be a number of dollars from 0 to 1,000,000; got nan"),
    ({"delay": "x"}, "'delay' must be a number of seconds from 0 to 86,400; got 'x' (a string)"),
    ({"delay": "1e-3"}, "'delay' must be a number of seconds from 0 to 86,400; got '1e-3'"
     " (a string): write the number unquoted (YAML reads 1e-3 as text, 1.0e-3 as a number)"),
    ({"delay": 1e300}, "'delay' must be a number of seconds from 0 to 86,400; got 1e+300"),
    ({"fail_first": "x"}, "'fail_first' must be a whole number, 0 or more; got 'x' (a string)"),
    ({"fail_first": -1}, "'fail_first' must be a whole number, 0 or more; got -1"),
    ({"fail_first": None}, "'fail_first' must be a whole number, 0 or more; got null (nothing)"),
    ({"text": 5}, "'text' must be a string; got 5"),
    ({"text": ["a"]}, "'text' must be a string; got a list"),
    ({"output": {"when": date(2024, 1, 2)}}, "'output.when' is not JSON data (date)"),
    ({"output": [1, float("inf")]}, "'output[1]' is not a finite number (inf)"),
    ({"tool_calls": {"name": "x"}}, "'tool_calls' must be a list; got a mapping"),
    ({"tool_calls": [{"name": 7}]}, "tool call 0: 'name' must be a non-empty string; got 7"),
    ({"tool_calls": [{"name": ""}]},
     "tool call 0: 'name' must be a non-empty string; got '' (a string)"),
    ({"tool_calls": [{"name": "x", "id": 3}]},
     "tool call 0: 'id' must be a non-empty string; got 3"),
    ({"tool_calls": [{"name": "x", "input": "hi"}]},
     "tool call 0: 'input' must be a mapping; got 'hi' (a string)"),
    ({"tool_calls": [{"name": "x", "input": {"on": date(2024, 1, 2)}}]},
     "tool call 0: 'input.on' is not JSON data (date)"),
]  # fmt: skip


@pytest.mark.parametrize(("turn", "said"), BAD_VALUES, ids=[said for _, said in BAD_VALUES])
def test_a_turn_value_of_the_wrong_type_or_out_of_range_is_refused_as_it_loads(
    turn: dict[str, Any], said: str
) -> None:
    with pytest.raises(ScenarioError) as caught:
        load_scenario({"nodes": {"poet": [{"text": "first"}, turn]}})
    assert str(caught.value) == f"node 'poet', turn 1: {said}"
    with pytest.raises(ScenarioError) as caught:  # in a run of a node too
        load_scenario({"nodes": {"poet": {"visits": [[{"text": "x"}], [turn]]}}})
    assert str(caught.value) == f"node 'poet', run 2, turn 0: {said}"


def test_values_at_their_bounds_load() -> None:
    edges = [
        {"tokens": {"in": 0, "out": 1_000_000_000}, "cost_usd": 0, "delay": 86_400},
        {"tokens": {}, "cost_usd": 1_000_000, "delay": 0.25, "fail_first": 0},
        {"output": None, "text": ""}, {"output": "plain text"}, {"output": [1, "a", True]},
    ]  # fmt: skip
    assert load_scenario({"nodes": {"poet": edges}})["nodes"]["poet"] == edges


def test_every_key_a_turn_may_hold_loads() -> None:
    call = {"name": "n", "input": {}, "id": "i"}
    turn = {"text": "t", "output": {}, "tool_calls": [call], "tokens": {"in": 1, "out": 2},
            "cost_usd": 0.1, "delay": 0, "fail_first": 1}  # fmt: skip
    assert load_scenario({"nodes": {"poet": [turn]}})["nodes"]["poet"] == [turn]


def test_a_document_without_nodes_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "flat.yaml"
    path.write_text("poet:\n  - output: {ok: true}\n")
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert str(caught.value) == (
        f"{path}: a scenario needs a top-level 'nodes:' mapping (node name -> its turns);"
        " it has 'poet' at its top level (do node names go under 'nodes:'?)"
    )
    path.write_text("node:\n  poet: []\n")
    with pytest.raises(ScenarioError, match=r"needs a top-level 'nodes:'.*did you mean 'nodes'"):
        load_scenario(path)
    path.write_text("")
    with pytest.raises(ScenarioError, match=r"flat\.yaml: a scenario needs .*; this is empty"):
        load_scenario(path)
    path.write_text("- poet\n")
    with pytest.raises(ScenarioError, match=r"flat\.yaml: a scenario needs .*; this is a list$"):
        load_scenario(path)
    path.write_text("nodes: [poet]\n")
    with pytest.raises(ScenarioError, match=r"needs .*; its 'nodes' is a list$"):
        load_scenario(path)


def test_a_scenario_for_one_run_naming_a_node_the_workflow_lacks_is_refused(
    tmp_path: Path,
) -> None:
    wf = it.compile(HAIKU)
    path = tmp_path / "s.yaml"
    path.write_text("nodes:\n  poett: [{text: x}]\n  critic: [{text: y}]\n")
    with pytest.raises(RunError) as caught:
        scenario_data(path, wf)
    assert str(caught.value) == (
        f"scenario: {path}: node 'poett' is not in workflow 'haiku'; did you mean 'poet'?"
        " (its nodes: poet, critic)"
    )
    with pytest.raises(RunError, match=r"nodes 'poett' \(did you mean 'poet'\?\), 'zz' are not"):
        scenario_data({"nodes": {"poett": [], "zz": []}}, wf)
    # a session's scenario serves every workflow it runs: read without a workflow, not checked
    assert scenario_data(path) is not None
    assert scenario_data({"nodes": {"poet": [], "critic": []}}, wf) is not None


async def test_a_node_the_scenario_misspells_fails_naming_the_spelling_it_has() -> None:
    provider = ScriptedProvider({"nodes": {"poett": [{"text": "x"}]}})
    request = ProviderRequest("scripted", "", [{"role": "user", "content": "go"}], [], "poet", 0)
    with pytest.raises(ScenarioError) as caught:
        await provider.complete(request)
    assert str(caught.value) == (
        "the scenario has no turns for node 'poet' (it has turns for 'poett': is that this"
        " node, misspelt?)"
    )
