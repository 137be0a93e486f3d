"""``/api/store/…``: the Store port over HTTP, for other processes.

Only the holder can open the DuckDB file, so another process that wants a
Store (the CLI, another kernel) gets a :class:`RemoteStore` whose every call
is one request to ``POST /api/store/{method}``; the holder runs it on its
own store. ``write_batch`` applies a batch of events and checkpoints in one
request. ``GET /api/store/rings`` streams the holder's doorbell to the
client (one JSON line per ring), so its waiters wake at once.

Every call is checked against the Store protocol's signature and types
before it reaches the store (records field by field, text without U+0000,
times with a zone), so a malformed call is a 400 that names the argument,
never a half-applied write or a database error. ``GET /api/store/hello``
(no token) is how a client checks a holder before trusting it
(:mod:`iterion_nb.store.holder_file`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import tornado.iostream
import tornado.web

from iterion_nb.api.errlog import ERRORS
from iterion_nb.api.handlers import (
    ApiError,
    BaseHandler,
    check_fields,
    check_json_type,
    oversize,
    parse_records,
)
from iterion_nb.api.rpc_check import checked_call
from iterion_nb.errors import IterionError
from iterion_nb.runtime.ports import Store
from iterion_nb.store.codec import decode, encode
from iterion_nb.store.holder_file import NONCE
from iterion_nb.store.remote import write_batch

#: The Store methods reachable over HTTP.
METHODS = (
    "create_run", "get_run", "update_run", "list_runs", "save_checkpoint", "append_event",
    "events", "put_artifact", "get_artifact", "list_artifacts", "add_interaction",
    "get_interaction", "pending_interactions", "interactions", "answer", "queue_message",
    "drain_messages", "flush", "acquire_run", "renew_leases", "settle_run", "release_runs",
    "cancel_run", "write_batch", "export_run", "import_run", "expire_due", "retract", "amend",
)  # fmt: skip
#: The largest store call read: a checkpoint holds every output of a run (each at most
#: 64 Mi characters), and a batch many checkpoints.
MAX_RPC_BODY = 1024 * 1024 * 1024
#: Seconds between keep-alive lines on the rings stream.
KEEPALIVE = 5.0


@tornado.web.stream_request_body
class StoreRpcHandler(BaseHandler):
    """One Store call: the body is ``{"args": [...], "kwargs": {...}}``.

    A call carries records (a checkpoint holds every output of its run), so
    its body may be up to :data:`MAX_RPC_BODY`, read as it comes once the
    token is checked, and is held to what a run may record, not to what a
    person may type (:func:`~iterion_nb.api.handlers.parse_records`).
    """

    store: Store

    def initialize(self, service: Any, token: str | None, store: Store | None = None) -> None:
        super().initialize(service, token)
        assert store is not None
        self.store = store
        self._body = bytearray()

    def prepare(self) -> None:
        super().prepare()
        if not self._finished:
            self.request.connection.set_max_body_size(MAX_RPC_BODY)  # type: ignore[union-attr]

    def data_received(self, chunk: bytes) -> None:
        self._body += chunk

    def _call_body(self) -> dict[str, Any]:
        raw = bytes(self._body)
        if raw:
            check_json_type(self.request.headers.get("Content-Type"), self.lenient_body_types)
        data = parse_records(raw or b"{}")
        if not isinstance(data, dict):
            raise ApiError(400, "bad_request", "request body must be a JSON object")
        check_fields(data, ("args", "kwargs"))
        return data

    async def post(self, method: str) -> None:
        async def act() -> None:
            if method not in METHODS:
                raise ApiError(404, "not_found", f"no store method '{method[:80]}'")
            data = self._call_body()
            args, kwargs = data.get("args", []), data.get("kwargs", {})
            if not isinstance(args, list) or not isinstance(kwargs, dict):
                raise ApiError(400, "bad_request", "args must be a list and kwargs an object")
            try:
                args, kwargs = decode(args), decode(kwargs)
            except (KeyError, TypeError, ValueError, AttributeError):
                raise ApiError(400, "bad_request", f"{method}: a malformed record") from None
            call = checked_call(method, args, kwargs)
            try:
                result: Any = None
                if method == "write_batch":
                    await write_batch(self.store, *call.args)
                else:
                    result = await getattr(self.store, method)(*call.args, **call.kwargs)
            except IterionError:
                raise
            except Exception as err:  # checked, yet refused: say so without the store's text
                ERRORS.line(f"store.{method} refused a checked call: {type(err).__name__}")
                raise ApiError(
                    400, "store_refused", f"{method}: the store could not apply this call"
                ) from None
            self.reply({"result": encode(result)})

        await self.guarded(act)


class RingsHandler(BaseHandler):
    """``GET /api/store/rings``: one JSON line per ring of the holder's doorbell.

    Not counted among the requests in flight: it lasts as long as its client,
    and stopping the holder closes it.
    """

    store: Store

    def initialize(self, service: Any, token: str | None, store: Store | None = None) -> None:
        super().initialize(service, token)
        assert store is not None
        self.store = store

    def prepare(self) -> None:
        if self.api_token is None:
            return
        super().prepare()
        tracker = getattr(self, "_tracked", None)
        if tracker is not None:  # a stream is not a request to drain before stopping
            self._tracked = None
            tracker.finished()

    async def get(self) -> None:
        bell = getattr(self.store, "doorbell", None)
        if bell is None:
            raise tornado.web.HTTPError(404)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[str] = asyncio.Queue()

        def heard(key: str) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, key)

        unsubscribe = bell.subscribe(heard)
        self.set_header("Content-Type", "application/x-ndjson")
        self.set_header("Cache-Control", "no-store")
        try:
            self.write("{}\n")
            await self.flush()
            while True:
                try:
                    keys = [await asyncio.wait_for(queue.get(), KEEPALIVE)]
                except TimeoutError:
                    keys = []
                while not queue.empty():
                    keys.append(queue.get_nowait())
                lines = [json.dumps({"ring": k}) for k in dict.fromkeys(keys)] or ["{}"]
                self.write("\n".join(lines) + "\n")
                await self.flush()
        except tornado.iostream.StreamClosedError:
            pass
        finally:
            unsubscribe()


class HelloHandler(tornado.web.RequestHandler):
    """``GET /api/store/hello?nonce=HEX``, no token: the holder proves it holds this store."""

    def initialize(self, hello: Callable[[str], dict[str, Any]]) -> None:
        self._hello = hello

    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        refused = oversize(self.request)
        if refused is not None:
            self.set_status(refused.status)
            self.finish({"code": refused.code, "message": str(refused)})
            return
        nonce = self.get_query_argument("nonce", "")
        if not NONCE.match(nonce):
            self.set_status(400)
            self.finish({"code": "bad_request", "message": "nonce must be 32 to 128 hex digits"})
            return
        self.finish(json.dumps(self._hello(nonce)))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        self.finish({"code": "http_error", "message": self._reason})


def store_routes(
    store: Store,
    token: str | None,
    prefix: str = "",
    hello: Callable[[str], dict[str, Any]] | None = None,
) -> list[tuple[str, Any, dict[str, Any]]]:
    """The store RPC route, the rings stream, and (from a holder) the hello."""
    args = {"service": None, "token": token, "store": store}
    table: list[tuple[str, Any, dict[str, Any]]] = []
    if hello is not None:
        table.append((prefix + r"/api/store/hello", HelloHandler, {"hello": hello}))
    return [
        *table,
        (prefix + r"/api/store/rings", RingsHandler, args),
        (prefix + r"/api/store/([a-z_]+)", StoreRpcHandler, args),
    ]
