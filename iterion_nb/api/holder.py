"""The store holder's loopback server, and how other processes find it.

The process that holds the DuckDB file serves the REST API on 127.0.0.1 (an
ephemeral port) with a random bearer token, and publishes ``{pid, url,
token}`` in ``<store>.holder.json`` beside the database, mode 0600, removed
on a clean exit. The server runs on its own thread and event loop, so it
answers even while the holder's loop is busy; each call is handed to the
loop that runs the workflows. ``GET /api/store/hello`` lets a client check,
before it sends the token, that this server holds the store it means
(:mod:`iterion_nb.store.holder_file`). What the server logs goes through a
bounded, rate-limited queue (:mod:`iterion_nb.api.errlog`): a stderr nobody
reads never stalls it.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import errno
import os
import secrets
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import tornado.httpserver
import tornado.netutil
import tornado.web

from iterion_nb.api.errlog import forget_this_thread, reroute_this_thread
from iterion_nb.api.handlers import (
    HEADER_READ_LIMIT,
    MAX_BODY,
    ApiError,
    NotFoundHandler,
    routes,
)
from iterion_nb.api.service import RunService
from iterion_nb.api.store_rpc import store_routes
from iterion_nb.errors import ResumeError, RunError, StoreFileError
from iterion_nb.runtime.answers import AnswerService
from iterion_nb.runtime.doorbell import Doorbell
from iterion_nb.runtime.ownership import cancel_wait, owned_error
from iterion_nb.runtime.ports import Store
from iterion_nb.runtime.records import RESUMABLE, RUN_STATUSES
from iterion_nb.store.holder_file import (
    HolderInfo,
    file_identity,
    find_holder,
    holder_file,
    holder_proof,
    publish_holder_file,
    unpublish_holder_file,
)
from iterion_nb.store.remote import open_store

#: Seconds a run route waits for the holder's loop to take its call up before it answers
#: 503 ``holder_busy`` (the call is then not made at all).
BUSY_SECONDS = 3.0

#: How often a cancel looks at the run again while it waits for it to settle.
CANCEL_LOOK = 0.5


class _OnLoop:
    """A RunService whose calls run on another thread's event loop (the session's).

    That loop may be busy: a notebook whose cell computes for minutes runs
    nothing else meanwhile. A call it has not taken up within
    :data:`BUSY_SECONDS` is withdrawn (it never runs) and refused with 503
    ``holder_busy``, so a terminal says why instead of hanging. A call the loop
    took up is waited for, however long it takes.
    """

    def __init__(self, service: RunService, loop: asyncio.AbstractEventLoop) -> None:
        self._service = service
        self._loop = loop

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        method = getattr(self._service, name)

        async def call(*args: Any) -> Any:
            begun = threading.Event()

            async def run() -> Any:
                begun.set()
                return await method(*args)

            future = asyncio.run_coroutine_threadsafe(run(), self._loop)
            waited = asyncio.wrap_future(future)
            try:
                return await asyncio.wait_for(asyncio.shield(waited), BUSY_SECONDS)
            except TimeoutError:
                if not begun.is_set() and future.cancel():
                    raise ApiError(
                        503, "holder_busy",
                        f"process {os.getpid()} holds the run store, but it is busy: it has"
                        f" not taken a request up for {BUSY_SECONDS:.0f} s (a notebook cell"
                        " still running?); try again once it is free",
                        pid=os.getpid(),
                    ) from None  # fmt: skip
                return await waited

        return call


class InFlight:
    """Counts the requests being served, so stopping can wait for them to finish."""

    def __init__(self) -> None:
        self.count = 0

    def started(self) -> None:
        """A request came in (called on the server's loop)."""
        self.count += 1

    def finished(self) -> None:
        """A request was answered or its client went away."""
        self.count -= 1


def _log_request(handler: tornado.web.RequestHandler) -> None:
    """Access log: nothing (a 500 was logged once, as one line, where it happened)."""


class Holder:
    """Serves the API for one store file until stopped."""

    #: How long stopping waits for requests in flight to be answered.
    DRAIN_SECONDS = 3.0

    def __init__(
        self, service: RunService, store: Store, db_path: Path, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.db_path = db_path
        self._store = store
        self.token = secrets.token_urlsafe(32)
        self._service = _OnLoop(service, loop)
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="iterion-holder", daemon=True)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: tornado.httpserver.HTTPServer | None = None
        self.url = ""
        self._error: BaseException | None = None
        self._in_flight = InFlight()
        self._stopping: asyncio.Task[None] | None = None
        self._identity = file_identity(db_path)
        self._address = ""

    def start(self) -> Holder:
        """Start serving and publish the holder file."""
        self._thread.start()
        self._ready.wait(10)
        if self._error is not None:
            raise self._error
        try:
            self._publish()
        except OSError as err:  # (a directory, say, where the holder file goes)
            self.stop()
            path = holder_file(self.db_path)
            in_the_way = err.errno in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST)
            raise StoreFileError(
                f"cannot write the holder file {path}, through which other processes reach"
                f" the run store: {err.strerror or err}"
                + ("; move what is there away" if in_the_way else "")
            ) from None
        atexit.register(self._unpublish)
        return self

    @property
    def running(self) -> bool:
        """Whether the server still serves (it has not been stopped)."""
        return self._thread.is_alive() and self._stopping is None

    def rebind(self, service: RunService) -> None:
        """Answer the run routes through ``service`` from now on (same loop)."""
        self._service._service = service

    def hello(self, nonce: str) -> dict[str, Any]:
        """The answer to ``GET /api/store/hello``: the proof that this server holds the store."""
        proof = holder_proof(self.token, nonce, os.getpid(), self._address, self._identity)
        return {"service": "iterion-nb holder", "pid": os.getpid(), "proof": proof}

    def _serve(self) -> None:
        reroute_this_thread()
        try:
            self._run_server()
        finally:
            forget_this_thread()

    def _run_server(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            table = routes(self._service, self.token) + store_routes(  # type: ignore[arg-type]
                self._store, self.token, hello=self.hello
            )
            app = tornado.web.Application(
                table,
                iterion_in_flight=self._in_flight,
                iterion_stopping=lambda: self._stopping is not None,
                log_function=_log_request,
                default_handler_class=NotFoundHandler,
                default_handler_args={"token": self.token},
            )
            # Bodies up to 4x the limit reach the handler, which answers 413 in JSON, and
            # heads (URL and headers) up to HEADER_READ_LIMIT, which it answers 414 or 431;
            # beyond either, tornado drops the connection before any handler runs.
            server = tornado.httpserver.HTTPServer(
                app, max_body_size=4 * MAX_BODY, max_header_size=HEADER_READ_LIMIT
            )
            sockets = tornado.netutil.bind_sockets(0, "127.0.0.1")
            server.add_sockets(sockets)
            self._server = server
            port = sockets[0].getsockname()[1]
            self._address = f"127.0.0.1:{port}"
            self.url = f"http://{self._address}"
        except BaseException as err:  # reported by start()
            self._error = err
            self._ready.set()
            return
        self._ready.set()
        loop.run_forever()
        loop.close()

    def _publish(self) -> None:
        publish_holder_file(self.db_path, HolderInfo(os.getpid(), self.url, self.token))

    def _unpublish(self) -> None:
        unpublish_holder_file(self.db_path, os.getpid())

    def stop(self) -> None:
        """Remove the holder file, stop accepting, answer the requests in flight, then stop.

        Clients that connect after this find nobody listening and look for
        the file's next holder (or open the file themselves once it is free);
        a request already being served is answered first, so nobody is left
        without a reply while this process still holds the file.
        """
        self._unpublish()
        atexit.unregister(self._unpublish)
        loop, server = self._loop, self._server
        if loop is None or server is None or loop.is_closed():
            return

        async def shutdown() -> None:
            server.stop()
            deadline = loop.time() + self.DRAIN_SECONDS
            while self._in_flight.count > 0 and loop.time() < deadline:
                await asyncio.sleep(0.005)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(server.close_all_connections(), 1.0)
            loop.stop()

        def start_shutdown() -> None:
            self._stopping = loop.create_task(shutdown())

        loop.call_soon_threadsafe(start_shutdown)
        self._thread.join(self.DRAIN_SECONDS + 3)


__all__ = [
    "Holder",
    "HolderInfo",
    "StoreService",
    "find_holder",
    "holder_file",
    "open_served_store",
    "serve_store",
]


class StoreService:
    """The REST routes over a bare store, for a process that holds the file but runs nothing.

    Answers go through the one answer path; a paused run whose answers are
    all in resumes in its owner's process if one keeps it parked, else it
    waits for someone to resume it (nothing runs here). (A session serves a
    :class:`~iterion_nb.session.SessionService` instead, which can also run.)
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.answers = AnswerService(store)

    async def list_runs(self, status: str | None, limit: int) -> list[Any]:
        """Runs, newest first."""
        if status is not None and status not in RUN_STATUSES:
            raise RunError(f"unknown status '{status}' (one of {', '.join(RUN_STATUSES)})")
        return await self.store.list_runs(status=status, limit=limit)

    async def get_run(self, run_id: str) -> Any:
        """One run."""
        return await self.store.get_run(run_id)

    async def events(self, run_id: str, after: int) -> list[Any]:
        """A run's events."""
        return await self.store.events(run_id, after=after)

    async def pending(self, run_id: str) -> list[Any]:
        """A run's unanswered questions (an ``await`` pause is not one)."""
        await self.store.get_run(run_id)
        return [i for i in await self.store.pending_interactions(run_id) if i.kind != "await"]

    async def pending_all(self) -> list[Any]:
        """Every run's unanswered questions, oldest first."""
        return [i for i in await self.store.pending_interactions() if i.kind != "await"]

    async def interactions(self, run_id: str) -> list[Any]:
        """Every question of a run (not the synthetic ``await`` records)."""
        return [i for i in await self.store.interactions(run_id) if i.kind != "await"]

    async def answer(
        self, run_id: str, interaction_id: str, answer: Any, answered_by: str
    ) -> dict[str, Any]:
        """Record an answer (a parked run resumes in its owner's process)."""
        outcome = await self.answers.answer(run_id, interaction_id, answer, answered_by)
        return outcome.to_dict()

    async def answer_human(
        self, run_id: str, answers: dict[str, Any], answered_by: str
    ) -> dict[str, Any]:
        """Record the answers a paused run waits on (its owner, if any, resumes it)."""
        outcome = await self.answers.answer_human(run_id, answers, answered_by)
        return outcome.to_dict()

    async def resume(self, run_id: str, force: bool, source: str | None = None) -> str:
        """Resuming needs a process that runs workflows; this one runs none.

        Raises:
            RunOwnedError: A live process owns the run (it executes it, or keeps it
                parked to resume it once answered): named as ``iterion-nb resume`` does.
            ResumeError: Its status does not allow it, or it would have to run here.
        """
        run = await self.store.get_run(run_id)
        if run.lease is not None:  # the store dropped it if it lapsed: its owner is alive
            raise owned_error(run.id, run.lease)
        if run.status not in RESUMABLE:
            raise ResumeError(f"run '{run_id}' is {run.status} and cannot be resumed")
        raise ResumeError(
            f"run '{run_id}' cannot be resumed by this process (it runs no workflows):"
            f" use `iterion-nb resume {run_id}` or %iterion resume in a notebook"
        )

    async def cancel(self, run_id: str) -> str:
        """Cancel a run and wait for it to settle, as a session does.

        A run executing elsewhere (a ``run`` in a terminal that goes through
        this holder) is asked to stop; its owner stops it at its next
        heartbeat, waited for up to :data:`CANCEL_WAIT` seconds (a run still
        queued for a cluster: :data:`QUEUED_CANCEL_WAIT`); it may still read
        ``running`` on return.
        """
        run = await self.store.cancel_run(run_id)
        if run.status != "running":
            return run.status
        loop = asyncio.get_running_loop()
        deadline = loop.time() + cancel_wait(run)
        bell: Doorbell = getattr(self.store, "doorbell", None) or Doorbell()
        while run.status == "running" and loop.time() < deadline:
            with bell.arm(run_id) as ticket:
                run = await self.store.get_run(run_id)
                if run.status == "running":  # a ring, or a look again in a moment
                    await ticket.wait(timeout=min(CANCEL_LOOK, deadline - loop.time()))
        return run.status


def serve_store(
    store: Store, db_path: Path, loop: asyncio.AbstractEventLoop | None = None
) -> Holder:
    """Serve a bare store from this process: its calls run on ``loop`` (default: the running one).

    The server stops when the store closes.
    """
    holder = Holder(StoreService(store), store, db_path, loop or asyncio.get_running_loop())
    holder.start()
    adder = getattr(store, "add_closer", None)
    if adder is not None:
        adder(holder.stop)
    return holder


def open_served_store(
    path: str | os.PathLike[str] | None = None, loop: asyncio.AbstractEventLoop | None = None
) -> Store:
    """:func:`open_store` that starts serving the file if it has to take it over.

    ``loop`` is the loop the store is used on, when this is called from
    another thread (default: the running loop).
    """

    def take_over(local: Store) -> None:
        if getattr(local, "read_only", None) is None:  # a read-only file: every reader opens it
            serve_store(local, Path(local.path), loop)  # type: ignore[attr-defined]

    return open_store(path, on_take_over=take_over, on_open=take_over)
