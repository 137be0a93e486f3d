"""The holder's error log: one line per error, rate-limited, and never on the server's thread.

A holder's stderr may be a pipe nobody reads. Written from the thread that
serves the API, about 64 KB of tracebacks would block it, and the whole API
with it. So the server thread only hands a line to a bounded queue (dropped,
and counted, when full or over the rate); a daemon thread writes the lines
to the ``iterion_nb.holder`` logger, where a blocked stderr blocks nobody
but that thread. Records that tornado and asyncio log from the holder's
threads are caught by a filter on their loggers and go the same way, as one
line each, without their tracebacks.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time

#: Lines waiting to be written; beyond this they are dropped (and counted).
QUEUE_LINES = 200
#: Lines per second, and the burst allowed above that rate.
RATE = 5.0
BURST = 20.0
#: Longest line kept (a request summary or an error message cut beyond this).
MAX_LINE = 500
#: The loggers whose records from a holder's threads are rerouted here.
CAUGHT = ("tornado.application", "tornado.general", "tornado.access", "asyncio")

LOGGER = logging.getLogger("iterion_nb.holder")


class ErrorLog:
    """Bounded, rate-limited, asynchronous: ``line()`` never blocks and never raises."""

    def __init__(self, rate: float = RATE, burst: float = BURST, size: int = QUEUE_LINES) -> None:
        self._queue: queue.Queue[str] = queue.Queue(size)
        self._rate = rate
        self._burst = burst
        self._tokens = burst
        self._last = time.monotonic()
        self._lock = threading.Lock()
        self.dropped = 0
        self._thread: threading.Thread | None = None

    def line(self, text: str) -> None:
        """Log one line (cut, flattened), unless over the rate or the queue is full."""
        text = " ".join(str(text).split())[:MAX_LINE]
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self._burst, self._tokens + (now - self._last) * self._rate)
            self._last = now
            if self._tokens < 1:
                self.dropped += 1
                return
            self._tokens -= 1
            dropped, self.dropped = self.dropped, 0
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._write, name="iterion-holder-log", daemon=True
                )
                self._thread.start()
        if dropped:
            text = f"{text} ({dropped} earlier lines dropped)"
        try:
            self._queue.put_nowait(text)
        except queue.Full:
            with self._lock:
                self.dropped += 1 + dropped

    def _write(self) -> None:
        while True:
            text = self._queue.get()
            with contextlib.suppress(Exception):
                LOGGER.error("%s", text)


#: The one error log of this process (its writer thread starts on the first line).
ERRORS = ErrorLog()


class _HolderThreads(logging.Filter):
    """Reroutes the records logged on a holder's threads to :data:`ERRORS`, as one line."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: set[int] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.thread not in self.threads:
            return True
        if record.levelno >= logging.WARNING:
            try:
                message = record.getMessage()
            except Exception:  # a record whose arguments do not format
                message = str(record.msg)
            kind = record.exc_info[0].__name__ if record.exc_info and record.exc_info[0] else ""
            ERRORS.line(f"{record.name}: {message.splitlines()[0] if message else ''} {kind}")
        return False


_FILTER = _HolderThreads()
_installed = threading.Lock()


def reroute_this_thread() -> None:
    """Send what tornado and asyncio log on the calling thread to :data:`ERRORS`."""
    with _installed:
        if not _FILTER.threads:
            for name in CAUGHT:
                logging.getLogger(name).addFilter(_FILTER)
        _FILTER.threads.add(threading.get_ident())


def forget_this_thread() -> None:
    """Undo :func:`reroute_this_thread` for the calling thread (it is ending)."""
    with _installed:
        _FILTER.threads.discard(threading.get_ident())
