"""One node in detail, for the run widget's panel: input, output, model turns, tools, questions.

Built from the run's events, so it follows the node live. Long values are
cut (the store keeps them whole): the panel is for reading, the report and
the store for everything.
"""

from __future__ import annotations

import json
from typing import Any

from iterion_nb.runtime.records import Event, Interaction
from iterion_nb.runtime.wire import interaction_json
from iterion_nb.view.states import NodeView, Visit

#: Longest value (as JSON) shown whole in the panel.
CHARS = 4000


def clipped(value: Any, limit: int = CHARS) -> Any:
    """``value``, or its JSON cut to ``limit`` characters with a note of the full size."""
    if value is None or isinstance(value, bool | int | float):
        return value
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    if len(text) <= limit:
        return value
    return text[:limit] + f"… ({len(text)} characters; the store has them all)"


def _at(event: Event) -> str:
    return event.at.isoformat()


def _turns(events: list[Event]) -> list[dict[str, Any]]:
    """Each model turn: what was asked (``llm_request``) and what came back."""
    turns: list[dict[str, Any]] = []
    for event in events:
        data = event.data or {}
        if event.type == "llm_request":
            turns.append({"at": _at(event), "request": clipped(data), "reply": None})
        elif event.type == "llm_step_finished":
            if not turns or turns[-1]["reply"] is not None:
                turns.append({"at": _at(event), "request": None, "reply": None})
            turns[-1]["reply"] = clipped(data)
            turns[-1]["ended"] = _at(event)
    return turns


def _tools(events: list[Event]) -> list[dict[str, Any]]:
    """Each tool call with what it gave back (a result or an error)."""
    calls: list[dict[str, Any]] = []
    for event in events:
        data = event.data or {}
        if event.type == "tool_called":
            calls.append({"at": _at(event), "tool": data.get("tool") or data.get("command"),
                          "input": clipped(data.get("input")), "result": None,
                          "error": None})  # fmt: skip
        elif event.type in ("tool_result", "tool_error"):
            tool = data.get("tool") or data.get("command")
            open_ = [c for c in calls if c["tool"] == tool and not (c["result"] or c["error"])]
            if not open_:
                calls.append({"at": _at(event), "tool": tool, "input": None, "result": None,
                              "error": None})  # fmt: skip
                open_ = calls[-1:]
            if event.type == "tool_error":
                open_[0]["error"] = clipped(data.get("error") or data.get("stderr") or data)
            else:
                open_[0]["result"] = clipped(data.get("result", data.get("output", data)))
    return calls


def node_details(
    node: str,
    kind: str,
    view: NodeView | None,
    visits: list[Visit],
    events: list[Event],
    interactions: list[Interaction],
) -> dict[str, Any]:
    """Everything the panel shows about ``node``."""
    mine = [e for e in events if e.node_id == node]
    started = [e for e in mine if e.type == "node_started"]
    finished = [e for e in mine if e.type == "node_finished"]
    visit_rows = [
        {"started": v.started.isoformat(), "ended": v.ended.isoformat() if v.ended else None,
         "seconds": (v.ended - v.started).total_seconds() if v.ended else None,
         "state": v.state, "error": v.error}
        for v in visits if v.node == node
    ]  # fmt: skip
    return {
        "node": node,
        "kind": kind,
        "state": view.state if view else "pending",
        "text": view.text if view else "pending",
        "visits": visit_rows,
        "input": clipped((started[-1].data or {}).get("input")) if started else None,
        "output": clipped((finished[-1].data or {}).get("output")) if finished else None,
        "turns": _turns(mine),
        "tools": _tools(mine),
        "questions": [
            interaction_json(q) for q in interactions if q.node_id == node and q.kind != "await"
        ],
        "events": len(mine),
    }
