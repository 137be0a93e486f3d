"""The run widget: node states over the workflow graph, progress, events, questions, status."""

from __future__ import annotations

from typing import Any

import anywidget
import traitlets

from iterion_nb.errors import CompileError, NotFoundError
from iterion_nb.ir import compile_workflow
from iterion_nb.ir import model as m
from iterion_nb.ir.layout import graph_layout
from iterion_nb.runtime.ports import Store
from iterion_nb.runtime.records import Event
from iterion_nb.runtime.wire import event_json, interaction_json
from iterion_nb.widgets.common import STATIC
from iterion_nb.widgets.live import Live

#: How many recent events the widget shows.
RECENT = 12
#: Statuses after which nothing changes any more (cancelled runs can be resumed).
SETTLED = ("finished", "failed")


def node_states(events: list[Event], pending_blocking: set[str]) -> dict[str, str]:
    """Each node's state from the run's events: running, done, failed or parked.

    A node is parked while a blocking question of it (``ask_user``, a human
    gate, an ``await`` pause) is pending; a node never started is pending
    (absent from the result).
    """
    states: dict[str, str] = {}
    for event in events:
        node = event.node_id
        if node is None:
            continue
        if event.type == "node_started":
            states[node] = "running"
        elif event.type == "node_finished":
            states[node] = "done"
        elif event.type == "node_failed" or (
            event.type == "branch_finished" and (event.data or {}).get("how") == "failed"
        ):
            states[node] = "failed"
    for node in pending_blocking:
        states[node] = "parked"
    return states


def summary(event: Event) -> str:
    """One line about an event, for the recent-events list."""
    data = event.data if isinstance(event.data, dict) else {}
    for key in ("error", "interaction_id", "tool", "name", "how"):
        if key in data:
            return f"{key}: {str(data[key])[:120]}"
    return ""


class RunWidget(anywidget.AnyWidget):
    """One run, live: graph with node states, progress, recent events, questions, status.

    ``error`` also carries a failure of the task that drives the run in this
    kernel (see :meth:`show_failure`), so nothing that goes wrong is lost.
    """

    _esm = STATIC / "run.js"
    run_id = traitlets.Unicode("").tag(sync=True)
    workflow = traitlets.Unicode("").tag(sync=True)
    graph = traitlets.Dict().tag(sync=True)
    states = traitlets.Dict().tag(sync=True)
    status = traitlets.Unicode("").tag(sync=True)
    progress = traitlets.Dict().tag(sync=True)
    events: traitlets.List[dict[str, Any]] = traitlets.List().tag(sync=True)
    questions: traitlets.List[dict[str, Any]] = traitlets.List().tag(sync=True)
    error = traitlets.Unicode("").tag(sync=True)

    def __init__(
        self,
        store: Store,
        run_id: str,
        workflow: m.Workflow | None = None,
        *,
        interval: float = 0.5,
        **kwargs: Any,
    ) -> None:
        super().__init__(run_id=run_id, **kwargs)
        self.store = store
        self._wf = workflow
        self._seq = 0
        self._events: list[Event] = []
        self._failure: str | None = None
        if workflow is not None:
            self._set_graph(workflow)
        self.live = Live(store, run_id, self.refresh, interval)
        self.live.start()

    def _set_graph(self, wf: m.Workflow) -> None:
        self._wf = wf
        self.workflow = wf.name
        self.graph = graph_layout(wf)

    async def refresh(self) -> bool:
        """Read the run's record, new events and questions; False once it has settled."""
        if getattr(self.store, "closed", False):
            return False
        try:
            run = await self.store.get_run(self.run_id)
        except NotFoundError:
            return True  # being created: the task that starts it is on its way
        if self._wf is None and run.source:
            try:
                self._set_graph(compile_workflow(run.source, f"<run {run.id}>"))
            except CompileError:
                self.workflow = run.workflow
        fresh = await self.store.events(self.run_id, after=self._seq)
        if fresh:
            self._events.extend(fresh)
            self._seq = fresh[-1].seq
        interactions = await self.store.interactions(self.run_id)
        blocking = {q.node_id for q in interactions if q.pending and q.kind != "async"}
        states = node_states(self._events, blocking)
        total = len(self.graph.get("nodes", [])) or len(states)
        self.states = states
        self.progress = {
            "done": sum(1 for s in states.values() if s == "done"),
            "total": total,
            "events": self._seq,
        }
        self.events = [{**event_json(e), "summary": summary(e)} for e in self._events[-RECENT:]]
        self.questions = [interaction_json(q) for q in interactions if q.kind != "await"]
        self.error = self._failure or run.error or ""
        self.status = run.status
        return run.status not in SETTLED

    def show_failure(self, message: str) -> None:
        """Show an exception of the task driving the run (it is also recorded on the run)."""
        self._failure = message
        self.error = message

    def close(self) -> None:
        """Stop following the store and close the widget."""
        self.live.stop()
        super().close()
