"""A run seen from Python: its status, outputs, events, questions; answer, wait, cancel."""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any

from iterion_nb.errors import ResumeError, RunOwnedError
from iterion_nb.report import render, write_report
from iterion_nb.report.build import format_for
from iterion_nb.runtime.engine import Engine
from iterion_nb.runtime.ownership import cancel_wait
from iterion_nb.runtime.records import Event, Interaction, Run, RunStatus
from iterion_nb.session import args
from iterion_nb.session.cluster import EXECUTOR

if TYPE_CHECKING:
    from iterion_nb.session.core import Session

#: How often a handle re-reads a run that executes in another process.
FOLLOW_INTERVAL = 0.5


class RunHandle:
    """One run, seen from Python."""

    def __init__(self, session: Session, run_id: str) -> None:
        self.session = session
        self.id = run_id
        self._record: Run | None = None

    @property
    def _engine(self) -> Engine | None:
        return self.session.engine(self.id)

    @property
    def status(self) -> RunStatus:
        """The live status, or the last one read from the store."""
        engine = self._engine
        if engine is not None:
            return engine.status
        task = self.session._tasks.get(self.id)
        if task is not None and task.done() and not task.cancelled() and not task.exception():
            return task.result()
        return self._record.status if self._record else "running"

    @property
    def outputs(self) -> dict[str, Any]:
        """Every node's last output so far."""
        engine = self._engine
        if engine is not None:
            return dict(engine.state.outputs)
        if self.id in self.session._final_outputs:  # ran here: as the engine left them
            return dict(self.session._final_outputs[self.id])
        if self._record and self._record.checkpoint:
            return dict(self._record.checkpoint.get("outputs", {}))
        return {}

    @property
    def error(self) -> str | None:
        """Why the run failed, if it did (as of the last refresh or wait)."""
        return self._record.error if self._record else None

    async def refresh(self) -> Run:
        """Read the run's record from the store."""
        self._record = await self.session.store.get_run(self.id)
        return self._record

    async def wait(self, timeout: float | None = None) -> RunStatus:
        """Wait until the run settles (finished, failed, paused, cancelled or interrupted).

        A run executing in another process is followed through the store. A
        cluster run that reads ``interrupted`` (its worker died, the store was
        away) is followed on: the cluster takes it back.
        """
        args.seconds("timeout", timeout)
        task = self.session._tasks.get(self.id)
        if task is not None:
            await asyncio.wait_for(self._settled_here(task), timeout)
            return (await self.refresh()).status
        return await asyncio.wait_for(self._follow(), timeout)

    async def _settled_here(self, task: asyncio.Future[RunStatus]) -> None:
        """Until the run's task here is done, and any resume here that followed at once."""
        while True:
            await asyncio.shield(task)
            await asyncio.sleep(0)  # a parked run whose answers are in resumes right away
            following = self.session._tasks.get(self.id)
            if following is None or following is task or following.done():
                return
            task = following

    async def _follow(self) -> RunStatus:
        bell = self.session.store.doorbell  # type: ignore[attr-defined]
        while True:
            with bell.arm(self.id) as ticket:
                record = await self.refresh()
                # a cluster run nobody executes for a moment (its worker died, the store
                # was away) is taken back by the cluster: it has not settled
                cluster = record.launch.get("executor") == EXECUTOR
                if record.status != "running" and not (cluster and record.status == "interrupted"):
                    return record.status
                task = self.session._tasks.get(self.id)
                if task is not None:  # resumed here meanwhile
                    await asyncio.shield(task)
                    continue
                await ticket.wait(timeout=FOLLOW_INTERVAL)

    async def events(self, after: int = 0) -> list[Event]:
        """The run's events with ``seq > after``."""
        return await self.session.store.events(self.id, after=args.whole("after", after, 0))

    async def pending_questions(self) -> list[Interaction]:
        """The run's unanswered questions, oldest first (an ``await`` pause is not one)."""
        pending = await self.session.store.pending_interactions(self.id)
        return [i for i in pending if i.kind != "await"]

    async def questions(self) -> list[Interaction]:
        """Every question of the run, answered or not, oldest first (answers and who gave them)."""
        found = await self.session.store.interactions(self.id)
        return [i for i in found if i.kind != "await"]

    async def next_question(self, timeout: float | None = None) -> Interaction | None:
        """The first pending question, waiting up to ``timeout`` for one to be asked."""
        args.seconds("timeout", timeout)
        store = self.session.store
        bell = store.doorbell  # type: ignore[attr-defined]
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            with bell.arm(self.id) as ticket:
                pending = await self.pending_questions()
                if pending:
                    return pending[0]
                task = self.session._tasks.get(self.id)
                if task is not None and task.done():
                    return None
                left = None if deadline is None else deadline - loop.time()
                if left is not None and left <= 0:
                    return None
                await ticket.wait(timeout=min(left, 0.5) if left is not None else 0.5)

    async def answer(
        self, interaction_id: str, answer: Any, *, answered_by: str = "python"
    ) -> dict[str, Any]:
        """Answer one of the run's questions; returns ``{"queued", "resumed"}``.

        An async question's answer is queued for the agent (the run goes on or
        stays as it is). The answer to the question a paused run waits on
        resumes it; so does the last answer an ``await`` pause waits for.
        """
        args.text_id("interaction_id", interaction_id)
        args.text_id("answered_by", answered_by)
        outcome = await self.session.answers.answer(self.id, interaction_id, answer, answered_by)
        return outcome.to_dict()

    async def cancel(self) -> RunStatus:
        """Cancel the run (it stays resumable) and wait for it to settle.

        A run executing in another process is asked to stop; its owner stops
        it at its next heartbeat. A run still queued for a cluster ends
        ``cancelled`` when a worker takes it: waited for a few seconds only,
        it may still read ``running`` (with ``cancel_requested``) on return.
        """
        engine = self._engine
        if engine is not None:
            engine.cancel()
            status = await self.wait()
            if status != "paused_waiting_human":
                return status
            # it was recording a pause as the cancel came: cancel the paused run (below)
        record = await self.session.store.cancel_run(self.id)
        if record.status == "running":
            try:
                return await asyncio.wait_for(self._follow(), cancel_wait(record))
            except TimeoutError:
                return (await self.refresh()).status
        self._record = record
        return record.status

    async def report(
        self,
        format: str | None = None,  # noqa: A002 - the word users know
        path: str | os.PathLike[str] | None = None,
    ) -> str:
        """The run's report as Markdown (default) or HTML; also written to ``path`` if given.

        The format follows ``path``'s suffix (``.html``) unless given. A live
        run gets a report of its state so far, marked as such.
        """
        fmt = format_for(path, format)
        await self.session.store.flush()
        text = await render(self.session.store, self.id, fmt)
        if path is not None:
            write_report(text, path)
        return text

    async def resume(self, **kwargs: Any) -> RunHandle:
        """Same as :meth:`Session.resume` for this run.

        Raises:
            ResumeError: This very session executes the run (an answer resumed it).
        """
        try:
            return await self.session.resume(self.id, **kwargs)
        except RunOwnedError:
            if self._engine is None:
                raise
            raise ResumeError(
                f"run {self.id} is already running in this session (an answer resumed it):"
                " wait for it with `await run.wait()`"
            ) from None

    def __repr__(self) -> str:
        return f"<Run {self.id} {self.status}>"
