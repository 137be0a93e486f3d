"""Mounting the API's handlers in a Jupyter server, the service they talk to, and stopping it.

The extension is an :class:`~jupyter_server.extension.application.ExtensionApp`
so that the server tells it when it stops (``POST /api/shutdown``, SIGTERM,
Ctrl-C): it then ends its event streams, stops serving the store to other
processes (they take the file over) and closes the store, before the server's
loop stops. Left to the interpreter's exit, the threads that serve and write
the store would be cut off mid-call (a crash at exit, or a hang).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from pathlib import Path
from typing import Any

import tornado.web
from jupyter_server.base.handlers import APIHandler
from jupyter_server.extension.application import ExtensionApp
from jupyter_server.utils import url_path_join

from iterion_nb.api.handlers import ApiError, routes, scrub
from iterion_nb.api.holder import StoreService, open_served_store
from iterion_nb.errors import IterionError
from iterion_nb.runtime.ports import Store
from iterion_nb.store import resolve_store_path
from iterion_nb.store.location import DEFAULT_DIR, STORE_ENV, mask_url, store_url
from iterion_nb.view.askers import Askers

#: Where the API is mounted, under the server's base URL.
PREFIX = "iterion"
#: What a request gets while the server stops (503: the store is no longer served here).
STOPPING = "the Jupyter server is stopping"


class JupyterAuth(APIHandler):
    """Jupyter's authentication and XSRF before one of our handlers; errors as {code, message}."""

    #: Bodies labelled so are read as JSON here too (never by the holder): a browser's
    #: ``fetch`` labels a string body ``text/plain``, and JupyterLab's ``ServerConnection``
    #: (the sidebar's requests) keeps that label; tornado's and urllib's clients label a
    #: POST form-encoded unless told. Cross-site requests are Jupyter's XSRF check's business.
    lenient_body_types = frozenset({"text/plain", "application/x-www-form-urlencoded"})
    #: Jupyter reads these itself: a token in the URL, the XSRF token of a form.
    ambient_query = frozenset({"token", "_xsrf"})
    cache_buster = True

    async def prepare(self) -> None:  # type: ignore[override]
        """Jupyter's checks (host, identity, XSRF for posts), then: no identity, no access.

        Enforced here whatever ``allow_unauthenticated_access`` says, as
        Jupyter's own API handlers do with their ``authenticated`` decorators.
        """
        await super().prepare()
        if self.current_user is None:
            raise tornado.web.HTTPError(403, "not authenticated: use Jupyter's token or log in")
        service = self.settings.get("iterion_nb_service")
        if service is not None and service.stopping:
            raise tornado.web.HTTPError(503, STOPPING)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Jupyter's refusals (403), an unknown route (404), tornado's errors: as the API's JSON."""
        exc = kwargs.get("exc_info", (None, None, None))[1]
        logged = exc.log_message if isinstance(exc, tornado.web.HTTPError) else None
        if status_code == 403:
            message = logged or "not authenticated: use Jupyter's token or log in"
            code = "forbidden"
        elif status_code == 404:
            message, code = "no such route", "not_found"
        elif status_code == 503 and logged == STOPPING:
            message, code = logged, "stopping"
        elif status_code >= 500:
            message, code = "internal error (logged by the server)", "internal_error"
        else:
            message, code = self._reason, "http_error"
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"code": code, "message": message}))


class JupyterNotFound(JupyterAuth):
    """Any other path under ``/iterion/api``: a JSON 404, after Jupyter's checks."""

    async def prepare(self) -> None:  # type: ignore[override]
        """Jupyter's checks first (no identity: 403), then: no such route."""
        await super().prepare()
        raise tornado.web.HTTPError(404)


def jupyter_routes(service: Any, base_url: str) -> list[tuple[str, type, dict[str, Any]]]:
    """Our routes, each handler class mixed with Jupyter's auth."""
    mounted = []
    prefix = url_path_join(base_url, PREFIX)
    for path, handler, args in routes(service, None, prefix=prefix):
        cls = type(f"Jupyter{handler.__name__}", (JupyterAuth, handler), {})
        mounted.append((path, cls, args))
    return mounted


def not_found_route(base_url: str) -> tuple[str, type, dict[str, Any]]:
    """Every other path under ``{base_url}iterion/api``: JSON 404 (mount it after the others)."""
    return (url_path_join(base_url, PREFIX, "api") + "(?:/.*)?", JupyterNotFound, {})


class HolderOrFileService:
    """The REST API's service in a Jupyter server.

    The store is opened on first use through :func:`open_served_store`: the
    holder's store routes when another process holds the file, else the file
    itself, which this server then serves to the others. Everything goes
    through the one answer path (:class:`StoreService`): an answer that
    completes what a paused run waits on resumes it in the process that owns
    it. The server runs no workflows: kernels and the CLI run them, against
    this store, whoever holds the file.
    """

    #: Seconds :meth:`close` gives the event streams to end their responses.
    STREAMS_GRACE = 2.0

    def __init__(self, store_path: str | None = None) -> None:
        #: The DuckDB file, or the store's URL (a PostgreSQL store: no file, no holder).
        self.path: Path | str = store_url(store_path) or resolve_store_path(store_path)
        self._service: StoreService | None = None
        #: Set by :meth:`close`: the server stops; nothing opens the store again.
        self.stopping = False
        #: The open event streams: each one's wake-up, set when it has ended (see :meth:`stream`).
        self._streams: dict[asyncio.Event, asyncio.Event] = {}
        #: Held while the store is being opened (see :meth:`_ready`).
        self._opening = asyncio.Lock()
        #: Attempts to open the store so far, and why the last one failed.
        self._attempts = 0
        self._failure: IterionError | None = None
        #: What ``GET /iterion/api/inbox`` read of the asking runs' events, for the next
        #: request (each run's log read once, then only what is new); one request at a time.
        self.inbox_askers = Askers()
        self.inbox_lock = asyncio.Lock()

    async def opened(self) -> Store:
        """The store, opened on first use (so the server holds no file until asked)."""
        return (await self._ready()).store

    async def _ready(self) -> StoreService:
        """The service on the open store; the first call opens it, off the server's loop.

        Opening a DuckDB file can wait (up to 15 s) for a process that holds
        it to publish itself as its holder: meanwhile the server goes on
        serving notebooks. Requests that arrive meanwhile wait for that attempt and share
        its failure; a later request tries again.
        """
        self._refuse_when_stopping()
        if self._service is None:
            tried = self._attempts
            async with self._opening:
                if self._service is None and self._attempts != tried:
                    assert self._failure is not None  # the attempt this one waited for failed
                    raise self._failure
                if self._service is None:
                    self._attempts += 1
                    try:
                        store = await asyncio.to_thread(
                            open_served_store, self.path, asyncio.get_running_loop()
                        )
                    except IterionError as err:
                        self._failure = err
                        raise
                    if self.stopping:  # the server stopped meanwhile: nothing serves it now
                        await asyncio.to_thread(asyncio.run, store.close())
                        self._refuse_when_stopping()
                    self._service = StoreService(store)
        return self._service

    def _refuse_when_stopping(self) -> None:
        if self.stopping:
            raise ApiError(503, "stopping", STOPPING)

    @contextlib.contextmanager
    def stream(self, wake: asyncio.Event) -> Any:
        """Count an event stream as open while in the block; :meth:`close` sets ``wake``."""
        ended = asyncio.Event()
        self._streams[wake] = ended
        try:
            yield
        finally:
            del self._streams[wake]
            ended.set()

    async def close(self) -> None:
        """Stop serving, as the server stops: end the streams, stop the holder, close the store.

        Other processes using the store through this server find it gone and
        take the file over. The store is closed off the server's loop, so
        requests the holder is still answering on it can finish meanwhile.
        """
        self.stopping = True
        ends = []
        for wake, ended in list(self._streams.items()):
            wake.set()
            ends.append(ended.wait())
        if ends:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*ends), self.STREAMS_GRACE)
        async with self._opening:  # an open under way ends first (it closes what it opened)
            pass
        service, self._service = self._service, None
        if service is not None:
            await asyncio.to_thread(asyncio.run, service.store.close())

    async def list_runs(self, status: str | None, limit: int) -> list[Any]:
        """Runs, newest first."""
        return await (await self._ready()).list_runs(status, limit)

    async def get_run(self, run_id: str) -> Any:
        """One run."""
        return await (await self._ready()).get_run(run_id)

    async def events(self, run_id: str, after: int) -> list[Any]:
        """A run's events."""
        return await (await self._ready()).events(run_id, after)

    async def pending(self, run_id: str) -> list[Any]:
        """A run's unanswered questions."""
        return await (await self._ready()).pending(run_id)

    async def pending_all(self) -> list[Any]:
        """Every run's unanswered questions, oldest first."""
        return await (await self._ready()).pending_all()

    async def interactions(self, run_id: str) -> list[Any]:
        """Every question of a run, with its answer."""
        return await (await self._ready()).interactions(run_id)

    async def answer(
        self, run_id: str, interaction_id: str, answer: Any, answered_by: str
    ) -> dict[str, Any]:
        """Answer one question (its owner resumes a parked run it completes)."""
        return await (await self._ready()).answer(run_id, interaction_id, answer, answered_by)

    async def answer_human(
        self, run_id: str, answers: dict[str, Any], answered_by: str
    ) -> dict[str, Any]:
        """Answer what a paused run waits on."""
        return await (await self._ready()).answer_human(run_id, answers, answered_by)

    async def resume(self, run_id: str, force: bool, source: str | None = None) -> str:
        """Refused: the server runs no workflows."""
        return await (await self._ready()).resume(run_id, force, source)

    async def cancel(self, run_id: str) -> str:
        """Cancel a run (one executing elsewhere is asked to stop)."""
        return await (await self._ready()).cancel(run_id)


def server_store(serverapp: Any) -> str:
    """The store this server serves: ``ITERION_NB_STORE``, else ``.iterion`` in its root dir."""
    chosen = os.environ.get(STORE_ENV)
    if chosen:
        return chosen
    return str(Path(getattr(serverapp, "root_dir", None) or os.getcwd()) / DEFAULT_DIR)


def load(serverapp: Any) -> HolderOrFileService:
    """Mount the API in a running Jupyter server, and give its kernels the same store.

    The rule: a kernel this server starts and the server itself use one
    store by default — ``ITERION_NB_STORE`` if set, else ``.iterion/`` in the
    server's root directory. The server exports that store, as an absolute
    path, in ``ITERION_NB_STORE`` to every kernel it starts (they inherit its
    environment), so a kernel whose notebook sits in a subdirectory still
    finds it, and its runs are the ones the server's REST API lists.
    """
    chosen = server_store(serverapp)
    service = HolderOrFileService(chosen)
    if "://" not in chosen:  # a store URL (a database server) is the same from anywhere
        os.environ[STORE_ENV] = str(service.path)
    from iterion_nb.server.routes import lab_routes  # they import this module

    web_app = serverapp.web_app
    base_url = web_app.settings["base_url"]
    mounted = lab_routes(service, base_url) + jupyter_routes(service, base_url)
    web_app.add_handlers(".*$", [*mounted, not_found_route(base_url)])
    web_app.settings["iterion_nb_service"] = service
    shown = mask_url(service.path) if isinstance(service.path, str) else service.path
    serverapp.log.info("iterion_nb: REST API at %s, store %s", url_path_join(
        web_app.settings["base_url"], PREFIX, "api/runs"), shown)  # fmt: skip
    return service


class IterionExtension(ExtensionApp):
    """The server extension: mounts the API when loaded, stops serving the store when stopped."""

    name = "iterion_nb"
    load_other_extensions = True
    service: HolderOrFileService | None = None

    def initialize_handlers(self) -> None:
        """Mount the routes (:func:`load`)."""
        self.service = load(self.serverapp)

    async def stop_extension(self) -> None:
        """End the streams, stop the holder, close the store: :meth:`HolderOrFileService.close`."""
        if self.service is None:
            return
        try:
            await self.service.close()
        except Exception as err:  # the server stops all the same; say why the store did not close
            self.log.warning("iterion_nb: closing the store failed: %s", scrub(str(err)))
        else:
            self.log.info("iterion_nb: stopped serving the store")


__all__ = [
    "HolderOrFileService",
    "IterionExtension",
    "JupyterAuth",
    "jupyter_routes",
    "load",
    "not_found_route",
    "server_store",
]
