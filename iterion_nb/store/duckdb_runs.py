"""The DuckDB store's runs: records, checkpoints, and ownership (leases).

Every run leaves here with its effective status
(:func:`~iterion_nb.runtime.ownership.effective_status`): a ``running``
run whose lease lapsed reads as ``interrupted``. Taking, settling and
cancelling a run each happen in one transaction on the worker thread, so
two processes (through the holder) or two sessions race safely: exactly one
takes a run.
"""

from __future__ import annotations

from typing import Any

from iterion_nb.errors import (
    ConflictError,
    LeaseLostError,
    NotFoundError,
    StoreError,
)
from iterion_nb.runtime.ownership import (
    Claimant,
    check_acquire,
    effective_status,
    keeps_cancel,
)
from iterion_nb.runtime.ports import UNSET
from iterion_nb.runtime.records import RESUMABLE, LeaseReport, Run, RunStatus, encode_json
from iterion_nb.store.duckdb_base import DuckDBBase
from iterion_nb.store.duckdb_rows import RUN_COLUMNS, lease_params, run_from_row, to_db

#: The SET clause that leaves a run with no owner.
CLEAR_LEASE = (
    "owner_id = NULL, owner_pid = NULL, owner_host = NULL, owner_since = NULL,"
    " lease_expires_at = NULL"
)
_SET_LEASE = "owner_id = ?, owner_pid = ?, owner_host = ?, owner_since = ?, lease_expires_at = ?"


class RunTables(DuckDBBase):
    """Runs, checkpoints and leases of the DuckDB store."""

    def _stored_run(self, run_id: str) -> Run:
        """On the worker: the run as stored (lease included, status not derived)."""
        row = self._con.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE id = ?", [run_id]).fetchone()
        if row is None:
            raise NotFoundError("run", run_id)
        return run_from_row(row)

    def _fetch_run(self, run_id: str) -> Run:
        """On the worker: the run as every reader sees it."""
        return effective_status(self._stored_run(run_id), self._clock())

    # -- records -----------------------------------------------------------
    async def create_run(self, run: Run, *, owner: Claimant | None = None) -> Run:
        lease = owner.lease(self._clock()) if owner is not None else run.lease

        def body() -> Run:
            exists = self._con.execute("SELECT 1 FROM runs WHERE id = ?", [run.id]).fetchone()
            if exists:
                raise ConflictError(f"run '{run.id}' already exists")
            self._con.execute(
                f"INSERT INTO runs ({RUN_COLUMNS}) VALUES"
                " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    run.id, run.workflow, run.source_hash, run.status,
                    to_db(run.created_at), to_db(run.updated_at), run.source,
                    encode_json(run.vars), run.error,
                    None if run.checkpoint is None else encode_json(run.checkpoint),
                    *lease_params(lease), encode_json(run.launch), run.cancel_requested,
                ],
            )  # fmt: skip
            return self._fetch_run(run.id)

        created = await self._call(lambda: self._transaction(body))
        with self._seq_lock:
            self._next_seq[run.id] = 1
        return created

    async def get_run(self, run_id: str) -> Run:
        def body() -> Run:
            self._flushed()
            return self._fetch_run(run_id)

        return await self._call(body)

    async def update_run(
        self,
        run_id: str,
        *,
        status: RunStatus | None = None,
        error: str | None = UNSET,
        checkpoint: dict[str, Any] | None = UNSET,
        source_hash: str | None = None,
        source: str | None = None,
        launch: dict[str, Any] | None = None,
    ) -> Run:
        if status == "interrupted":
            raise StoreError("'interrupted' is not stored: a run reads so when its lease lapses")
        sets = ["updated_at = ?"]
        params: list[Any] = [to_db(self._clock())]
        for column, value in (("status", status), ("source_hash", source_hash), ("source", source)):
            if value is not None:
                sets.append(f"{column} = ?")
                params.append(value)
        if error is not UNSET:
            sets.append("error = ?")
            params.append(error)
        if checkpoint is not UNSET:
            sets.append("checkpoint = ?")
            params.append(None if checkpoint is None else encode_json(checkpoint))
        if launch is not None:
            sets.append("launch = ?")
            params.append(encode_json(launch))

        def body() -> Run:
            self._require_run(run_id)
            self._con.execute(f"UPDATE runs SET {', '.join(sets)} WHERE id = ?", [*params, run_id])
            return self._fetch_run(run_id)

        return await self._call(lambda: self._transaction(body, checkpoints=True))

    async def list_runs(self, *, status: RunStatus | None = None, limit: int = 100) -> list[Run]:
        # running and interrupted runs are both stored as 'running': filter after deriving
        stored = "running" if status == "interrupted" else status

        def body() -> list[Run]:
            self._flushed()
            where = "WHERE status = ?" if stored else ""
            cap = [] if stored == "running" else [limit]
            rows = self._con.execute(
                f"SELECT {RUN_COLUMNS} FROM runs {where} ORDER BY created_at DESC, id DESC"
                + ("" if stored == "running" else " LIMIT ?"),
                ([stored] if stored else []) + cap,
            ).fetchall()
            now = self._clock()
            runs = [effective_status(run_from_row(r), now) for r in rows]
            if status is not None:
                runs = [r for r in runs if r.status == status]
            return runs[:limit]

        return await self._call(body)

    async def save_checkpoint(
        self,
        run_id: str,
        checkpoint: dict[str, Any],
        *,
        owner: str | None = None,
        durable: bool = False,
    ) -> None:
        if self.closed:
            raise StoreError(f"the run store {self.path} is closed")
        if run_id not in self._next_seq:
            await self._seq_for(run_id)  # checks the run exists
        if not durable:
            if self._buffer.add_checkpoint(run_id, checkpoint, owner):
                self._worker.nudge()
            return

        def body() -> bool:
            # events first (they led to this checkpoint), and any older progress
            # checkpoint of the run is superseded by this one
            self._flushed()
            return self._write_checkpoint(run_id, checkpoint, owner)

        if not await self._call(body):
            raise LeaseLostError(run_id)

    # -- ownership -----------------------------------------------------------
    async def stored_owners(self, run_ids: list[str]) -> dict[str, str | None]:
        """The claimant each existing run is stored under, its lease lapsed or not.

        A holder checks a late batch against it: the claimant a process sent
        its events under must still be the one stored, as PostgreSQL checks
        ``owner_id`` when it numbers a batch.
        """

        def body() -> dict[str, str | None]:
            rows = self._con.execute(
                "SELECT id, owner_id FROM runs WHERE id IN (SELECT unnest(?::VARCHAR[]))",
                [run_ids],
            ).fetchall()
            return {str(r[0]): None if r[1] is None else str(r[1]) for r in rows}

        return await self._call(body) if run_ids else {}

    async def acquire_run(
        self,
        run_id: str,
        owner: Claimant,
        *,
        statuses: tuple[RunStatus, ...] = RESUMABLE,
        take_from: str | None = None,
    ) -> Run:
        def body() -> Run:
            now = self._clock()
            stored = self._stored_run(run_id)
            since = check_acquire(effective_status(stored, now), owner, statuses, take_from)
            lease = owner.lease(now, since)
            self._con.execute(
                f"UPDATE runs SET status = 'running', error = NULL, cancel_requested = ?,"
                f" updated_at = ?, {_SET_LEASE} WHERE id = ?",
                [keeps_cancel(stored, take_from), to_db(now), *lease_params(lease), run_id],
            )
            return self._fetch_run(run_id)

        return await self._call(lambda: self._transaction(body, checkpoints=True))

    async def renew_leases(self, owner: Claimant, run_ids: list[str]) -> LeaseReport:
        if not run_ids:
            return LeaseReport()

        def body() -> LeaseReport:
            now = self._clock()
            lease = owner.lease(now)
            marks = ", ".join("?" for _ in run_ids)
            # a lapsed lease is renewed only if nobody took the run meanwhile
            self._con.execute(
                f"UPDATE runs SET lease_expires_at = ? WHERE owner_id = ? AND id IN ({marks})",
                [to_db(lease.expires_at), owner.id, *run_ids],
            )
            rows = self._con.execute(
                f"SELECT id, owner_id, cancel_requested FROM runs WHERE id IN ({marks})", run_ids
            ).fetchall()
            mine = {r[0]: bool(r[2]) for r in rows if r[1] == owner.id}
            lost = tuple(i for i in run_ids if i not in mine)
            return LeaseReport(lost, tuple(i for i, cancel in mine.items() if cancel))

        return await self._call(lambda: self._transaction(body))

    async def release_runs(self, owner: str, run_ids: list[str]) -> None:
        if not run_ids:
            return
        marks = ", ".join("?" for _ in run_ids)

        def body() -> None:
            self._con.execute(
                f"UPDATE runs SET {CLEAR_LEASE} WHERE owner_id = ? AND id IN ({marks})",
                [owner, *run_ids],
            )

        await self._call(lambda: self._transaction(body))

    async def cancel_run(self, run_id: str) -> Run:
        def body() -> Run:
            run = self._fetch_run(run_id)
            if run.status == "running":  # its owner lives: ask it to stop
                self._con.execute("UPDATE runs SET cancel_requested = true WHERE id = ?", [run_id])
            elif run.status in RESUMABLE and run.status != "cancelled":
                self._con.execute(
                    f"UPDATE runs SET status = 'cancelled', cancel_requested = false,"
                    f" updated_at = ?, {CLEAR_LEASE} WHERE id = ?",
                    [to_db(self._clock()), run_id],
                )
                self._event_now(run_id, "run_cancelled", {})
            return self._fetch_run(run_id)

        run = await self._call(lambda: self._transaction(body, checkpoints=True))
        self.doorbell.ring(run_id)
        return run
