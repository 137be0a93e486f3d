"""The composition root: a store, a backend, and the runs this session owns.

A session is one owner (a :class:`~iterion_nb.runtime.ownership.Claimant`):
starting a run takes its lease; resuming one takes it too, atomically, or is
refused with :class:`~iterion_nb.errors.RunOwnedError` while another live
owner holds it. A heartbeat renews the leases; a run this session pauses
stays *parked* here (still owned) and resumes here as soon as the answers it
waits on are in, whoever gives them. Closing the session cancels its live
runs and lets go of its parked ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import traceback
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from iterion_nb import safe_data
from iterion_nb.api.holder import Holder
from iterion_nb.errors import IterionError, ResumeError, RunOwnedError
from iterion_nb.ir import compile_stored
from iterion_nb.ir import model as m
from iterion_nb.runtime import replay
from iterion_nb.runtime.answers import (
    AnswerService,
    check_answer_text,
    check_answered_by,
    expire_awaited,
    ready_to_resume,
)
from iterion_nb.runtime.engine import Engine, Outcome
from iterion_nb.runtime.ownership import DEFAULT_TTL, Claimant, owned_error
from iterion_nb.runtime.ports import Backend, Store
from iterion_nb.runtime.records import RESUMABLE, RUN_STATUSES, RunStatus, utcnow
from iterion_nb.runtime.records import Run as RunRecord
from iterion_nb.runtime.state import Frontier, RunState
from iterion_nb.runtime.values import preset_values, resolve_vars
from iterion_nb.session import args
from iterion_nb.session.cluster import (
    CLUSTER_ENV,
    CLUSTER_TAKES,
    EXECUTOR,
    DaskExecutor,
    check_tools_reach_workers,
)
from iterion_nb.session.handle import RunHandle
from iterion_nb.session.launch import (
    Answers,
    Scenario,
    attachment_values,
    backend_for,
    default_backends,
    read_answers,
    scenario_data,
    store_spec,
    workflow_of,
)
from iterion_nb.session.leases import LeaseKeeper
from iterion_nb.store import DuckDBStore, resolve_store_path
from iterion_nb.store.location import mask_url
from iterion_nb.store.remote import open_store

#: What an answer (or the parked watcher) resumes: a run still paused. Never one cancelled
#: meanwhile, which only a person's resume sets going again.
ANSWERED_TAKES: tuple[RunStatus, ...] = ("paused_waiting_human",)
#: Says when a run was cancelled by nobody's asking (the CLI, which says it itself, mutes it).
CANCELLED_LOG = logging.getLogger("iterion_nb.session.cancelled")


class SourceChangedError(ResumeError):
    """A resume given a workflow source other than the one its run recorded, not forced.

    Each surface says how to force it (:meth:`refusal`); ``str(err)`` says it for Python.
    """

    def __init__(self, run: RunRecord, given: m.Workflow) -> None:
        self.run_id = run.id
        self.workflow = run.workflow
        self.recorded_hash = run.source_hash
        self.given_hash = given.source_hash
        super().__init__(self.refusal("pass force=True"))

    def refusal(self, how: str, given: str = "the workflow given") -> str:
        """The refusal: what differs, and ``how`` to resume with the new source anyway.

        ``given`` names the new source where it came from (a file, a cell).
        """
        return (
            f"the workflow of run '{self.run_id}' changed since it started; {how} to resume"
            f" with the new source (the run recorded workflow '{self.workflow}' with source"
            f" sha256 {self.recorded_hash[:12]}…; {given} has sha256 {self.given_hash[:12]}…)"
        )


def _nodes_it_lacks(checkpoint: dict[str, Any] | None, wf: m.Workflow) -> list[str]:
    """The nodes a run's checkpoint stands at (or goes back to) that ``wf`` does not have."""
    state = RunState.from_checkpoint(checkpoint or {})
    used = {f.node for f in state.frontier.values()}
    used |= {f.came_from for f in state.frontier.values() if f.came_from}
    used |= {g.router for g in state.groups.values()}
    return sorted(used - set(wf.nodes) - set(wf.fails) - set(m.TERMINALS))


class Session:
    """Starts, resumes and looks up runs on one store with one backend.

    Args:
        store: A Store, or where the DuckDB store lives (see
            :func:`~iterion_nb.store.resolve_store_path`); default ``.iterion/``.
        backend: What runs agent, judge and llm nodes; by default the in-process
            loop (``claw``), whose ``scripted`` model answers from ``scenario``.
        scenario: The scripted provider's scenario (a dict or a YAML/JSON file).
        workdir: Where tool commands run (default: the current directory).
        poll_interval: The fallback poll of ``await_answers`` and parked runs, in seconds.
        serve: Serve the store's REST API when this session holds the DuckDB file.
        lease_seconds: How long this session's leases last without renewal.
        cluster: Execute runs on a Dask cluster: a scheduler address or a
            ``distributed.Client`` (default: ``ITERION_NB_CLUSTER``; ``False``:
            in this process whatever the environment says). It is reached when
            a run first goes there. A cluster's runs use the default backends:
            ``backend`` with a cluster is refused.
        parking: Keep a run that pauses owned here and resume it when answered
            (a cluster worker does not: a parked run holds no process).
    """

    def __init__(
        self,
        store: Store | str | os.PathLike[str] | None = None,
        *,
        backend: Backend | None = None,
        scenario: Scenario | None = None,
        workdir: str | os.PathLike[str] | None = None,
        poll_interval: float = 5.0,
        serve: bool = True,
        lease_seconds: float = DEFAULT_TTL,
        cluster: Any = None,
        parking: bool = True,
    ) -> None:
        args.session_settings(store, backend, workdir, poll_interval, lease_seconds)
        if cluster is None:
            cluster = os.environ.get(CLUSTER_ENV) or None
        if cluster and backend is not None:
            raise IterionError(
                "a backend given to the session exists in this process only, and runs of"
                " a cluster execute on its workers with the default backends: pass"
                " cluster=False to run here"
                + (f" ({CLUSTER_ENV} names a cluster)" if os.environ.get(CLUSTER_ENV) else "")
            )
        self._serve = serve
        self._serve_now = False
        self.holder: Holder | None = None
        if store is None or isinstance(store, str | os.PathLike):
            # the file opened here: served at once, so that other processes (a terminal,
            # another kernel) can use the store while this session merely holds it
            self.store: Store = open_store(
                store, on_take_over=self._took_over, on_open=self._opened
            )
            self._owns_store = True
        else:
            self.store = store
            self._owns_store = False
        self._custom_backend = backend is not None
        self._scenario = scenario
        self.backend: Backend = backend or default_backends(scenario)
        self.workdir = Path(workdir) if workdir is not None else Path.cwd()
        self.poll_interval = poll_interval
        self.claimant = Claimant.here(lease_seconds)
        self.leases = LeaseKeeper(
            self.store, self.claimant, on_lost=self._lost, on_cancel=self._cancel_requested
        )
        self.answers = AnswerService(self.store, self)
        self._tasks: dict[str, asyncio.Task[RunStatus]] = {}
        self._engines: dict[str, Engine] = {}
        #: Runs a resume of this session is taking over right now (not yet launched).
        self._resuming: set[str] = set()
        self._parked: dict[str, asyncio.Task[None]] = {}
        #: Tracebacks of runs whose driving task failed unexpectedly, by run id.
        self.failures: dict[str, str] = {}
        self._final_outputs: dict[str, dict[str, Any]] = {}
        self._scenarios: dict[str, Scenario] = {}
        self._closed = False
        self.parking = parking
        self.executor: DaskExecutor | None = None
        if cluster:
            self.executor = DaskExecutor(cluster, store_spec(store, self.store))
        if self._serve_now:
            self._serve_if_loop()

    def _opened(self, local: Store) -> None:
        """This process opened the file itself (served at the end of ``__init__``)."""
        self._serve_now = True

    def _serve_if_loop(self) -> None:
        """Serve the file opened here if a loop runs (else start and resume serve it)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop yet (a script before asyncio.run)
        if getattr(self.store, "read_only", None) is None:  # read-only: every reader opens it
            self.serve()

    def _took_over(self, local: Store) -> None:
        """The holder we used died and this process opened the file: serve it now."""
        if self._serve and self.holder is None and isinstance(local, DuckDBStore):
            self.holder = _serving.join(self, local)

    def serve(self) -> Holder | None:
        """Serve the REST API for this session's DuckDB file (done by start and resume).

        Other processes (the CLI, another kernel, the Jupyter server) find the
        server through the holder file and use the store through it. Sessions
        of one process on one file share one server.
        """
        if self.holder is None and self._serve and isinstance(self.store, DuckDBStore):
            if self.store.read_only is not None:  # nothing this session starts could be recorded
                raise self.store.read_only_error()
            self.holder = _serving.join(self, self.store)
        return self.holder

    # -- starting and resuming ----------------------------------------------
    async def start(
        self,
        workflow: m.Workflow | str,
        vars: dict[str, Any] | None = None,  # noqa: A002 - the name users know
        *,
        run_id: str | None = None,
        source: str | None = None,
        scenario: Scenario | None = None,
        backend: str | None = None,
        answers: Answers | None = None,
        answers_from: str | None = None,
        preset: str | None = None,
        attachments: Mapping[str, str | os.PathLike[str]] | None = None,
    ) -> RunHandle:
        """Start a run as a background task, owned by this session; return its handle at once.

        ``backend`` names the backend for nodes that name none (instead of the
        workflow's ``default_backend``), when the session uses the default backends.
        ``answers`` pins answers (a YAML file as ``iterion-nb runs answers --export``
        writes, or its content); ``answers_from`` pins the answers another run of
        this store got. A question whose node, text and options match a pin is
        answered at once (``answered_by: "replay"``, the k-th ask of one question
        by its k-th answer); the others are asked as usual. ``preset`` starts from
        the variable values of one of the workflow's ``presets:`` (``vars`` given
        here win over it). ``attachments`` gives the files of the workflow's
        ``attachments:`` (name -> path; checked, and recorded with the run).

        Raises:
            VarsError: A variable is missing, unknown or of the wrong type
                (nothing is recorded).
        """
        args.workflow_arg(workflow)
        args.mapping("vars", vars)
        args.mapping("attachments", attachments)
        if run_id is not None:
            args.new_run_id(run_id)
        if answers_from is not None:
            args.text_id("answers_from", answers_from)
        wf, text = workflow_of(workflow, source)
        values = resolve_vars(wf, {**preset_values(wf, preset), **(vars or {})})
        files = attachment_values(wf, attachments)
        launch: dict[str, Any] = {}
        if backend is not None:
            launch["backend"] = backend
        if preset is not None:
            launch["preset"] = preset
        if files:
            launch["attachments"] = files
        if self.executor is not None:
            launch["executor"] = EXECUTOR
            launch["workdir"] = str(self.workdir.absolute())
        # a scenario given for this run is checked against its workflow (a node it lacks);
        # the session's serves every workflow the session runs
        recorded = (
            scenario_data(scenario, wf) if scenario is not None else scenario_data(self._scenario)
        )
        if recorded is not None and not self._custom_backend:
            launch["scenario"] = recorded
        pins = [] if answers is None else read_answers(answers, wf)
        if answers_from is not None:
            await self.store.get_run(answers_from)  # NotFoundError names an unknown run
            pins += replay.export(await self.store.interactions(answers_from))
        if pins:
            launch["answers"] = pins
        now = utcnow()
        run = RunRecord(
            id=run_id or uuid.uuid4().hex[:12], workflow=wf.name, source_hash=wf.source_hash,
            status="running", created_at=now, updated_at=now, source=text, vars=values,
            launch=launch,
        )  # fmt: skip
        self.serve()
        if self.executor is not None:  # held for the cluster until a worker takes it over
            check_tools_reach_workers(wf)
            await self.executor.connected()  # no scheduler answers: nothing is recorded
            queue = self.executor.queue_claimant()
            await self.store.create_run(run, owner=queue)
            self.executor.submit(run.id, queue.id)
            return RunHandle(self, run.id)
        await self.store.create_run(run, owner=self.claimant)
        self.leases.hold(run.id)
        state = RunState(vars=values, attachments=files)
        state.frontier["b0"] = Frontier("b0", wf.entry, {})
        self._launch(wf, run.id, state, launch, resumed=False, scenario=scenario)
        return RunHandle(self, run.id)

    async def resume(
        self,
        run_id: str,
        *,
        answers: dict[str, Any] | None = None,
        workflow: m.Workflow | str | None = None,
        force: bool = False,
        answered_by: str = "python",
        scenario: Scenario | None = None,
        take_from: str | None = None,
    ) -> RunHandle:
        """Resume a paused, interrupted, failed-resumable or cancelled run here.

        The run is taken atomically: if another live process (or another
        session) owns it, :class:`~iterion_nb.errors.RunOwnedError` names
        that owner and nothing changes. ``answers`` (interaction id -> answer)
        are recorded once the run is ours. Without ``workflow`` the run's own
        source is used; a different source is refused unless ``force``
        (:class:`SourceChangedError`), one of another workflow always. The
        scripted model uses ``scenario``, else the one the run recorded. With
        a cluster, the run is taken for it and executes on a worker; a worker
        takes a run queued for it with ``take_from`` (the queue's claimant).
        """
        args.text_id("run_id", run_id)
        args.mapping("answers", answers)
        args.text_id("answered_by", answered_by)
        return await self._one_resume(
            run_id, RESUMABLE, answers, workflow, force, answered_by, scenario, take_from
        )

    async def _one_resume(
        self, run_id: str, statuses: tuple[RunStatus, ...],
        answers: dict[str, Any] | None = None, workflow: m.Workflow | str | None = None,
        force: bool = False, answered_by: str = "python", scenario: Scenario | None = None,
        take_from: str | None = None,
    ) -> RunHandle:  # fmt: skip
        """:meth:`resume`, of a run whose status is one of ``statuses``, one at a time here."""
        self.serve()
        if run_id in self._resuming:  # two resumes at once here (an answer, the parked watcher)
            raise RunOwnedError(run_id, self.claimant.pid, self.claimant.host, utcnow())
        self._resuming.add(run_id)
        try:
            return await self._resume(
                run_id, answers, workflow, force, answered_by, scenario, take_from, None, statuses
            )
        finally:
            self._resuming.discard(run_id)

    async def execute_queued(self, record: RunRecord, take_from: str | None) -> RunStatus:
        """Take the run of ``record`` and execute it here until it settles (a cluster task).

        ``record`` was just read (not read again); ``take_from`` names the claimant
        that queued the run for the cluster, if one did. Returns the status the run
        ends in here, without reading the store again.

        Raises:
            RunOwnedError: Another live owner holds it (another task of the run took it).
            ResumeError: It cannot be resumed.
        """
        # only a run that can go on by itself: never one cancelled (or failed) while it
        # waited for a worker, which a person resumes if they want it to go on
        await self._resume(
            record.id, None, None, False, "cluster", None, take_from, record, CLUSTER_TAKES
        )
        return await asyncio.shield(self._tasks[record.id])

    async def _resume(
        self, run_id: str, answers: dict[str, Any] | None, workflow: m.Workflow | str | None,
        force: bool, answered_by: str, scenario: Scenario | None, take_from: str | None,
        record: RunRecord | None = None, statuses: tuple[RunStatus, ...] = RESUMABLE,
    ) -> RunHandle:  # fmt: skip
        record = record if record is not None else await self.store.get_run(run_id)
        self._refuse_early(record)
        wf, text = self._workflow_for(record, workflow, force)
        if scenario is not None:  # one run's scenario: checked against its workflow, as start does
            scenario_data(scenario, wf)
        if answers:  # refused as on every surface, before anything changes
            check_answered_by(answered_by)
            for iid, answer in answers.items():
                check_answer_text(answer, f"answers[{iid!r}]")
        for iid in answers or {}:
            await self.answers.question(run_id, iid)
        if self.executor is not None and take_from is None:
            return await self._resume_on_cluster(record, wf, text, answers, answered_by, statuses)
        run = await self.store.acquire_run(
            run_id, self.claimant, statuses=statuses, take_from=take_from
        )
        self.leases.hold(run_id)
        self._unpark(run_id)
        try:
            for iid, answer in (answers or {}).items():
                await self.store.answer(iid, answer, answered_by=answered_by)
            if text != run.source:
                await self.store.update_run(run_id, source_hash=wf.source_hash, source=text)
        except BaseException:
            await self._give_back(record, self.claimant.id, run.checkpoint)
            self.leases.drop(run_id)
            raise
        state = RunState.from_checkpoint(run.checkpoint or {})
        if not state.frontier and run.checkpoint is None:
            state = RunState(vars=run.vars, attachments=dict(run.launch.get("attachments", {})))
            state.frontier["b0"] = Frontier("b0", wf.entry, {})
        state.pending_interaction = None
        state.waiting_on = []
        begun = await self._begun(run_id, run, record, take_from)
        self._launch(wf, run_id, state, run.launch, resumed=begun, scenario=scenario)
        # asked while the run waited in a cluster's queue (kept by the hand-over), or
        # while it lay interrupted: the cluster's own recovery ends it as the person asked
        if run.cancel_requested or (statuses == CLUSTER_TAKES and record.cancel_requested):
            self._engines[run_id].cancel()
        return RunHandle(self, run_id)

    async def _begun(
        self, run_id: str, run: RunRecord, record: RunRecord, take_from: str | None
    ) -> bool:
        """Whether the run taken here already started (so it resumes, not starts, here).

        A run with a checkpoint did. One without did only if its log says so:
        ``run_started`` may commit a moment before the start checkpoint (a read
        of events writes rows only), and an owner killed in that moment leaves a
        started run with no checkpoint; one killed before its first batch leaves
        neither, and starts afresh (as does one cancelled before it ever ran).
        The log is read only then, and never for a run a worker takes from its
        queue while the queue still held it (the common case: never executed).
        """
        if run.checkpoint is not None:
            return True
        if take_from is not None and record.lease is not None and record.lease.owner == take_from:
            return False
        first = await self.store.events(run_id, limit=1)  # a started run's is run_started
        return bool(first) and first[0].type == "run_started"

    def _refuse_early(self, record: RunRecord) -> None:
        """This session runs it, or it ended for good: said before any word on its source.

        Raises:
            RunOwnedError: This very session executes the run.
            ResumeError: The run is ``finished`` or ``failed``.
        """
        if record.id in self._engines and record.lease is not None:
            raise owned_error(record.id, record.lease)
        if record.status in ("finished", "failed"):
            raise ResumeError(f"run '{record.id}' is {record.status} and cannot be resumed")

    def _workflow_for(
        self, run: RunRecord, workflow: m.Workflow | str | None, force: bool
    ) -> tuple[m.Workflow, str]:
        if workflow is None:
            return compile_stored(run.source, f"<run {run.id}>"), run.source
        wf, text = workflow_of(workflow, None)
        if wf.name != run.workflow:  # forced or not: a run's record names one workflow
            raise ResumeError(
                f"run '{run.id}' is a run of workflow '{run.workflow}', not '{wf.name}':"
                " it resumes only with a source of its own workflow (forcing allows a"
                " changed source, not another workflow)"
            )
        if wf.source_hash != run.source_hash and not force:
            raise SourceChangedError(run, wf)
        lost = _nodes_it_lacks(run.checkpoint, wf)
        if lost:  # the run would go on at a node that is not there
            names = ", ".join(f"'{n}'" for n in lost)
            raise ResumeError(
                f"run '{run.id}' stands at {names}, which the workflow given does not have:"
                " it can go on only where it stopped (keep that node, or resume with the"
                " recorded source); nothing changed"
            )
        return wf, text

    async def _give_back(
        self, record: RunRecord, owner: str, checkpoint: dict[str, Any] | None
    ) -> None:
        """Settle a run just taken as it was before (what came after the take failed)."""
        prior: RunStatus = "running" if record.status == "interrupted" else record.status
        with contextlib.suppress(Exception):
            await self.store.settle_run(
                record.id, owner, status=prior, error=record.error,
                checkpoint=checkpoint or {}, event=None,
            )  # fmt: skip

    async def _resume_on_cluster(
        self, record: RunRecord, wf: m.Workflow, text: str, answers: dict[str, Any] | None,
        by: str, statuses: tuple[RunStatus, ...] = RESUMABLE,
    ) -> RunHandle:  # fmt: skip
        """Take the run for the cluster (atomically), record the answers, queue it."""
        assert self.executor is not None
        run_id = record.id
        check_tools_reach_workers(wf)
        await self.executor.connected()  # no scheduler answers: the run is not taken
        queue = self.executor.queue_claimant()
        run = await self.store.acquire_run(run_id, queue, statuses=statuses)
        try:
            if run.launch.get("executor") != EXECUTOR:  # from now on a cluster run: its
                # pauses and a worker's crash are the cluster's to take up
                workdir = str(self.workdir.absolute())
                await self.store.update_run(
                    run_id, launch={**run.launch, "executor": EXECUTOR, "workdir": workdir}
                )
            for iid, answer in (answers or {}).items():
                await self.store.answer(iid, answer, answered_by=by)
            if text != run.source:
                await self.store.update_run(run_id, source_hash=wf.source_hash, source=text)
        except BaseException:  # not queued: the run stays as it was, for anyone to resume
            await self._give_back(record, queue.id, run.checkpoint)
            raise
        self.executor.submit(run_id, queue.id)
        return RunHandle(self, run_id)

    @property
    def on_cluster(self) -> bool:
        """Whether this session executes runs on a Dask cluster."""
        return self.executor is not None

    async def resume_answered(self, run_id: str, answered_by: str) -> None:
        """Resume a run whose awaited answers are all in (the answer service calls this).

        Raises:
            ResumeError: This session's cluster cannot be reached (the answer is in;
                a cluster's run is taken up by its workers' watchers all the same).
        """
        if self.executor is not None:
            self.serve()  # (a DuckDB store's workers reach it through this process)
            try:
                await self.executor.connected()
            except IterionError as err:
                raise ResumeError(str(err)) from None  # the answer's outcome says it
        await self._one_resume(run_id, ANSWERED_TAKES, answered_by=answered_by)

    def _launch(
        self, wf: m.Workflow, run_id: str, state: RunState, launch: Mapping[str, Any], *,
        resumed: bool, scenario: Scenario | None = None,
    ) -> None:  # fmt: skip
        # a run started with its own scenario keeps it when this session resumes it
        scenario = scenario if scenario is not None else self._scenarios.get(run_id)
        if scenario is not None:
            self._scenarios[run_id] = scenario
        backend = backend_for(self.backend, self._custom_backend, launch, wf, scenario)
        engine = Engine(
            wf, self.store, backend, run_id, state, owner=self.claimant.id,
            workdir=self.workdir, poll_interval=self.poll_interval, park=self.parking,
            guard=lambda: self.leases.guard(run_id),
        )  # fmt: skip
        self._engines[run_id] = engine
        self._tasks[run_id] = asyncio.ensure_future(self._drive(engine, resumed))

    async def _drive(self, engine: Engine, resumed: bool) -> RunStatus:
        run_id = engine.run_id
        status: RunStatus = "failed_resumable"
        try:
            status = await engine.run(resumed=resumed)
        except Exception as err:  # a bug or a store failure: record it, never lose it
            self.failures[run_id] = "".join(traceback.format_exception(err))
            message = safe_data.printable(f"internal error: {type(err).__name__}: {err}")
            await self._record_failure(engine, message)
        finally:
            self._final_outputs[run_id] = dict(engine.state.outputs)
            if self._engines.get(run_id) is engine:
                del self._engines[run_id]
        if engine.cancelled_by_task and not self._closed:
            # nobody asked for it: a script that returned before `await run.wait()`
            # (asyncio.run cancels what is left), a loop stopped under it
            CANCELLED_LOG.warning(
                "iterion_nb: run %s was cancelled: the task that executed it was cancelled"
                " (its event loop stopping? a script must `await run.wait()` before it"
                " returns); it is resumable: `iterion-nb resume %s%s`",
                run_id, run_id, self._store_option(),
            )  # fmt: skip
        lost = engine.outcome is not None and engine.outcome.lost
        if status == "paused_waiting_human" and not lost:
            self._park(run_id)
        else:
            self.leases.drop(run_id)
        return status

    def _store_option(self) -> str:
        """`` --store WHERE`` that names this session's store to the CLI ("" for the default)."""
        url = getattr(self.store, "url", None)
        if isinstance(url, str):
            return f" --store {shlex.quote(mask_url(url))}"
        path = getattr(self.store, "path", None)
        if path is None:  # a store in memory: no command reaches it
            return ""
        if Path(path).resolve() == resolve_store_path(None).resolve():
            return ""
        return f" --store {shlex.quote(str(path))}"

    async def _record_failure(self, engine: Engine, message: str) -> None:
        """Settle a run the engine gave up on, with ``message``, whatever its state holds.

        Its checkpoint first; if the store refuses that (the failure may be in
        the state itself), the last checkpoint it stored, so the run reads
        ``failed_resumable`` with the reason rather than ``running``.
        """
        run_id = engine.run_id
        event = ("run_failed", {"error": message, "resumable": True})
        with contextlib.suppress(Exception):
            await self.store.settle_run(
                run_id, self.claimant.id, status="failed_resumable", error=message,
                checkpoint=engine.state.checkpoint(), event=event,
            )  # fmt: skip
            return
        with contextlib.suppress(Exception):
            kept = (await self.store.get_run(run_id)).checkpoint
            if kept is None:  # none stored yet (the first is batched): a resume starts over
                fresh = RunState(vars=engine.state.vars, attachments=engine.state.attachments)
                fresh.frontier["b0"] = Frontier("b0", engine.wf.entry, {})
                kept = fresh.checkpoint()
            await self.store.settle_run(
                run_id, self.claimant.id, status="failed_resumable", error=message,
                checkpoint=kept, event=event,
            )  # fmt: skip

    # -- parked runs -------------------------------------------------------------
    def _park(self, run_id: str) -> None:
        """Keep a paused run owned here, and resume it once its answers are in."""
        self._unpark(run_id)
        self._parked[run_id] = asyncio.ensure_future(self._watch_parked(run_id))

    def _unpark(self, run_id: str) -> None:
        task = self._parked.pop(run_id, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def _watch_parked(self, run_id: str) -> None:
        bell = self.store.doorbell  # type: ignore[attr-defined]
        while True:
            with bell.arm(run_id) as ticket:
                try:
                    run = await self.store.get_run(run_id)
                    ours = run.lease is not None and run.lease.owner == self.claimant.id
                    if run.status != "paused_waiting_human" or not ours:
                        break
                    expiry = await expire_awaited(self.store, run)
                    if await ready_to_resume(self.store, run):
                        self._parked.pop(run_id, None)
                        with contextlib.suppress(ResumeError):  # cancelled meanwhile: it stays
                            await self._one_resume(run_id, ANSWERED_TAKES, answered_by="iterion")
                        return
                except asyncio.CancelledError:
                    raise
                except Exception:  # the store is away for a moment: look again later
                    expiry = None
                wait = self.poll_interval if expiry is None else min(self.poll_interval, expiry)
                await ticket.wait(timeout=max(wait, 0.0))
        self._parked.pop(run_id, None)
        if run_id not in self._engines:
            self.leases.drop(run_id)

    # -- what the heartbeat reports ------------------------------------------------
    def _lost(self, run_id: str) -> None:
        engine = self._engines.get(run_id)
        if engine is not None:
            engine.lose()
        self._unpark(run_id)

    def _cancel_requested(self, run_id: str) -> None:
        engine = self._engines.get(run_id)
        if engine is not None:
            engine.cancel()

    # -- looking up ---------------------------------------------------------
    def run(self, run_id: str) -> RunHandle:
        """A handle on an existing run (live or not)."""
        return RunHandle(self, args.text_id("run_id", run_id))

    async def runs(self, *, status: RunStatus | None = None, limit: int = 100) -> list[RunRecord]:
        """Runs in the store, newest first."""
        if status is not None and status not in RUN_STATUSES:
            raise ValueError(f"status must be one of {', '.join(RUN_STATUSES)}, not {status!r}")
        return await self.store.list_runs(status=status, limit=args.whole("limit", limit, 1))

    def engine(self, run_id: str) -> Engine | None:
        """The engine running ``run_id`` in this session, if any."""
        return self._engines.get(run_id)

    async def close(self) -> None:
        """Cancel this session's live runs (they stay resumable), release the rest, close.

        Closing twice does nothing more.
        """
        if self._closed:
            return
        self._closed = True
        # parked runs first: a watcher must not resume one here while the rest stops
        for run_id in list(self._parked):
            self._unpark(run_id)
        for engine in list(self._engines.values()):
            engine.stop(Outcome("cancelled"))
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        with contextlib.suppress(Exception):
            await self.store.release_runs(self.claimant.id, sorted(self.leases.runs))
        self.leases.runs.clear()
        await self.leases.stop()
        closer = getattr(self.backend, "close", None)
        if closer is not None:
            await closer()
        if self.executor is not None:
            self.executor.close()
        if self.holder is not None:
            _serving.leave(self, self.holder)
            self.holder = None
        if self._owns_store:
            await self.store.close()


class _Serving:
    """One holder server per DuckDB file in this process, shared by its sessions.

    The server answers through one of them (the REST view of a session); when
    that session closes while others remain, it answers through another.
    """

    def __init__(self) -> None:
        self._by_path: dict[Path, tuple[Holder, list[Session]]] = {}

    def join(self, session: Session, store: DuckDBStore) -> Holder:
        from iterion_nb.session.service import SessionService

        entry = self._by_path.get(store.path)
        if entry is not None and entry[0].running:
            entry[1].append(session)
            return entry[0]
        loop = asyncio.get_running_loop()
        holder = Holder(SessionService(session), store, store.path, loop).start()
        self._by_path[store.path] = (holder, [session])
        return holder

    def leave(self, session: Session, holder: Holder) -> None:
        from iterion_nb.session.service import SessionService

        entry = self._by_path.get(holder.db_path)
        if entry is None or entry[0] is not holder:
            holder.stop()
            return
        sessions = [s for s in entry[1] if s is not session]
        if sessions:
            self._by_path[holder.db_path] = (holder, sessions)
            holder.rebind(SessionService(sessions[0]))
            return
        del self._by_path[holder.db_path]
        holder.stop()


_serving = _Serving()
