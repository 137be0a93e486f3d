"""Runs on a Dask cluster: a run is a task on a worker that ends when the run finishes or parks.

The notebook (or CLI) that launches a run records it in the store, holds it
for the cluster under a *queue* claimant, and submits :func:`execute_run`;
the worker that executes the task takes the run over from the queue
(``acquire_run(take_from=…)``), runs it under its own lease, and returns when
the run finishes, fails or pauses. A paused run keeps no process: its lease
is released.

Every worker runs a :class:`RunWatcher` (registered by the first client as a
worker plugin, so workers that start later get it too). It hears the store's
doorbell — LISTEN/NOTIFY on PostgreSQL — and submits a task for any cluster
run that can go on: a paused run whose awaited answers are all in (whoever
answered, even a process that exited at once), or an interrupted run whose
worker died. Tasks for one run and state share a key, and taking a run is
atomic in the store, so a run executes once however many watchers react.

Python tools registered in a notebook (``@iterion_nb.tool``) are not on the
workers; tools must be importable there.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from typing import Any

from iterion_nb.errors import IterionError, ResumeError, RunOwnedError, StoreError
from iterion_nb.runtime.ownership import Claimant
from iterion_nb.runtime.ports import Store
from iterion_nb.runtime.records import Run, RunStatus

log = logging.getLogger("iterion_nb.cluster")

#: Environment variable naming the cluster (a scheduler address).
CLUSTER_ENV = "ITERION_NB_CLUSTER"
#: ``launch["executor"]`` of the runs the cluster executes.
EXECUTOR = "dask"
#: How long a queued run stays reserved for the cluster before it reads interrupted.
QUEUE_TTL = 60.0
#: Seconds between a watcher's full looks for runs to go on (between rings).
SCAN_INTERVAL = 5.0
#: The watcher plugin's name on the cluster.
PLUGIN = "iterion-run-watcher"
#: What a cluster task takes up by itself: a parked run that can go on, or one whose
#: executor died (a run handed over from the queue is taken whatever it was before).
CLUSTER_TAKES: tuple[RunStatus, ...] = ("paused_waiting_human", "interrupted")
#: Seconds to reach a scheduler before giving up.
CONNECT_TIMEOUT = 10.0
#: Seconds a worker has to try the store before a run is sent to the cluster regardless.
STORE_CHECK_SECONDS = 5.0

_stores: dict[str, Store] = {}
_stores_lock = threading.Lock()


def worker_store(spec: str) -> Store:
    """This worker process's store for ``spec`` (opened once, shared by its tasks).

    A URL (PostgreSQL) is opened as usual. A DuckDB file is only ever used
    through the process that holds it: a worker never holds the file itself.

    Raises:
        StoreError: No live process holds that DuckDB file.
    """
    from pathlib import Path

    from iterion_nb.store.holder_file import find_holder
    from iterion_nb.store.remote import RemoteStore, open_store

    with _stores_lock:
        store = _stores.get(spec)
        if store is not None and not getattr(store, "closed", False):
            return store
        if "://" in spec:
            store = open_store(spec)
        else:
            holder = find_holder(Path(spec))
            if holder is None:
                raise StoreError(
                    f"no process holds the run store {spec}: cluster workers use a DuckDB store"
                    " only through the process that holds it (use a postgresql:// store)"
                )
            store = RemoteStore(Path(spec), holder, take_over=False)
        _stores[spec] = store
        return store


def plugin_name(store_spec: str) -> str:
    """The watcher plugin's name for a store: its URL without a password.

    One name per store, however the password reaches the worker (in the URL a
    notebook sends, or from ``PGPASSWORD`` for the URL of the worker's
    ``ITERION_NB_STORE``): a worker never watches one store twice.
    """
    from iterion_nb.store.location import without_password

    return f"{PLUGIN}:{without_password(store_spec)}"


def _client(cluster: Any) -> Any:
    """A ``distributed.Client`` for ``cluster`` (an address, or a client already)."""
    try:
        import distributed
    except ImportError:
        raise IterionError(
            "running on a cluster needs Dask distributed: pip install 'iterion-nb[dask]'"
        ) from None
    if isinstance(cluster, distributed.Client):
        return cluster
    reach_scheduler(str(cluster))
    try:
        return distributed.Client(  # type: ignore[no-untyped-call]
            str(cluster), set_as_default=False, timeout=f"{CONNECT_TIMEOUT:.0f}s"
        )
    except (OSError, TimeoutError) as err:
        raise IterionError(f"cannot reach the Dask scheduler at {cluster}: {err}") from None


def reach_scheduler(address: str) -> None:
    """Check that a Dask scheduler answers at ``address`` before a client waits on it.

    A client connected to something that is not a Dask server (its dashboard's
    HTTP port, say) waits for its greeting forever, and one whose address has
    nothing listening retries until its timeout; this check tells at once.

    Raises:
        IterionError: Not an address Dask takes, nothing listens there, or what
            does never greets like Dask.
    """
    import concurrent.futures

    from distributed.comm.addressing import parse_address, parse_host_port
    from distributed.comm.core import CommClosedError, connect

    try:
        scheme, where = parse_address(address)
        host_port = parse_host_port(where, 8786) if scheme in ("tcp", "tls") else None
    except ValueError as err:
        raise IterionError(f"'{address}' is not a Dask scheduler address: {err}") from None
    if scheme in ("http", "https"):
        raise IterionError(_web_address(address))
    if host_port is not None:
        if not 1 <= host_port[1] <= 65535:
            raise IterionError(
                f"'{address}' is not a Dask scheduler address: port {host_port[1]} is out of"
                " range (1-65535)"
            )
        _listens(address, *host_port)

    async def greet() -> None:
        comm = await connect(address, timeout=CONNECT_TIMEOUT)  # type: ignore[no-untyped-call]
        await comm.close()

    # a thread of its own: the caller may be a notebook's running event loop
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="iterion-dask") as pool:
        done = pool.submit(asyncio.run, asyncio.wait_for(greet(), CONNECT_TIMEOUT))
        try:
            done.result()
        except ValueError as err:
            raise IterionError(f"'{address}' is not a Dask scheduler address: {err}") from None
        except TimeoutError:
            raise IterionError(
                f"nothing at {address} answered as a Dask scheduler within"
                f" {CONNECT_TIMEOUT:.0f} s ({_PORTS})"
            ) from None
        except CommClosedError:  # a server of another kind (PostgreSQL, say) hung up on Dask
            raise IterionError(
                f"what listens at {address} is not a Dask scheduler: it hung up on Dask's"
                f" greeting ({_PORTS})"
            ) from None
        except OSError as err:
            raise IterionError(f"cannot reach the Dask scheduler at {address}: {err}") from None


DASHBOARD_PORT = 8787
_PORTS = f"a scheduler listens on port 8786 by default; {DASHBOARD_PORT} is its dashboard"


def _web_address(address: str) -> str:
    """Why a web address (a dashboard's, pasted from the browser) is no scheduler's."""
    from urllib.parse import urlsplit

    try:
        host = urlsplit(address).hostname or "HOST"
    except ValueError:
        host = "HOST"
    host = f"[{host}]" if ":" in host else host
    return (
        f"'{address}' is not a Dask scheduler address: it is a web address (a scheduler's"
        f" dashboard, say); the scheduler itself listens on tcp://{host}:8786 by default"
    )


def _listens(address: str, host: str, port: int) -> None:
    """Refuse at once an address where nothing accepts a TCP connection.

    Raises:
        IterionError: The connection is refused or fails, or the host cannot be found.
    """
    import socket

    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT):
            pass
    except ConnectionRefusedError:
        start = (  # 8787 is where a scheduler's dashboard listens, not the scheduler
            f"`dask scheduler`; {_PORTS}" if port == DASHBOARD_PORT
            else f"`dask scheduler --port {port}`"
        )  # fmt: skip
        raise IterionError(
            f"no Dask scheduler at {address}: nothing listens there (start one with {start})"
        ) from None
    except TimeoutError:
        raise IterionError(
            f"cannot reach the Dask scheduler at {address}: no reply within {CONNECT_TIMEOUT:.0f} s"
        ) from None
    except OSError as err:  # no such host, no route, reset ...
        why = err.strerror or str(err)
        raise IterionError(f"cannot reach the Dask scheduler at {address}: {why}") from None


class DaskExecutor:
    """Submits runs of a store to a Dask cluster; registers the watcher on its workers.

    It reaches the scheduler only when a run is to go there (:meth:`connect`):
    a session that lists runs, answers or cancels needs no scheduler up.
    """

    def __init__(self, cluster: Any, store_spec: str) -> None:
        self.cluster = cluster
        self.store_spec = store_spec
        self._client: Any = None
        self._connecting = threading.Lock()
        #: Why the last attempt to reach the scheduler failed (None once it succeeds).
        self.error: str | None = None

    @property
    def client(self) -> Any:
        """The ``distributed.Client`` (connecting first, if this executor has not yet)."""
        return self.connect()

    def connect(self) -> Any:
        """Reach the scheduler and register the watcher (once); return the client.

        Raises:
            IterionError: Dask is not installed, or no scheduler answers there.
        """
        with self._connecting:
            if self._client is None:
                try:
                    self._client = self._registered(_client(self.cluster))
                except IterionError as err:
                    self.error = str(err)
                    raise
                self.error = None
            return self._client

    def _registered(self, client: Any) -> Any:
        """``client``, once the watcher is registered on the workers through it."""
        from iterion_nb.session.watcher import RunWatcher

        # one watcher per store on every worker (registering it again changes nothing);
        # Dask logs plugin names, and its dashboard shows those logs: no password in it
        try:
            client.register_plugin(RunWatcher(self.store_spec), name=plugin_name(self.store_spec))
        except Exception as err:
            if client is not self.cluster:
                client.close()
            raise IterionError(f"cannot use the Dask scheduler at {self.cluster}: {err}") from None
        try:
            self._check_workers(client)
        except IterionError:
            if client is not self.cluster:
                client.close()
            raise
        return client

    def _check_workers(self, client: Any) -> None:
        """Refuse a cluster none of whose workers can open the store (say, none has psycopg).

        Each connected worker tries to open the store (:func:`store_check`). When
        every one says it cannot, a run sent there would wait in the queue with
        its reason in the workers' logs only: the launch or resume is refused
        now, naming why. No worker up, a worker that can, one that does not
        reply in time, or a check that could not run there (an older release, a
        worker going away): the run goes to the cluster, as before the check.
        Done once, when this executor first reaches the scheduler.
        """
        from iterion_nb.store.location import mask_url

        try:
            said = client.run(
                store_check, self.store_spec, on_error="return",
                callback_timeout=STORE_CHECK_SECONDS + CONNECT_TIMEOUT,
            )  # fmt: skip
            said = dict(said)
        except Exception as err:  # (not a dict: an asynchronous client on its own loop)
            log.info("iterion_nb: the cluster's workers did not say whether they can open"
                     " the store: %s", err or type(err).__name__)  # fmt: skip
            return
        why = {worker: got for worker, got in said.items() if isinstance(got, str)}
        if said and len(why) == len(said):
            reasons: dict[str, list[str]] = {}
            for worker, reason in sorted(why.items()):
                reasons.setdefault(reason, []).append(worker)
            told = "; ".join(
                f"worker {workers[0]}"
                + (f" and {len(workers) - 1} more" if len(workers) > 1 else "")
                + f": {reason}"
                for reason, workers in reasons.items()
            )
            raise ClusterStoreError(
                f"no worker of the Dask cluster at {_address(self.cluster)} can open the run"
                f" store {mask_url(self.store_spec)}: {told}"
            )
        for worker, reason in sorted(why.items()):
            log.info("iterion_nb: worker %s cannot open the run store (the others take its"
                     " runs): %s", worker, reason)  # fmt: skip

    async def connected(self) -> Any:
        """:meth:`connect` in a thread: the caller's event loop (a kernel's) goes on meanwhile."""
        if self._client is not None:
            return self._client
        return await asyncio.to_thread(self.connect)

    def has_workers(self) -> bool:
        """Whether any worker is connected to the scheduler now."""
        return bool(self.client.scheduler_info().get("workers"))

    @staticmethod
    def queue_claimant() -> Claimant:
        """A claimant that holds a run for the cluster until a worker takes it over."""
        return Claimant.queue(QUEUE_TTL)

    def submit(self, run_id: str, take_from: str) -> None:
        """Execute ``run_id`` on a worker (the task outlives this client)."""
        import distributed

        future = self.client.submit(
            execute_run, self.store_spec, run_id, take_from,
            key=queued_key(run_id, take_from), pure=False,
        )  # fmt: skip
        distributed.fire_and_forget(future)  # type: ignore[no-untyped-call]

    def close(self) -> None:
        """Let go of the client (runs go on on the cluster)."""
        if self._client is not None and self._client is not self.cluster:
            self._client.close()


def _address(cluster: Any) -> str:
    """The scheduler's address of ``cluster`` (an address, or a client: not its repr)."""
    scheduler = getattr(cluster, "scheduler", None)
    return str(getattr(scheduler, "address", None) or cluster)


def queued_key(run_id: str, take_from: str) -> str:
    """The scheduler's key of the task that takes ``run_id`` over from the queue ``take_from``."""
    return f"iterion-run-{run_id}-{take_from}"


def check_tools_reach_workers(wf: Any) -> None:
    """Refuse a cluster run that calls a tool defined in this notebook or script.

    Such a tool exists in this process only: the workers could not call it.

    Raises:
        IterionError: Names the tools and what to do.
    """
    from iterion_nb.backends.tools import REGISTRY
    from iterion_nb.ir import model as m

    here = sorted({
        name for node in wf.nodes.values() if isinstance(node, m.AgentNode)
        for name in node.tools
        if name in REGISTRY and getattr(REGISTRY[name].fn, "__module__", None) == "__main__"
    })  # fmt: skip
    if here:
        names = ", ".join(f"'{name}'" for name in here)
        raise IterionError(
            f"tool {names} is defined in this notebook or script, and a cluster run executes"
            " on the workers, where it does not exist: define it in a module the workers"
            " import (dask worker --preload MODULE), or run here (cluster=False)"
        )


async def store_check(store_spec: str) -> str | None:
    """On a worker (``Client.run``): why this worker cannot open the run store, or None.

    Only opening counts (no driver, a malformed URL, no process holding a
    DuckDB file): what then goes wrong talking to the store (a password, an
    outage) the watcher says in the worker's log, and runs wait it out. In a
    thread of its own, bounded as a whole: the worker's event loop goes on.
    """

    def check() -> str | None:
        try:
            worker_store(store_spec)
        except IterionError as err:
            return str(err) or type(err).__name__
        return None

    try:
        return await asyncio.wait_for(asyncio.to_thread(check), STORE_CHECK_SECONDS)
    except TimeoutError:  # (the thread ends by itself)
        return None


class ClusterStoreError(IterionError):
    """No worker of the cluster can open the run store (they need fixing, not the address)."""


class _NoStoreHere(Exception):  # noqa: N818 - a condition of this worker, handled by passing on
    """This worker cannot open the run's store (no driver, no route, no holder ...)."""


def execute_run(
    store_spec: str, run_id: str, take_from: str | None, tried: tuple[str, ...] = ()
) -> str:
    """The Dask task: take the run and execute it until it finishes, fails or pauses.

    A worker that cannot open the store (say, its Python lacks psycopg) does
    not fail the task, which nothing would see (a task is fire-and-forget):
    it hands the run at once to a worker it has not been to (``tried``), and
    says so in its log in one line.
    """
    try:
        return asyncio.run(_execute(store_spec, run_id, take_from))
    except _NoStoreHere as err:
        return _pass_on(store_spec, run_id, take_from, tried, str(err))


async def _execute(store_spec: str, run_id: str, take_from: str | None) -> str:
    from iterion_nb.session.core import Session

    try:
        store = worker_store(store_spec)
    except StoreError as err:
        raise _NoStoreHere(str(err)) from None
    record = await store.get_run(run_id)
    # tools run where the launching process asked, when this machine has that directory
    wanted = record.launch.get("workdir")
    workdir = wanted if isinstance(wanted, str) and os.path.isdir(wanted) else os.getcwd()
    session = Session(store, cluster=False, parking=False, workdir=workdir, serve=False)
    try:
        status: RunStatus = await session.execute_queued(record, take_from)
        return status
    except RunOwnedError:
        return "owned elsewhere"  # another task of this run took it first
    except ResumeError as err:
        return f"not resumable: {err}"
    finally:
        await session.close()


#: The stores this worker process could not open (and said so): said once each.
_unusable: set[str] = set()
_unusable_lock = threading.Lock()


def _first_time_unusable(where: str) -> bool:
    """Whether this worker finds ``where`` unusable for the first time (its threads race)."""
    with _unusable_lock:
        first = where not in _unusable
        _unusable.add(where)
        return first


def _pass_on(
    store_spec: str, run_id: str, take_from: str | None, tried: tuple[str, ...], why: str
) -> str:
    """Submit the run to the workers not in ``tried`` (nor this one); what became of it.

    When every worker has been tried, the run stays where it was: a queued run's
    hold lapses within :data:`QUEUE_TTL` (it reads ``interrupted``, as with no
    worker up), and the first watcher that can open the store takes it up.
    """
    import distributed

    from iterion_nb.store.location import mask_url

    worker = distributed.get_worker()
    tried = (*tried, worker.address)
    others = _submit_elsewhere(worker, store_spec, run_id, take_from, tried)
    where = mask_url(store_spec)
    if others is None:  # the scheduler is away: the watchers submit the run again later
        return f"not passed on (no scheduler): {why}"
    if others:
        (log.warning if _first_time_unusable(where) else log.info)(
            "iterion_nb: this worker cannot open the run store %s, so it passes that store's"
            " runs to other workers: %s", where, why,
        )  # fmt: skip
        return "passed on: this worker cannot open the store"
    log.warning(
        "iterion_nb: no worker of this cluster could open the run store %s for run %s (here:"
        " %s); the run waits for a worker that can (queued, it reads interrupted within %.0f s)",
        where, run_id, why, QUEUE_TTL,
    )  # fmt: skip
    return f"no worker can open the store: {why}"


def _submit_elsewhere(
    worker: Any, store_spec: str, run_id: str, take_from: str | None, tried: tuple[str, ...]
) -> list[str] | None:
    """Submit the run to the workers not ``tried``, through a client of its own; those workers.

    None if the scheduler cannot be reached.

    A client of its own, closed at once: the worker's own client makes
    tracebacks when its scheduler goes away (see :class:`RunWatcher`).
    """
    import distributed

    key = str(worker.get_current_task() or f"iterion-run-{run_id}").partition("-elsewhere-")[0]
    try:
        with distributed.Client(  # type: ignore[no-untyped-call]
            worker.scheduler.address, security=worker.security, set_as_default=False,
            timeout=f"{CONNECT_TIMEOUT:.0f}s",
        ) as client:  # fmt: skip
            others = sorted(set(client.scheduler_info(n_workers=-1)["workers"]) - set(tried))
            if others:
                future = client.submit(
                    execute_run, store_spec, run_id, take_from, tried,
                    key=f"{key}-elsewhere-{len(tried)}", workers=others,
                    allow_other_workers=False, pure=False,
                )  # fmt: skip
                distributed.fire_and_forget(future)  # type: ignore[no-untyped-call]
                future.release()
    except (OSError, TimeoutError) as err:  # the scheduler is away: the watchers resubmit later
        log.info("iterion_nb: cannot pass run %s on: %s", run_id, err)
        return None
    return others


def submit_resumes(client: Any, store_spec: str, runs: list[Run]) -> None:
    """One task per run and state (watchers reacting together submit it once), in one graph.

    ``client`` is asynchronous, on the caller's loop: submitting only queues
    messages, which go out when the caller next waits; a watcher closes the
    client right after. One graph, not one per run: the scheduler takes a graph
    in asynchronously, and a client that closed while it still took in later
    ones would be sent the end of a quick task of an earlier one on its closed
    connection, which the scheduler logs as a CRITICAL error with a traceback.
    Taken in as one, the tasks are handed to ``fire_and_forget`` and released
    by this client in the same breath.
    """
    import distributed

    keys = [f"iterion-resume-{run.id}-{run.updated_at.timestamp()}" for run in runs]
    futures = client.map(
        execute_run, [store_spec] * len(runs), [run.id for run in runs], [None] * len(runs),
        key=keys, pure=False,
    )  # fmt: skip
    distributed.fire_and_forget(futures)  # type: ignore[no-untyped-call]
    for future in futures:
        future.release()


__all__ = [
    "CLUSTER_ENV",
    "CLUSTER_TAKES",
    "QUEUE_TTL",
    "ClusterStoreError",
    "DaskExecutor",
    "execute_run",
    "queued_key",
    "reach_scheduler",
    "submit_resumes",
    "worker_store",
]
