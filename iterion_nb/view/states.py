"""Each node's state, read from a run's events and questions.

One vocabulary for every surface (the run widget, its saved snapshot, the
HTML and Markdown reports):

- ``pending``: not started yet (or stopped, and it will run again on resume);
- ``running``: started, not finished;
- ``waiting``: started and waiting on people or an event — a blocking
  question, an ``await_answers`` gate with questions still open, the
  agent's ``await_answers`` pause, a ``wait`` node;
- ``finished`` / ``failed``: its last visit ended so;
- ``skipped``: never started, and the run is over (a branch not taken).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from iterion_nb.ir import model as m
from iterion_nb.runtime.records import Event, Interaction

STATES = ("pending", "running", "waiting", "finished", "failed", "skipped")
#: Run statuses in which a started node may still be at work.
LIVE = ("running",)
#: Run statuses after which nothing runs again: a node never started was skipped.
OVER = ("finished", "failed")


@dataclass
class Visit:
    """One run of one node: when it started and ended, and how.

    ``state`` is ``finished`` or ``failed`` once it ended; an open visit is
    ``running`` or ``waiting`` while the run is live, ``pending`` in a run
    that stopped and may resume, ``skipped`` in one that is over; a visit
    left open by a stop and then started again reads ``stopped``.
    """

    node: str
    branch: str | None
    started: datetime
    ended: datetime | None = None
    state: str = "running"
    error: str | None = None


@dataclass(frozen=True)
class NodeView:
    """How one node is shown: its state, a line saying more, how often it ran."""

    state: str
    note: str
    visits: int = 0
    error: str | None = None

    @property
    def text(self) -> str:
        """The state as a person reads it (``waiting for 1 of 2 answers``)."""
        return self.note or self.state


def ended_as(event: Event) -> str | None:
    """``finished`` or ``failed`` for an event that ends a node's visit, else None."""
    if event.type == "node_finished":
        return "finished"
    if event.type == "node_failed":
        return "failed"
    if event.type == "branch_finished" and (event.data or {}).get("how") == "failed":
        return "failed"
    return None


def visits(
    events: Iterable[Event], run_status: str, waiting: Mapping[str, str] | None = None
) -> list[Visit]:
    """Every visit of every node, in order (loops and retries visit again).

    ``waiting`` names the nodes waiting on people or an event (see
    :func:`waiting_notes`): their open visits read ``waiting``.
    """
    waiting = waiting or {}
    found: list[Visit] = []
    open_: dict[tuple[str | None, str], Visit] = {}
    for event in events:
        node = event.node_id
        if node is None:
            continue
        key = (event.branch_id, node)
        if event.type == "node_started":
            left = open_.pop(key, None)
            if left is not None:  # stopped (a pause, a cancel, a dead kernel), then run again
                left.state = "stopped"
            visit = Visit(node, event.branch_id, event.at)
            open_[key] = visit
            found.append(visit)
            continue
        how = ended_as(event)
        if how is not None and key in open_:
            visit = open_.pop(key)
            visit.ended, visit.state = event.at, how
            if how == "failed":
                visit.error = str((event.data or {}).get("error") or "") or None
    for visit in open_.values():
        if run_status in LIVE:
            visit.state = "waiting" if visit.node in waiting else "running"
        elif visit.node in waiting and run_status == "paused_waiting_human":
            visit.state = "waiting"
        else:
            visit.state = "skipped" if run_status in OVER else "pending"
    return found


def _answers(asked: list[Interaction]) -> str:
    pending = sum(q.pending for q in asked)
    noun = "answer" if len(asked) == 1 else "answers"
    return f"waiting for {pending} of {len(asked)} {noun}"


def waiting_notes(
    workflow: m.Workflow | None,
    interactions: Iterable[Interaction],
    open_nodes: Iterable[str] = (),
) -> dict[str, str]:
    """What each waiting node waits for, by node (``waiting for 1 of 2 answers``).

    Blocking questions and the agent's ``await_answers`` pause come from the
    store; an ``await_answers`` node or a ``wait`` node among ``open_nodes``
    (started, not ended) waits by what it is.
    """
    records = list(interactions)
    by_id = {q.id: q for q in records}
    notes: dict[str, str] = {}
    for q in records:
        if not q.pending:
            continue
        if q.kind == "await":
            notes[q.node_id] = _answers([by_id[i] for i in q.waits_on if i in by_id])
        elif q.kind in ("human", "ask_user"):
            notes[q.node_id] = "waiting for an answer"
    nodes = workflow.nodes if workflow is not None else {}
    for name in open_nodes:
        node = nodes.get(name)
        if isinstance(node, m.AwaitAnswersNode):
            asked = [
                q for q in records
                if q.kind == "async" and node.from_node in (None, q.node_id)
            ]  # fmt: skip
            if any(q.pending for q in asked):
                notes[name] = _answers(asked)
        elif isinstance(node, m.WaitNode):
            notes[name] = f"waiting for event {node.event}"
    return notes


def node_views(
    workflow: m.Workflow | None,
    events: list[Event],
    interactions: list[Interaction],
    run_status: str,
) -> tuple[dict[str, NodeView], list[Visit]]:
    """Each node's view (every node of ``workflow``, plus any seen in events), and the visits."""
    started: dict[str, Any] = {}
    for event in events:
        if event.node_id is None:
            continue
        if event.type == "node_started":
            started[event.node_id] = True
        elif ended_as(event) is not None:
            started[event.node_id] = False
    open_nodes = [node for node, is_open in started.items() if is_open]
    notes = waiting_notes(workflow, interactions, open_nodes)
    found = visits(events, run_status, notes)
    by_node: dict[str, list[Visit]] = {}
    for visit in found:
        by_node.setdefault(visit.node, []).append(visit)
    names = list(workflow.nodes) if workflow is not None else []
    names += [n for n in by_node if n not in names]
    views: dict[str, NodeView] = {}
    for name in names:
        mine = by_node.get(name, [])
        if not mine:
            state = "skipped" if run_status in OVER else "pending"
            views[name] = NodeView(state, "")
            continue
        live = [v for v in mine if v.state in ("running", "waiting")]
        last = live[-1] if live else mine[-1]
        state = "pending" if last.state == "stopped" else last.state
        note = notes.get(name, "") if state == "waiting" else ""
        views[name] = NodeView(state, note, len(mine), last.error)
    return views, found
