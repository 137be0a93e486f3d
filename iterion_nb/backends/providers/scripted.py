"""The scripted provider: a scenario says, turn by turn, what the model answers.

A scenario is plain data (a dict, or a YAML/JSON file)::

    nodes:
      gatherer:                       # node name
        - text: "Let me ask first."   # turn 0 of the node's first run
          tool_calls:
            - name: ask_user_async
              input: {question: "Formal or casual?"}
        - output: {draft: "...", open_points: []}   # a final answer (JSON)
      writer:
        visits:                       # one list of turns per run of the node
          - [{output: {text: "v1"}}]
          - [{output: {text: "v2"}}]

Each turn may hold ``text``, ``output`` (JSON data, sent as the text of a
final answer), ``tool_calls`` (``name``, ``input``, optional ``id``),
``tokens`` (``{in, out}``) and ``cost_usd`` for budget tests, ``delay``
(seconds to wait before answering) and ``fail_first`` (how many attempts at
this turn fail with a transient error before it succeeds). Tool-call ids
are deterministic: ``toolu_<node>_<visit>_<turn>_<n>``.

The turn is the number of assistant messages already in the conversation, so
a resumed conversation picks up where it stopped, even in another process
(a node continuing another's session counts its own turns only);
the visit is how many times the node ran before in this run.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from iterion_nb.backends.providers.base import (
    ProviderRequest,
    ProviderResponse,
    TransientProviderError,
)
from iterion_nb.safe_input import InputFileError, load_json, load_yaml, read_text, shown_path

#: What a run that failed for want of a scenario says (a resume without one fails again).
NO_SCENARIO = "uses the scripted model, and no scenario says what it answers"


class ScenarioError(Exception):
    """The scenario has no answer for this node and turn, or is malformed."""


def load_scenario(source: Mapping[str, Any] | str | Path) -> dict[str, Any]:
    """A scenario from a dict, or from a file: JSON if it ends ``.json``, else YAML.

    A file is read as :mod:`iterion_nb.safe_input` reads what a person names:
    a regular file of UTF-8 text, of bounded size, nesting and alias expansion.

    Raises:
        ScenarioError: The file cannot be read or parsed (the message names it
            and, where there is one, the line and column), or the data is not
            a scenario.
    """
    where = ""
    if isinstance(source, Mapping):
        data: Any = dict(source)
    else:
        path = Path(source)
        where = f"{shown_path(path)}: "
        try:
            text = read_text(path)
            if path.suffix == ".json":
                data = load_json(text, shown_path(path))
            else:  # .yaml, .yml, or no telling (a pipe): YAML, which JSON is too
                data = load_yaml(text, shown_path(path))
        except InputFileError as err:
            raise ScenarioError(str(err)) from None
    if not isinstance(data, dict) or not isinstance(data.get("nodes", {}), dict):
        raise ScenarioError(f"{where}a scenario is an object with a 'nodes' mapping")
    data.setdefault("nodes", {})
    return data


def turn_of(scenario: Mapping[str, Any], request: ProviderRequest) -> tuple[int, dict[str, Any]]:
    """The index and the data of the scenario turn that answers ``request``."""
    turns = _turns(scenario, request.node, request.visit)
    replies = sum(1 for m in request.messages if m.get("role") == "assistant")
    index = replies - request.turn_base
    if index >= len(turns):
        raise ScenarioError(
            f"the scenario has no turn {index} for node '{request.node}'"
            f" (run {request.visit + 1} of the node; it has {len(turns)} turn(s))"
        )
    return index, dict(turns[index])


def scripted_turn(scenario: Mapping[str, Any], request: ProviderRequest) -> ProviderResponse:
    """The scenario's answer to ``request``."""
    index, turn = turn_of(scenario, request)
    return response_for(turn, request.node, request.visit, index)


class FailureBudget:
    """Counts attempts per turn, for turns that say ``fail_first: N``."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, int, int], int] = {}

    def should_fail(self, node: str, visit: int, index: int, turn: Mapping[str, Any]) -> bool:
        """Whether this attempt at the turn must fail (and count it)."""
        wanted = int(turn.get("fail_first", 0))
        key = (node, visit, index)
        tried = self._seen.get(key, 0)
        self._seen[key] = tried + 1
        return tried < wanted


def _turns(scenario: Mapping[str, Any], node: str, visit: int) -> list[dict[str, Any]]:
    nodes = scenario.get("nodes", {})
    script = nodes.get(node)
    if script is None and not nodes:  # no scenario was given at all
        raise ScenarioError(
            f"node '{node}' {NO_SCENARIO}: give one (--scenario FILE, Session(scenario=...);"
            " examples/*.scenario.yaml are samples) or name a real model backend"
        )
    if script is None:
        raise ScenarioError(f"the scenario has no turns for node '{node}'")
    if isinstance(script, Mapping) and "visits" in script:
        visits = script["visits"]
        if visit >= len(visits):
            raise ScenarioError(
                f"the scenario has {len(visits)} run(s) of node '{node}'; this is run {visit + 1}"
            )
        script = visits[visit]
    if not isinstance(script, list):
        raise ScenarioError(f"the turns of node '{node}' must be a list")
    return script


def response_for(turn: Mapping[str, Any], node: str, visit: int, index: int) -> ProviderResponse:
    """Build the model's reply from one scenario turn."""
    content: list[dict[str, Any]] = []
    if "text" in turn:
        content.append({"type": "text", "text": str(turn["text"])})
    if "output" in turn:
        output = turn["output"]
        text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
        content.append({"type": "text", "text": text})
    for n, call in enumerate(turn.get("tool_calls", [])):
        content.append(
            {
                "type": "tool_use",
                "id": call.get("id") or f"toolu_{node}_{visit}_{index}_{n}",
                "name": call["name"],
                "input": call.get("input", {}),
            }
        )
    tokens = turn.get("tokens", {})
    return ProviderResponse(
        content=content,
        stop_reason="tool_use" if turn.get("tool_calls") else "end_turn",
        tokens_in=int(tokens.get("in", 0)),
        tokens_out=int(tokens.get("out", 0)),
        cost_usd=float(turn.get("cost_usd", 0.0)),
    )


class ScriptedProvider:
    """Answers from a scenario, offline and deterministically.

    ``requests`` keeps every request it answered, so tests can check what the
    model was shown at each turn.
    """

    def __init__(self, scenario: Mapping[str, Any] | str | Path) -> None:
        self.scenario = load_scenario(scenario)
        self.requests: list[ProviderRequest] = []
        self._failures = FailureBudget()

    async def complete(self, request: ProviderRequest) -> ProviderResponse:
        """The scenario's next turn for the asking node."""
        self.requests.append(replace(request, messages=list(request.messages)))
        index, turn = turn_of(self.scenario, request)
        if turn.get("delay"):
            await asyncio.sleep(float(turn["delay"]))
        if self._failures.should_fail(request.node, request.visit, index, turn):
            raise TransientProviderError(f"scripted overload at turn {index} of {request.node}")
        return response_for(turn, request.node, request.visit, index)
