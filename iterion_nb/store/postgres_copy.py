# ruff: noqa: D102 - each Store method is documented once, on the Store protocol
"""Copying runs in and out of the PostgreSQL store (``iterion-nb store copy``).

A run travels whole — record, events (with their seqs and times),
artifacts, questions and messages — and is replaced in one transaction that
locks the run's row, so copying again changes nothing, a copy interrupted
midway leaves each run either as it was or as the source has it, and a run
a live owner executes here is never overwritten. The same transaction
compares the copy here with the one coming
(:func:`~iterion_nb.runtime.lineage.import_outcome`): one that recorded what
the coming one lacks is kept, unless forced.
"""

from __future__ import annotations

import json
from datetime import UTC

from iterion_nb.runtime.lineage import import_outcome
from iterion_nb.runtime.ownership import check_import
from iterion_nb.runtime.records import Artifact, Event, RunBundle, encode_json
from iterion_nb.store.duckdb_rows import (
    INTERACTION_COLUMNS,
    MESSAGE_COLUMNS,
    RUN_COLUMNS,
    interaction_from_row,
    message_from_row,
)
from iterion_nb.store.postgres_base import Conn, copy_events
from iterion_nb.store.postgres_runs import (
    INTERACTION_VALUES,
    PgRuns,
    interaction_params,
    lease_params,
)

_RUN_TABLES = ("events", "artifacts", "interactions", "messages")


class PgCopies(PgRuns):
    """Export and import of whole runs."""

    async def _bundle(self, conn: Conn, run_id: str) -> RunBundle:
        """On the loop: the run as stored and everything it recorded."""
        run = await self._stored_run(conn, run_id)
        cur = await conn.execute(
            "SELECT run_id, seq, type, occurred_at, data, node_id, branch_id FROM events"
            " WHERE run_id = %s ORDER BY seq",
            [run_id],
        )
        events = tuple(
            Event(r[0], r[1], r[2], r[3].astimezone(UTC), json.loads(r[4]), r[5], r[6])
            for r in await cur.fetchall()
        )
        cur = await conn.execute(
            "SELECT run_id, name, version, node_id, value, created_at FROM artifacts"
            " WHERE run_id = %s ORDER BY name, version",
            [run_id],
        )
        artifacts = tuple(
            Artifact(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5].astimezone(UTC))
            for r in await cur.fetchall()
        )
        cur = await conn.execute(
            f"SELECT {INTERACTION_COLUMNS} FROM interactions WHERE run_id = %s"
            " ORDER BY requested_at, n",
            [run_id],
        )
        interactions = tuple(interaction_from_row(r) for r in await cur.fetchall())
        cur = await conn.execute(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE run_id = %s ORDER BY n", [run_id]
        )
        messages = tuple(message_from_row(r) for r in await cur.fetchall())
        return RunBundle(run, events, artifacts, interactions, messages)

    async def export_run(self, run_id: str) -> RunBundle:
        async def work() -> RunBundle:
            await self._flushed()
            # one snapshot: a run another process writes meanwhile is read consistently
            return await self._transact(lambda conn: self._bundle(conn, run_id), flush=False)

        return await self._call(work)

    async def import_run(self, bundle: RunBundle, *, force: bool = False) -> str:
        run_id = bundle.run.id

        async def body(conn: Conn) -> str:
            cur = await conn.execute("SELECT 1 FROM runs WHERE id = %s FOR UPDATE", [run_id])
            exists = await cur.fetchone() is not None
            current = None
            if exists:
                check_import(await self._stored_run(conn, run_id), await self._now(conn))
                current = await self._bundle(conn, run_id)
            outcome = import_outcome(current, bundle, force=force)
            if outcome not in ("created", "updated"):
                return outcome  # the same, or history only this copy has: left as it is
            if exists:
                for table in _RUN_TABLES:
                    await conn.execute(f"DELETE FROM {table} WHERE run_id = %s", [run_id])
                await conn.execute("DELETE FROM runs WHERE id = %s", [run_id])
            await self._insert_bundle(conn, bundle)
            await self._notify(conn, run_id)
            return outcome

        outcome = await self._call(lambda: self._transact(body, checkpoints=True))
        self._known_runs.add(run_id)
        self.doorbell.ring(run_id)
        return outcome

    async def _insert_bundle(self, conn: Conn, bundle: RunBundle) -> None:
        """On the loop, in the transaction: every record of the bundle."""
        run = bundle.run
        last_seq = max((e.seq for e in bundle.events), default=0)
        await conn.execute(
            f"INSERT INTO runs ({RUN_COLUMNS}, event_seq) VALUES ({', '.join(['%s'] * 18)})",
            [
                run.id, run.workflow, run.source_hash, run.status, run.created_at,
                run.updated_at, run.source, encode_json(run.vars), run.error,
                None if run.checkpoint is None else encode_json(run.checkpoint),
                *lease_params(run.lease), encode_json(run.launch), run.cancel_requested,
                last_seq,
            ],
        )  # fmt: skip
        await copy_events(
            conn,
            [(e.run_id, e.seq, e.type, e.at, e.node_id, e.branch_id, encode_json(e.data))
             for e in bundle.events],
        )  # fmt: skip
        async with conn.cursor() as cur:
            await cur.executemany(
                "INSERT INTO artifacts (run_id, name, version, node_id, value, created_at)"
                " VALUES (%s, %s, %s, %s, %s, %s)",
                [[a.run_id, a.name, a.version, a.node_id, encode_json(a.value), a.created_at]
                 for a in bundle.artifacts],
            )  # fmt: skip
            await cur.executemany(
                f"INSERT INTO interactions ({INTERACTION_COLUMNS}) VALUES ({INTERACTION_VALUES})",
                [interaction_params(i) for i in bundle.interactions],
            )
            await cur.executemany(
                f"INSERT INTO messages ({MESSAGE_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s)",
                [[m.id, m.run_id, m.node_id, m.text, m.created_at, m.delivered_at]
                 for m in bundle.messages],
            )  # fmt: skip
