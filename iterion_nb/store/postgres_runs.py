# ruff: noqa: D102 - each Store method is documented once, on the Store protocol
"""The PostgreSQL store's runs: records, checkpoints, and ownership (leases).

Same semantics as the DuckDB store. Taking, settling and cancelling a run
each happen in one transaction that locks the run's row (``FOR UPDATE``),
so any number of processes on any number of machines race safely: exactly
one takes a run. Lease times come from the database server's clock (or the
injected one), so machines whose clocks disagree still agree on who owns a
run. Every run leaves here with its effective status.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from iterion_nb.errors import (
    ConflictError,
    LeaseLostError,
    NotFoundError,
    OwnerMayRenewError,
    StoreError,
)
from iterion_nb.runtime.ownership import (
    TAKEOVER_GRACE,
    Claimant,
    check_acquire,
    effective_status,
    keeps_cancel,
    lease_alive,
    owner_may_live,
)
from iterion_nb.runtime.ports import UNSET
from iterion_nb.runtime.records import (
    RESUMABLE,
    Interaction,
    Lease,
    LeaseReport,
    Run,
    RunStatus,
    encode_json,
)
from iterion_nb.store.duckdb_rows import INTERACTION_COLUMNS, RUN_COLUMNS, run_from_row
from iterion_nb.store.postgres_base import NOT_LANDED, Conn, PgBase, check_text

#: The SET clause that leaves a run with no owner.
CLEAR_LEASE = (
    "owner_id = NULL, owner_pid = NULL, owner_host = NULL, owner_since = NULL,"
    " lease_expires_at = NULL"
)
_SET_LEASE = (
    "owner_id = %s, owner_pid = %s, owner_host = %s, owner_since = %s, lease_expires_at = %s"
)
_MARKS = ", ".join(["%s"] * 17)
#: ``_MARKS`` with a lease that starts at the server's now() and lasts a given number of seconds.
_MARKS_SERVER_LEASE = ", ".join(
    ["%s"] * 13 + ["now()", "now() + %s * interval '1 second'"] + ["%s"] * 2
)


def lease_params(lease: Lease | None) -> list[Any]:
    """The five lease columns (owner id, pid, host, since, expiry)."""
    if lease is None:
        return [None, None, None, None, None]
    return [lease.owner, lease.pid, lease.host, lease.since, lease.expires_at]


def interaction_params(i: Interaction) -> list[Any]:
    """The values of ``INTERACTION_COLUMNS`` for an interaction."""
    return [
        i.id, i.run_id, i.node_id, i.branch_id, i.kind, encode_json(list(i.questions)),
        encode_json([{"id": o.id, "label": o.label} for o in i.options]),
        i.allow_free_text, encode_json(list(i.waits_on)), i.requested_at, i.answered_at,
        None if i.answered_at is None else encode_json(i.answers), i.answered_by,
        i.expires_at, i.ended, i.ended_at, i.end_reason, i.revision,
        None if i.accepts is None else encode_json(i.accepts),
    ]  # fmt: skip


#: Placeholders for one row of ``INTERACTION_COLUMNS``.
INTERACTION_VALUES = ", ".join("%s" for _ in INTERACTION_COLUMNS.split(","))


def _json_or_null(value: Any) -> str | None:
    return None if value is None else encode_json(value)


#: When the server began serving after its last start or crash recovery, and its time now.
#: ``pg_postmaster_start_time()`` alone misses a crash recovery (a backend killed: the
#: postmaster restarts every other process and stays); the shared statistics' reset time,
#: readable by every role, is set then (and at a start after an immediate shutdown). A
#: reset by hand (``pg_stat_reset_shared``) only moves a take-over back by the grace.
_SERVING_SINCE = (
    "SELECT greatest(pg_postmaster_start_time(), (SELECT stats_reset FROM pg_stat_bgwriter)),"
    " clock_timestamp()"
)


class PgRuns(PgBase):
    """Runs, checkpoints and leases of the PostgreSQL store."""

    async def _stored_run(self, conn: Conn, run_id: str, *, lock: bool = False) -> Run:
        """On the loop: the run as stored (lease included, status not derived)."""
        cur = await conn.execute(
            f"SELECT {RUN_COLUMNS} FROM runs WHERE id = %s" + (" FOR UPDATE" if lock else ""),
            [run_id],
        )
        row = await cur.fetchone()
        if row is None:
            raise NotFoundError("run", run_id)
        return run_from_row(row)

    async def _run_if_any(self, conn: Conn, run_id: str) -> Run | None:
        """On the loop: the run as stored, or None if there is no such run."""
        try:
            return await self._stored_run(conn, run_id)
        except NotFoundError:
            return None

    async def _locked_run(self, conn: Conn, run_id: str) -> tuple[Run, datetime]:
        """On the loop, in a transaction: the run as stored, locked, and the transaction's time.

        One round trip: the server's clock comes with the row (unless a clock is injected).
        """
        if self._clock is not None:
            return await self._stored_run(conn, run_id, lock=True), self._clock()
        cur = await conn.execute(
            f"SELECT {RUN_COLUMNS}, now() FROM runs WHERE id = %s FOR UPDATE", [run_id]
        )
        row = await cur.fetchone()
        if row is None:
            raise NotFoundError("run", run_id)
        return run_from_row(row[:-1]), row[-1].astimezone(UTC)

    async def _fetch_run(self, conn: Conn, run_id: str, now: datetime | None = None) -> Run:
        """On the loop: the run as every reader sees it.

        The server's clock comes with the row (one round trip, not two: reading a
        run is the store's most frequent query).
        """
        if now is not None or self._clock is not None:
            run = await self._stored_run(conn, run_id)
            return effective_status(run, now or await self._now(conn))
        cur = await conn.execute(f"SELECT {RUN_COLUMNS}, now() FROM runs WHERE id = %s", [run_id])
        row = await cur.fetchone()
        if row is None:
            raise NotFoundError("run", run_id)
        return effective_status(run_from_row(row[:-1]), row[-1].astimezone(UTC))

    # -- records -----------------------------------------------------------
    async def create_run(self, run: Run, *, owner: Claimant | None = None) -> Run:
        check_text(run.id)
        # One statement, one round trip (starting runs is a cluster launcher's hot path):
        # a lease taken now starts at the server's now(), unless a clock is injected.
        marks, lease = _MARKS, lease_params(run.lease)
        if owner is not None and self._clock is not None:
            lease = lease_params(owner.lease(self._clock()))
        elif owner is not None:  # owner, pid, host; then since and expiry from the server
            lease = [owner.id, owner.pid, owner.host, owner.ttl]
            marks = _MARKS_SERVER_LEASE
        params = [
            run.id, run.workflow, run.source_hash, run.status,
            run.created_at, run.updated_at, run.source, encode_json(run.vars), run.error,
            _json_or_null(run.checkpoint), *lease, encode_json(run.launch), run.cancel_requested,
        ]  # fmt: skip

        async def body(conn: Conn) -> Run:
            cur = await conn.execute(
                f"INSERT INTO runs ({RUN_COLUMNS}) VALUES ({marks})"
                f" ON CONFLICT (id) DO NOTHING RETURNING {RUN_COLUMNS}, now()",
                params,
            )
            row = await cur.fetchone()
            if row is None:
                raise ConflictError(f"run '{run.id}' already exists")
            now = self._clock() if self._clock is not None else row[-1].astimezone(UTC)
            return effective_status(run_from_row(row[:-1]), now)

        async def landed() -> Run | Any:
            """After a lost reply: the run, if this call created it (else NOT_LANDED)."""
            async with self._connection() as conn:
                stored = await self._run_if_any(conn, run.id)
                now = await self._now(conn)
            if stored is None:
                return NOT_LANDED
            holder = stored.lease.owner if stored.lease is not None else None
            ours = (holder == owner.id) if owner is not None else (
                holder is None and stored.created_at == run.created_at
                and stored.source_hash == run.source_hash
            )  # fmt: skip
            return effective_status(stored, now) if ours else NOT_LANDED

        created = await self._call(lambda: self._read(body, writes=True, settle=landed))
        self._known_runs.add(run.id)
        if owner is not None:
            self._held[run.id] = owner.id
        return created

    async def get_run(self, run_id: str) -> Run:
        async def body() -> Run:
            await self._flushed()
            return await self._read(lambda conn: self._fetch_run(conn, run_id))

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
        sets: list[str] = []
        params: list[Any] = []
        for column, value in (("status", status), ("source_hash", source_hash), ("source", source)):
            if value is not None:
                sets.append(f"{column} = %s")
                params.append(value)
        if error is not UNSET:
            sets.append("error = %s")
            params.append(error)
        if checkpoint is not UNSET:
            sets.append("checkpoint = %s")
            params.append(_json_or_null(checkpoint))
        if launch is not None:
            sets.append("launch = %s")
            params.append(encode_json(launch))

        async def body(conn: Conn) -> Run:
            now = await self._now(conn)
            cur = await conn.execute(
                f"UPDATE runs SET {', '.join(['updated_at = %s', *sets])} WHERE id = %s"
                f" RETURNING {RUN_COLUMNS}",
                [now, *params, run_id],
            )
            row = await cur.fetchone()
            if row is None:
                raise NotFoundError("run", run_id)
            return effective_status(run_from_row(row), now)

        return await self._call(lambda: self._transact(body, checkpoints=True))

    async def list_runs(self, *, status: RunStatus | None = None, limit: int = 100) -> list[Run]:
        # running and interrupted runs are both stored as 'running': filter after deriving
        stored = "running" if status == "interrupted" else status
        where = "WHERE status = %s" if stored else ""
        cap = "" if stored == "running" else " LIMIT %s"
        params: list[Any] = ([stored] if stored else []) + ([] if cap == "" else [limit])

        async def body(conn: Conn) -> list[Run]:
            cur = await conn.execute(
                f"SELECT {RUN_COLUMNS} FROM runs {where} ORDER BY created_at DESC, id DESC{cap}",
                params,
            )
            rows = await cur.fetchall()
            now = await self._now(conn)
            runs = [effective_status(run_from_row(r), now) for r in rows]
            if status is not None:
                runs = [r for r in runs if r.status == status]
            return runs[:limit]

        async def work() -> list[Run]:
            await self._flushed()
            return await self._read(body)

        return await self._call(work)

    async def save_checkpoint(
        self,
        run_id: str,
        checkpoint: dict[str, Any],
        *,
        owner: str | None = None,
        durable: bool = False,
    ) -> None:
        if self.closed:
            raise StoreError(f"the run store {self.display_url} is closed")
        await self._known(run_id)
        if not durable:
            if self._buffer.add_checkpoint(run_id, checkpoint, owner):
                self._nudge()
            return
        fence = "" if owner is None else " AND owner_id = %s"

        async def body(conn: Conn) -> bool:
            # events first (they led to this checkpoint); any older progress
            # checkpoint of the run was written by the flush and is superseded
            cur = await conn.execute(
                f"UPDATE runs SET checkpoint = %s WHERE id = %s{fence} RETURNING id",
                [encode_json(checkpoint), run_id, *([] if owner is None else [owner])],
            )
            return await cur.fetchone() is not None

        if not await self._call(lambda: self._transact(body, checkpoints=True)):
            raise LeaseLostError(run_id)

    # -- ownership -----------------------------------------------------------
    async def _owner_may_renew(
        self, conn: Conn, run: Run, owner: Claimant, take_from: str | None, now: datetime
    ) -> None:
        """Refuse to take over an executing run whose lease lapsed while the server was away.

        Every lease lapses in an outage longer than a lease, yet their owners
        may be alive, executing, and about to renew (writing the nodes that
        ended meanwhile): for :data:`TAKEOVER_GRACE` seconds after the server
        started serving again — a restart, or a crash recovery (a backend
        killed), see :data:`_SERVING_SINCE` — only they may. (A process cut off
        from a server that stayed up cannot be told from a dead one: its lease
        is the rule.)

        Raises:
            OwnerMayRenewError: The run is such a run: its lease lapsed before
                the server started, less than the grace ago.
        """
        held = run.lease
        if (
            self._clock is not None  # leases follow the injected clock alone
            or held is None or run.status != "running" or held.owner in (owner.id, take_from)
            or lease_alive(held, now) or not owner_may_live(held, now)
        ):  # fmt: skip
            return
        cur = await conn.execute(_SERVING_SINCE)
        row = await cur.fetchone()
        assert row is not None
        started, up = row[0], (row[1] - row[0]).total_seconds()
        # lapsed before the server was back: its owner could not renew it (once back, it could)
        if held.expires_at <= started and up < TAKEOVER_GRACE:
            raise OwnerMayRenewError(
                run.id, held.pid, held.host, held.since, wait=TAKEOVER_GRACE - up,
                queued=held.queued,
            )  # fmt: skip

    async def acquire_run(
        self,
        run_id: str,
        owner: Claimant,
        *,
        statuses: tuple[RunStatus, ...] = RESUMABLE,
        take_from: str | None = None,
    ) -> Run:
        async def body(conn: Conn) -> Run:
            run, now = await self._locked_run(conn, run_id)
            await self._owner_may_renew(conn, run, owner, take_from, now)
            since = check_acquire(effective_status(run, now), owner, statuses, take_from)
            lease = owner.lease(now, since)
            cur = await conn.execute(
                f"UPDATE runs SET status = 'running', error = NULL, cancel_requested = %s,"
                f" updated_at = %s, {_SET_LEASE} WHERE id = %s RETURNING {RUN_COLUMNS}",
                [keeps_cancel(run, take_from), now, *lease_params(lease), run_id],
            )
            row = await cur.fetchone()
            assert row is not None  # locked above
            return effective_status(run_from_row(row), now)

        async def handed_over(conn: Conn) -> Run | None:
            """A hand-over from a live ``take_from`` in one statement (a cluster task's start).

            It keeps a cancel request (asked while the run was queued). It does not
            ask whether the holder's process still runs (a same-host holder that
            exited): taken from such a holder, the run would be ``interrupted`` and
            taken all the same, so it is only used when ``statuses`` allow that.
            """
            cur = await conn.execute(
                "UPDATE runs SET status = 'running', error = NULL,"
                " updated_at = now(), owner_id = %s, owner_pid = %s, owner_host = %s,"
                " owner_since = now(), lease_expires_at = now() + %s * interval '1 second'"
                " WHERE id = %s AND owner_id = %s AND lease_expires_at > now()"
                f" AND status = ANY(%s) RETURNING {RUN_COLUMNS}, now()",
                [owner.id, owner.pid, owner.host, owner.ttl, run_id, take_from,
                 [*statuses, "running"]],
            )  # fmt: skip
            row = await cur.fetchone()
            if row is None:
                return None
            return effective_status(run_from_row(row[:-1]), row[-1].astimezone(UTC))

        async def handed_over_landed() -> Run | Any:
            """After a lost reply: the run, if the hand-over made ``owner`` its holder."""
            async with self._connection() as conn:
                stored = await self._run_if_any(conn, run_id)
                now = await self._now(conn)
            if stored is None or stored.lease is None or stored.lease.owner != owner.id:
                return NOT_LANDED
            return effective_status(stored, now) if stored.status == "running" else NOT_LANDED

        async def take() -> Run:
            if take_from is not None and self._clock is None and "interrupted" in statuses:
                await self._flushed(True)
                handed = await self._read(handed_over, writes=True, settle=handed_over_landed)
                if handed is not None:
                    return handed
            # anything else (a lapsed or dead holder, an owner re-taking its parked run,
            # a refusal to explain) is decided on the locked row
            return await self._transact(body, checkpoints=True)

        taken = await self._call(take)
        self._known_runs.add(run_id)
        self._held[run_id] = owner.id
        return taken

    async def renew_leases(self, owner: Claimant, run_ids: list[str]) -> LeaseReport:
        if not run_ids:
            return LeaseReport()

        async def body(conn: Conn) -> LeaseReport:
            now = await self._now(conn)
            # a lapsed lease is renewed only if nobody took the run meanwhile;
            # rows are locked in id order, as every batch does
            cur = await conn.execute(
                "UPDATE runs SET lease_expires_at = %s WHERE id IN (SELECT id FROM runs"
                " WHERE owner_id = %s AND id = ANY(%s) ORDER BY id FOR NO KEY UPDATE)"
                " RETURNING id, cancel_requested",
                [owner.lease(now).expires_at, owner.id, run_ids],
            )
            mine = {str(r[0]): bool(r[1]) for r in await cur.fetchall()}
            lost = tuple(i for i in run_ids if i not in mine)
            return LeaseReport(lost, tuple(i for i in run_ids if mine.get(i)))

        return await self._call(lambda: self._transact(body, flush=False))

    async def release_runs(self, owner: str, run_ids: list[str]) -> None:
        if not run_ids:
            return

        async def body(conn: Conn) -> None:
            await conn.execute(
                f"UPDATE runs SET {CLEAR_LEASE} WHERE id IN (SELECT id FROM runs"
                " WHERE owner_id = %s AND id = ANY(%s) ORDER BY id FOR NO KEY UPDATE)",
                [owner, run_ids],
            )

        await self._call(lambda: self._transact(body, flush=False))
        for run_id in run_ids:
            if self._held.get(run_id) == owner:
                del self._held[run_id]

    async def cancel_run(self, run_id: str) -> Run:
        async def body(conn: Conn) -> Run:
            stored, now = await self._locked_run(conn, run_id)
            run = effective_status(stored, now)
            if run.status == "running":  # its owner lives: ask it to stop
                await conn.execute(
                    "UPDATE runs SET cancel_requested = true WHERE id = %s", [run_id]
                )
            elif run.status in RESUMABLE and run.status != "cancelled":
                await conn.execute(
                    f"UPDATE runs SET status = 'cancelled', cancel_requested = false,"
                    f" updated_at = %s, {CLEAR_LEASE} WHERE id = %s",
                    [now, run_id],
                )
                await self._event_now(conn, run_id, "run_cancelled", {}, now)
            await self._notify(conn, run_id)
            return await self._fetch_run(conn, run_id, now)

        run = await self._call(lambda: self._transact(body, checkpoints=True))
        self.doorbell.ring(run_id)
        return run
