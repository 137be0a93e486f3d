"""What the magics give back: a run handle shown as its widget, answers in words, late results."""

from __future__ import annotations

import asyncio
import contextvars
import json
import traceback
from typing import Any

from IPython.core.error import UsageError

from iterion_nb.errors import withdrawn_by
from iterion_nb.ir import model as m
from iterion_nb.magics.display import Table
from iterion_nb.runtime.records import Interaction
from iterion_nb.session import RunHandle, Session
from iterion_nb.widgets import InboxWidget, RunWidget
from iterion_nb.widgets.common import outcome_text


class LiveRun(RunHandle):
    """A run handle whose display is the live run widget (and its saved snapshot)."""

    def __init__(self, session: Session, run_id: str, workflow: m.Workflow | None = None) -> None:
        super().__init__(session, run_id)
        self._workflow = workflow
        self._widget: RunWidget | None = None

    @property
    def widget(self) -> RunWidget:
        """The run widget (made on first use, then shared by every display)."""
        if self._widget is None:
            self._widget = RunWidget(
                self.session.store, self.id, self._workflow, answer=answerer(self.session)
            )
            failure = self.session.failures.get(self.id)
            if failure:
                self._widget.show_failure(failure)
        return self._widget

    async def shown(self) -> LiveRun:
        """This handle, its widget brought to the run's state first (returns ``self``).

        A cell's first display of the widget must already be true: a notebook
        executed by nbconvert (nbclient) keeps it as it was then, since it
        drops the updates a cell's output gets once a later cell runs. So the
        snapshot of a settled run is its final state, and that of a run just
        started names its workflow and its nodes.
        """
        await self.widget.refresh()
        return self

    def inbox(self) -> InboxWidget:
        """An inbox for this run's questions."""
        return inbox(self.session, self.id)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Any:
        bundle: Any = self.widget._repr_mimebundle_(include=include, exclude=exclude)
        data = bundle[0] if isinstance(bundle, tuple) else bundle
        if isinstance(data, dict):  # where widgets do not render: a line, not an object
            data["text/plain"] = self.widget.plain_text()
        return bundle


def answerer(session: Session) -> Any:
    """The widgets' way to answer: the run handle's (one answer path)."""

    async def answer(run_id: str, iid: str, value: Any, by: str) -> dict[str, Any]:
        return await session.run(run_id).answer(iid, value, answered_by=by)

    return answer


def inbox(session: Session, run_id: str | None) -> InboxWidget:
    """An inbox over ``session``'s store, answering through it."""
    return InboxWidget(session.store, answerer(session), run_id)


class Answered(dict[str, Any]):
    """What ``%iterion answer`` did: ``{"queued", "resumed", "run_status"}``, as a sentence.

    The sentence is the widgets' (:func:`~iterion_nb.widgets.common.outcome_text`):
    an answer to a run nothing executes says it waits for ``%iterion resume RUN``.
    """

    def __init__(
        self, outcome: dict[str, Any], text: str | None = None, run_id: str | None = None
    ) -> None:
        super().__init__(outcome)
        self.text = text or outcome_text(outcome, run_id)

    def __repr__(self) -> str:
        return self.text

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.text)


def answer_shown(q: Interaction) -> str:
    """A question's answer as a person reads it: its option's label, other data as JSON."""
    if q.pending:
        return "(pending)"
    if q.ended == "expired":
        return "(expired unanswered)"
    if q.ended is not None:
        return f"(withdrawn: {q.end_reason})" if q.end_reason else "(withdrawn by its asker)"
    if isinstance(q.answers, str):
        return next((o.label for o in q.options if o.id == q.answers), q.answers)
    return json.dumps(q.answers, ensure_ascii=False)


def not_pending(q: Interaction) -> str:
    """Why an answer given only if ``q`` is pending was not sent (``--if-pending``)."""
    if q.ended == "expired":
        return "The question expired unanswered"
    if q.ended is not None:
        if withdrawn_by(q.end_reason) == "its run":  # (the reason says how the run ended)
            return f"The question was withdrawn: {q.end_reason}"
        reason = f": {q.end_reason}" if q.end_reason else ""
        return f"The question was withdrawn by its asker{reason}"
    shown = answer_shown(q)
    return f"Already answered by {q.answered_by or 'someone'}: " + (
        repr(shown) if isinstance(q.answers, str) else shown
    )


class Questions(list[Interaction]):
    """A run's questions (the records), shown as a table: who answered what."""

    def table(self) -> Table:
        """The questions as rows: node, kind, question, answer, who answered."""
        rows = []
        for q in self:
            rows.append(
                [q.node_id, q.kind, " / ".join(q.questions), answer_shown(q), q.answered_by or ""]
            )
        return Table(f"{len(self)} question(s)", ["node", "kind", "question", "answer", "by"], rows)

    def __repr__(self) -> str:
        return repr(self.table())

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


class Deferred:
    """A magic's result that the cell could not await; shown in the cell once it is ready.

    The transformer that awaits the magics is added by ``%load_ext``, after
    IPython has read the cell it is in: a magic later in that same cell runs
    as a task, and its result (or its one-line error) replaces a placeholder
    when it is done. ``await`` it to get the result itself.
    """

    def __init__(self, task: asyncio.Task[Any], what: str) -> None:
        self.task = task
        self.what = what

    def __await__(self) -> Any:
        return self.task.__await__()

    def __repr__(self) -> str:
        return f"<{self.what}: {'done' if self.task.done() else 'running'}>"

    def _ipython_display_(self) -> None:
        from IPython.display import display

        handle = display({"text/plain": f"{self.what} …"}, raw=True, display_id=True)  # type: ignore[no-untyped-call]
        context = contextvars.copy_context()

        def shown(task: asyncio.Task[Any]) -> None:
            context.run(_show, handle, task)

        self.task.add_done_callback(shown)


def _show(handle: Any, task: asyncio.Task[Any]) -> None:
    if task.cancelled():
        handle.update({"text/plain": "cancelled"}, raw=True)
        return
    err = task.exception()
    if isinstance(err, UsageError):
        handle.update({"text/plain": f"UsageError: {err}"}, raw=True)
    elif err is not None:
        text = "".join(traceback.format_exception(err))
        handle.update({"text/plain": text}, raw=True)
    elif task.result() is None:
        handle.update({"text/plain": ""}, raw=True)
    else:
        handle.update(task.result())
