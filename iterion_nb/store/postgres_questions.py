# ruff: noqa: D102 - each Store method is documented once, on the Store protocol
"""How a question ends in the PostgreSQL store: expired, retracted, amended, or with its run.

Each change locks the question's row (``FOR UPDATE``) in one transaction,
so of an answer, a retraction and an expiry of one question, from any number
of processes, exactly one wins. A run that settles ``finished`` or ``failed``
withdraws its open questions in the commit that records its end
(``settle_run``); one another transaction holds locked right then is
skipped (an answer committing wins), and withdrawn right after that commit
if it is still open (an amendment let it go).
"""

from __future__ import annotations

import contextlib
from datetime import datetime
from typing import Any, cast

from iterion_nb.errors import LeaseLostError, NotFoundError, StoreError
from iterion_nb.runtime import lifecycle
from iterion_nb.runtime.doorbell import node_key
from iterion_nb.runtime.ownership import (
    CANCELLED_EVENT,
    cancel_wins,
    effective_status,
    settled_already,
)
from iterion_nb.runtime.ports import Store
from iterion_nb.runtime.records import (
    Interaction,
    Option,
    QueuedMessage,
    Run,
    RunStatus,
    encode_json,
)
from iterion_nb.store.duckdb_rows import (
    INTERACTION_COLUMNS,
    RUN_COLUMNS,
    interaction_from_row,
    run_from_row,
)
from iterion_nb.store.postgres_base import Conn
from iterion_nb.store.postgres_copy import PgCopies
from iterion_nb.store.postgres_runs import CLEAR_LEASE


class PgQuestions(PgCopies):
    """Expiry, retraction and amendment of questions; a run's end, with its questions."""

    async def _insert_message(
        self, conn: Conn, run_id: str, node_id: str, text: str, now: datetime
    ) -> QueuedMessage:  # pragma: no cover - defined by the store
        raise NotImplementedError

    async def _locked_question(self, conn: Conn, interaction_id: str) -> Interaction:
        cur = await conn.execute(
            f"SELECT {INTERACTION_COLUMNS} FROM interactions WHERE id = %s FOR UPDATE",
            [interaction_id],
        )
        row = await cur.fetchone()
        if row is None:
            raise NotFoundError("interaction", interaction_id)
        return interaction_from_row(row)

    async def _end(self, conn: Conn, ended: Interaction) -> None:
        """In a transaction: record how a question ended unanswered (event, asker's message)."""
        assert ended.ended_at is not None
        await conn.execute(
            "UPDATE interactions SET ended = %s, ended_at = %s, end_reason = %s WHERE id = %s",
            [ended.ended, ended.ended_at, ended.end_reason, ended.id],
        )
        event, data = lifecycle.ended_event(ended)
        await self._event_now(
            conn, ended.run_id, event, data, ended.ended_at, ended.node_id, ended.branch_id
        )
        text = lifecycle.closing_message(ended)
        if text is not None:
            await self._insert_message(conn, ended.run_id, ended.node_id, text, ended.ended_at)
        await self._notify(conn, node_key(ended.run_id, ended.node_id))

    async def expire_due(self, run_id: str | None = None) -> list[Interaction]:
        async def body(conn: Conn) -> list[Interaction]:
            now = await self._now(conn)
            where = "answered_at IS NULL AND ended IS NULL AND expires_at <= %s"
            params: list[object] = [now]
            if run_id is not None:
                where += " AND run_id = %s"
                params.append(run_id)
            cur = await conn.execute(
                f"SELECT {INTERACTION_COLUMNS} FROM interactions WHERE {where}"
                " ORDER BY requested_at, n FOR UPDATE SKIP LOCKED",
                params,
            )
            ended = [lifecycle.expire(interaction_from_row(r)) for r in await cur.fetchall()]
            for question in ended:
                await self._end(conn, question)
            return ended

        ended = await self._call(lambda: self._transact(body))
        for question in ended:
            self.doorbell.ring(node_key(question.run_id, question.node_id))
        return ended

    async def retract(self, interaction_id: str, reason: str) -> Interaction:
        async def body(conn: Conn) -> Interaction:
            current = await self._locked_question(conn, interaction_id)
            now = await self._now(conn)
            if current.due(now):
                current = lifecycle.expire(current)
                await self._end(conn, current)
            if not current.pending:
                return current  # answered (or expired) first: the caller says so
            ended = lifecycle.retract(current, reason, now)
            await self._end(conn, ended)
            return ended

        question = await self._call(lambda: self._transact(body))
        self.doorbell.ring(node_key(question.run_id, question.node_id))
        return question

    async def settle_run(
        self,
        run_id: str,
        owner: str,
        *,
        status: RunStatus,
        error: str | None,
        checkpoint: dict[str, Any],
        event: tuple[str, dict[str, Any]] | None,
        keep_lease: bool = False,
    ) -> Run:
        ended: list[Interaction] = []
        busy: list[bool] = [False]

        async def body(conn: Conn) -> Run:
            ended.clear()  # a retry after a deadlock starts over
            stored, now = await self._locked_run(conn, run_id)
            if settled_already(stored, status, error, checkpoint):
                return effective_status(stored, now)  # a repeat: its reply was lost
            held = stored.lease
            if held is None or held.owner != owner:
                raise LeaseLostError(run_id)
            cancel = cancel_wins(stored, status)
            lease = "" if keep_lease and not cancel else f", {CLEAR_LEASE}"
            cur = await conn.execute(
                f"UPDATE runs SET status = %s, error = %s, checkpoint = %s, updated_at = %s,"
                f" cancel_requested = false{lease} WHERE id = %s RETURNING {RUN_COLUMNS}",
                ["cancelled" if cancel else status, error, encode_json(checkpoint), now, run_id],
            )
            row = await cur.fetchone()
            assert row is not None  # locked above
            if status in lifecycle.OVER:
                open_, busy[0] = await self._open_questions(conn, run_id)
                ended.extend(lifecycle.ended_with_run(open_, run_id, status, now))
            for question in ended:  # before the run's last event, which followers stop at
                await self._end(conn, question)
            said = CANCELLED_EVENT if cancel else event
            if said is not None:
                await self._event_now(conn, run_id, said[0], said[1], now)
            return effective_status(run_from_row(row), now)

        settled = await self._call(lambda: self._transact(body, checkpoints=True))
        if not keep_lease or settled.status == "cancelled":
            self._held.pop(run_id, None)
        for question in ended:
            self.doorbell.ring(node_key(question.run_id, question.node_id))
        if busy[0]:  # one was held by another transaction: withdrawn once it is let go
            with contextlib.suppress(StoreError):
                await lifecycle.retire_questions(cast("Store", self), run_id, status)
        return settled

    async def _open_questions(self, conn: Conn, run_id: str) -> tuple[list[Interaction], bool]:
        """In a transaction: the run's pending questions, locked; and whether any was busy.

        One another transaction holds locked is left out (waiting for it could
        deadlock: an answer locks its question, then the run's row): an answer
        that commits ends it; an amendment does not, so the caller withdraws
        what is still open once this commit is done.
        """
        cur = await conn.execute(
            f"SELECT {INTERACTION_COLUMNS} FROM interactions WHERE run_id = %s"
            " AND answered_at IS NULL AND ended IS NULL ORDER BY id FOR UPDATE SKIP LOCKED",
            [run_id],
        )
        found = [interaction_from_row(r) for r in await cur.fetchall()]
        cur = await conn.execute(
            "SELECT count(*) FROM interactions WHERE run_id = %s AND answered_at IS NULL"
            " AND ended IS NULL",
            [run_id],
        )
        row = await cur.fetchone()
        return found, row is not None and row[0] > len(found)

    async def amend(
        self,
        interaction_id: str,
        *,
        questions: tuple[str, ...] | None = None,
        options: tuple[Option, ...] | None = None,
        allow_free_text: bool | None = None,
    ) -> Interaction:
        async def body(conn: Conn) -> Interaction:
            current = await self._locked_question(conn, interaction_id)
            now = await self._now(conn)
            if current.due(now):
                current = lifecycle.expire(current)
                await self._end(conn, current)
                return current  # committed, then refused below
            if not current.pending:
                return current
            amended = lifecycle.amend(current, questions, options, allow_free_text)
            await conn.execute(
                "UPDATE interactions SET questions = %s, options = %s, allow_free_text = %s,"
                " revision = %s WHERE id = %s",
                [encode_json(list(amended.questions)),
                 encode_json([{"id": o.id, "label": o.label} for o in amended.options]),
                 amended.allow_free_text, amended.revision, amended.id],
            )  # fmt: skip
            await self._event_now(
                conn, amended.run_id, "interaction_amended", lifecycle.amended_event(amended),
                now, amended.node_id, amended.branch_id,
            )  # fmt: skip
            await self._notify(conn, node_key(amended.run_id, amended.node_id))
            return amended

        question = await self._call(lambda: self._transact(body))
        self.doorbell.ring(node_key(question.run_id, question.node_id))
        if not question.pending:
            raise lifecycle.not_pending(question)
        return question
