"""Hearing the holder's doorbell in another process: ``GET /api/store/rings``.

The holder streams one JSON line per ring (``{"ring": run_id}``) and a
keep-alive line (``{}``) every few seconds. A :class:`RingListener` thread
reads that stream and rings the local doorbell, so a waiter in this process
(an ``await_answers`` gate, an agent's inbox, a widget) wakes the moment an
answer commits anywhere. When the stream breaks, every waiter is rung (they
re-check the store; nothing is lost) and the listener reconnects, to the
holder's successor if there is one. The stream runs on a connection on
which the holder first proved itself (:mod:`iterion_nb.store.holder_file`).
The slow poll of every waiter stays the last fallback.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
from collections.abc import Callable

from iterion_nb.runtime.doorbell import ANY, Doorbell
from iterion_nb.store.holder_file import HolderInfo, UntrustedHolderError

#: Seconds without a line after which the stream is presumed dead.
STALE_SECONDS = 20.0


class RingListener:
    """A daemon thread that relays the holder's rings to ``doorbell``."""

    def __init__(
        self,
        connect: Callable[[], tuple[HolderInfo, http.client.HTTPConnection]],
        doorbell: Doorbell,
        wanted: Callable[[], bool],
    ) -> None:
        self._connect = connect
        self._doorbell = doorbell
        self._wanted = wanted
        self._stop = threading.Event()
        self._connection: http.client.HTTPConnection | None = None
        self._thread = threading.Thread(target=self._run, name="iterion-rings", daemon=True)
        #: Set once the first stream is open (tests wait for it).
        self.connected = threading.Event()

    def start(self) -> None:
        """Start listening."""
        self._thread.start()

    def stop(self) -> None:
        """Stop listening (the thread ends within moments)."""
        self._stop.set()
        connection = self._connection
        if connection is not None:
            with contextlib.suppress(OSError):
                if connection.sock is not None:
                    connection.sock.shutdown(2)

    def _run(self) -> None:
        delay = 0.05
        while not self._stop.is_set() and self._wanted():
            try:
                self._listen(*self._connect())
                delay = 0.05
            except (OSError, http.client.HTTPException, ValueError, UntrustedHolderError):
                pass
            # the stream ended: whatever rang meanwhile is unknown, so wake everyone
            self._doorbell.ring(ANY)
            if self._stop.wait(delay):
                return
            delay = min(delay * 2, 1.0)

    def _listen(self, holder: HolderInfo, connection: http.client.HTTPConnection) -> None:
        if connection.sock is not None:
            connection.sock.settimeout(STALE_SECONDS)
        self._connection = connection
        try:
            connection.request(
                "GET", "/api/store/rings", headers={"Authorization": f"Bearer {holder.token}"}
            )
            response = connection.getresponse()
            if response.status != 200:
                raise ValueError(f"rings: HTTP {response.status}")
            self.connected.set()
            while not self._stop.is_set():
                line = response.readline()
                if not line:
                    return
                try:
                    data = json.loads(line)
                except RecursionError:
                    data = None
                key = data.get("ring") if isinstance(data, dict) else None
                if isinstance(key, str):
                    self._doorbell.ring(key)
        finally:
            self._connection = None
            connection.close()
