"""The cross-process doorbell: LISTEN on the store's channel, ring the local doorbell.

Every transaction that a waiter may care about (an answer, a question, a
queued message, a cancel) calls ``pg_notify(channel, run_id)``; PostgreSQL
delivers it at commit to every process listening, on any machine. The
listener rings this process's :class:`~iterion_nb.runtime.doorbell.Doorbell`
with the run id, so a gate or an agent waiting here wakes within
milliseconds of an answer given anywhere.

A notification sent while the listening connection was down is lost; so on
every (re)connection the listener rings :data:`~iterion_nb.runtime.doorbell.ANY`
and every waiter re-checks the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg import AsyncConnection, sql

from iterion_nb.runtime.doorbell import ANY, Doorbell

log = logging.getLogger("iterion_nb.store.postgres")

Conn = AsyncConnection[tuple[Any, ...]]
#: The longest pause between two attempts to reconnect, in seconds.
MAX_BACKOFF = 2.0


class Listener:
    """LISTENs on one channel on its own connection and rings a doorbell for each NOTIFY."""

    def __init__(
        self, channel: str, doorbell: Doorbell, connect: Callable[[], Awaitable[Conn]]
    ) -> None:
        self.channel = channel
        self.doorbell = doorbell
        self._connect = connect
        self._task: asyncio.Task[None] | None = None
        self._conn: Conn | None = None

    async def listen(self, conn: Conn) -> None:
        """On the store's loop: LISTEN on ``conn`` and keep listening (reconnecting) until stopped.

        Returns once ``conn`` listens, so a notification committed after
        this returns is heard.
        """
        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
        self._conn = conn
        self._task = asyncio.get_running_loop().create_task(self._run(conn))

    async def _run(self, conn: Conn) -> None:
        while True:
            try:
                async for note in conn.notifies():
                    self.doorbell.ring(note.payload or ANY)
            except psycopg.Error as err:
                # no action needed (it reconnects), and a store call that waits says the
                # server is away: not a warning of its own
                log.info("lost the LISTEN connection (%s); reconnecting", type(err).__name__)
            with contextlib.suppress(Exception):
                await conn.close()
            conn = await self._reconnect()
            self.doorbell.ring(ANY)  # what was notified meanwhile is lost: everyone re-checks

    async def _reconnect(self) -> Conn:
        pause = 0.05
        while True:
            conn: Conn | None = None
            try:
                conn = await self._connect()
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
            except psycopg.Error:
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close()
                await asyncio.sleep(pause)
                pause = min(MAX_BACKOFF, pause * 2)
                continue
            self._conn = conn
            return conn

    async def stop(self) -> None:
        """On the store's loop: stop listening and close the connection."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()
            self._conn = None
