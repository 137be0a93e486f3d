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
this turn fail with a transient error before it succeeds); any other key is
refused as the scenario is loaded, and so is a value of the wrong type or out
of range (see :func:`turn_value_problem`). Tool-call ids are deterministic:
``toolu_<node>_<visit>_<turn>_<n>``.

The turn is the number of assistant messages already in the conversation, so
a resumed conversation picks up where it stopped, even in another process
(a node continuing another's session counts its own turns only);
the visit is how many times the node ran before in this run.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from iterion_nb.backends.providers.base import (
    ProviderRequest,
    ProviderResponse,
    TransientProviderError,
    repair_reason,
)
from iterion_nb.dsl.diagnostics import closest, did_you_mean
from iterion_nb.safe_data import problem as data_problem
from iterion_nb.safe_input import InputFileError, load_json, load_yaml, read_text, shown_path

#: What a run that failed for want of a scenario says (a resume without one fails again).
NO_SCENARIO = "uses the scripted model, and no scenario says what it answers"
#: What a turn may hold (read by response_for, FailureBudget and the providers' delay).
TURN_KEYS = ("text", "output", "tool_calls", "tokens", "cost_usd", "delay", "fail_first")
#: What a turn's tool call may hold (``name`` is required).
CALL_KEYS = ("name", "input", "id")
#: What a turn's ``tokens`` may hold.
TOKEN_KEYS = ("in", "out")
#: The most tokens a turn may say it took, each of ``in`` and ``out``.
MAX_TURN_TOKENS = 1_000_000_000
#: The most a turn may say it cost (``cost_usd``), in dollars.
MAX_TURN_COST = 1_000_000
#: The longest ``delay`` a turn may ask for, in seconds (a day).
MAX_DELAY = 86_400


class ScenarioError(Exception):
    """The scenario has no answer for this node and turn, or is malformed."""


def load_scenario(source: Mapping[str, Any] | str | Path) -> dict[str, Any]:
    """A scenario from a dict, or from a file: JSON if it ends ``.json``, else YAML.

    A file is read as :mod:`iterion_nb.safe_input` reads what a person names:
    a regular file of UTF-8 text, of bounded size, nesting and alias expansion.

    Raises:
        ScenarioError: The file cannot be read or parsed (the message names it
            and, where there is one, the line and column), or the data is not
            a scenario: no top-level ``nodes:`` mapping, a node's turns not a
            list (or ``visits:`` of lists), a turn that is not a mapping or
            holds a key no turn takes, or a value of the wrong type or out of
            range (named with its node and index, the key, what it must be and
            what it is).
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
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), dict):
        raise ScenarioError(where + _not_a_scenario(data))
    for node, script in data["nodes"].items():
        problem = _script_problem(script)
        if problem:
            raise ScenarioError(f"{where}node '{node}'{problem}")
    return data


def scenario_strays(
    scenario: Mapping[str, Any], nodes: Iterable[str], whose: str = "the workflow"
) -> str | None:
    """What is wrong when ``scenario`` names nodes that are not among ``nodes``, else None.

    Each stray is named with the node it is close to ("did you mean …?"); the
    message ends with the nodes there are (``whose`` names their workflow).
    """
    known = list(nodes)
    strays = [str(n) for n in scenario.get("nodes", {}) if n not in known]
    if not strays:
        return None
    shown = ", ".join(known[:8]) + (f" and {len(known) - 8} more" if len(known) > 8 else "")
    if len(strays) == 1:
        said = f"node '{strays[0]}' is not in {whose}{did_you_mean(strays[0], known)}"
    else:
        named = []
        for stray in strays:
            meant = closest(stray, known)
            named.append(f"'{stray}'" + (f" (did you mean '{meant}'?)" if meant else ""))
        said = f"nodes {', '.join(named)} are not in {whose}"
    return f"{said} (its nodes: {shown or 'none'})"


def _a(data: Any) -> str:
    """What YAML made of ``data``, in words: ``a list``, ``a string``, ``empty``."""
    if data is None:
        return "empty"
    kinds = {list: "a list", str: "a string", bool: "true or false", int: "a number",
             float: "a number", dict: "a mapping"}  # fmt: skip
    return kinds.get(type(data), type(data).__name__)


def _not_a_scenario(data: Any) -> str:
    """Why ``data`` (with no ``nodes:`` mapping) is not a scenario."""
    said = "a scenario needs a top-level 'nodes:' mapping (node name -> its turns)"
    if not isinstance(data, dict):
        return f"{said}; this is {_a(data)}"
    if "nodes" in data:
        return f"{said}; its 'nodes' is {_a(data['nodes'])}"
    keys = [str(k) for k in data]
    hint = next((h for h in (did_you_mean(k, ["nodes"]) for k in keys) if h), "")
    found = (
        f"; it has {', '.join(repr(k) for k in keys[:8])} at its top level (do node names"
        " go under 'nodes:'?)"
        if keys
        else "; it is empty"
    )
    return said + (hint or found)


def _script_problem(script: Any) -> str:
    """What is wrong with one node's turns (``: ...`` to follow its name), or ``""``."""
    if isinstance(script, Mapping):
        if set(script) != {"visits"} or not isinstance(script["visits"], list):
            return ": its runs go under 'visits:' (a list of lists of turns), with nothing else"
        for visit, turns in enumerate(script["visits"]):
            problem = _turns_problem(turns)
            if problem:
                return f", run {visit + 1}{problem}"
        return ""
    return _turns_problem(script)


def _turns_problem(turns: Any) -> str:
    if not isinstance(turns, list):
        return ": its turns must be a list"
    for index, turn in enumerate(turns):
        if not isinstance(turn, Mapping):
            return f", turn {index}: a turn is a mapping (text, output, tool_calls, …)"
        problem = _keys_problem(turn, TURN_KEYS, "a turn") or _calls_problem(turn)
        if not problem:
            said = turn_value_problem(turn)
            problem = f": {said}" if said else ""
        if problem:
            return f", turn {index}{problem}"
    return ""


def _calls_problem(turn: Mapping[str, Any]) -> str:
    """What is wrong with a turn's ``tool_calls`` (``: ...``), or ``""``."""
    calls = turn.get("tool_calls", [])
    if not isinstance(calls, list):
        return f": 'tool_calls' must be a list; got {_got(calls)}"
    for n, call in enumerate(calls):
        if not isinstance(call, Mapping) or "name" not in call:
            return f": tool call {n} needs a 'name'"
        problem = _keys_problem(call, CALL_KEYS, f"tool call {n}")
        for key in ("name", "id"):
            value = call.get(key, "x")
            if not problem and (not isinstance(value, str) or not value):
                problem = f": tool call {n}: '{key}' must be a non-empty string; got {_got(value)}"
        if not problem and not isinstance(call.get("input", {}), Mapping):
            problem = f": tool call {n}: 'input' must be a mapping; got {_got(call['input'])}"
        if not problem and "input" in call:
            found = _json_problem(f"tool call {n}: 'input", call["input"])
            problem = f": {found}" if found else ""
        if problem:
            return problem
    return ""


def turn_value_problem(turn: Mapping[str, Any]) -> str:
    """What is wrong with the values a turn holds, or ``""``: the key, what it must be, what it is.

    ``text`` is a string; ``output`` JSON data; ``tokens`` a mapping of
    ``in`` and ``out``, whole numbers from 0 to :data:`MAX_TURN_TOKENS`;
    ``cost_usd`` a number of dollars from 0 to :data:`MAX_TURN_COST`;
    ``delay`` a number of seconds from 0 to :data:`MAX_DELAY`; ``fail_first``
    a whole number, 0 or more. (``tool_calls`` are checked with the keys.)
    """
    if "text" in turn and not isinstance(turn["text"], str):
        return f"'text' must be a string; got {_got(turn['text'])}"
    if "output" in turn:
        found = _json_problem("'output", turn["output"])
        if found:
            return found
    if "tokens" in turn:
        found = _tokens_problem(turn["tokens"])
        if found:
            return found
    for key, whole, most, unit in (
        ("cost_usd", False, MAX_TURN_COST, " of dollars"),
        ("delay", False, MAX_DELAY, " of seconds"),
        ("fail_first", True, None, ""),
    ):
        if key in turn:
            found = _number_problem(f"'{key}'", turn[key], whole=whole, most=most, unit=unit)
            if found:
                return found
    return ""


def _tokens_problem(tokens: Any) -> str:
    if not isinstance(tokens, Mapping):
        return f"'tokens' must be a mapping such as {{in: 120, out: 40}}; got {_got(tokens)}"
    unknown = _keys_problem(tokens, TOKEN_KEYS, "'tokens'")
    if unknown:
        return f"'tokens'{unknown}"
    for key in TOKEN_KEYS:
        if key in tokens:
            found = _number_problem(
                f"'tokens.{key}'", tokens[key], whole=True, most=MAX_TURN_TOKENS
            )
            if found:
                return found
    return ""


def _number_problem(name: str, value: Any, *, whole: bool, most: int | None, unit: str = "") -> str:
    """Why ``value`` is not a number (a whole one if ``whole``) from 0 to ``most``, or ``""``."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    fits = number and (isinstance(value, int) if whole else math.isfinite(value))
    if fits and value >= 0 and (most is None or value <= most):
        return ""
    kind = "a whole number" if whole else f"a number{unit}"
    bounds = f" from 0 to {most:,}" if most is not None else ", 0 or more"
    said = f"{name} must be {kind}{bounds}; got {_got(value)}"
    if isinstance(value, str) and _numeric(value):  # quoted, or YAML's 1e-3 (read as text)
        said += ": write the number unquoted (YAML reads 1e-3 as text, 1.0e-3 as a number)"
    return said


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _json_problem(opened: str, value: Any) -> str:
    """Why ``value`` is not JSON data, naming the place from ``opened`` (``'output``), or ``""``."""
    found = data_problem(value)
    if found is None:
        return ""
    if found.startswith("'"):  # a place inside it: 'a[1]' is not JSON data (date)
        inner = found[1:]
        return f"{opened}{'' if inner.startswith('[') else '.'}{inner}"
    return f"{opened}' {found}"


def _got(value: Any) -> str:
    """``value`` for a message, with its kind where the value alone does not say it."""
    if value is None:
        return "null (nothing)"
    if isinstance(value, bool):
        return f"{json.dumps(value)} (a boolean)"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:39] + "…"
        return f"{shown!r} (a string)"
    kinds = {list: "a list", dict: "a mapping"}
    return next((k for t, k in kinds.items() if isinstance(value, t)), type(value).__name__)


def _keys_problem(data: Mapping[Any, Any], allowed: tuple[str, ...], what: str) -> str:
    unknown = [str(k) for k in data if k not in allowed]
    if not unknown:
        return ""
    hint = did_you_mean(unknown[0], allowed)
    return f": unknown key '{unknown[0]}'{hint} ({what} may hold: {', '.join(allowed)})"


def turn_of(scenario: Mapping[str, Any], request: ProviderRequest) -> tuple[int, dict[str, Any]]:
    """The index and the data of the scenario turn that answers ``request``."""
    turns = _turns(scenario, request.node, request.visit)
    replies = sum(1 for m in request.messages if m.get("role") == "assistant")
    index = replies - request.turn_base
    if index >= len(turns):
        said = (
            f"the scenario has no turn {index} for node '{request.node}'"
            f" (run {request.visit + 1} of the node; it has {len(turns)} turn(s))"
        )
        refused = repair_reason(request.messages[-1]) if index and request.messages else None
        if refused is not None:  # the turn before gave an answer the schema refused
            said += (
                f": its turn {index - 1}'s answer was refused ({refused}), so the node asked"
                " for another; correct that turn's output (or add a turn that answers again)"
            )
        raise ScenarioError(said)
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
        meant = closest(node, [str(n) for n in nodes])
        hint = f" (it has turns for '{meant}': is that this node, misspelt?)" if meant else ""
        raise ScenarioError(f"the scenario has no turns for node '{node}'{hint}")
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
