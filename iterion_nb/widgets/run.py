"""The run widget: the workflow graph with each node's state, live; details; questions as forms.

Its header shows the status, the time the run has executed, and its tokens
and cost against the workflow's budget; clicking a node opens its details
(input, output, each model turn, tool calls, questions, timing), kept
current while it runs; its pending questions are forms under the graph.
Every display also leaves a static snapshot in the notebook (see
:mod:`iterion_nb.widgets.snapshot`).
"""

from __future__ import annotations

import asyncio
from html import escape
from typing import Any

import anywidget
import traitlets

from iterion_nb.errors import CompileError, NotFoundError
from iterion_nb.ir import compile_stored
from iterion_nb.ir import model as m
from iterion_nb.runtime.answers import is_cluster_run
from iterion_nb.runtime.ports import Store
from iterion_nb.runtime.records import Event, Interaction, Run
from iterion_nb.runtime.wire import event_json, interaction_json, waited_on
from iterion_nb.view import graph_layout, graph_svg
from iterion_nb.view.askers import Askers
from iterion_nb.view.states import NodeView, Visit, node_views
from iterion_nb.view.usage import usage
from iterion_nb.widgets.common import STATIC, AnswerFn, Answering, ended_text
from iterion_nb.widgets.details import node_details
from iterion_nb.widgets.live import Live, on_loop
from iterion_nb.widgets.snapshot import STYLE, Bundle, Snapshots, as_of, saved_line, svg_image

#: How many recent events the widget shows.
RECENT = 12
#: Statuses after which nothing changes any more (cancelled runs can be resumed).
SETTLED = ("finished", "failed")


def node_states(views: dict[str, NodeView]) -> dict[str, str]:
    """Node -> state, for the front-end."""
    return {name: view.state for name, view in views.items()}


def summary(event: Event) -> str:
    """One line about an event, for the recent-events list."""
    data = event.data if isinstance(event.data, dict) else {}
    for key in ("error", "interaction_id", "tool", "name", "how"):
        if key in data:
            return f"{key}: {str(data[key])[:120]}"
    return ""


class RunWidget(Answering, anywidget.AnyWidget):
    """One run, live: graph with node states, usage and budget, details, questions, status.

    ``answer`` (the same path as the API: ``RunHandle.answer``) lets its
    pending questions be answered from the widget; without it they are
    listed only. ``error`` also carries a failure of the task that drives
    the run in this kernel (see :meth:`show_failure`), so nothing is lost.
    """

    _esm = STATIC / "run.js"
    run_id = traitlets.Unicode("").tag(sync=True)
    workflow = traitlets.Unicode("").tag(sync=True)
    graph = traitlets.Dict().tag(sync=True)
    states = traitlets.Dict().tag(sync=True)
    notes = traitlets.Dict().tag(sync=True)
    status = traitlets.Unicode("").tag(sync=True)
    #: A Dask cluster executes the run: its workers take it up again when it is interrupted.
    cluster = traitlets.Bool(False).tag(sync=True)
    progress = traitlets.Dict().tag(sync=True)
    usage = traitlets.Dict().tag(sync=True)
    events: traitlets.List[dict[str, Any]] = traitlets.List().tag(sync=True)
    questions: traitlets.List[dict[str, Any]] = traitlets.List().tag(sync=True)
    error = traitlets.Unicode("").tag(sync=True)
    selected = traitlets.Unicode("").tag(sync=True)
    details = traitlets.Dict().tag(sync=True)
    answerable = traitlets.Bool(False).tag(sync=True)
    last_result = traitlets.Dict().tag(sync=True)

    def __init__(
        self,
        store: Store,
        run_id: str,
        workflow: m.Workflow | None = None,
        *,
        answer: AnswerFn | None = None,
        answered_by: str | None = None,
        interval: float = 0.5,
        **kwargs: Any,
    ) -> None:
        super().__init__(run_id=run_id, answerable=answer is not None, **kwargs)
        self.store = store
        self._wf = workflow
        self._answer = answer
        self.answered_by = answered_by
        self._tasks: set[asyncio.Task[Any]] = set()
        self._seq = 0
        self._events: list[Event] = []
        self._askers = Askers()  # what each question's card says of who waits for it
        self._interactions: list[Interaction] = []
        self._views: dict[str, NodeView] = {}
        self._visits: list[Visit] = []
        self._run: Run | None = None
        self._failure: str | None = None
        # the follower and a first display's refresh may overlap: one at a time, so
        # that each event is read once
        self._refreshing = asyncio.Lock()
        if workflow is not None:
            self._set_graph(workflow)
        self.snapshots = Snapshots(self.snapshot)
        self.on_msg(self._on_msg)
        self.observe(self._on_selected, names="selected")
        self.live = Live(store, run_id, self.refresh, interval)
        self.live.start()

    def _loop(self) -> asyncio.AbstractEventLoop | None:
        return self.live.loop

    def _pending_ids(self) -> set[str]:
        return {q.id for q in self._interactions if q.pending}

    def _set_graph(self, wf: m.Workflow) -> None:
        self._wf = wf
        self.workflow = wf.name
        self.graph = graph_layout(wf)
        self.progress = {**self.progress, "total": self._node_count()}

    def _node_count(self) -> int:
        """The workflow's nodes, its terminals (``done``, ``fail``) aside."""
        return sum(1 for n in self.graph.get("nodes", []) if not n.get("terminal"))

    # -- store -> state ------------------------------------------------------
    async def refresh(self) -> bool:
        """Read the run's record, new events and questions; False once it has settled."""
        async with self._refreshing:
            return await self._refresh()

    async def _refresh(self) -> bool:
        if getattr(self.store, "closed", False):
            return False
        try:
            run = await self.store.get_run(self.run_id)
        except NotFoundError:
            return True  # being created: the task that starts it is on its way
        if self._wf is None and run.source:
            try:
                self._set_graph(compile_stored(run.source, f"<run {run.id}>"))
            except CompileError:
                self.workflow = run.workflow
        fresh = await self.store.events(self.run_id, after=self._seq)
        if fresh:
            self._events.extend(fresh)
            self._seq = fresh[-1].seq
            self._askers.feed(self.run_id, fresh)
        self._interactions = await self.store.interactions(self.run_id)
        self._run = run
        self._views, self._visits = node_views(
            self._wf, self._events, self._interactions, run.status
        )
        self._publish(run)
        self.keep_banner_true(run.status, self._pending_ids())
        settled = run.status in SETTLED
        self.snapshots.changed(now=settled)
        return not settled

    def _publish(self, run: Run) -> None:
        views = self._views
        total = self._node_count()
        self.states = node_states(views)
        self.notes = {name: view.text for name, view in views.items()}
        self.progress = {
            "done": sum(1 for v in views.values() if v.state == "finished"),
            "total": total or len(views),
            "events": self._seq,
        }
        budget = self._wf.budget if self._wf is not None else None
        saved = (run.checkpoint or {}).get("usage", {})
        self.usage = usage(self._events, run.status, saved).as_json(budget)
        self.events = [{**event_json(e), "summary": summary(e)} for e in self._events[-RECENT:]]
        waited = waited_on(self._interactions)
        self.questions = [
            {
                **interaction_json(q),
                "run_status": run.status,
                "run_cluster": is_cluster_run(run),
                "waited_on": q.id in waited or self._askers.waits(q)[0],
                "asker_finished": self._askers.waits(q)[1],
            }
            for q in self._interactions
            if q.kind != "await"
        ]
        self.error = self._failure or run.error or ""
        self.cluster = is_cluster_run(run)
        self.status = run.status
        self._show_details()

    # -- details of the selected node ------------------------------------------
    def _on_selected(self, _change: Any) -> None:
        on_loop(self.live.loop, self._show_details)

    def _show_details(self) -> None:
        name = self.selected
        if not name:
            if self.details:
                self.details = {}
            return
        kind = next((n["kind"] for n in self.graph.get("nodes", []) if n["id"] == name), "node")
        details = node_details(
            name, kind, self._views.get(name), self._visits, self._events, self._interactions
        )
        if details != self.details:
            self.details = details

    # -- the saved snapshot ------------------------------------------------------
    def snapshot(self) -> Bundle:
        """The widget as it is now, as static HTML and as text, saying as of when.

        A saved notebook keeps the last snapshot: a run still going then reads
        ``running as of 12:03 UTC``, under a line saying it is not live.
        """
        views, status = self._views, self.status or "starting"
        p = self.progress
        when = as_of()
        shown = status if status in SETTLED else f"{status} as of {when[-9:]}"
        head = (
            f"Run {self.run_id} · {self.workflow} · {shown} · "
            f"{p.get('done', 0)}/{p.get('total', 0)} nodes finished"
        )
        saved = saved_line("view", when)
        states = "; ".join(f"{name} {view.text}" for name, view in views.items())
        text = [saved, head, f"Nodes: {states}" if states else "Nodes: (not started)"]
        html = [
            f'<div class="iterion-snapshot" data-run="{escape(self.run_id)}">{STYLE}',
            f"<div><small>{escape(saved)}</small></div><div><b>{escape(head)}</b></div>",
        ]
        if self.graph:
            svg = graph_svg(self.graph, views, prefix=f"snap-{self.run_id}", standalone=True)
            html.append(f"<div>{svg_image(svg, 'workflow graph: ' + states)}</div>")
        questions = [q for q in self._interactions if q.kind != "await"]
        if questions:
            html.append("<div>Questions:</div><ul>")
            for q in questions:
                line = _question_line(q)
                text.append("- " + line)
                html.append(f"<li>{escape(line)}</li>")
            html.append("</ul>")
        if self.error:
            text.append(f"Error: {self.error}")
            html.append(f"<pre>{escape(self.error)}</pre>")
        html.append("</div>")
        return {"text/html": "".join(html), "text/plain": "\n".join(text)}

    def show_failure(self, message: str) -> None:
        """Show an exception of the task driving the run (it is also recorded on the run)."""
        self._failure = message
        self.error = message

    def _on_other_msg(self, content: Any) -> None:
        if isinstance(content, dict) and content.get("type") == "refresh":
            on_loop(self.live.loop, lambda: self._spawn(self.refresh()))

    def plain_text(self) -> str:
        """What shows where widgets do not: a line naming the run (the snapshot has the rest)."""
        return f"Run {self.run_id}: the live run widget (its saved snapshot shows the last state)"

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        bundle: Any = super()._repr_mimebundle_(**kwargs)
        data = bundle[0] if isinstance(bundle, tuple) else bundle
        if isinstance(data, dict):
            data["text/plain"] = self.plain_text()
        self.snapshots.publish()
        return bundle

    def __repr__(self) -> str:
        return f"<Run {self.run_id} {self.status or 'starting'}>"

    def close(self) -> None:
        """Stop following the store and close the widget."""
        self.live.stop()
        self.snapshots.stop()
        super().close()


def _question_line(q: Interaction) -> str:
    labels = {o.id: o.label for o in q.options}
    asked = f"{q.node_id} asked: {q.question}"
    if q.pending:
        offered = ", ".join(o.label or o.id for o in q.options)
        return f"{asked}{f' (options: {offered})' if offered else ''} — waiting for an answer"
    if q.ended is not None:
        return f"{asked} — {ended_text(q.ended, q.end_reason)}"
    answer = q.answers if isinstance(q.answers, str) else str(q.answers)
    shown = labels.get(answer) or answer
    return f"{asked} — answered {shown!r} by {q.answered_by or 'someone'}"
