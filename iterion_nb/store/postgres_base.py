"""The PostgreSQL store's plumbing: its own event loop thread, a pool, batched events.

The store owns one thread running an asyncio loop; the connection pool, the
LISTEN connection and the batch flusher live there. A Store method may be
awaited from any loop on any thread: its work is submitted to that loop and
the caller awaits the result.

Events and progress checkpoints wait in a buffer and are written in one
transaction when 2,000 rows wait or the oldest row (or checkpoint) waited
50 ms, and always before a read of events or runs and before any record
that is committed at once. Seqs are given at write time from a per-run
counter (``runs.event_seq``), inside the writing transaction, so events of
several processes get distinct, gap-free seqs in commit order.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import logging
import select
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import psycopg
import psycopg_pool
from psycopg import AsyncConnection

from iterion_nb.errors import NotFoundError, StoreError
from iterion_nb.runtime.doorbell import Doorbell
from iterion_nb.runtime.records import encode_json
from iterion_nb.store.location import mask_secrets, mask_url, one_line, url_password
from iterion_nb.store.postgres_schema import channel_for
from iterion_nb.store.worker import EventBuffer

T = TypeVar("T")
log = logging.getLogger("iterion_nb.store")
Conn = AsyncConnection[tuple[Any, ...]]

#: Events go in by binary COPY: about five times faster than an INSERT of unnested arrays.
COPY_EVENTS = (
    "COPY events (run_id, seq, type, occurred_at, node_id, branch_id, data)"
    " FROM STDIN (FORMAT BINARY)"
)
_EVENT_TYPES = ["text", "int8", "text", "timestamptz", "text", "text", "text"]
INSERT_EVENT_NOW = (
    "WITH s AS (UPDATE runs SET event_seq = event_seq + 1 WHERE id = %s RETURNING id, event_seq)"
    " INSERT INTO events (run_id, seq, type, occurred_at, node_id, branch_id, data)"
    " SELECT id, event_seq, %s, %s, %s, %s, %s FROM s RETURNING seq"
)
#: Seqs for the runs of a batch; none for a run another owner took over meanwhile (its
#: events from here are void, as its checkpoints are: see PgBase._held).
_TAKE_SEQS = (
    "UPDATE runs SET event_seq = runs.event_seq + c.n"
    " FROM unnest(%s::text[], %s::bigint[], %s::text[]) AS c(id, n, owner)"
    " WHERE runs.id = c.id AND (c.owner IS NULL OR runs.owner_id = c.owner)"
    " RETURNING runs.id, runs.event_seq"
)
_WRITE_CHECKPOINTS = (
    "UPDATE runs SET checkpoint = c.cp"
    " FROM unnest(%s::text[], %s::text[], %s::text[]) AS c(id, cp, owner)"
    " WHERE runs.id = c.id AND (c.owner IS NULL OR runs.owner_id = c.owner)"
)
#: Row locks are taken in id order, so two processes' batches never deadlock.
_LOCK_RUNS = "SELECT id FROM runs WHERE id = ANY(%s) ORDER BY id FOR NO KEY UPDATE"
#: Errors that mean the server or the connection went away (a batch is kept and retried).
CONNECTION_ERRORS = (psycopg.OperationalError, psycopg_pool.PoolTimeout)
#: Seconds a call waits for a server that went away (a restart) before it fails.
OUTAGE_TIMEOUT = 300.0

#: Seconds a call waits for a pooled connection at most (the pool is busy, or the server away).
CONNECTION_WAIT = 30.0


#: psycopg_pool's logger, and its line for each failed attempt to (re)connect.
POOL_LOGGER = "psycopg.pool"
_CONNECT_ERROR = "error connecting in %r: %s"
#: Our pools' names (see ``PostgresStore``): this prefix, then the schema.
POOL_PREFIX = "iterion-nb:"
#: What a user sees of a failed attempt: one line, naming the store by its schema.
_CONNECT_FAILED = "the run store%s cannot connect to its PostgreSQL server: %s (%s)"
_CONNECTED_AGAIN = (
    "the run store%s connected again to its PostgreSQL server after %.1f s"
    " (%d failed attempts not shown)"
)
#: Seconds between two lines of one outage (after its first).
OUTAGE_LOG_INTERVAL = 60.0


def _seen(done: asyncio.Future[Any]) -> None:
    """Mark the outcome of store work as read: its caller may have stopped waiting for it."""
    if not done.cancelled():
        done.exception()


def _store_named(pool: str) -> str:
    """How a line names the store whose pool is ``pool``: by its schema (`` (schema 'x')``)."""
    if pool.startswith(POOL_PREFIX):
        return f" (schema '{pool[len(POOL_PREFIX) :]}')"
    return ""


def _as_one_line(record: logging.LogRecord) -> None:
    """``record``'s message on one line (libpq puts a hint on a line of its own), masked."""
    try:
        said = record.getMessage()
    except Exception:  # arguments that do not fit: the handler reports it as usual
        return
    shown = one_line(mask_secrets(said))
    if shown != said:
        record.msg, record.args = shown, ()  # (no arguments: not formatted again)


class OutageLogFilter(logging.Filter):
    """On psycopg_pool's logger: one "cannot connect" line per pool and outage, not one a try.

    The pool tries to reconnect again and again while the server is away,
    and logs each failure: hundreds of lines over an outage the store waits
    through. This passes the first, then at most one every
    :data:`OUTAGE_LOG_INTERVAL` seconds (saying how many it held back); the
    store calls :meth:`back` when the pool connects again, which logs one
    line and ends the outage. Each line is one line (libpq's hint joined on
    with `` — ``), names the store by its schema (not the pool's internal
    name), and masks any password. Every other message of the logger passes,
    also on one line, masked.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._clock = clock
        self._lock = threading.Lock()
        #: Pool name -> (when its outage began, when a line was last shown, lines held back).
        self._outages: dict[str, tuple[float, float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        """Whether ``record`` is shown (a shown failure to connect says what it held back)."""
        args = record.args
        if record.msg != _CONNECT_ERROR or not isinstance(args, tuple) or len(args) != 2:
            _as_one_line(record)
            return True
        name, now = str(args[0]), self._clock()
        with self._lock:
            outage = self._outages.get(name)
            if outage is None:  # the first failure of an outage: shown
                self._outages[name] = (now, now, 0)
                note = "it keeps trying; its next failures are logged once a minute at most"
            else:
                began, shown, held = outage
                if now - shown < OUTAGE_LOG_INTERVAL:
                    self._outages[name] = (began, shown, held + 1)
                    return False
                self._outages[name] = (began, now, 0)
                note = f"still failing after {now - began:.0f} s; {held} failed attempts not shown"
        record.msg = _CONNECT_FAILED
        record.args = (_store_named(name), one_line(mask_secrets(str(args[1]))), note)
        return True

    def back(self, name: str) -> None:
        """The pool ``name`` connected: if an outage was logged, say it is over."""
        with self._lock:
            outage = self._outages.pop(name, None)
        if outage is not None:
            began, _, held = outage
            logging.getLogger(POOL_LOGGER).warning(
                _CONNECTED_AGAIN, _store_named(name), self._clock() - began, held
            )


_FILTER_LOCK = threading.Lock()


def outage_log_filter() -> OutageLogFilter:
    """The :class:`OutageLogFilter` on psycopg_pool's logger, installed there on first use."""
    logger = logging.getLogger(POOL_LOGGER)
    with _FILTER_LOCK:
        for found in logger.filters:
            if isinstance(found, OutageLogFilter):
                return found
        installed = OutageLogFilter()
        logger.addFilter(installed)
        return installed


#: A write's settling check found it did not land: the call may simply be made again.
NOT_LANDED: Any = object()
#: How a write whose connection was lost finds out whether it landed: its result if it
#: did, :data:`NOT_LANDED` if not (it runs on a fresh connection once the server answers).
Settle = Callable[[], Awaitable[Any]]


class _Attempt:
    """One try of a store call: until when it may wait, and whether a write may have landed."""

    __slots__ = ("backend", "deadline", "settle", "unsure")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.unsure = False
        self.settle: Settle | None = None
        #: The server process of the connection the undecided write went on.
        self.backend: int | None = None


_attempt: contextvars.ContextVar[_Attempt] = contextvars.ContextVar("iterion_nb_pg_attempt")


def _unsure(conn: Conn, settle: Settle | None = None) -> None:
    """From here, a lost connection leaves this attempt's write on ``conn`` undecided.

    With ``settle`` the call finds out, once the server answers and the
    connection's server process is gone, whether it landed (then that is its
    result) or not (then it is made again); without it, the call fails with a
    StoreError that says so.
    """
    attempt = _attempt.get(None)
    if attempt is not None:
        attempt.unsure = True
        attempt.settle = settle
        attempt.backend = conn.info.backend_pid


async def _xid(conn: Conn) -> int | None:
    """The id of the connection's transaction, if it wrote anything (else None)."""
    cur = await conn.execute("SELECT pg_current_xact_id_if_assigned()::text::bigint")
    row = await cur.fetchone()
    return None if row is None or row[0] is None else int(row[0])


async def check_lent(conn: Conn) -> None:
    """The pool's check of a connection it lends: a round trip only if the server spoke.

    An idle connection has nothing to read. When its socket is readable the
    server closed it (a restart, a terminated backend) or sent a notice: then
    psycopg's own check asks the server, and raises for a dead connection, which
    the pool replaces. Asking every time would double the round trips of a read.
    """
    try:
        spoke = conn.broken or _readable(conn.pgconn.socket)
    except (psycopg.OperationalError, OSError, ValueError):  # closed already, or unsure
        spoke = True
    if spoke:
        await psycopg_pool.AsyncConnectionPool.check_connection(conn)


def _readable(fd: int) -> bool:
    """Whether the socket ``fd`` has something to read, without waiting."""
    if hasattr(select, "poll"):
        poll = select.poll()
        poll.register(fd, select.POLLIN | select.POLLPRI)
        return bool(poll.poll(0))
    return bool(select.select([fd], [], [], 0)[0])  # Windows: no poll


def check_text(*texts: str | None) -> None:
    """Refuse ids and types PostgreSQL text cannot hold (a NUL character)."""
    for text in texts:
        if text is not None and "\x00" in text:
            raise StoreError("run, node and branch ids and event types cannot hold NUL (U+0000)")


async def copy_events(conn: Conn, rows: list[tuple[Any, ...]]) -> None:
    """Insert event rows (run_id, seq, type, at, node_id, branch_id, data JSON) in one COPY."""
    async with conn.cursor() as cur, cur.copy(COPY_EVENTS) as copy:
        copy.set_types(_EVENT_TYPES)
        for row in rows:
            await copy.write_row(row)


class Batch(EventBuffer):
    """The event buffer, plus putting back a batch the server did not take."""

    def restore(self, rows: list[tuple[Any, ...]], checkpoints: dict[str, Any]) -> None:
        """Put ``rows`` back in front, and ``checkpoints`` unless a newer one waits."""
        with self._lock:
            if rows:  # they were due already: due now
                self._rows[:0] = rows
                self._rows_since = 0.0
            for run_id, entry in checkpoints.items():
                self._checkpoints.setdefault(run_id, entry)
            if checkpoints:
                self._checkpoints_since = 0.0


class LoopThread:
    """A daemon thread running one asyncio loop: where all of one store's I/O happens."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def submit(self, work: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``work`` on the loop."""
        return asyncio.run_coroutine_threadsafe(work, self.loop)

    def stop(self) -> None:
        """Stop the loop and end the thread (from another thread)."""
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join()
        if not self.loop.is_closed():
            self.loop.close()


class PgBase:
    """Loop thread, pool, batching and seqs of one PostgreSQL store."""

    def __init__(
        self,
        url: str,
        schema: str,
        doorbell: Doorbell,
        clock: Callable[[], datetime] | None,
        new_id: Callable[[], str],
        flush_rows: int,
        flush_interval: float,
    ) -> None:
        #: The URL the store was opened with, credentials included (to open it
        #: elsewhere: a cluster worker); show :attr:`display_url` instead.
        self.url = url
        #: The URL a cluster's worker opens it with: :attr:`url`, and the password
        #: libpq took from elsewhere (``PGPASSWORD``, ``~/.pgpass``) once connected.
        self.worker_url = url
        self.display_url = mask_url(url)
        self.schema = schema
        self._channel = channel_for(schema)
        self.doorbell = doorbell
        self._clock = clock
        self._new_id = new_id
        self._password = url_password(url)
        self._thread = LoopThread(f"iterion-pg:{schema}")
        self._pool: psycopg_pool.AsyncConnectionPool[Conn] | None = None
        self._buffer = Batch(flush_rows, flush_interval)
        self._wake = asyncio.Event()
        self._flush_lock = asyncio.Lock()
        self._flush_error: BaseException | None = None
        #: A batch whose COMMIT lost its connection: its transaction id, the server
        #: process that ran it, its rows and checkpoints.
        self._unsettled: tuple[int, int, list[tuple[Any, ...]], dict[str, Any]] | None = None
        self._flusher: asyncio.Task[None] | None = None
        self._known_runs: set[str] = set()
        #: The claimant each run this process took is held under (run id -> claimant id):
        #: a batch written after the run was taken over by another owner drops its events.
        self._held: dict[str, str] = {}
        #: Server time minus this machine's, so event times agree across machines.
        self._skew = timedelta(0)
        self.closed = False
        self._closing = False
        #: Seconds a call waits for the server to come back (see :meth:`_guarded`).
        self.outage_timeout = OUTAGE_TIMEOUT
        #: When (``time.monotonic()``) the server last came back after it was away, if
        #: ever: leases lapsed meanwhile, and their live owners renew them first.
        self.back_at: float | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.display_url}>"

    # -- running work on the store's loop --------------------------------
    def _scrub(self, text: str) -> str:
        # where a password stands, or as a whole word: replacing its text wherever it
        # occurs would mangle every word that contains it
        return mask_secrets(one_line(text), self._password)

    def _failure(self, err: BaseException | str) -> StoreError:
        return StoreError(self._scrub(f"the run store {self.display_url} failed: {err}"))

    async def _guarded(self, work: Callable[[], Awaitable[T]], *, wait: bool = True) -> T:
        """``work()``, its errors as StoreError; through an outage, ``work()`` again.

        When the server goes away (a restart) the call waits and tries again,
        up to ``outage_timeout`` seconds, so runs wait and go on: a connection
        lost before anything could commit leaves nothing behind. A connection
        lost while a write may have committed (its COMMIT, or an autocommit
        write) is settled: once the server answers, the call asks whether the
        write landed (its transaction's status, or what the write would have
        left) and returns as if nothing had happened, or makes the call again.
        A write that cannot be settled fails with a StoreError that says so.
        """
        loop = asyncio.get_running_loop()
        delay, deadline = 0.05, loop.time() + (self.outage_timeout if wait else CONNECTION_WAIT)
        away = False
        while True:
            attempt = _Attempt(deadline)
            token = _attempt.set(attempt)
            try:
                result = await work()
                if away:  # the server is back
                    self.back_at = time.monotonic()
                return result
            except CONNECTION_ERRORS as err:
                settle = attempt.settle if attempt.unsure else None
                if wait and settle is not None and not self._closing:
                    _attempt.reset(token)
                    token = _attempt.set(_Attempt(deadline))  # settling writes nothing
                    outcome = await self._settled(settle, attempt.backend, deadline, err)
                    if outcome is not NOT_LANDED:
                        return outcome  # type: ignore[no-any-return]
                    attempt.unsure = False  # it did not land: make the call again
                if not wait or attempt.unsure or self._closing or loop.time() >= deadline:
                    raise self._failure(err) from None
                if not away:
                    log.warning("%s", self._scrub(f"{self.display_url} is away, waiting: {err}"))
                away = True
            except psycopg.Error as err:
                raise self._failure(err) from None
            finally:
                _attempt.reset(token)
            await asyncio.sleep(delay)
            delay = min(2.0, delay * 2)

    async def _settled(
        self, settle: Settle, backend: int | None, deadline: float, lost: BaseException
    ) -> Any:
        """Did a write whose connection was lost land? ``settle()``, through an outage.

        First the lost connection's server process must be gone (it may not have
        noticed the loss, and could still commit what it was sent): then what
        the write left is final. Returns ``settle()``'s result (NOT_LANDED if the
        write did not land); a StoreError if the server is not back by ``deadline``.
        """
        loop = asyncio.get_running_loop()
        delay = 0.05
        while True:
            try:
                if backend is not None:
                    await self._ended(backend, deadline)
                return await settle()
            except CONNECTION_ERRORS:
                if self._closing or loop.time() >= deadline:
                    unknown = "whether the write landed is unknown: the server is not back"
                    raise self._failure(f"{lost} ({unknown})") from None
            except psycopg.Error as err:
                raise self._failure(err) from None
            await asyncio.sleep(delay)
            delay = min(2.0, delay * 2)

    async def _ended(self, backend: int, deadline: float) -> None:
        """Stop the server process ``backend`` (a lost connection's) and wait until it is gone.

        It either finished what it was sent or, stopped, rolls back; either way
        it writes nothing more. Server process ids are not reused while a
        server runs for years of connections, so the id names that process.
        """
        loop = asyncio.get_running_loop()
        delay = 0.01
        while True:
            async with self._connection() as conn:
                cur = await conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = %s",
                    [backend],
                )
                if await cur.fetchone() is None:
                    return
            if loop.time() >= deadline:
                raise psycopg.OperationalError(f"server process {backend} does not stop")
            await asyncio.sleep(delay)
            delay = min(0.5, delay * 2)

    async def _xact_landed(self, xid: int, result: T) -> T | Any:
        """``result`` if the transaction ``xid`` committed; NOT_LANDED if it did not.

        Asked once its server process is gone (see :meth:`_ended`), when the
        transaction is over either way.
        """
        async with self._connection() as conn:
            cur = await conn.execute("SELECT pg_xact_status(%s::text::xid8)", [str(xid)])
            row = await cur.fetchone()
        status = row[0] if row else None
        if status == "committed":
            return result
        if status == "aborted":
            return NOT_LANDED
        # in progress (its process not gone after all), or too old to ask: unknown
        raise psycopg.OperationalError(f"transaction {xid}: status {status!r}")

    async def _call(self, work: Callable[[], Awaitable[T]]) -> T:
        """Run ``work()`` on the store's loop and await it from any loop.

        A caller that is cancelled stops waiting, but the work goes on to its
        end: a flush it started has taken a batch (other runs' events too)
        that must be written or put back, never dropped half way.
        """
        if self.closed:
            raise StoreError(f"the run store {self.display_url} is closed")
        done = asyncio.wrap_future(self._thread.submit(self._guarded(work)))
        done.add_done_callback(_seen)  # a cancelled caller's error is nobody's to log
        return await asyncio.shield(done)

    def _pooled(self) -> psycopg_pool.AsyncConnectionPool[Conn]:
        assert self._pool is not None, "the store is not open"
        return self._pool

    def _connection(self) -> contextlib.AbstractAsyncContextManager[Conn]:
        """A pooled connection, waited for no longer than this call may wait."""
        attempt = _attempt.get(None)
        wait = CONNECTION_WAIT
        if attempt is not None:
            wait = min(wait, max(0.1, attempt.deadline - asyncio.get_running_loop().time()))
        return self._pooled().connection(timeout=wait)

    async def _read(
        self,
        body: Callable[[Conn], Awaitable[T]],
        *,
        writes: bool = False,
        settle: Settle | None = None,
    ) -> T:
        """On the loop: ``body`` on a pooled connection, outside any transaction.

        ``writes``: its statement commits on its own (autocommit), so a connection
        lost once it was sent leaves it undecided: ``settle`` finds out whether it
        landed from what it would have left (see :meth:`_guarded`).
        """
        async with self._connection() as conn:
            if writes:
                _unsure(conn, settle)
            return await body(conn)

    async def _transact(
        self,
        body: Callable[[Conn], Awaitable[T]],
        *,
        checkpoints: bool = False,
        flush: bool = True,
    ) -> T:
        """On the loop: flush this process's batch, then ``body`` in one transaction."""
        if flush:
            await self._flushed(checkpoints)
        for attempt in range(3):
            try:
                async with self._connection() as conn, conn.transaction():
                    result = await body(conn)
                    xid = await _xid(conn)
                    if xid is not None:  # committing a write now: settled by its status
                        _unsure(conn, functools.partial(self._xact_landed, xid, result))
                    return result
            except psycopg.errors.DeadlockDetected:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def _now(self, conn: Conn) -> datetime:
        """The time of this transaction: the injected clock's, else the server's."""
        if self._clock is not None:
            return self._clock()
        cur = await conn.execute("SELECT now()")
        row = await cur.fetchone()
        assert row is not None
        return row[0].astimezone(UTC)  # type: ignore[no-any-return]

    def _stamp(self) -> datetime:
        """When an appended event happened: the injected clock, else server-aligned local time."""
        if self._clock is not None:
            return self._clock()
        return datetime.now(UTC) + self._skew

    async def _notify(self, conn: Conn, run_id: str) -> None:
        """Ring every listening process's doorbell when this transaction commits."""
        await conn.execute("SELECT pg_notify(%s, %s)", [self._channel, run_id])

    async def _require_run(self, conn: Conn, run_id: str) -> None:
        """NotFoundError unless the run exists (runs are never deleted: remembered)."""
        if run_id in self._known_runs:
            return
        cur = await conn.execute("SELECT 1 FROM runs WHERE id = %s", [run_id])
        if await cur.fetchone() is None:
            raise NotFoundError("run", run_id)
        self._known_runs.add(run_id)

    async def _known(self, run_id: str) -> None:
        """Before buffering for a run: it exists (asked once per run and process)."""
        if run_id in self._known_runs:
            return
        check_text(run_id)
        await self._call(lambda: self._read(lambda conn: self._require_run(conn, run_id)))

    # -- the batch -------------------------------------------------------
    def _nudge(self) -> None:
        """From any thread: the flusher must look at the buffer again."""
        self._thread.loop.call_soon_threadsafe(self._wake.set)

    async def _flushed(self, checkpoints: bool = True) -> None:
        """On the loop, before a read or a decision record: write what waits."""
        async with self._flush_lock:
            if self._flush_error is not None:
                err, self._flush_error = self._flush_error, None
                raise StoreError(f"writing events failed: {err}") from err
            await self._write_buffer(checkpoints)

    async def _write_buffer(self, checkpoints: bool) -> None:
        """On the loop, under the flush lock: one transaction for the waiting batch."""
        await self._settle_batch()
        rows, due = self._buffer.take(checkpoints)
        if not rows and not due:
            return
        xid: int | None = None
        backend = 0
        committed = False
        try:
            async with self._connection() as conn:
                backend = conn.info.backend_pid
                async with conn.transaction():
                    await self._write_batch(conn, rows, due)
                    xid = await _xid(conn)
                committed = True
        except (*CONNECTION_ERRORS, asyncio.CancelledError):
            if committed:
                raise
            if xid is None:
                self._buffer.restore(rows, due)  # nothing was written: try again later
            else:  # lost while committing: settled before anything else is written
                self._unsettled = (xid, backend, rows, due)
            raise

    async def _settle_batch(self) -> None:
        """A batch whose COMMIT lost its connection: written (done) or not (put back).

        Until that is known nothing else is written, so events keep their order.
        """
        if self._unsettled is None:
            return
        xid, backend, rows, due = self._unsettled
        await self._ended(backend, asyncio.get_running_loop().time() + self.outage_timeout)
        if await self._xact_landed(xid, True) is NOT_LANDED:
            self._buffer.restore(rows, due)
        self._unsettled = None

    async def _write_batch(
        self, conn: Conn, rows: list[tuple[Any, ...]], checkpoints: dict[str, Any]
    ) -> None:
        """In the batch's transaction: the events (seqs given here), then the checkpoints."""
        runs = sorted({row[0] for row in rows} | set(checkpoints))
        if len(runs) > 1:
            await conn.execute(_LOCK_RUNS, [runs])
        if rows:
            await self._insert_rows(conn, rows)
        if checkpoints:
            ids = list(checkpoints)
            await conn.execute(
                _WRITE_CHECKPOINTS,
                [ids, [encode_json(checkpoints[i][0]) for i in ids],
                 [checkpoints[i][1] for i in ids]],
            )  # fmt: skip

    async def _insert_rows(self, conn: Conn, rows: list[tuple[Any, ...]]) -> None:
        """Take each run's next seqs from its counter, then insert the rows in one statement."""
        counts = Counter(row[0] for row in rows)
        ids = sorted(counts)
        owners = [self._held.get(i) for i in ids]
        cur = await conn.execute(_TAKE_SEQS, [ids, [counts[i] for i in ids], owners])
        next_seq = {str(r[0]): int(r[1]) - counts[str(r[0])] + 1 for r in await cur.fetchall()}
        # not a run that vanished, nor one another owner took over while these waited
        kept = [row for row in rows if row[0] in next_seq]
        if len(kept) < len(rows):
            dropped = sorted({row[0] for row in rows} - set(next_seq))
            log.warning("dropped the events of runs taken over by another owner: %s", dropped)
        if not kept:
            return
        rows_with_seqs = []
        for row in kept:
            rows_with_seqs.append((row[0], next_seq[row[0]], *row[1:]))
            next_seq[row[0]] += 1
        await copy_events(conn, rows_with_seqs)

    async def _flush_loop(self) -> None:
        """On the loop, for the store's life: write the batch whenever it is due."""
        failures = 0
        while True:
            wait = self._buffer.wait_time()
            if self._unsettled is None and (wait is None or wait > 0):
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), wait)
                continue
            try:
                async with self._flush_lock:
                    await self._write_buffer(checkpoints=True)
                failures = 0
            except CONNECTION_ERRORS:
                failures += 1  # kept; retried after a pause that grows to 2 s
                await asyncio.sleep(min(2.0, 0.05 * 2**failures))
            except Exception as err:  # kept and raised by the next read or flush
                self._flush_error = err

    async def _event_now(
        self, conn: Conn, run_id: str, event_type: str, data: dict[str, Any] | None,
        at: datetime, node_id: str | None = None, branch_id: str | None = None,
    ) -> None:  # fmt: skip
        """On the loop, inside a transaction: append one event now (not batched)."""
        check_text(run_id, event_type, node_id, branch_id)
        cur = await conn.execute(
            INSERT_EVENT_NOW,
            [run_id, event_type, at, node_id, branch_id, encode_json(data or {})],
        )
        if await cur.fetchone() is None:
            raise NotFoundError("run", run_id)
