"""The store holder's loopback server, and how other processes find it.

The process that holds the DuckDB file serves the REST API on 127.0.0.1 (an
ephemeral port) with a random bearer token, and publishes ``{pid, url,
token}`` in ``<store>.holder.json`` beside the database, mode 0600, removed
on a clean exit. The server runs on its own thread and event loop, so it
answers even while the holder's loop is busy; each call is handed to the
loop that runs the workflows.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import secrets
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tornado.httpserver
import tornado.netutil
import tornado.web

from iterion_nb.api.handlers import MAX_BODY, routes
from iterion_nb.api.service import RunService


@dataclass(frozen=True)
class HolderInfo:
    """What a holder publishes."""

    pid: int
    url: str
    token: str


def holder_file(db_path: Path) -> Path:
    """Where the holder of ``db_path`` publishes itself."""
    return db_path.with_name(db_path.name + ".holder.json")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def find_holder(db_path: Path) -> HolderInfo | None:
    """The live holder of ``db_path``, if a process publishes one and is still alive."""
    path = holder_file(db_path)
    try:
        data = json.loads(path.read_text())
        info = HolderInfo(int(data["pid"]), str(data["url"]), str(data["token"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return info if info.pid != os.getpid() and _alive(info.pid) else None


class _OnLoop:
    """A RunService whose calls run on another thread's event loop."""

    def __init__(self, service: RunService, loop: asyncio.AbstractEventLoop) -> None:
        self._service = service
        self._loop = loop

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        method = getattr(self._service, name)

        async def call(*args: Any) -> Any:
            future = asyncio.run_coroutine_threadsafe(method(*args), self._loop)
            return await asyncio.wrap_future(future)

        return call


class Holder:
    """Serves the API for one store file until stopped."""

    def __init__(self, service: RunService, db_path: Path, loop: asyncio.AbstractEventLoop) -> None:
        self.db_path = db_path
        self.token = secrets.token_urlsafe(32)
        self._service = _OnLoop(service, loop)
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="iterion-holder", daemon=True)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: tornado.httpserver.HTTPServer | None = None
        self.url = ""
        self._error: BaseException | None = None

    def start(self) -> Holder:
        """Start serving and publish the holder file."""
        self._thread.start()
        self._ready.wait(10)
        if self._error is not None:
            raise self._error
        self._publish()
        atexit.register(self._unpublish)
        return self

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            app = tornado.web.Application(routes(self._service, self.token))  # type: ignore[arg-type]
            # Bodies up to 4x the limit reach the handler, which answers 413 in JSON;
            # beyond that tornado drops the connection without reading it all.
            server = tornado.httpserver.HTTPServer(app, max_body_size=4 * MAX_BODY)
            sockets = tornado.netutil.bind_sockets(0, "127.0.0.1")
            server.add_sockets(sockets)
            self._server = server
            port = sockets[0].getsockname()[1]
            self.url = f"http://127.0.0.1:{port}"
        except BaseException as err:  # reported by start()
            self._error = err
            self._ready.set()
            return
        self._ready.set()
        loop.run_forever()
        loop.close()

    def _publish(self) -> None:
        path = holder_file(self.db_path)
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump({"pid": os.getpid(), "url": self.url, "token": self.token}, handle)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)

    def _unpublish(self) -> None:
        path = holder_file(self.db_path)
        with contextlib.suppress(OSError, ValueError):
            if json.loads(path.read_text()).get("pid") == os.getpid():
                path.unlink()

    def stop(self) -> None:
        """Stop serving and remove the holder file."""
        self._unpublish()
        atexit.unregister(self._unpublish)
        loop, server = self._loop, self._server
        if loop is not None and server is not None and not loop.is_closed():

            def shutdown() -> None:
                server.stop()
                loop.stop()

            loop.call_soon_threadsafe(shutdown)
            self._thread.join(5)
