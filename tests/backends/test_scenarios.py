"""Scenario mistakes are refused where they are made, naming what is wrong and where."""

from __future__ import annotations

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
