"""A loopback TCP proxy to a PostgreSQL server that loses one reply, or one request, on cue.

The network edge, faked where networks fail: between the store and a real
server, it relays the wire protocol message by message, and when a client
sends a statement matching what it was armed with it either

- ``"reply_lost"``: forwards the statement (up to its ``Query`` or ``Sync``),
  lets the server finish it (its ``ReadyForQuery``), then cuts the client off
  without the reply: the write landed, the client cannot know; or
- ``"request_lost"``: never forwards it, cuts the client off, and leaves the
  server's side open and silent (a half-open connection: the server's
  process waits, idle, in whatever transaction it was in).

Clients must not ask for TLS or GSS encryption (``sslmode=disable&gssencmode=disable``):
the proxy reads the protocol in the clear.

    with PgProxy(server_port) as proxy:
        proxy.arm(b"COMMIT", "reply_lost")
        ...                                 # the client's next COMMIT loses its reply
        assert proxy.fired.wait(5)
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import threading
from types import TracebackType
from typing import Literal

Mode = Literal["reply_lost", "request_lost"]
#: Messages that end what a client asks for: a simple query, or an extended one's Sync.
BOUNDARIES = (b"Q", b"S")


async def _message(reader: asyncio.StreamReader, typed: bool = True) -> bytes:
    """One protocol message, whole (type byte, length, body); the startup one is untyped."""
    head = await reader.readexactly(5 if typed else 4)
    (length,) = struct.unpack("!i", head[-4:])
    return head + await reader.readexactly(length - 4)


class _Link:
    """One client connection and its server connection."""

    def __init__(self, proxy: PgProxy, client: tuple[asyncio.StreamReader, asyncio.StreamWriter]):
        self.proxy = proxy
        self.client_reader, self.client_writer = client
        self.server_writer: asyncio.StreamWriter | None = None
        self.cut: Mode | None = None  # set once this link lost something
        self.finished = asyncio.Event()  # the server finished what the cut client sent

    async def run(self) -> None:
        server_reader, self.server_writer = await asyncio.open_connection(
            "127.0.0.1", self.proxy.server_port
        )
        upstream = asyncio.create_task(self._client_to_server())
        downstream = asyncio.create_task(self._server_to_client(server_reader))
        await asyncio.wait([upstream, downstream], return_when=asyncio.FIRST_COMPLETED)
        if self.cut == "request_lost":
            await asyncio.wait([downstream])  # half-open: the server side waits, untouched
        for task in (upstream, downstream):
            task.cancel()
        self._close_client()
        if self.server_writer is not None:
            self.server_writer.close()

    async def _client_to_server(self) -> None:
        assert self.server_writer is not None
        held: list[bytes] = []  # a matching request, until its boundary
        typed = False
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                message = await _message(self.client_reader, typed)
                typed = True
                if not held and not self.proxy.matches(message):
                    self.server_writer.write(message)
                    await self.server_writer.drain()
                    continue
                held.append(message)
                if message[:1] in BOUNDARIES:
                    await self._lose(held)
                    return

    async def _lose(self, held: list[bytes]) -> None:
        assert self.server_writer is not None
        self.cut = self.proxy.fire()
        if self.cut == "reply_lost":
            self.server_writer.write(b"".join(held))
            await self.server_writer.drain()
            await self.finished.wait()  # the server is done: the write landed
        self._close_client()
        self.proxy.cut_links.set()

    async def _server_to_client(self, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                message = await _message(reader)
                if self.cut is not None:
                    if message[:1] == b"Z":
                        self.finished.set()
                    continue  # the reply the client never gets
                self.client_writer.write(message)
                await self.client_writer.drain()

    def _close_client(self) -> None:
        with contextlib.suppress(Exception):
            self.client_writer.transport.abort()  # a reset, as a dropped network gives


class PgProxy:
    """A proxy on a free loopback port to ``127.0.0.1:server_port``; see the module doc."""

    def __init__(self, server_port: int) -> None:
        self.server_port = server_port
        self.port = 0
        self.fired = threading.Event()
        self.cut_links = threading.Event()
        self._armed: tuple[bytes, Mode] | None = None
        self._firing: _Link | None = None
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._links: set[asyncio.Task[None]] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> PgProxy:
        self._thread.start()
        server = asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(10)
        self.port = server.sockets[0].getsockname()[1]
        self._server = server
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        async def stop() -> None:
            self._server.close()
            for task in list(self._links):
                task.cancel()
            await asyncio.gather(*self._links, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def url(self, server_url: str) -> str:
        """``server_url`` (``postgresql://user@127.0.0.1:PORT/db``) through this proxy."""
        head, _, tail = server_url.rpartition(f":{self.server_port}/")
        return f"{head}:{self.port}/{tail}?sslmode=disable&gssencmode=disable"

    def arm(self, pattern: bytes, mode: Mode) -> None:
        """Lose the next request whose statement holds ``pattern`` (once), as ``mode`` says."""
        with self._lock:
            self.fired.clear()
            self._armed = (pattern, mode)

    @property
    def armed(self) -> bool:
        """Whether a loss waits for its statement."""
        with self._lock:
            return self._armed is not None

    def matches(self, message: bytes) -> bool:
        with self._lock:
            return self._armed is not None and self._armed[0] in message

    def fire(self) -> Mode:
        with self._lock:
            assert self._armed is not None
            mode = self._armed[1]
            self._armed = None
        self.fired.set()
        return mode

    async def _serve(self) -> asyncio.Server:
        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            self._links.add(task)
            try:
                await _Link(self, (reader, writer)).run()
            finally:
                self._links.discard(task)

        return await asyncio.start_server(accept, "127.0.0.1", 0)
