"""The composition root: a store, a backend, and the runs started with them.

::

    import iterion_nb as it

    wf = it.compile(source)
    session = it.Session(".iterion", backend=my_backend)   # DuckDB under .iterion/
    run = await session.start(wf, vars={"topic": "tea"})   # returns at once
    q = await run.next_question(timeout=5)
    await run.answer(q.id, "formal")                       # {"queued": ..., "resumed": ...}
    await run.wait()
    run.status, run.outputs
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import traceback
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iterion_nb.api.holder import Holder
from iterion_nb.backends.router import BackendRouter
from iterion_nb.errors import NotFoundError, ResumeError, RunError
from iterion_nb.ir import compile_workflow
from iterion_nb.ir import model as m
from iterion_nb.report import render, write_report
from iterion_nb.report.build import format_for
from iterion_nb.runtime.engine import Engine, Outcome
from iterion_nb.runtime.ports import Backend, Store
from iterion_nb.runtime.records import RUN_STATUSES, Event, Interaction, Run, RunStatus, utcnow
from iterion_nb.runtime.state import Frontier, RunState
from iterion_nb.runtime.values import resolve_vars
from iterion_nb.store import DuckDBStore
from iterion_nb.store.remote import open_store

RESUMABLE: tuple[RunStatus, ...] = ("paused_waiting_human", "failed_resumable", "cancelled")
SETTLED: tuple[RunStatus, ...] = (
    "finished", "failed", "failed_resumable", "cancelled", "paused_waiting_human"
)  # fmt: skip

#: Engines running in this process, by (store, run id): a run is live here or nowhere,
#: because the process that holds a DuckDB file is the only one that can run on it.
_LIVE: dict[tuple[int, str], Engine] = {}


@dataclass(frozen=True)
class AnswerOutcome:
    """What answering did: queued a message for the agent, resumed the run."""

    queued: bool
    resumed: bool

    def to_dict(self) -> dict[str, bool]:
        """``{"queued": ..., "resumed": ...}``."""
        return {"queued": self.queued, "resumed": self.resumed}


class Session:
    """Starts, resumes and looks up runs on one store with one backend.

    Args:
        store: A Store, or where the DuckDB store lives (see
            :func:`~iterion_nb.store.resolve_store_path`); default ``.iterion/``.
        backend: What runs agent, judge and llm nodes; by default the in-process
            loop (``claw``), whose ``scripted`` model answers from ``scenario``.
        scenario: The scripted provider's scenario (a dict or a YAML/JSON file).
        workdir: Where tool commands run (default: the current directory).
        poll_interval: The ``await_answers`` fallback poll, in seconds.
    """

    def __init__(
        self,
        store: Store | str | os.PathLike[str] | None = None,
        *,
        backend: Backend | None = None,
        scenario: Mapping[str, Any] | str | os.PathLike[str] | None = None,
        workdir: str | os.PathLike[str] | None = None,
        poll_interval: float = 5.0,
        serve: bool = True,
    ) -> None:
        if store is None or isinstance(store, str | os.PathLike):
            self.store: Store = open_store(store, on_take_over=self._took_over)
            self._owns_store = True
        else:
            self.store = store
            self._owns_store = False
        self.backend: Backend = backend or _claw(scenario)
        self.workdir = Path(workdir) if workdir is not None else Path.cwd()
        self.poll_interval = poll_interval
        self._tasks: dict[str, asyncio.Task[RunStatus]] = {}
        #: Tracebacks of runs whose driving task failed unexpectedly, by run id.
        self.failures: dict[str, str] = {}
        self._final_outputs: dict[str, dict[str, Any]] = {}
        self._scenarios: dict[str, Mapping[str, Any] | str | os.PathLike[str]] = {}
        self._backend_names: dict[str, str] = {}
        self._serve = serve
        self.holder: Holder | None = None

    def _took_over(self, local: Store) -> None:
        """The holder we used died and this process opened the file: serve it now."""
        if self._serve and self.holder is None and isinstance(local, DuckDBStore):
            loop = asyncio.get_running_loop()
            self.holder = Holder(SessionService(self), local, local.path, loop).start()

    def serve(self) -> Holder | None:
        """Serve the REST API for this session's DuckDB file (done by start and resume).

        Other processes (the CLI, another kernel) find the server through the
        holder file and answer questions of this process's runs through it.
        """
        if self.holder is None and self._serve and isinstance(self.store, DuckDBStore):
            loop = asyncio.get_running_loop()
            self.holder = Holder(SessionService(self), self.store, self.store.path, loop).start()
        return self.holder

    # -- starting and resuming ----------------------------------------------
    async def start(
        self,
        workflow: m.Workflow | str,
        vars: dict[str, Any] | None = None,  # noqa: A002 - the name users know
        *,
        run_id: str | None = None,
        source: str | None = None,
        scenario: Mapping[str, Any] | str | os.PathLike[str] | None = None,
        backend: str | None = None,
    ) -> RunHandle:
        """Start a run as a background task and return its handle at once.

        ``backend`` names the backend for nodes that name none (instead of the
        workflow's ``default_backend``), when the session uses the default backends.

        Raises:
            VarsError: A variable is missing, unknown or of the wrong type
                (nothing is recorded).
        """
        wf, text = _workflow(workflow, source)
        values = resolve_vars(wf, vars)
        now = utcnow()
        run = Run(
            id=run_id or uuid.uuid4().hex[:12],
            workflow=wf.name,
            source_hash=wf.source_hash,
            status="running",
            created_at=now,
            updated_at=now,
            source=text,
            vars=values,
        )
        self.serve()
        await self.store.create_run(run)
        if backend is not None:
            self._backend_names[run.id] = backend
        state = RunState(vars=values)
        state.frontier["b0"] = Frontier("b0", wf.entry, {})
        self._launch(wf, run.id, state, resumed=False, scenario=scenario)
        return RunHandle(self, run.id)

    async def resume(
        self,
        run_id: str,
        *,
        answers: dict[str, Any] | None = None,
        workflow: m.Workflow | str | None = None,
        force: bool = False,
        answered_by: str = "python",
        scenario: Mapping[str, Any] | str | os.PathLike[str] | None = None,
    ) -> RunHandle:
        """Resume a paused, failed-resumable or cancelled run from its checkpoint.

        ``answers`` (interaction id -> answer) are recorded first. Without
        ``workflow`` the run's own source is used; a different source is
        refused unless ``force``. A run left ``running`` by a dead process is
        resumable too.
        """
        self.serve()
        run = await self.store.get_run(run_id)
        if (id(self.store), run_id) in _LIVE:
            raise ResumeError(f"run '{run_id}' is running")
        if run.status not in (*RESUMABLE, "running"):
            raise ResumeError(f"run '{run_id}' is {run.status} and cannot be resumed")
        if workflow is None:
            wf = compile_workflow(run.source, f"<run {run_id}>")
            text = run.source
        else:
            wf, text = _workflow(workflow, None)
            if wf.source_hash != run.source_hash and not force:
                raise ResumeError(
                    f"the workflow of run '{run_id}' changed since it started; pass force=True"
                    " to resume with the new source"
                )
        for iid, answer in (answers or {}).items():
            await self._record_answer(run_id, iid, answer, answered_by)
        state = RunState.from_checkpoint(run.checkpoint or {})
        if not state.frontier and run.checkpoint is None:
            state = RunState(vars=run.vars)
            state.frontier["b0"] = Frontier("b0", wf.entry, {})
        state.pending_interaction = None
        state.waiting_on = []
        await self.store.update_run(
            run_id, status="running", error=None, source_hash=wf.source_hash, source=text
        )
        self._launch(wf, run_id, state, resumed=True, scenario=scenario)
        return RunHandle(self, run_id)

    def _launch(
        self, wf: m.Workflow, run_id: str, state: RunState, *, resumed: bool,
        scenario: Mapping[str, Any] | str | os.PathLike[str] | None = None,
    ) -> None:  # fmt: skip
        # a run started with its own scenario keeps it when this session resumes it
        scenario = scenario if scenario is not None else self._scenarios.get(run_id)
        if scenario is not None:
            self._scenarios[run_id] = scenario
        backend = _claw(scenario) if scenario is not None else self.backend
        if isinstance(backend, BackendRouter):
            backend = backend.with_default(self._backend_names.get(run_id) or wf.default_backend)
        engine = Engine(
            wf, self.store, backend, run_id, state,
            workdir=self.workdir, poll_interval=self.poll_interval,
        )  # fmt: skip
        key = (id(self.store), run_id)
        _LIVE[key] = engine

        async def drive() -> RunStatus:
            try:
                return await engine.run(resumed=resumed)
            except Exception as err:  # a bug or a store failure: record it, never lose it
                self.failures[run_id] = "".join(traceback.format_exception(err))
                message = f"internal error: {type(err).__name__}: {err}"
                with contextlib.suppress(Exception):
                    await self.store.append_event(
                        run_id, "run_failed", {"error": message, "resumable": True}
                    )
                    await self.store.update_run(run_id, status="failed_resumable", error=message)
                return "failed_resumable"
            finally:
                self._final_outputs[run_id] = dict(engine.state.outputs)
                _LIVE.pop(key, None)

        self._tasks[run_id] = asyncio.ensure_future(drive())

    # -- looking up ---------------------------------------------------------
    def run(self, run_id: str) -> RunHandle:
        """A handle on an existing run (live or not)."""
        return RunHandle(self, run_id)

    async def runs(self, *, status: RunStatus | None = None, limit: int = 100) -> list[Run]:
        """Runs in the store, newest first."""
        return await self.store.list_runs(status=status, limit=limit)

    def engine(self, run_id: str) -> Engine | None:
        """The engine running ``run_id`` in this process, if any."""
        return _LIVE.get((id(self.store), run_id))

    async def _record_answer(self, run_id: str, iid: str, answer: Any, by: str) -> bool:
        interaction = await self.store.get_interaction(iid)
        if interaction.run_id != run_id:
            raise NotFoundError("interaction", f"{iid} of run {run_id}")
        result = await self.store.answer(iid, answer, answered_by=by)
        await self.store.append_event(
            run_id,
            "interaction_answered",
            {"interaction_id": iid, "kind": interaction.kind, "answered_by": by},
            node_id=interaction.node_id,
            branch_id=interaction.branch_id,
        )
        return result.message is not None

    async def close(self) -> None:
        """Cancel this session's live runs (they stay resumable) and close the store."""
        for run_id in list(self._tasks):
            engine = self.engine(run_id)
            if engine is not None:
                engine.stop(Outcome("cancelled"))
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        closer = getattr(self.backend, "close", None)
        if closer is not None:
            await closer()
        if self.holder is not None:
            self.holder.stop()
            self.holder = None
        if self._owns_store:
            await self.store.close()


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
        """Wait until the run settles (finished, failed, paused or cancelled)."""
        task = self.session._tasks.get(self.id)
        if task is not None:
            await asyncio.wait_for(asyncio.shield(task), timeout)
        record = await self.refresh()
        return record.status

    async def events(self, after: int = 0) -> list[Event]:
        """The run's events with ``seq > after``."""
        return await self.session.store.events(self.id, after=after)

    async def pending_questions(self) -> list[Interaction]:
        """The run's unanswered questions, oldest first."""
        return await self.session.store.pending_interactions(self.id)

    async def next_question(self, timeout: float | None = None) -> Interaction | None:
        """The first pending question, waiting up to ``timeout`` for one to be asked."""
        store = self.session.store
        bell = store.doorbell  # type: ignore[attr-defined]
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            with bell.arm(self.id) as ticket:
                pending = await store.pending_interactions(self.id)
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
    ) -> dict[str, bool]:
        """Answer one of the run's questions; returns ``{"queued", "resumed"}``.

        An async question's answer is queued for the agent (the run goes on or
        stays as it is). The answer to the question a paused run waits on
        resumes it; so does the last answer an ``await`` pause waits for.
        """
        session = self.session
        queued = await session._record_answer(self.id, interaction_id, answer, answered_by)
        if self._engine is not None:  # running here: the answer reaches it without a resume
            return AnswerOutcome(queued, False).to_dict()
        record = await self.refresh()
        resumed = False
        waiting_on = list((record.checkpoint or {}).get("waiting_on", []))
        if (
            record.status == "paused_waiting_human"
            and self._engine is None
            and (interaction_id in waiting_on or await self._is_awaited(interaction_id, waiting_on))
            and await self._ready_to_resume(waiting_on)
        ):
            await session.resume(self.id, answered_by=answered_by)
            resumed = True
        return AnswerOutcome(queued, resumed).to_dict()

    async def _is_awaited(self, interaction_id: str, waiting_on: list[str]) -> bool:
        for iid in waiting_on:
            pause = await self.session.store.get_interaction(iid)
            if pause.kind == "await" and interaction_id in pause.waits_on:
                return True
        return False

    async def _ready_to_resume(self, waiting_on: list[str]) -> bool:
        """Whether every question the pause waits on has its answer.

        An ``await`` pause waits on the async questions it lists.
        """
        store = self.session.store
        needed: list[str] = []
        for iid in waiting_on:
            pause = await store.get_interaction(iid)
            needed.extend(pause.waits_on if pause.kind == "await" else (iid,))
        answered = [not (await store.get_interaction(i)).pending for i in needed]
        return all(answered)

    async def cancel(self) -> RunStatus:
        """Cancel the run (it stays resumable) and wait for it to settle."""
        engine = self._engine
        if engine is not None:
            engine.stop(Outcome("cancelled"))
            return await self.wait()
        record = await self.refresh()
        if record.status in ("running", "paused_waiting_human", "failed_resumable"):
            await self.session.store.update_run(self.id, status="cancelled")
            await self.session.store.append_event(self.id, "run_cancelled", {})
        return (await self.refresh()).status

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
        """Same as :meth:`Session.resume` for this run."""
        return await self.session.resume(self.id, **kwargs)

    def __repr__(self) -> str:
        return f"<Run {self.id} {self.status}>"


class SessionService:
    """The REST API's view of a session (see :class:`iterion_nb.api.service.RunService`)."""

    def __init__(self, session: Session) -> None:
        self.session = session

    async def list_runs(self, status: str | None, limit: int) -> list[Run]:
        """Runs, newest first."""
        if status is not None and status not in RUN_STATUSES:
            raise RunError(f"unknown status '{status}' (one of {', '.join(RUN_STATUSES)})")
        return await self.session.runs(status=status, limit=limit)

    async def get_run(self, run_id: str) -> Run:
        """One run."""
        return await self.session.store.get_run(run_id)

    async def events(self, run_id: str, after: int) -> list[Event]:
        """A run's events."""
        return await self.session.store.events(run_id, after=after)

    async def pending(self, run_id: str) -> list[Interaction]:
        """A run's unanswered questions."""
        await self.session.store.get_run(run_id)
        return await self.session.store.pending_interactions(run_id)

    async def answer(
        self, run_id: str, interaction_id: str, answer: Any, answered_by: str
    ) -> dict[str, bool]:
        """Answer one question of a run."""
        return await self.session.run(run_id).answer(
            interaction_id, answer, answered_by=answered_by
        )

    async def answer_human(
        self, run_id: str, answers: dict[str, Any], answered_by: str
    ) -> dict[str, bool]:
        """Answer what a paused run waits on, then resume it."""
        run = await self.session.store.get_run(run_id)
        waiting = list((run.checkpoint or {}).get("waiting_on", []))
        if run.status != "paused_waiting_human" or self.session.engine(run_id) is not None:
            raise ResumeError(f"run '{run_id}' is {run.status}, not paused waiting for a person")
        if "" in answers:
            if len(waiting) != 1:
                raise RunError(f"run '{run_id}' waits on {len(waiting)} questions: name them")
            answers = {waiting[0]: answers.pop("")} | answers
        await self.session.resume(run_id, answers=answers, answered_by=answered_by)
        return {"queued": False, "resumed": True}

    async def cancel(self, run_id: str) -> str:
        """Cancel a run."""
        return await self.session.run(run_id).cancel()


def _claw(scenario: Mapping[str, Any] | str | os.PathLike[str] | None) -> Backend:
    """The default backends: the in-process loop (``claw``) and Claude Code, by node."""
    from iterion_nb.backends.claude_code import ClaudeCodeBackend
    from iterion_nb.backends.claw import ClawBackend
    from iterion_nb.backends.providers import ProviderResolver

    source = os.fspath(scenario) if isinstance(scenario, os.PathLike) else scenario
    claw = ClawBackend(ProviderResolver(source))
    return BackendRouter({"claw": claw, "claude_code": ClaudeCodeBackend()})


def _workflow(workflow: m.Workflow | str, source: str | None) -> tuple[m.Workflow, str]:
    if isinstance(workflow, str):
        return compile_workflow(workflow), workflow
    return workflow, source if source is not None else workflow.source
