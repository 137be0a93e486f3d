"""One thread owns the DuckDB connection; everything else sends it jobs.

DuckDB connections are not safe to share between threads, and a blocking
call must never run on the event loop. So every database call runs on this
worker, in submission order, and callers on any thread or loop await a
future. Between jobs the worker flushes the event buffer when it is full or
old enough (see :class:`EventBuffer`).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar, cast

T = TypeVar("T")


class EventBuffer:
    """Event rows and progress checkpoints waiting to be written in one batch.

    Rows and checkpoints (the latest per run wins, with the owner it is
    fenced by) are added from any thread; the worker takes them at once. The
    buffer is due when it holds ``max_rows`` rows or its oldest row, or its
    oldest checkpoint, is ``max_age`` seconds old. Rows and checkpoints keep
    separate clocks, so taking the rows alone (before a read) never delays
    the checkpoints.
    """

    def __init__(self, max_rows: int, max_age: float) -> None:
        self.max_rows = max_rows
        self.max_age = max_age
        self._lock = threading.Lock()
        self._rows: list[tuple[Any, ...]] = []
        self._checkpoints: dict[str, tuple[Any, str | None]] = {}
        self._rows_since = 0.0
        self._checkpoints_since = 0.0

    def add(self, row: tuple[Any, ...]) -> bool:
        """Add a row; True when the worker must look again (first entry, or now full)."""
        with self._lock:
            first = not self._rows and not self._checkpoints
            if not self._rows:
                self._rows_since = time.monotonic()
            self._rows.append(row)
            return first or len(self._rows) == self.max_rows

    def add_checkpoint(self, run_id: str, checkpoint: Any, owner: str | None = None) -> bool:
        """Replace the run's pending checkpoint; True when it is the first entry."""
        with self._lock:
            first = not self._rows and not self._checkpoints
            if not self._checkpoints:
                self._checkpoints_since = time.monotonic()
            self._checkpoints[run_id] = (checkpoint, owner)
            return first

    def take(
        self, checkpoints: bool = True
    ) -> tuple[list[tuple[Any, ...]], dict[str, tuple[Any, str | None]]]:
        """Remove and return every row, and the checkpoints unless told not to."""
        with self._lock:
            rows, self._rows = self._rows, []
            taken: dict[str, tuple[Any, str | None]] = {}
            if checkpoints:
                taken, self._checkpoints = self._checkpoints, {}
            return rows, taken

    def wait_time(self) -> float | None:
        """Seconds until the buffer is due (0 if due now), None if empty."""
        with self._lock:
            due: list[float] = []
            if self._rows:
                if len(self._rows) >= self.max_rows:
                    return 0.0
                due.append(self._rows_since + self.max_age)
            if self._checkpoints:
                due.append(self._checkpoints_since + self.max_age)
            if not due:
                return None
            return max(0.0, min(due) - time.monotonic())


_STOP = object()
_NUDGE = object()


class DbWorker:
    """The thread that runs database jobs and flushes the event buffer."""

    def __init__(self, buffer: EventBuffer, flush: Callable[[], None], name: str) -> None:
        self._buffer = buffer
        self._flush = flush
        self._jobs: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.flush_error: BaseException | None = None
        self._thread.start()

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """Run ``fn`` on the worker; the future holds its result or exception."""
        future: Future[T] = Future()
        self._jobs.put((fn, future))
        return future

    def nudge(self) -> None:
        """Ask the worker to look at the buffer again (it started a batch, or is full)."""
        self._jobs.put(_NUDGE)

    def stop(self) -> None:
        """Flush and end the thread (waits for queued jobs first)."""
        if self._thread.is_alive():
            self._jobs.put(_STOP)
            self._thread.join()

    @property
    def on_worker(self) -> bool:
        """Whether the caller is the worker thread itself."""
        return threading.current_thread() is self._thread

    def _run(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=self._buffer.wait_time())
            except queue.Empty:
                job = _NUDGE
            if job is _STOP:
                self._safe_flush()
                return
            if job is not _NUDGE:
                fn, future = cast("tuple[Callable[[], Any], Future[Any]]", job)
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(fn())
                    except BaseException as err:  # handed to the caller
                        future.set_exception(err)
            if self._buffer.wait_time() == 0.0:
                self._safe_flush()

    def _safe_flush(self) -> None:
        try:
            self._flush()
        except Exception as err:  # kept and raised by the next read or flush
            self.flush_error = err
