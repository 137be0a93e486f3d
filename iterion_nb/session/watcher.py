"""The worker plugin that resumes cluster runs when they can go on (imports Dask: load lazily).

Clients register it on the cluster (``Session(cluster=…)`` does). A worker
can also start with it, whatever its scheduler knows — the robust setup,
which survives a scheduler restart::

    export ITERION_NB_STORE=postgresql://…
    dask worker tcp://HOST:8786 --preload iterion_nb.session.watcher
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any

import distributed

from iterion_nb.errors import IterionError
from iterion_nb.runtime.answers import ready_to_resume
from iterion_nb.runtime.ownership import DEFAULT_TTL, Claimant
from iterion_nb.runtime.ports import Store
from iterion_nb.runtime.records import Interaction, Run, utcnow
from iterion_nb.session.cluster import (
    CONNECT_TIMEOUT,
    EXECUTOR,
    QUEUE_TTL,
    SCAN_INTERVAL,
    log,
    queued_key,
    submit_resumes,
    worker_store,
)

#: Seconds after the store came back from an outage before interrupted runs are taken:
#: every lease lapsed while it was away, and owners still alive renew theirs first.
TAKEOVER_GRACE = DEFAULT_TTL
#: Seconds a watcher gives its store to answer at start before it warns.
STORE_CHECK_SECONDS = 10.0

#: The warnings this worker process gave, by what they are about: a watcher that
#: replaces another of the same store (a client registering the watcher a worker
#: preloaded; the scheduler handing a new worker the watchers clients registered)
#: does not say them again. A store that works again is taken out: its next
#: trouble is news.
_warned: set[str] = set()
_warned_lock = threading.Lock()


def warn_once(about: str, message: str, *args: Any) -> None:
    """Log a watcher's warning once per worker process and ``about``; at INFO after that."""
    with _warned_lock:
        first = about not in _warned
        _warned.add(about)
    (log.warning if first else log.info)(message, *args)


def _works_again(about: str) -> None:
    with _warned_lock:
        _warned.discard(about)


def settling(store: Store) -> bool:
    """Whether the store came back from an outage less than :data:`TAKEOVER_GRACE` ago."""
    back = getattr(store, "back_at", None)
    return back is not None and time.monotonic() - back < TAKEOVER_GRACE


class RunWatcher(distributed.WorkerPlugin):
    """A Dask worker plugin: submits a task for every cluster run that can go on.

    It runs a thread of its own, with its own event loop, so it never delays
    the worker's tasks.

    It holds no ``distributed.Client``: it opens one, on its own loop, for each
    batch of runs it submits, and closes it at once (:meth:`_submit`). A client
    held for the watcher's life reconnects when its scheduler goes away, and the
    worker closing it meanwhile (the worker exits without its scheduler) fills
    the worker's log with tracebacks; one that fails to reconnect within its
    timeout closes for good, and a worker that outlived the outage would
    submit nothing again. The worker's own client (``worker.client``) would
    not help: it lives on the worker's loop, and makes the same tracebacks.
    A client per batch is never there when the scheduler goes away (but in
    the moments a submission takes), and always reaches the scheduler of now.
    """

    idempotent = True

    def __init__(self, store_spec: str, scan_interval: float = SCAN_INTERVAL) -> None:
        self.store_spec = store_spec
        self.scan_interval = scan_interval
        # made on the worker (setup): the plugin travels pickled to each worker
        self._stop: threading.Event | None = None
        self._thread: threading.Thread | None = None
        self._scheduler = ""
        self._security: Any = None  # the worker's: a client reaches its scheduler as it does
        self._away = False  # whether the scheduler was away at the last submission
        self._unheld = False  # whether this DuckDB store's holder was found gone

    def __getstate__(self) -> dict[str, Any]:
        return {"store_spec": self.store_spec, "scan_interval": self.scan_interval,
                "_stop": None, "_thread": None, "_scheduler": "", "_security": None,
                "_away": False, "_unheld": False}  # fmt: skip

    def setup(self, worker: Any) -> None:
        """Start watching (a worker plugin hook)."""
        self._scheduler = worker.scheduler.address
        self._security = worker.security
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._watch()), name="iterion-watcher", daemon=True
        )
        self._thread.start()

    def teardown(self, worker: Any) -> None:
        """Stop watching (a worker plugin hook)."""
        if self._stop is not None:
            self._stop.set()

    @property
    def _local(self) -> bool:
        """Whether the store is a DuckDB file (used through the process that holds it)."""
        return "://" not in self.store_spec

    async def _watch(self) -> None:
        store = None
        assert self._stop is not None
        said = False
        while store is None:  # a DuckDB store waits for a process to hold (and serve) it
            try:
                store = worker_store(self.store_spec)
            except IterionError as err:
                # a DuckDB file nobody holds is the usual state of a notebook's store once
                # the notebook is closed (its watcher stays registered on the cluster)
                if not self._local:
                    warn_once(self._about, "iterion_nb watcher: %s", err)
                elif not said:
                    log.info("iterion_nb watcher: %s", err)
                said = True
                if self._stop.wait(self.scan_interval):
                    return
        await self._check_store(store)
        rung: set[str] = set()
        unsubscribe = store.doorbell.subscribe(rung.add)  # type: ignore[attr-defined]
        try:
            await self._loop(store, rung)
        finally:
            unsubscribe()

    async def _check_store(self, store: Store) -> None:
        """Say in the worker's log, within seconds, when the store cannot be used.

        A store call waits out an outage (minutes, on PostgreSQL): a wrong host,
        database or password would otherwise leave this worker silent.
        """
        from iterion_nb.store.location import mask_url

        try:
            await asyncio.wait_for(store.list_runs(limit=1), STORE_CHECK_SECONDS)
        except Exception as err:  # the watcher goes on trying: the store may come up
            if await self._held():  # (else: its holder exited meanwhile, said at INFO)
                why = str(err) or f"no reply within {STORE_CHECK_SECONDS:.0f} s"
                warn_once(
                    self._about, "iterion_nb watcher: cannot use the store %s: %s; this worker"
                    " takes up none of that store's runs until it can",
                    mask_url(self.store_spec), why,
                )  # fmt: skip
        else:
            _works_again(self._about)
            log.info("iterion_nb watcher: watching the runs of %s", mask_url(self.store_spec))

    @property
    def _about(self) -> str:
        """What this watcher's warnings are about: its store (named without a password)."""
        from iterion_nb.session.cluster import plugin_name

        return plugin_name(self.store_spec)

    async def _held(self) -> bool:
        """Whether the store can be reached: for a DuckDB file, whether a process holds it.

        A DuckDB store nobody holds is a normal state (the notebook or command
        that held it exited): said once, at INFO, when its holder is found gone;
        then the watcher makes no call on it (each would wait for a holder for
        half a minute, and fail) until a process holds the file again. Cheap
        (the holder file and its process) while a holder is there.
        """
        if not self._local:
            return True
        from pathlib import Path

        from iterion_nb.store.holder_file import UntrustedHolderError, alive, find_holder
        from iterion_nb.store.holder_file import read_holder_file as read

        path = Path(self.store_spec)
        if self._unheld:  # gone before: look for a new holder properly
            held = await asyncio.to_thread(find_holder, path) is not None
        else:
            try:
                info = await asyncio.to_thread(read, path)
            except UntrustedHolderError:
                info = None
            held = info is not None and alive(info.pid)
        if held and self._unheld:  # a change: said once
            log.info("iterion_nb watcher: a process holds the run store %s again", path)
        elif not held and not self._unheld:
            log.info(
                "iterion_nb watcher: nobody holds the run store %s any more; this watcher takes"
                " up its runs again once a process holds it", path,
            )  # fmt: skip
        self._unheld = not held
        return held

    async def _loop(self, store: Store, rung: set[str]) -> None:
        bell = store.doorbell  # type: ignore[attr-defined]
        loop = asyncio.get_running_loop()
        last_scan = 0.0
        scan: asyncio.Task[None] | None = None
        assert self._stop is not None
        try:
            while not self._stop.is_set():
                if not await self._held():  # nobody serves the DuckDB file: wait for a holder
                    await asyncio.to_thread(self._stop.wait, self.scan_interval)
                    continue
                with bell.arm() as ticket:
                    keys = {key.partition("/")[0] for key in rung}  # a node's ring: its run
                    rung.clear()
                    try:
                        # a parked run's question that expires releases it: expiring rings it
                        await store.expire_due()
                        due = loop.time() - last_scan >= self.scan_interval or "*" in keys
                        if due and (scan is None or scan.done()):
                            # a task of its own: a ring never waits behind a long scan
                            last_scan = loop.time()
                            scan = asyncio.ensure_future(self._scan_logged(store))
                        ready = [await self._considered(store, run_id) for run_id in keys - {"*"}]
                        await self._submit([run for run in ready if run is not None])
                    except Exception as err:  # the store or scheduler is away: look again later
                        await self._trouble(err)
                    await ticket.wait(timeout=min(1.0, self.scan_interval))
        finally:
            if scan is not None:
                scan.cancel()

    async def _scan_logged(self, store: Store) -> None:
        try:
            await self._scan(store)
        except Exception as err:
            await self._trouble(err)

    async def _trouble(self, err: Exception) -> None:
        """Say what failed, unless it is that a DuckDB store's holder exited (said once)."""
        if await self._held():
            log.warning("iterion_nb watcher: %s", err)

    async def _scan(self, store: Store) -> None:
        """Every cluster run that can go on, at a cost independent of how many are parked.

        One query for the open questions decides which paused runs have all
        their answers (not one look per parked run).
        """
        try:  # its trouble must not keep this scan from taking up runs
            await self._keep_queued(store)
        except Exception as err:
            log.warning("iterion_nb watcher: keeping queued runs: %s", err)
        open_ = {q.id: q for q in await store.pending_interactions()}
        ready = []
        for run in await store.list_runs(status="interrupted", limit=100_000):
            if await self._goes_on(store, run, checked=True):
                ready.append(run)
        for run in await store.list_runs(status="paused_waiting_human", limit=100_000):
            ours = run.launch.get("executor") == EXECUTOR and run.lease is None
            if ours and _answered(run, open_) and await self._goes_on(store, run, checked=True):
                ready.append(run)
        await self._submit(ready)

    async def _keep_queued(self, store: Store) -> None:
        """Renew the queue lease of each run whose task still waits in this scheduler's queue.

        A queued run's lease (:data:`QUEUE_TTL`) is what tells a run that waits for a
        free worker from one that nothing will take (no worker, or a scheduler that lost
        its task): the first reads ``running`` for as long as the backlog lasts, the
        second ``interrupted`` once the lease lapses — then this watcher submits it anew.
        """
        now = utcnow()
        due = [  # (one whose lease lapsed reads interrupted, without it: the scan takes it up)
            run
            for run in await store.list_runs(status="running", limit=100_000)
            if run.lease is not None and run.lease.queued
            and (run.lease.expires_at - now).total_seconds() < QUEUE_TTL / 2
        ]  # fmt: skip
        if not due:
            return
        keys = {queued_key(run.id, run.lease.owner): run for run in due if run.lease is not None}
        try:
            async with distributed.Client(  # type: ignore[no-untyped-call]
                self._scheduler, security=self._security, asynchronous=True,
                set_as_default=False, timeout=f"{CONNECT_TIMEOUT:.0f}s",
            ) as client:  # fmt: skip
                states = await client.scheduler.get_task_status(keys=list(keys))
        except (OSError, TimeoutError) as err:  # the scheduler is away: its queue with it
            log.debug("iterion_nb watcher: cannot read the queue: %s", err)
            return
        for key, state in states.items():
            run = keys[key]
            if state in (None, "memory", "erred", "released", "forgotten") or run.lease is None:
                continue  # not waiting there (any more): nothing to keep
            held = Claimant(run.lease.owner, run.lease.pid, run.lease.host, QUEUE_TTL)
            await store.renew_leases(held, [run.id])

    async def _considered(self, store: Store, run_id: str) -> Run | None:
        """The run ``run_id``, if it can go on now (its ring may be about something else)."""
        with contextlib.suppress(IterionError):
            run = await store.get_run(run_id)
            if await self._goes_on(store, run):
                return run
        return None

    async def _goes_on(self, store: Store, run: Run, checked: bool = False) -> bool:
        if run.launch.get("executor") != EXECUTOR or run.lease is not None:
            return False
        paused = run.status == "paused_waiting_human"
        if paused and not checked and not await ready_to_resume(store, run):
            return False
        if run.status not in ("interrupted", "paused_waiting_human"):
            return False
        # an interrupted run's owner may be alive and about to renew: a later scan looks again
        return not (run.status == "interrupted" and settling(store))

    async def _submit(self, runs: list[Run]) -> None:
        """Submit a task for each run, through a client opened for them alone.

        The client lives on this thread's loop, and nothing waits between its
        start and its close (submitting only queues messages, which its close
        sends before it lets go): it is closing before it could hear that its
        scheduler went away, so it never reconnects, nor logs a reconnection
        cut short. Why no client is held: see the class's docstring.
        """
        if not runs:
            return
        try:
            async with distributed.Client(  # type: ignore[no-untyped-call]
                self._scheduler, security=self._security, asynchronous=True,
                set_as_default=False, timeout=f"{CONNECT_TIMEOUT:.0f}s",
            ) as client:  # fmt: skip
                submit_resumes(client, self.store_spec, runs)
        except (OSError, TimeoutError) as err:
            # one line for the whole outage, not one per ring: the worker usually exits
            # without its scheduler anyway, and a watcher's scan submits these runs later
            log.debug("iterion_nb watcher: cannot submit: %s", err)
            if not self._away:
                log.warning(
                    "iterion_nb watcher: the scheduler at %s went away; the runs that can go on"
                    " are taken up once it is back", self._scheduler,
                )  # fmt: skip
            self._away = True
        else:
            self._away = False


def _answered(run: Run, open_: dict[str, Interaction]) -> bool:
    """Whether nothing a paused run waits on is open (an ``await`` pause: its questions)."""
    for iid in (run.checkpoint or {}).get("waiting_on", []):
        question = open_.get(iid)
        if question is None:
            continue
        if question.kind != "await" or any(w in open_ for w in question.waits_on):
            return False
    return True


def dask_setup(worker: Any) -> None:
    """``dask worker --preload iterion_nb.session.watcher``: watch ``ITERION_NB_STORE``'s runs."""
    import os

    spec = os.environ.get("ITERION_NB_STORE")
    if not spec:
        warn_once(
            "ITERION_NB_STORE",
            "iterion_nb watcher: ITERION_NB_STORE is not set, so this worker watches no store"
            " of its own: it watches only the stores of clients that register the watcher"
            " (Session(cluster=...) does), and only while their scheduler runs",
        )
        return
    # under the name clients register it by: a client's registration replaces this
    # watcher instead of adding a second one for the same store
    from iterion_nb.session.cluster import plugin_name

    watcher = RunWatcher(spec)
    worker.plugins[plugin_name(spec)] = watcher
    watcher.setup(worker)
