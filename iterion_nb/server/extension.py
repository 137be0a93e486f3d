"""Mounting the API's handlers in a Jupyter server, and the service they talk to."""

from __future__ import annotations

import json
import os
from typing import Any

import tornado.web
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join

from iterion_nb.api.client import HolderCallError, HolderClient
from iterion_nb.api.handlers import ApiError, routes
from iterion_nb.api.holder import StoreService, open_served_store
from iterion_nb.runtime.ports import Store
from iterion_nb.store import resolve_store_path
from iterion_nb.store.holder_file import HolderInfo, find_holder

#: Where the API is mounted, under the server's base URL.
PREFIX = "iterion"


class JupyterAuth(APIHandler):
    """Jupyter's authentication and XSRF before one of our handlers; errors as {code, message}."""

    async def prepare(self) -> None:  # type: ignore[override]
        """Jupyter's checks (host, identity, XSRF for posts), then: no identity, no access.

        Enforced here whatever ``allow_unauthenticated_access`` says, as
        Jupyter's own API handlers do with their ``authenticated`` decorators.
        """
        await super().prepare()
        if self.current_user is None:
            raise tornado.web.HTTPError(403, "not authenticated: use Jupyter's token or log in")

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Jupyter's refusals (403) and tornado's errors, in the API's JSON shape."""
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, tornado.web.HTTPError) and status_code == 403:
            message = exc.log_message or "not authenticated: use Jupyter's token or log in"
            code = "forbidden"
        else:
            message, code = self._reason, "http_error"
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"code": code, "message": message}))


def jupyter_routes(service: Any, base_url: str) -> list[tuple[str, type, dict[str, Any]]]:
    """Our routes, each handler class mixed with Jupyter's auth."""
    mounted = []
    prefix = url_path_join(base_url, PREFIX)
    for path, handler, args in routes(service, None, prefix=prefix):
        cls = type(f"Jupyter{handler.__name__}", (JupyterAuth, handler), {})
        mounted.append((path, cls, args))
    return mounted


class HolderOrFileService:
    """The REST API's service in a Jupyter server.

    Reads go through :func:`open_served_store` (the holder's store route when a
    process holds the file, else the file itself, which this server then serves).
    Answers, resumes and cancels go to the holder's own REST API when one is
    live, so the process running the run records them and resumes it; without
    a live holder they are recorded on the file (nothing runs here to resume).
    """

    def __init__(self, store_path: str | None = None) -> None:
        self.path = resolve_store_path(store_path)
        self._store: Store | None = None

    @property
    def store(self) -> Store:
        """The store, opened on first use (so the server holds no file until asked)."""
        if self._store is None:
            self._store = open_served_store(self.path)
        return self._store

    def _holder(self) -> HolderInfo | None:
        return find_holder(self.path)

    async def _forward(self, holder: HolderInfo, path: str, body: dict[str, Any]) -> Any:
        try:
            return await HolderClient(holder).call("POST", path, body)
        except HolderCallError as err:
            raise ApiError(err.status or 502, err.code, str(err)) from None

    async def list_runs(self, status: str | None, limit: int) -> list[Any]:
        """Runs, newest first."""
        return await StoreService(self.store).list_runs(status, limit)

    async def get_run(self, run_id: str) -> Any:
        """One run."""
        return await self.store.get_run(run_id)

    async def events(self, run_id: str, after: int) -> list[Any]:
        """A run's events."""
        return await self.store.events(run_id, after=after)

    async def pending(self, run_id: str) -> list[Any]:
        """A run's unanswered questions."""
        return await StoreService(self.store).pending(run_id)

    async def answer(
        self, run_id: str, interaction_id: str, answer: Any, answered_by: str
    ) -> dict[str, bool]:
        """Answer through the holder (it may resume the run), else on the file."""
        holder = self._holder()
        if holder is not None:
            path = f"/api/runs/{run_id}/interactions/{interaction_id}/answer"
            result = await self._forward(
                holder, path, {"answer": answer, "answered_by": answered_by}
            )
            return {"queued": bool(result.get("queued")), "resumed": bool(result.get("resumed"))}
        return await StoreService(self.store).answer(run_id, interaction_id, answer, answered_by)

    async def answer_human(
        self, run_id: str, answers: dict[str, Any], answered_by: str
    ) -> dict[str, bool]:
        """Resume a paused run: only the process that runs workflows can."""
        holder = self._holder()
        if holder is None:
            return await StoreService(self.store).answer_human(run_id, answers, answered_by)
        path = f"/api/runs/{run_id}/answer-human"
        result = await self._forward(holder, path, {"answers": answers, "answered_by": answered_by})
        return {"queued": bool(result.get("queued")), "resumed": bool(result.get("resumed"))}

    async def cancel(self, run_id: str) -> str:
        """Cancel a run (the holder stops it if it runs there)."""
        holder = self._holder()
        if holder is None:
            return await StoreService(self.store).cancel(run_id)
        result = await self._forward(holder, f"/api/runs/{run_id}/cancel", {})
        return str(result.get("status"))


def load(serverapp: Any) -> None:
    """Mount the API in a running Jupyter server (``ITERION_NB_STORE`` picks the store)."""
    service = HolderOrFileService(os.environ.get("ITERION_NB_STORE"))
    web_app = serverapp.web_app
    web_app.add_handlers(".*$", jupyter_routes(service, web_app.settings["base_url"]))
    web_app.settings["iterion_nb_service"] = service
    serverapp.log.info("iterion_nb: REST API at %s", url_path_join(
        web_app.settings["base_url"], PREFIX, "api/runs"))  # fmt: skip


__all__ = ["HolderOrFileService", "JupyterAuth", "jupyter_routes", "load"]
