"""``POST /api/store/{method}``: the Store port over HTTP, for other processes.

Only the holder can open the DuckDB file, so another process that wants a
Store (the CLI, another kernel) gets a :class:`RemoteStore` whose every call
is one request to this route. The holder runs it on its own store.
"""

from __future__ import annotations

from typing import Any

from iterion_nb.api.handlers import ApiError, BaseHandler
from iterion_nb.runtime.ports import Store
from iterion_nb.store.codec import decode, encode

#: The Store methods reachable over HTTP.
METHODS = (
    "create_run", "get_run", "update_run", "list_runs", "save_checkpoint", "append_event",
    "events", "put_artifact", "get_artifact", "list_artifacts", "add_interaction",
    "get_interaction", "pending_interactions", "interactions", "answer", "queue_message",
    "drain_messages", "flush",
)  # fmt: skip


class StoreRpcHandler(BaseHandler):
    """One Store call: the body is ``{"args": [...], "kwargs": {...}}``."""

    store: Store

    def initialize(self, service: Any, token: str | None, store: Store | None = None) -> None:
        super().initialize(service, token)
        assert store is not None
        self.store = store

    async def post(self, method: str) -> None:
        async def act() -> None:
            if method not in METHODS:
                raise ApiError(404, "not_found", f"no store method '{method[:80]}'")
            data = self.body()
            args = decode(data.get("args", []))
            kwargs = decode(data.get("kwargs", {}))
            if not isinstance(args, list) or not isinstance(kwargs, dict):
                raise ApiError(400, "bad_request", "args must be a list and kwargs an object")
            try:
                result = await getattr(self.store, method)(*args, **kwargs)
            except TypeError as err:
                raise ApiError(400, "bad_request", f"{method}: {err}") from None
            self.reply({"result": encode(result)})

        await self.guarded(act)


def store_routes(
    store: Store, token: str | None, prefix: str = ""
) -> list[tuple[str, type[BaseHandler], dict[str, Any]]]:
    """The store RPC route."""
    args = {"service": None, "token": token, "store": store}
    return [(prefix + r"/api/store/([a-z_]+)", StoreRpcHandler, args)]
