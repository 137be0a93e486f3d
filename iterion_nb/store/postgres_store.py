# ruff: noqa: D102 - each Store method is documented once, on the Store protocol
"""The PostgreSQL Store: many processes on many machines, no holder process.

Open it with a URL wherever a store is named (``postgresql://user@host/db``,
``?schema=NAME`` to choose the PostgreSQL schema its tables live in; default
``iterion_nb``). The store creates and migrates its schema itself.

Durability is the DuckDB store's: decision records (a run's creation, every
status change, taking and settling a run, a cancel, an interaction, an
answer with its queued message and its event, a message, a drain, an
artifact, a durable checkpoint) are committed, each in one transaction,
before the call returns; events and progress checkpoints are batched (see
:mod:`~iterion_nb.store.postgres_base`). An answer, a question, a queued
message and a cancel also ``NOTIFY`` the store's channel in their
transaction: every process using the store hears it (see
:mod:`~iterion_nb.store.postgres_listener`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psycopg
import psycopg_pool
from psycopg import sql

from iterion_nb.errors import ConflictError, LeaseLostError, NotFoundError, StoreError
from iterion_nb.runtime import lifecycle
from iterion_nb.runtime.doorbell import Doorbell, node_key
from iterion_nb.runtime.records import (
    AnswerResult,
    Artifact,
    Event,
    Interaction,
    InteractionKind,
    QueuedMessage,
    answer_message,
    answered_event,
    check_answer,
    encode_json,
)
from iterion_nb.store.duckdb_rows import (
    INTERACTION_COLUMNS,
    MESSAGE_COLUMNS,
    interaction_from_row,
    message_from_row,
)
from iterion_nb.store.location import (
    SCHEMA_PARAM,
    check_schema_name,
    check_url_parameters,
    mask_secrets,
    mask_url,
    one_line,
    url_password,
)
from iterion_nb.store.postgres_base import (
    NOT_LANDED,
    OUTAGE_TIMEOUT,
    POOL_PREFIX,
    Conn,
    check_lent,
    check_text,
    outage_log_filter,
)
from iterion_nb.store.postgres_listener import Listener
from iterion_nb.store.postgres_questions import PgQuestions
from iterion_nb.store.postgres_runs import INTERACTION_VALUES, interaction_params
from iterion_nb.store.postgres_schema import DEFAULT_SCHEMA, migrate

log = logging.getLogger("iterion_nb.store.postgres")

#: How many connections one store keeps at most (the LISTEN one aside).
POOL_SIZE = 8
#: How long opening waits for the server, unless the URL sets ``connect_timeout``.
CONNECT_TIMEOUT = 10
#: How long closing tries to write the last batch (a server that is gone loses it).
CLOSE_TIMEOUT = 10.0
_ARTIFACT_COLUMNS = "run_id, name, version, node_id, value, created_at"


def split_url(url: str) -> tuple[str, str]:
    """The URL to connect with (our ``schema`` parameter removed) and the schema name.

    Raises:
        StoreError: A parameter is unknown or given twice, or the schema name
            is not one we accept (see :func:`~iterion_nb.store.location.check_url_parameters`).
    """
    parts = urlsplit(url)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    check_url_parameters(url, pairs)
    schemas = [value for key, value in pairs if key == SCHEMA_PARAM]
    schema = check_schema_name(schemas[0] if schemas else DEFAULT_SCHEMA)
    query = urlencode([(k, v) for k, v in pairs if k != SCHEMA_PARAM])
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment)), schema


def with_password(url: str, user: str, password: str | None) -> str:
    """``url`` with the password it connected with, if libpq found it elsewhere.

    libpq takes a password missing from the URL from ``PGPASSWORD`` or
    ``~/.pgpass``, which another machine (a cluster's worker) may not have:
    the URL it is sent must carry it.
    """
    if not password or url_password(url) is not None:
        return url
    parts = urlsplit(url)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    name = userinfo if at else quote(user, safe="")
    netloc = f"{name}:{quote(password, safe='')}@{hosts}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _connect_options(conninfo: str) -> dict[str, Any]:
    given = psycopg.conninfo.conninfo_to_dict(conninfo)
    options: dict[str, Any] = {"autocommit": True}
    if "connect_timeout" not in given:
        options["connect_timeout"] = CONNECT_TIMEOUT
    if "application_name" not in given:
        options["application_name"] = "iterion_nb"
    return options


def store_exists(url: str) -> tuple[str, bool]:
    """The URL's schema, and whether it holds a store (any other schema does not).

    Creates nothing: for commands about runs already made, which must not turn
    a misspelt ``schema=`` — or ``public`` — into a new, empty store.

    Raises:
        StoreError: The server cannot be reached or refuses the connection
            (the message as opening the store gives it, password masked).
    """
    conninfo, schema = split_url(url)
    try:
        with psycopg.connect(conninfo, **_connect_options(conninfo)) as conn:
            found = conn.execute(
                "SELECT to_regclass(format('%%I.iterion_meta', %s::text))", [schema]
            ).fetchone()
    except psycopg.Error as err:
        said = f"cannot connect to the run store {mask_url(url)}: {err}"
        raise StoreError(mask_secrets(one_line(said), url_password(url))) from None
    return schema, found is not None and found[0] is not None


def _artifact(row: tuple[Any, ...]) -> Artifact:
    return Artifact(row[0], row[1], row[2], row[3], json.loads(row[4]),
                    row[5].astimezone(UTC))  # fmt: skip


class PostgresStore(PgQuestions):
    """A Store in a PostgreSQL database. Create with :func:`open_postgres_store`."""

    def __init__(
        self,
        url: str,
        conninfo: str,
        schema: str,
        doorbell: Doorbell,
        clock: Callable[[], datetime] | None,
        new_id: Callable[[], str],
        flush_rows: int,
        flush_interval: float,
    ) -> None:
        super().__init__(url, schema, doorbell, clock, new_id, flush_rows, flush_interval)
        self._conninfo = conninfo
        self._pool_name = f"{POOL_PREFIX}{schema}"
        self._listener = Listener(self._channel, doorbell, self._listen_again)

    # -- opening -----------------------------------------------------------
    async def _configure(self, conn: Conn) -> None:
        """Every connection: times in UTC, our schema first on the search path."""
        await conn.execute(
            "SELECT set_config('TimeZone', 'UTC', false), set_config('search_path', %s, false)",
            [sql.Identifier(self.schema).as_string(conn)],
        )

    async def _configure_pooled(self, conn: Conn) -> None:
        """Every pooled connection: configured; and an outage the pool logged is over."""
        await self._configure(conn)
        outage_log_filter().back(self._pool_name)

    async def _open(self, conninfo: str, pool_size: int) -> None:
        """On the loop: connect, migrate, listen, then open the pool and the flusher."""
        options = _connect_options(conninfo)
        try:
            conn = await psycopg.AsyncConnection.connect(conninfo, **options)
        except psycopg.Error as err:
            raise StoreError(
                self._scrub(f"cannot connect to the run store {self.display_url}: {err}")
            ) from None
        self.worker_url = with_password(self.url, conn.info.user, conn.info.password)
        try:
            await conn.execute("SET TimeZone TO 'UTC'")
            await migrate(conn, self.schema, self.display_url)
            await self._configure(conn)
            sent = time.time()
            cur = await conn.execute("SELECT clock_timestamp()")
            row = await cur.fetchone()
            assert row is not None
            here = datetime.fromtimestamp((sent + time.time()) / 2, UTC)
            self._skew = row[0] - here
            await self._listener.listen(conn)
        except BaseException:
            await conn.close()
            raise
        outage_log_filter()  # its retries while the server is away: one line, not hundreds
        self._pool = psycopg_pool.AsyncConnectionPool(
            conninfo, kwargs=options, min_size=1, max_size=pool_size, open=False,
            configure=self._configure_pooled, check=check_lent, name=self._pool_name,
        )  # fmt: skip
        try:
            await self._pool.open(wait=True, timeout=float(options.get("connect_timeout", 30)))
        except BaseException:
            await self._listener.stop()
            await self._pool.close()
            raise
        self._flusher = asyncio.get_running_loop().create_task(self._flush_loop())

    async def _listen_again(self) -> Conn:
        """A new connection for the listener (after it lost its own)."""
        conn = await psycopg.AsyncConnection.connect(
            self._conninfo, **_connect_options(self._conninfo)
        )
        self.back_at = time.monotonic()  # (a server restart cut the listener too)
        await self._configure(conn)
        return conn

    # -- events ----------------------------------------------------------
    async def append_event(
        self,
        run_id: str,
        event_type: str,
        data: dict[str, Any] | None = None,
        *,
        node_id: str | None = None,
        branch_id: str | None = None,
    ) -> None:
        if self.closed:
            raise StoreError(f"the run store {self.display_url} is closed")
        await self._known(run_id)
        check_text(event_type, node_id, branch_id)
        row = (run_id, event_type, self._stamp(), node_id, branch_id, encode_json(data or {}))
        if self._buffer.add(row):
            self._nudge()

    async def events(self, run_id: str, *, after: int = 0, limit: int | None = None) -> list[Event]:
        async def body(conn: Conn) -> list[Event]:
            await self._require_run(conn, run_id)
            cur = await conn.execute(
                "SELECT run_id, seq, type, occurred_at, data, node_id, branch_id FROM events"
                " WHERE run_id = %s AND seq > %s ORDER BY seq LIMIT %s",
                [run_id, after, limit],
            )
            return [
                Event(r[0], r[1], r[2], r[3].astimezone(UTC), json.loads(r[4]), r[5], r[6])
                for r in await cur.fetchall()
            ]

        async def work() -> list[Event]:
            await self._flushed(checkpoints=False)
            return await self._read(body)

        return await self._call(work)

    # -- artifacts -------------------------------------------------------
    async def put_artifact(self, run_id: str, node_id: str, name: str, value: Any) -> Artifact:
        payload = encode_json(value)

        async def body(conn: Conn) -> Artifact:
            await self._require_run(conn, run_id)
            # versions of one name are given one at a time, whoever publishes
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s))", [f"artifact {run_id} {name}"]
            )
            now = await self._now(conn)
            cur = await conn.execute(
                f"INSERT INTO artifacts ({_ARTIFACT_COLUMNS})"
                " SELECT %s, %s, coalesce(max(version), 0) + 1, %s, %s, %s FROM artifacts"
                f" WHERE run_id = %s AND name = %s RETURNING {_ARTIFACT_COLUMNS}",
                [run_id, name, node_id, payload, now, run_id, name],
            )
            row = await cur.fetchone()
            assert row is not None
            return _artifact(row)

        return await self._call(lambda: self._transact(body))

    async def get_artifact(self, run_id: str, name: str, version: int | None = None) -> Artifact:
        exact = "" if version is None else " AND version = %s"

        async def body(conn: Conn) -> Artifact:
            await self._require_run(conn, run_id)
            cur = await conn.execute(
                f"SELECT {_ARTIFACT_COLUMNS} FROM artifacts WHERE run_id = %s AND name = %s"
                f"{exact} ORDER BY version DESC LIMIT 1",
                [run_id, name, *([] if version is None else [version])],
            )
            row = await cur.fetchone()
            if row is None:
                raise NotFoundError("artifact", name if version is None else f"{name} v{version}")
            return _artifact(row)

        return await self._call(lambda: self._read(body))

    async def list_artifacts(self, run_id: str) -> list[Artifact]:
        async def body(conn: Conn) -> list[Artifact]:
            await self._require_run(conn, run_id)
            cur = await conn.execute(
                f"SELECT {_ARTIFACT_COLUMNS} FROM artifacts WHERE run_id = %s"
                " ORDER BY name, version",
                [run_id],
            )
            return [_artifact(r) for r in await cur.fetchall()]

        return await self._call(lambda: self._read(body))

    # -- interactions ----------------------------------------------------
    async def add_interaction(
        self, interaction: Interaction, *, owner: str | None = None
    ) -> Interaction:
        i = interaction
        check_text(i.id, i.run_id, i.node_id, i.branch_id)

        async def body(conn: Conn) -> Interaction:
            await self._require_run(conn, i.run_id)
            if owner is not None:  # the run's row stays as read until this commits
                cur = await conn.execute(
                    "SELECT owner_id FROM runs WHERE id = %s FOR SHARE", [i.run_id]
                )
                if await cur.fetchone() != (owner,):
                    raise LeaseLostError(i.run_id)
            cur = await conn.execute(
                f"INSERT INTO interactions ({INTERACTION_COLUMNS}) VALUES ({INTERACTION_VALUES})"
                f" ON CONFLICT (id) DO NOTHING RETURNING {INTERACTION_COLUMNS}",
                interaction_params(i),
            )
            row = await cur.fetchone()
            if row is None:
                raise ConflictError(f"interaction '{i.id}' already exists")
            await self._notify(conn, node_key(i.run_id, i.node_id))
            return interaction_from_row(row)

        stored = await self._call(lambda: self._transact(body))
        self.doorbell.ring(node_key(i.run_id, i.node_id))
        return stored

    async def get_interaction(self, interaction_id: str) -> Interaction:
        async def body(conn: Conn) -> Interaction:
            cur = await conn.execute(
                f"SELECT {INTERACTION_COLUMNS} FROM interactions WHERE id = %s", [interaction_id]
            )
            row = await cur.fetchone()
            if row is None:
                raise NotFoundError("interaction", interaction_id)
            return interaction_from_row(row)

        return await self._call(lambda: self._read(body))

    async def pending_interactions(
        self,
        run_id: str | None = None,
        *,
        node_id: str | None = None,
        kind: InteractionKind | None = None,
    ) -> list[Interaction]:
        # past its expiry a question is not pending, even before its expiry is recorded
        where = [
            "answered_at IS NULL",
            "ended IS NULL",
            "(expires_at IS NULL OR expires_at > coalesce(%s::timestamptz, now()))",
        ]
        params: list[Any] = [self._clock() if self._clock else None]
        for column, value in (("run_id", run_id), ("node_id", node_id), ("kind", kind)):
            if value is not None:
                where.append(f"{column} = %s")
                params.append(value)

        async def body(conn: Conn) -> list[Interaction]:
            cur = await conn.execute(
                f"SELECT {INTERACTION_COLUMNS} FROM interactions WHERE {' AND '.join(where)}"
                " ORDER BY requested_at, n",
                params,
            )
            return [interaction_from_row(r) for r in await cur.fetchall()]

        return await self._call(lambda: self._read(body))

    async def interactions(self, run_id: str) -> list[Interaction]:
        async def body(conn: Conn) -> list[Interaction]:
            await self._require_run(conn, run_id)
            cur = await conn.execute(
                f"SELECT {INTERACTION_COLUMNS} FROM interactions WHERE run_id = %s"
                " ORDER BY requested_at, n",
                [run_id],
            )
            return [interaction_from_row(r) for r in await cur.fetchall()]

        return await self._call(lambda: self._read(body))

    async def answer(
        self, interaction_id: str, answer: Any, *, answered_by: str = "unknown"
    ) -> AnswerResult:
        payload = check_answer(answer)

        async def body(conn: Conn) -> AnswerResult | Interaction:
            now = await self._now(conn)
            # the row lock decides: of concurrent answers (and a retraction, an expiry)
            # the first to commit wins; the others find the question ended
            current = await self._locked_question(conn, interaction_id)
            if current.due(now):  # an answer at (or after) the expiry instant: too late
                current = lifecycle.expire(current)
                await self._end(conn, current)
            if not current.pending:
                return current  # committed (an expiry found now), then refused below
            cur = await conn.execute(
                "UPDATE interactions SET answered_at = %s, answers = %s, answered_by = %s"
                f" WHERE id = %s RETURNING {INTERACTION_COLUMNS}",
                [now, payload, answered_by, interaction_id],
            )
            row = await cur.fetchone()
            assert row is not None
            answered = interaction_from_row(row)
            message = None
            if answered.kind == "async":
                text = answer_message(answered, answer)
                message = await self._insert_message(
                    conn, answered.run_id, answered.node_id, text, now
                )
            await self._event_now(
                conn, answered.run_id, "interaction_answered", answered_event(answered), now,
                answered.node_id, answered.branch_id,
            )  # fmt: skip
            await self._notify(conn, node_key(answered.run_id, answered.node_id))
            return AnswerResult(answered, message)

        result = await self._call(lambda: self._transact(body))
        if isinstance(result, Interaction):
            self.doorbell.ring(node_key(result.run_id, result.node_id))
            raise lifecycle.not_pending(result)
        self.doorbell.ring(node_key(result.interaction.run_id, result.interaction.node_id))
        return result

    # -- messages --------------------------------------------------------
    async def _insert_message(
        self, conn: Conn, run_id: str, node_id: str, text: str, now: datetime
    ) -> QueuedMessage:
        message = QueuedMessage(self._new_id(), run_id, node_id, text, now)
        await conn.execute(
            f"INSERT INTO messages ({MESSAGE_COLUMNS}) VALUES (%s, %s, %s, %s, %s, NULL)",
            [message.id, run_id, node_id, text, now],
        )
        return message

    async def queue_message(self, run_id: str, node_id: str, text: str) -> QueuedMessage:
        check_text(node_id)

        async def body(conn: Conn) -> QueuedMessage:
            await self._require_run(conn, run_id)
            message = await self._insert_message(conn, run_id, node_id, text, await self._now(conn))
            await self._notify(conn, node_key(run_id, node_id))
            return message

        message = await self._call(lambda: self._transact(body))
        self.doorbell.ring(node_key(run_id, node_id))
        return message

    async def drain_messages(
        self, run_id: str, node_id: str, *, token: str | None = None, repeated: bool = False
    ) -> list[QueuedMessage]:
        # a drain whose reply is lost is settled by what its token took
        token = token or uuid.uuid4().hex

        async def taken_by_token(conn: Conn) -> list[QueuedMessage]:
            cur = await conn.execute(
                f"SELECT n, {MESSAGE_COLUMNS} FROM messages WHERE drain_token = %s", [token]
            )
            return [message_from_row(r[1:]) for r in sorted(await cur.fetchall())]

        async def landed() -> list[QueuedMessage] | Any:
            async with self._connection() as conn:
                return await taken_by_token(conn) or NOT_LANDED

        async def body(conn: Conn) -> list[QueuedMessage]:
            if repeated:  # the first attempt may have landed: what did it take?
                taken = await taken_by_token(conn)
                if taken:
                    return taken
            # one statement: concurrent drainers each get a message at most once
            cur = await conn.execute(
                "UPDATE messages SET delivered_at = coalesce(%s::timestamptz, now()),"
                " drain_token = %s WHERE run_id = %s AND node_id = %s AND delivered_at IS NULL"
                f" RETURNING n, {MESSAGE_COLUMNS}",
                [self._clock() if self._clock else None, token, run_id, node_id],
            )
            rows = sorted(await cur.fetchall())
            return [message_from_row(r[1:]) for r in rows]

        async def work() -> list[QueuedMessage]:
            await self._flushed(checkpoints=False)
            return await self._read(body, writes=True, settle=landed)

        return await self._call(work)

    # -- lifecycle -------------------------------------------------------
    async def flush(self) -> None:
        await self._call(self._flushed)

    async def _shutdown(self) -> None:
        """On the loop: write what waits, stop listening, close the pool."""
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT), self._flush_lock:
                await self._write_buffer(checkpoints=True)
        except Exception as err:  # the server is gone: say so, and let go anyway
            log.warning("%s", self._scrub(f"closing {self.display_url}: events lost: {err!r}"))
        finally:
            if self._flusher is not None:
                self._flusher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._flusher
            await self._listener.stop()
            if self._pool is not None:
                await self._pool.close()

    async def close(self) -> None:
        """Write the events that wait, then release the connections and the thread."""
        if self._closing:
            return
        self._closing = True
        try:
            await self._call(self._shutdown)
        finally:
            self.closed = True
            await asyncio.get_running_loop().run_in_executor(None, self._thread.stop)


def open_postgres_store(
    url: str,
    *,
    doorbell: Doorbell | None = None,
    clock: Callable[[], datetime] | None = None,
    new_id: Callable[[], str] = lambda: uuid.uuid4().hex,
    flush_rows: int = 2000,
    flush_interval: float = 0.05,
    pool_size: int = POOL_SIZE,
    outage_timeout: float = OUTAGE_TIMEOUT,
) -> PostgresStore:
    """Open the PostgreSQL store a URL names, creating or migrating its schema.

    Args:
        url: ``postgresql://[user[:password]@]host[:port]/database[?schema=NAME&…]``;
            ``schema`` (default ``iterion_nb``) is ours, every other parameter
            goes to libpq.
        doorbell: Rung when anything a waiter may care about commits, in this
            process or any other using the store.
        clock: Times for records and leases; default: the database server's
            clock (so machines whose clocks disagree agree on leases).
        new_id: Ids of queued messages.
        flush_rows: Events written in one transaction once this many wait.
        flush_interval: Seconds the oldest event (or progress checkpoint) waits at most.
        pool_size: Connections kept at most (the LISTEN connection aside).
        outage_timeout: Seconds a call waits for a server that went away (a
            restart) and tries again before it fails; opening does not wait.

    Raises:
        StoreError: The server cannot be reached, or the URL is malformed
            (messages never show the password).
        StoreFileError: The schema holds tables that are not ours, or was
            written by a newer iterion_nb (it is left untouched).
    """
    conninfo, schema = split_url(url)
    store = PostgresStore(
        url, conninfo, schema, doorbell or Doorbell(), clock, new_id, flush_rows, flush_interval
    )
    store.outage_timeout = outage_timeout
    try:
        opening = store._guarded(lambda: store._open(conninfo, pool_size), wait=False)
        store._thread.submit(opening).result()
    except BaseException:
        store._thread.stop()
        raise
    return store
