"""The PostgreSQL schema, as numbered migrations the store applies itself.

The tables live in one PostgreSQL schema (``iterion_nb`` unless the URL
says ``?schema=NAME``), so several stores share a database. Opening a store
takes a transaction-scoped advisory lock, inspects the schema and applies the
missing migrations in that same transaction, so concurrent openers never
race and a failed migration leaves nothing half-done. A schema written by a
newer iterion_nb, or one holding tables that are not ours, is refused and
left untouched.

JSON payloads are TEXT holding our exact JSON (jsonb would reorder keys).
"""

from __future__ import annotations

import hashlib

from psycopg import AsyncConnection, sql

from iterion_nb.errors import StoreFileError
from iterion_nb.store.duckdb_schema import APP_MARK

#: The schema the tables live in when the URL does not say ``?schema=``.
DEFAULT_SCHEMA = "iterion_nb"

MIGRATIONS: list[tuple[int, str]] = [
    (
        1,
        """
        CREATE TABLE iterion_meta (key text PRIMARY KEY, value text NOT NULL);
        CREATE TABLE runs (
            id text PRIMARY KEY,
            workflow text NOT NULL,
            source_hash text NOT NULL,
            status text NOT NULL,
            created_at timestamptz NOT NULL,
            updated_at timestamptz NOT NULL,
            source text NOT NULL,
            vars text NOT NULL,
            error text,
            checkpoint text,
            owner_id text,
            owner_pid bigint,
            owner_host text,
            owner_since timestamptz,
            lease_expires_at timestamptz,
            launch text,
            cancel_requested boolean NOT NULL DEFAULT false,
            -- the last seq given to an event of the run: events of several
            -- processes get distinct, gap-free seqs in commit order
            event_seq bigint NOT NULL DEFAULT 0
        );
        CREATE INDEX runs_newest ON runs (created_at DESC, id DESC);
        CREATE INDEX runs_by_status ON runs (status, created_at DESC, id DESC);
        CREATE INDEX runs_by_owner ON runs (owner_id) WHERE owner_id IS NOT NULL;
        CREATE TABLE events (
            run_id text NOT NULL,
            seq bigint NOT NULL,
            type text NOT NULL,
            occurred_at timestamptz NOT NULL,
            node_id text,
            branch_id text,
            data text NOT NULL,
            PRIMARY KEY (run_id, seq)
        );
        CREATE TABLE artifacts (
            run_id text NOT NULL,
            name text NOT NULL,
            version integer NOT NULL,
            node_id text NOT NULL,
            value text NOT NULL,
            created_at timestamptz NOT NULL,
            PRIMARY KEY (run_id, name, version)
        );
        CREATE TABLE interactions (
            id text PRIMARY KEY,
            n bigint GENERATED ALWAYS AS IDENTITY,
            run_id text NOT NULL,
            node_id text NOT NULL,
            branch_id text,
            kind text NOT NULL,
            questions text NOT NULL,
            options text NOT NULL,
            allow_free_text boolean NOT NULL,
            waits_on text NOT NULL,
            requested_at timestamptz NOT NULL,
            answered_at timestamptz,
            answers text,
            answered_by text
        );
        CREATE INDEX interactions_by_run ON interactions (run_id, requested_at, n);
        CREATE INDEX interactions_pending ON interactions (run_id, requested_at, n)
            WHERE answered_at IS NULL;
        CREATE TABLE messages (
            id text PRIMARY KEY,
            n bigint GENERATED ALWAYS AS IDENTITY,
            run_id text NOT NULL,
            node_id text NOT NULL,
            text text NOT NULL,
            created_at timestamptz NOT NULL,
            delivered_at timestamptz
        );
        CREATE INDEX messages_undelivered ON messages (run_id, node_id, n)
            WHERE delivered_at IS NULL;
        """,
    ),
    (
        2,
        # a drain records its token: repeated after its reply was lost, it
        # returns what it took instead of nothing
        """
        ALTER TABLE messages ADD COLUMN drain_token text;
        CREATE INDEX messages_by_drain ON messages (drain_token) WHERE drain_token IS NOT NULL;
        """,
    ),
    (
        3,
        # questions that end well: an expiry, an end without an answer (expired or
        # retracted, with a reason), amendments, and what an answer must be
        """
        ALTER TABLE interactions ADD COLUMN expires_at timestamptz;
        ALTER TABLE interactions ADD COLUMN ended text;
        ALTER TABLE interactions ADD COLUMN ended_at timestamptz;
        ALTER TABLE interactions ADD COLUMN end_reason text;
        ALTER TABLE interactions ADD COLUMN revision integer NOT NULL DEFAULT 0;
        ALTER TABLE interactions ADD COLUMN accepts text;
        """,
    ),
]

LATEST = MIGRATIONS[-1][0]


def channel_for(schema: str) -> str:
    """The LISTEN/NOTIFY channel of a schema's store (at most 63 bytes, as PostgreSQL wants)."""
    channel = f"iterion_nb.{schema}"
    if len(channel) > 63:
        channel = "iterion_nb." + hashlib.sha256(schema.encode()).hexdigest()[:32]
    return channel


async def _relations(conn: AsyncConnection[tuple[object, ...]], schema: str) -> set[str]:
    cur = await conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f')",
        [schema],
    )
    return {str(row[0]) for row in await cur.fetchall()}


async def _check_ours(
    conn: AsyncConnection[tuple[object, ...]], schema: str, where: str, tables: set[str]
) -> set[int]:
    """The migrations the schema has; refuses one that is not ours or is newer."""
    ident = sql.Identifier(schema)
    if "iterion_meta" not in tables or "schema_migrations" not in tables:
        raise StoreFileError(
            f"the schema '{schema}' of {where} holds tables of another application;"
            " it was left untouched — choose another schema (?schema=NAME)"
        )
    cur = await conn.execute(
        sql.SQL("SELECT value FROM {}.iterion_meta WHERE key = 'app'").format(ident)
    )
    mark = await cur.fetchone()
    if mark is None or mark[0] != APP_MARK:
        raise StoreFileError(
            f"the schema '{schema}' of {where} is not an iterion_nb store; it was left"
            " untouched — choose another schema (?schema=NAME)"
        )
    cur = await conn.execute(sql.SQL("SELECT version FROM {}.schema_migrations").format(ident))
    done = {int(str(row[0])) for row in await cur.fetchall()}
    if done and max(done) > LATEST:
        raise StoreFileError(
            f"the schema '{schema}' of {where} was written by a newer iterion_nb (schema"
            f" {max(done)}, this one knows {LATEST}); upgrade iterion_nb to open it"
        )
    return done


async def migrate(conn: AsyncConnection[tuple[object, ...]], schema: str, where: str) -> None:
    """Create or bring the schema up to date, in one transaction, under an advisory lock.

    ``where`` names the database in messages (its URL, password masked).

    Raises:
        StoreFileError: The schema holds tables that are not ours, or was
            written by a newer iterion_nb (nothing is changed).
    """
    ident = sql.Identifier(schema)
    async with conn.transaction():
        await conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext(%s))", [f"iterion_nb migrate {schema}"]
        )
        cur = await conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", [schema])
        exists = await cur.fetchone() is not None
        tables = await _relations(conn, schema) if exists else set()
        done = await _check_ours(conn, schema, where, tables) if tables else set()
        if LATEST in done and len(done) == len(MIGRATIONS):
            return
        if not exists:
            await conn.execute(sql.SQL("CREATE SCHEMA {}").format(ident))
        await conn.execute(
            sql.SQL("SELECT set_config('search_path', %s, true)"), [ident.as_string(conn)]
        )
        if not tables:
            await conn.execute(
                "CREATE TABLE schema_migrations"
                " (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
        for version, statements in MIGRATIONS:
            if version in done:
                continue
            await conn.execute(statements)
            if version == 1:
                await conn.execute("INSERT INTO iterion_meta VALUES ('app', %s)", [APP_MARK])
            await conn.execute("INSERT INTO schema_migrations (version) VALUES (%s)", [version])
