"""Copying runs in and out of the DuckDB store (``iterion-nb store copy``).

A run travels whole — record, events (with their seqs and times),
artifacts, questions and messages — and is replaced in one transaction, so
copying again changes nothing and a copy interrupted midway leaves each run
either as it was or as the source has it. The same transaction compares the
copy here with the one coming (:func:`~iterion_nb.runtime.lineage.import_outcome`):
one that recorded what the coming one lacks is kept, unless forced.
"""

from __future__ import annotations

import json
from datetime import UTC

from iterion_nb.runtime.lineage import import_outcome
from iterion_nb.runtime.ownership import check_import
from iterion_nb.runtime.records import (
    Artifact,
    Event,
    RunBundle,
    encode_json,
)
from iterion_nb.store.duckdb_mirror import Mirror
from iterion_nb.store.duckdb_rows import (
    INTERACTION_COLUMNS,
    INTERACTION_VALUES,
    MESSAGE_COLUMNS,
    RUN_COLUMNS,
    interaction_from_row,
    interaction_params,
    lease_params,
    message_from_row,
    to_db,
)
from iterion_nb.store.duckdb_runs import RunTables

_RUN_TABLES = ("events", "artifacts", "interactions", "messages")


class RunCopies(RunTables):
    """Export and import of whole runs."""

    mirror: Mirror

    def _bundle(self, run_id: str) -> RunBundle:
        """On the worker: the run and everything it recorded."""
        run = self._stored_run(run_id)
        con = self._con
        events = tuple(
            Event(r[0], r[1], r[2], r[3].replace(tzinfo=UTC), json.loads(r[4]), r[5], r[6])
            for r in con.execute(
                "SELECT run_id, seq, type, occurred_at, data, node_id, branch_id FROM events"
                " WHERE run_id = ? ORDER BY seq",
                [run_id],
            ).fetchall()
        )
        artifacts = tuple(
            Artifact(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5].replace(tzinfo=UTC))
            for r in con.execute(
                "SELECT run_id, name, version, node_id, value, created_at FROM artifacts"
                " WHERE run_id = ? ORDER BY name, version",
                [run_id],
            ).fetchall()
        )
        interactions = tuple(
            interaction_from_row(r)
            for r in con.execute(
                f"SELECT {INTERACTION_COLUMNS} FROM interactions WHERE run_id = ?"
                " ORDER BY requested_at, n",
                [run_id],
            ).fetchall()
        )
        messages = tuple(
            message_from_row(r)
            for r in con.execute(
                f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE run_id = ? ORDER BY n", [run_id]
            ).fetchall()
        )
        return RunBundle(run, events, artifacts, interactions, messages)

    async def export_run(self, run_id: str) -> RunBundle:
        def body() -> RunBundle:
            self._flushed()
            return self._bundle(run_id)

        return await self._call(body)

    async def import_run(self, bundle: RunBundle, *, force: bool = False) -> str:
        run_id = bundle.run.id

        def body() -> str:
            exists = self._con.execute("SELECT 1 FROM runs WHERE id = ?", [run_id]).fetchone()
            current = None
            if exists:
                check_import(self._stored_run(run_id), self._clock())
                current = self._bundle(run_id)
            outcome = import_outcome(current, bundle, force=force)
            if outcome not in ("created", "updated"):
                return outcome  # the same, or history only this copy has: left as it is
            if exists:
                for table in _RUN_TABLES:
                    self._con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])
                self._con.execute("DELETE FROM runs WHERE id = ?", [run_id])
            self._insert_bundle(bundle)
            return outcome

        def job() -> str:
            outcome = self._transaction(body, checkpoints=True)
            if outcome in ("created", "updated"):
                self._mirror(bundle)
            return outcome

        outcome = await self._call(job)
        self.doorbell.ring(run_id)
        return outcome

    def _insert_bundle(self, bundle: RunBundle) -> None:
        """On the worker, in the transaction: write every record of the bundle."""
        run, con = bundle.run, self._con
        con.execute(
            f"INSERT INTO runs ({RUN_COLUMNS}) VALUES"
            " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                run.id, run.workflow, run.source_hash, run.status, to_db(run.created_at),
                to_db(run.updated_at), run.source, encode_json(run.vars), run.error,
                None if run.checkpoint is None else encode_json(run.checkpoint),
                *lease_params(run.lease), encode_json(run.launch), run.cancel_requested,
            ],
        )  # fmt: skip
        for e in bundle.events:
            con.execute(
                "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?)",
                [e.run_id, e.seq, e.type, to_db(e.at), e.node_id, e.branch_id,
                 encode_json(e.data)],
            )  # fmt: skip
        for a in bundle.artifacts:
            con.execute(
                "INSERT INTO artifacts VALUES (?, ?, ?, ?, ?, ?)",
                [a.run_id, a.name, a.version, a.node_id, encode_json(a.value),
                 to_db(a.created_at)],
            )  # fmt: skip
        for i in bundle.interactions:
            con.execute(
                f"INSERT INTO interactions ({INTERACTION_COLUMNS}) VALUES ({INTERACTION_VALUES})",
                interaction_params(i),
            )
        for m in bundle.messages:
            con.execute(
                f"INSERT INTO messages ({MESSAGE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
                [m.id, m.run_id, m.node_id, m.text, to_db(m.created_at),
                 None if m.delivered_at is None else to_db(m.delivered_at)],
            )  # fmt: skip

    def _mirror(self, bundle: RunBundle) -> None:
        """After the commit: what this process keeps in memory about the run."""
        run_id = bundle.run.id
        self.mirror.replace_run(run_id, bundle.interactions, bundle.messages)
        with self._seq_lock:
            self._next_seq[run_id] = max((e.seq for e in bundle.events), default=0) + 1
        self._known_runs.add(run_id)
