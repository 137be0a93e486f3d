"""The routes JupyterLab's extension needs beyond the REST API: push, validate, report.

- ``GET /iterion/api/inbox``: one snapshot (:func:`iterion_nb.server.inbox.snapshot`);
- ``GET /iterion/api/inbox/events``: the same, pushed as server-sent events
  each time it changes, driven by the store's doorbell (an answer, a new,
  expired or retracted question rings it at once); runs' statuses, which
  ring nothing, are re-read every :data:`RECHECK` seconds on the server;
- ``POST /iterion/api/validate`` ``{"source", "name"}``: the compiler's
  diagnostics, with their spans as UTF-16 offsets for the editor;
- ``GET /iterion/api/runs/{id}/report?format=html|md``: the run's report,
  served under a content security policy that lets it draw (inline styles,
  data: images) and nothing else (no script, no request, sandboxed).

Each is behind Jupyter's authentication and, for the POST, its XSRF check.
The stream needs no kernel: it reads the server's own store.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

import tornado.iostream
from jupyter_server.utils import url_path_join

from iterion_nb.api.handlers import (
    ApiError,
    BaseHandler,
    api_error,
    check_fields,
    check_json_type,
    parse_json,
)
from iterion_nb.dsl.diagnostics import Diagnostic
from iterion_nb.errors import IterionError
from iterion_nb.ir import analyze
from iterion_nb.report import render
from iterion_nb.server.extension import PREFIX, JupyterAuth
from iterion_nb.server.inbox import snapshot
from iterion_nb.view.askers import Askers

#: Seconds between two reads of the store when nothing rang (run statuses, expiries).
RECHECK = 2.0
#: Seconds a burst of rings is left to settle before the store is read.
SETTLE = 0.05
#: Seconds between keep-alive comments on a stream with nothing new.
KEEPALIVE = 15.0
#: The largest source validated: the language's own limit (4 MiB) and the JSON around it.
MAX_SOURCE_BODY = 9 * 1024 * 1024
#: What a report may do in the browser: draw itself, nothing more.
REPORT_POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'self'; sandbox"
)


class ServerRoute(JupyterAuth, BaseHandler):  # type: ignore[misc]
    """Jupyter's auth and XSRF first, then the API's JSON errors and helpers."""

    def initialize(self, service: Any, token: str | None = None) -> None:
        BaseHandler.initialize(self, service, None)


class InboxHandler(ServerRoute):
    """``GET /iterion/api/inbox``: pending questions, answered ones, runs."""

    async def get(self) -> None:  # noqa: D102
        async def act() -> None:
            service = self.service
            store = await service.opened()  # type: ignore[attr-defined]
            async with service.inbox_lock:  # type: ignore[attr-defined]
                self.reply(await snapshot(store, service.inbox_askers))  # type: ignore[attr-defined]

        await self.guarded(act)


class InboxEventsHandler(ServerRoute):
    """``GET /iterion/api/inbox/events``: the snapshot as server-sent events, when it changes.

    Events: ``inbox`` (data: the snapshot as JSON), ``problem`` (data:
    ``{code, message}``: the store could not be read; the stream goes on and
    tries again). A comment line every :data:`KEEPALIVE` seconds otherwise.
    The response ends when the client goes away or the server stops.
    """

    # An open sidebar is not activity: it must not keep an idle server from being culled.
    _track_activity = False
    _gone = False
    _wake: asyncio.Event | None = None

    def on_connection_close(self) -> None:  # noqa: D102
        self._gone = True
        if self._wake is not None:
            self._wake.set()
        super().on_connection_close()

    async def get(self) -> None:  # noqa: D102
        service = self.service
        try:
            self.check_query()
            store = await service.opened()  # type: ignore[attr-defined]
        except IterionError as err:
            self._fail(api_error(err))
            return
        except ApiError as err:  # the server stops
            self._fail(err)
            return
        loop = asyncio.get_running_loop()
        wake = self._wake = asyncio.Event()
        bell = getattr(store, "doorbell", None)

        def heard(key: str) -> None:
            loop.call_soon_threadsafe(wake.set)

        unsubscribe = bell.subscribe(heard) if bell is not None else None
        # arming is what makes a store served by another process hear its holder's rings
        ticket = bell.arm() if bell is not None else None
        self.set_header("Content-Type", "text/event-stream; charset=UTF-8")
        self.set_header("Cache-Control", "no-store")
        self.set_header("X-Accel-Buffering", "no")
        with service.stream(wake):  # type: ignore[attr-defined]  # the server's stop ends it
            try:
                await self._stream(store, wake)
            except tornado.iostream.StreamClosedError:
                pass
            finally:
                if unsubscribe is not None:
                    unsubscribe()
                if ticket is not None:
                    ticket.close()
                with contextlib.suppress(Exception):
                    if not self._finished:
                        await self.finish(set_content_type="text/event-stream; charset=UTF-8")

    async def _stream(self, store: Any, wake: asyncio.Event) -> None:
        last, written = "", time.monotonic()
        askers = Askers()  # each run's events read once, then only the new ones
        while not self._gone and not self.service.stopping:  # type: ignore[attr-defined]
            wake.clear()
            try:
                data = json.dumps(await snapshot(store, askers), ensure_ascii=False, default=str)
                event = "inbox"
            except IterionError as err:
                refused = api_error(err)
                data = json.dumps({"code": refused.code, "message": str(refused)})
                event = "problem"
            if data != last:
                self.write(f"event: {event}\ndata: {data}\n\n")
                last, written = data, time.monotonic()
                await self.flush()
            elif time.monotonic() - written >= KEEPALIVE:
                self.write(": keep-alive\n\n")
                written = time.monotonic()
                await self.flush()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), RECHECK)
            await asyncio.sleep(SETTLE)


def diagnostic_json(diag: Diagnostic, lines: list[int], text: str) -> dict[str, Any]:
    """A diagnostic with its span, and the span as UTF-16 offsets ``from``/``to`` in ``text``."""
    span = diag.span

    def offset(line: int, column: int) -> int:
        if line > len(lines):
            return _utf16(text)
        start = lines[line - 1]
        row = text[start:].split("\n", 1)[0]
        return _utf16(text[:start]) + _utf16(row[: max(column - 1, 0)])

    return diag.to_json() | {
        "end_line": span.end_line,
        "end_column": span.end_column,
        "from": offset(span.line, span.column),
        "to": offset(span.end_line, span.end_column),
    }


def _utf16(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _line_starts(text: str) -> list[int]:
    starts = [0]
    at = text.find("\n")
    while at >= 0:
        starts.append(at + 1)
        at = text.find("\n", at + 1)
    return starts


class ValidateHandler(ServerRoute):
    """``POST /iterion/api/validate`` ``{"source": TEXT, "name": NAME}``: compile, report all."""

    async def post(self) -> None:  # noqa: D102
        async def act() -> None:
            if self.request.body:
                check_json_type(self.request.headers.get("Content-Type"), self.lenient_body_types)
            if len(self.request.body) > MAX_SOURCE_BODY:
                raise ApiError(413, "too_large", f"request body over {MAX_SOURCE_BODY} bytes")
            data = parse_json(self.request.body or b"{}")
            if not isinstance(data, dict):
                raise ApiError(400, "bad_request", "request body must be a JSON object")
            check_fields(data, ("source", "name"))
            source = data.get("source")
            name = data.get("name", "<editor>")
            if not isinstance(source, str):
                raise ApiError(400, "bad_request", "the body needs a 'source' string")
            if not isinstance(name, str) or len(name) > 500:
                raise ApiError(400, "bad_request", "name must be a short string")
            # off the server's loop: a large source takes a while to compile
            result = await asyncio.to_thread(analyze, source, name)
            text = result.source.text
            lines = _line_starts(text)
            shift = 1 if source.startswith("\ufeff") and not text.startswith("\ufeff") else 0
            found = [diagnostic_json(d, lines, text) for d in result.diagnostics]
            for item in found:
                item["from"] += shift
                item["to"] += shift
            self.reply({"ok": result.ok, "diagnostics": found})

        await self.guarded(act)


class ReportHandler(ServerRoute):
    """``GET /iterion/api/runs/{id}/report?format=html|md``: a run's report (a live one: so far).

    ``t`` is taken and not read: the sidebar changes it to make its frame load the report again.
    """

    query_args = ("format", "t")

    @property
    def content_security_policy(self) -> str:  # noqa: D102
        return REPORT_POLICY

    async def get(self, run_id: str) -> None:  # noqa: D102
        async def act() -> None:
            fmt = self.get_query_argument("format", "html")
            if fmt not in ("html", "md"):
                raise ApiError(400, "bad_request", "format must be html or md")
            store = await self.service.opened()  # type: ignore[attr-defined]
            text = await render(store, run_id, fmt)
            kind = "text/html" if fmt == "html" else "text/markdown"
            self.set_header("Cache-Control", "no-store")
            self.set_header("X-Content-Type-Options", "nosniff")
            self.finish(text, set_content_type=f"{kind}; charset=UTF-8")

        await self.guarded(act, run_id)


def lab_routes(service: Any, base_url: str) -> list[tuple[str, type, dict[str, Any]]]:
    """The routes above, under ``{base_url}iterion/api``."""
    prefix = url_path_join(base_url, PREFIX, "api")
    args = {"service": service}
    return [
        (prefix + "/inbox", InboxHandler, args),
        (prefix + "/inbox/events", InboxEventsHandler, args),
        (prefix + "/validate", ValidateHandler, args),
        (prefix + r"/runs/([^/]+)/report", ReportHandler, args),
    ]


__all__ = [
    "InboxEventsHandler",
    "InboxHandler",
    "ReportHandler",
    "ValidateHandler",
    "diagnostic_json",
    "lab_routes",
]
