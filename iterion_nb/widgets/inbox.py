"""The inbox: every pending question of a run (or of the whole store) as an answer form."""

from __future__ import annotations

import asyncio
from html import escape
from typing import Any

import anywidget
import traitlets

from iterion_nb.errors import NotFoundError
from iterion_nb.runtime.answers import is_cluster_run
from iterion_nb.runtime.ports import Store
from iterion_nb.runtime.records import Interaction
from iterion_nb.runtime.wire import interaction_json, waited_on
from iterion_nb.view.askers import Askers
from iterion_nb.widgets.common import (
    LIVE,
    STATIC,
    AnswerFn,
    Answering,
    ended_text,
    status_words,
)
from iterion_nb.widgets.live import Live
from iterion_nb.widgets.snapshot import STYLE, Bundle, Snapshots, as_of, saved_line

#: How many answered questions the history keeps.
HISTORY = 50


class InboxWidget(Answering, anywidget.AnyWidget):
    """Pending questions with their forms, and the ones answered since (live).

    ``run_id`` limits it to one run; without it, every run of the store.
    Submitting calls ``answer`` (the same path as the API: ``RunHandle.answer``)
    and says what it did. A click is answered by ``answered_by`` if given,
    else by the person at the notebook (see :func:`~iterion_nb.widgets.common.who_clicked`).
    Widget messages may arrive on a subshell thread; the work is always done
    on the loop it was made on.
    """

    _esm = STATIC / "inbox.js"
    scope = traitlets.Unicode("").tag(sync=True)
    pending: traitlets.List[dict[str, Any]] = traitlets.List().tag(sync=True)
    history: traitlets.List[dict[str, Any]] = traitlets.List().tag(sync=True)
    last_result = traitlets.Dict().tag(sync=True)

    def __init__(
        self,
        store: Store,
        answer: AnswerFn,
        run_id: str | None = None,
        *,
        answered_by: str | None = None,
        interval: float = 0.5,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope=f"run {run_id}" if run_id else "all runs", **kwargs)
        self.store = store
        self.run_id = run_id
        self.answered_by = answered_by
        self._answer = answer
        self._known: dict[str, dict[str, Any]] = {}
        self._workflows: dict[str, str] = {}
        self._cluster_runs: set[str] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._askers = Askers()
        self.snapshots = Snapshots(self.snapshot)
        self.live = Live(store, run_id, self.refresh, interval)
        self.on_msg(self._on_msg)
        self.live.start()

    def _loop(self) -> asyncio.AbstractEventLoop | None:
        return self.live.loop

    def _known_run(self, interaction_id: str) -> str | None:
        known = self._known.get(interaction_id)
        return (known or {}).get("run_id") or self.run_id

    def _pending_ids(self) -> set[str]:
        return set(self._known)

    async def _shown(
        self, q: Interaction, status: str | None = None, waits: tuple[bool, bool] = (False, False)
    ) -> dict[str, Any]:
        """A question for the front-end, with its run's workflow name and status.

        ``waits``: its run is paused at a sync point until it is answered; the node visit
        that asked it has finished (see :mod:`iterion_nb.view.askers`).
        """
        if q.run_id not in self._workflows:
            try:
                self._workflows[q.run_id] = (await self.store.get_run(q.run_id)).workflow
            except NotFoundError:
                self._workflows[q.run_id] = ""
        workflow = self._workflows[q.run_id]
        return {**interaction_json(q), "workflow": workflow, "run_status": status,
                "run_cluster": q.run_id in self._cluster_runs,
                "waited_on": waits[0], "asker_finished": waits[1]}  # fmt: skip

    def _waits(self, q: Interaction, waited: set[str]) -> tuple[bool, bool]:
        """(the run waits for its answer at a sync point, the visit that asked it finished)."""
        gate, finished = self._askers.waits(q)
        return q.id in waited or gate, finished

    async def _statuses(self, run_ids: set[str]) -> dict[str, str]:
        """Each run's status now (a question of a run nothing executes says so)."""
        found: dict[str, str] = {}
        for run_id in sorted(run_ids):
            try:
                run = await self.store.get_run(run_id)
            except NotFoundError:
                continue
            found[run_id] = run.status
            if is_cluster_run(run):  # (its workers take it up again, interrupted or answered)
                self._cluster_runs.add(run_id)
        return found

    # -- store -> state ------------------------------------------------------
    async def refresh(self) -> bool:
        """Read pending questions (and what left the list) from the store."""
        if getattr(self.store, "closed", False):
            return False
        every = await self.store.pending_interactions(self.run_id)
        waited = waited_on(every)
        records = [q for q in every if q.kind != "await"]
        banner = self._banner.run_id if self._banner else ""
        statuses = await self._statuses({q.run_id for q in records} | {banner} - {""})
        await self._askers.read(self.store, records)
        pending = [await self._shown(q, statuses.get(q.run_id), self._waits(q, waited))
                   for q in records]  # fmt: skip
        ids = {q["id"] for q in pending}
        gone = [iid for iid in self._known if iid not in ids]
        history = list(self.history)
        if self.run_id is not None and not self._known and not history:
            # a run's inbox starts with the run's answered questions
            answered = [q for q in await self.store.interactions(self.run_id) if not q.pending]
            history = [await self._shown(q) for q in answered if q.kind != "await"][::-1]
        for iid in gone:
            history.insert(0, await self._shown(await self.store.get_interaction(iid)))
        self._known = {q["id"]: q for q in pending}
        if pending != self.pending:
            self.pending = pending
        if history[:HISTORY] != self.history:
            self.history = history[:HISTORY]
        self.keep_banner_true(statuses.get(banner), ids)
        self.snapshots.changed()
        return True

    # -- the saved snapshot ------------------------------------------------------
    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        bundle: Any = super()._repr_mimebundle_(**kwargs)
        data = bundle[0] if isinstance(bundle, tuple) else bundle
        if isinstance(data, dict):  # where widgets do not render: a line, not an object
            data["text/plain"] = f"Inbox ({self.scope}): the live inbox widget"
        self.snapshots.publish()
        return bundle

    def snapshot(self) -> Bundle:
        """The inbox as it is now, as of when: its questions and answers, as text."""
        when = as_of()
        saved = saved_line("inbox", when)
        head = f"Inbox — {self.scope} · {len(self.pending)} pending as of {when[-9:]}"
        text, items = [saved, head], []
        for q in self.pending:
            options = ", ".join(o.get("label") or o["id"] for o in q["options"])
            line = f"{q['node_id']} asks: {q['question']}" + (f" ({options})" if options else "")
            status = q.get("run_status")
            if status and status not in LIVE:
                line += f" — run {q['run_id']} is {status_words(status)}"
            text.append("- " + line)
            items.append(f"<li>{escape(line)}</li>")
        for q in self.history:
            labels = {o["id"]: o.get("label") for o in q["options"]}
            answer = q["answers"] if isinstance(q["answers"], str) else str(q["answers"])
            shown = labels.get(answer) or answer
            line = f"{q['question']} — answered {shown!r} by {q.get('answered_by') or 'someone'}"
            if q.get("ended"):
                line = f"{q['question']} — {ended_text(q['ended'], q.get('end_reason'))}"
            text.append("- " + line)
            items.append(f"<li>{escape(line)}</li>")
        html = (
            f'<div class="iterion-snapshot inbox">{STYLE}<div><small>{escape(saved)}</small></div>'
            f"<div><b>{escape(head)}</b></div><ul>{''.join(items)}</ul></div>"
        )
        return {"text/html": html, "text/plain": "\n".join(text)}

    def __repr__(self) -> str:
        return f"<Inbox {self.scope}: {len(self.pending)} pending>"

    def close(self) -> None:
        """Stop following the store and close the widget."""
        self.live.stop()
        self.snapshots.stop()
        super().close()
