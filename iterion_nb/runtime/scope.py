"""What templates and expressions see while a node runs."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from iterion_nb.errors import IterionError
from iterion_nb.ir import model as m
from iterion_nb.ir.templates import RefPart, Template, stringify
from iterion_nb.runtime.state import RunState


class RenderError(IterionError):
    """A template or expression refers to something that has no value yet."""


class Scope:
    """The namespaces ``vars``, ``input``, ``outputs``, ``artifacts``, ``loop``, ``run``."""

    def __init__(
        self, wf: m.Workflow, state: RunState, run_id: str, node_input: Any,
        elapsed: float | None = None,
    ) -> None:  # fmt: skip
        self.wf = wf
        self.state = state
        self.run_id = run_id
        self.input = node_input
        #: Seconds the run has executed so far (else the last checkpoint's figure).
        self.elapsed = state.usage.elapsed_seconds if elapsed is None else elapsed

    def run_values(self) -> dict[str, Any]:
        """``run.*``: the run's id and what it has consumed, as its budget counts it."""
        usage = self.state.usage
        return {
            "id": self.run_id, "tokens": usage.tokens, "cost_usd": usage.cost_usd,
            "iterations": usage.iterations, "elapsed_seconds": round(self.elapsed, 3),
        }  # fmt: skip

    def namespaces(self) -> dict[str, Any]:
        """The namespaces as plain data, for the expression evaluator."""
        loops = {
            name: {
                "iteration": self.state.loops.get(name, 0), "max": self._loop_max(loop),
                "previous_output": self.state.loop_outputs.get(name),
            }
            for name, loop in self.wf.loops.items()
        }  # fmt: skip
        outputs: dict[str, Any] = dict(self.state.outputs)
        for name in {*self.state.history, *self.state.sessions}:
            output = outputs.get(name)
            if isinstance(output, Mapping):
                outputs[name] = node_output(output, self._extras(name))
        return {
            "vars": self.state.vars,
            "input": self.input if self.input is not None else {},
            "outputs": outputs,
            "artifacts": {k: v["value"] for k, v in self.state.artifacts.items()},
            "attachments": dict(self.state.attachments),
            "loop": loops,
            "run": self.run_values(),
        }

    def _loop_max(self, loop: m.Loop) -> int | None:
        """A loop's bound as the run reads it now (None: its template has no value yet)."""
        if loop.bound is None:
            return loop.max_iterations
        try:
            return loop_bound(loop, self.value(loop.bound))
        except RenderError:
            return None

    def _extras(self, node: str) -> dict[str, Any]:
        """What an expression finds on a node besides its output's fields."""
        extras: dict[str, Any] = {}
        if node in self.state.history:
            extras["history"] = self.state.history[node]
        if node in self.state.sessions:
            extras[SESSION_ID] = node
            extras[SESSION_FINGERPRINT] = fingerprint(self.state.sessions[node])
        return extras

    def lookup(self, path: tuple[str, ...]) -> Any:
        """The value of a dotted reference; :class:`RenderError` if it has none."""
        found = self._root(path)
        if found is None:
            return None  # loop.X.previous_output on the first pass: nothing before it
        value, rest = found
        for name in rest:
            if isinstance(value, dict) and name in value:
                value = value[name]
            else:
                raise RenderError(f"'{'.'.join(path)}' has no value")
        return value

    def _root(self, path: tuple[str, ...]) -> tuple[Any, list[str]] | None:
        """Where a reference starts: a value, and the fields still to follow in it."""
        head, rest = path[0], list(path[1:])
        state = self.state
        if head == "outputs" and rest:
            return self._output_root(path, rest)
        if head == "artifacts" and rest:
            if rest[0] not in state.artifacts:
                raise RenderError(f"'{'.'.join(path)}': nothing has been published yet")
            return state.artifacts[rest[0]]["value"], rest[1:]
        if head == "attachments" and rest:
            if rest[0] not in state.attachments:
                raise RenderError(f"'{'.'.join(path)}': no file was given for '{rest[0]}'")
            given = state.attachments[rest[0]]
            return (given, rest[1:]) if len(rest) > 1 else (given["path"], [])
        if head == "loop" and len(rest) >= 2 and rest[1] == "previous_output":
            if rest[0] not in state.loop_outputs:
                return None
            return state.loop_outputs[rest[0]], rest[2:]
        if head == "input":
            return self.input, rest
        if head == "vars":
            return state.vars, rest
        return self.namespaces()[head], rest

    def _output_root(self, path: tuple[str, ...], rest: list[str]) -> tuple[Any, list[str]]:
        """``outputs.NODE…``: its output, its loop history, or its conversation's id."""
        state = self.state
        if len(rest) >= 2 and rest[1] == "history":
            return state.history.get(rest[0], []), rest[2:]
        if len(rest) >= 2 and rest[1] in (SESSION_ID, SESSION_FINGERPRINT):
            if rest[0] not in state.sessions:
                raise RenderError(f"'{'.'.join(path)}': '{rest[0]}' has no conversation yet")
            if rest[1] == SESSION_FINGERPRINT:
                return fingerprint(state.sessions[rest[0]]), rest[2:]
            return rest[0], rest[2:]
        if rest[0] not in state.outputs:
            raise RenderError(f"'{'.'.join(path)}': node '{rest[0]}' has not run yet")
        return state.outputs[rest[0]], rest[1:]

    def render(self, template: Template) -> str:
        """Render a template to text (``${ENV}`` from the environment)."""
        return template.render(self.lookup, os.environ)

    def value(self, template: Template) -> Any:
        """Like :meth:`render`, but a template that is one ``{{ref}}`` keeps its data.

        So ``with { plan: "{{outputs.planner}}" }`` passes the planner's
        object, not its JSON text.
        """
        parts = template.parts
        if len(parts) == 1 and isinstance(parts[0], RefPart):
            return self.lookup(parts[0].path)
        return self.render(template)


def quoted_lookup(scope: Scope, quote: Callable[[str], str]) -> Callable[[tuple[str, ...]], Any]:
    """A lookup whose values are quoted as text (for shell commands)."""
    return lambda path: quote(stringify(scope.lookup(path)))


#: The field naming a node's conversation, for ``session: inherit`` / ``fork`` (upstream's name).
SESSION_ID = "_session_id"
#: Which backend holds that conversation (upstream passes it along with the id).
SESSION_FINGERPRINT = "_session_fingerprint"


def loop_bound(loop: m.Loop, value: Any) -> int:
    """A templated loop bound's value as a whole number ≥ 0 (upstream takes "3" too).

    Raises:
        RenderError: It is not one.
    """
    number: Any = value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        number = int(value.strip())
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    if isinstance(number, bool) or not isinstance(number, int) or number < 0:
        raise RenderError(f"gave {value!r}, not a whole number of iterations")
    return number


def fingerprint(session: Mapping[str, Any]) -> str:
    """The backend whose conversation ``session`` is (``claw`` or ``claude_code``)."""
    return str(session.get("backend") or "claw")


def node_output(output: Mapping[str, Any], extras: Mapping[str, Any]) -> dict[str, Any]:
    """A node's output as expressions see it: its fields, then ``history`` and ``_session_id``.

    (Templates find those two through :meth:`Scope.lookup`; an expression such
    as ``length(outputs.fix.history)`` reads them here. A field of the output
    with the same name wins.)
    """
    return {**extras, **output}
