"""The DuckDB store's plumbing: one connection on one worker thread, batched events.

Every database call runs on the worker (:class:`~iterion_nb.store.worker.DbWorker`);
callers on any thread or event loop await a future. Events and progress
checkpoints wait in an :class:`~iterion_nb.store.worker.EventBuffer` and are
written together when the batch is due, and always before a read of events
or runs and before any record that is committed at once.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from iterion_nb.errors import NotFoundError, StoreError, StoreReadOnlyError
from iterion_nb.runtime.doorbell import Doorbell
from iterion_nb.runtime.records import encode_json, utcnow
from iterion_nb.store.worker import DbWorker, EventBuffer

T = TypeVar("T")

#: Separates the fields of a buffered event row. JSON text never holds it
#: raw (control characters are escaped) and ids are checked not to.
SEP = "\x1f"
INSERT_EVENTS = (
    "INSERT INTO events SELECT f[1], CAST(f[2] AS BIGINT), f[3],"
    " make_timestamp(CAST(f[4] AS BIGINT)), nullif(f[5], ''), nullif(f[6], ''), f[7]"
    " FROM (SELECT string_split(UNNEST($1), chr(31)) AS f)"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _check_id(text: str) -> None:
    if SEP in text:
        raise StoreError("run, node and branch ids and event types cannot hold U+001F")


class DuckDBBase:
    """Connection, worker, event buffer and sequence numbers of one DuckDB store."""

    def __init__(
        self,
        path: Path,
        con: duckdb.DuckDBPyConnection,
        doorbell: Doorbell,
        clock: Callable[[], datetime],
        new_id: Callable[[], str],
        flush_rows: int,
        flush_interval: float,
    ) -> None:
        self.path = path
        self.doorbell = doorbell
        self._con = con
        self._clock = clock
        self._new_id = new_id
        if clock is utcnow:
            self._micros: Callable[[], int] = lambda: time.time_ns() // 1000
        else:
            self._micros = lambda: (clock() - _EPOCH) // _MICROSECOND
        self._seq_lock = threading.Lock()
        self._next_seq: dict[str, int] = {}
        self._known_runs: set[str] = set()
        self._buffer = EventBuffer(flush_rows, flush_interval)
        self._worker = DbWorker(self._buffer, self._write_events, f"iterion-db:{path.name}")
        self.closed = False
        #: Why this process can only read the file (None: it can write it).
        self.read_only: str | None = None

    # -- running database work -------------------------------------------
    async def _call(self, fn: Callable[[], T]) -> T:
        if self.closed:
            raise StoreError(f"the run store {self.path} is closed")
        try:
            return await asyncio.wrap_future(self._worker.submit(fn))
        except duckdb.Error as err:
            if self.read_only is not None and "read-only" in str(err):
                raise self.read_only_error() from None
            raise StoreError(f"the run store {self.path} failed: {err}") from err

    def read_only_error(self) -> StoreReadOnlyError:
        """What refuses a write to a store opened read-only (it says what still works)."""
        return StoreReadOnlyError(
            f"the run store {self.path} can only be read here ({self.read_only}): listing,"
            " showing and reporting its runs, and copying them elsewhere, work; running, answering,"
            " resuming, cancelling or copying runs into it needs a store this process can write"
        )

    def _write_events(self, checkpoints: bool = True) -> None:
        """On the worker: write buffered events in one statement, then checkpoints.

        Each row travels as one string of unit-separated fields: DuckDB takes
        one list of strings about four times faster than seven typed lists.
        A checkpoint fenced by an owner is written only while that owner
        holds the run.
        """
        rows, checkpoints_due = self._buffer.take(checkpoints)
        if rows:
            self._con.execute(INSERT_EVENTS, [[row[0] for row in rows]])
        for run_id, (checkpoint, owner) in checkpoints_due.items():
            self._write_checkpoint(run_id, checkpoint, owner)

    def _write_checkpoint(self, run_id: str, checkpoint: Any, owner: str | None) -> bool:
        """On the worker: one checkpoint; False when ``owner`` no longer holds the run."""
        if owner is None:
            self._con.execute(
                "UPDATE runs SET checkpoint = ? WHERE id = ?", [encode_json(checkpoint), run_id]
            )
            return True
        row = self._con.execute(
            "UPDATE runs SET checkpoint = ? WHERE id = ? AND owner_id = ?",
            [encode_json(checkpoint), run_id, owner],
        ).fetchone()
        return bool(row and row[0])

    def _flushed(self, checkpoints: bool = True) -> None:
        """On the worker, before a read or a decision record."""
        if self._worker.flush_error is not None:
            err, self._worker.flush_error = self._worker.flush_error, None
            raise StoreError(f"writing events failed: {err}") from err
        self._write_events(checkpoints)

    def _transaction(self, body: Callable[[], T], *, checkpoints: bool = False) -> T:
        """On the worker: flush events, then run ``body`` in one transaction."""
        self._flushed(checkpoints)
        self._con.execute("BEGIN TRANSACTION")
        try:
            result = body()
        except BaseException:
            self._con.execute("ROLLBACK")
            raise
        self._con.execute("COMMIT")
        return result

    def _require_run(self, run_id: str) -> None:
        """NotFoundError unless the run exists (runs are never deleted: cached)."""
        if run_id in self._known_runs:
            return
        if self._con.execute("SELECT 1 FROM runs WHERE id = ?", [run_id]).fetchone() is None:
            raise NotFoundError("run", run_id)
        self._known_runs.add(run_id)

    # -- events ------------------------------------------------------------
    def _first_seq(self, run_id: str) -> int:
        """On the worker, with the buffer flushed: the run's next seq in the file."""
        self._require_run(run_id)
        row = self._con.execute(
            "SELECT coalesce(max(seq), 0) FROM events WHERE run_id = ?", [run_id]
        ).fetchone()
        return int(row[0]) + 1 if row else 1

    async def _seq_for(self, run_id: str) -> None:
        def body() -> int:
            self._flushed(checkpoints=False)
            return self._first_seq(run_id)

        first = await self._call(body)
        with self._seq_lock:
            self._next_seq.setdefault(run_id, first)

    def _line(
        self, run_id: str, seq: int, event_type: str, node_id: str | None,
        branch_id: str | None, data: dict[str, Any] | None,
    ) -> str:  # fmt: skip
        for text in (event_type, node_id or "", branch_id or ""):
            _check_id(text)
        payload = encode_json(data or {})
        return SEP.join(
            (run_id, str(seq), event_type, str(self._micros()), node_id or "", branch_id or "",
             payload)
        )  # fmt: skip

    def _event_now(
        self, run_id: str, event_type: str, data: dict[str, Any] | None = None,
        node_id: str | None = None, branch_id: str | None = None,
    ) -> None:  # fmt: skip
        """On the worker, inside a transaction: append one event now (not batched)."""
        for text in (run_id, event_type, node_id or "", branch_id or ""):
            _check_id(text)
        with self._seq_lock:
            if run_id not in self._next_seq:
                self._next_seq[run_id] = self._first_seq(run_id)
            seq = self._next_seq[run_id]
            self._next_seq[run_id] = seq + 1
        at = _EPOCH.replace(tzinfo=None) + timedelta(microseconds=self._micros())
        self._con.execute(
            "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?)",
            [run_id, seq, event_type, at, node_id, branch_id, encode_json(data or {})],
        )
