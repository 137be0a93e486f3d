# ruff: noqa: D102 - each Store method is documented once, on the Store protocol
"""How a question ends in the DuckDB store: expired, retracted, amended, or with its run.

Each change is one transaction on the worker thread, after which the
in-memory mirror is updated — so an answer, a retraction and an expiry of
one question are decided one at a time: exactly one of them wins. A run
that settles ``finished`` or ``failed`` withdraws its open questions in the
commit that records its end (``settle_run``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from iterion_nb.errors import LeaseLostError, NotFoundError
from iterion_nb.runtime import lifecycle
from iterion_nb.runtime.doorbell import node_key
from iterion_nb.runtime.ownership import CANCELLED_EVENT, cancel_wins, settled_already
from iterion_nb.runtime.records import (
    Interaction,
    Option,
    QueuedMessage,
    Run,
    RunStatus,
    encode_json,
)
from iterion_nb.store.duckdb_copy import RunCopies
from iterion_nb.store.duckdb_mirror import Mirror
from iterion_nb.store.duckdb_rows import INTERACTION_COLUMNS, interaction_from_row, to_db
from iterion_nb.store.duckdb_runs import CLEAR_LEASE


class Questions(RunCopies):
    """Expiry, retraction and amendment of questions; a run's end, with its questions."""

    mirror: Mirror

    def _insert_message(
        self, run_id: str, node_id: str, text: str, now: datetime
    ) -> QueuedMessage:  # pragma: no cover - defined by the store
        raise NotImplementedError

    def _fetch_interaction(self, interaction_id: str) -> Interaction:
        row = self._con.execute(
            f"SELECT {INTERACTION_COLUMNS} FROM interactions WHERE id = ?", [interaction_id]
        ).fetchone()
        if row is None:
            raise NotFoundError("interaction", interaction_id)
        return interaction_from_row(row)

    def _end(self, ended: Interaction) -> list[QueuedMessage]:
        """On the worker, in a transaction: record how a question ended unanswered."""
        assert ended.ended_at is not None
        self._con.execute(
            "UPDATE interactions SET ended = ?, ended_at = ?, end_reason = ? WHERE id = ?"
            " AND answered_at IS NULL AND ended IS NULL",
            [ended.ended, to_db(ended.ended_at), ended.end_reason, ended.id],
        )
        event, data = lifecycle.ended_event(ended)
        self._event_now(ended.run_id, event, data, ended.node_id, ended.branch_id)
        text = lifecycle.closing_message(ended)
        if text is None:
            return []
        return [self._insert_message(ended.run_id, ended.node_id, text, ended.ended_at)]

    def _settle_ended(self, ended: list[Interaction], messages: list[QueuedMessage]) -> None:
        """On the worker, after the commit: the mirror knows."""
        for question in ended:
            self.mirror.stored(question)
        for message in messages:
            self.mirror.queued(message)

    def _expire_now(self, current: Interaction) -> Interaction:
        """On the worker: expire one due question in its own transaction."""
        ended = lifecycle.expire(current)
        messages = self._transaction(lambda: self._end(ended))
        self._settle_ended([ended], messages)
        return ended

    async def expire_due(self, run_id: str | None = None) -> list[Interaction]:
        now = self._clock()
        if not [i for i in self.mirror.pending(run_id, None, None, now=None) if i.due(now)]:
            return []  # the common case: nothing to write

        def job() -> list[Interaction]:
            due = [i for i in self.mirror.pending(run_id, None, None, now=None) if i.due(now)]
            ended = [lifecycle.expire(i) for i in due]
            messages: list[QueuedMessage] = []

            def body() -> None:
                for question in ended:
                    messages.extend(self._end(question))

            self._transaction(body)
            self._settle_ended(ended, messages)
            return ended

        ended = await self._call(job)
        for question in ended:
            self.doorbell.ring(node_key(question.run_id, question.node_id))
        return ended

    async def retract(self, interaction_id: str, reason: str) -> Interaction:
        def job() -> Interaction:
            current = self.mirror.get(interaction_id) or self._fetch_interaction(interaction_id)
            now = self._clock()
            if current.due(now):
                current = self._expire_now(current)
            if not current.pending:
                return current  # answered (or expired) first: the caller says so
            ended = lifecycle.retract(current, reason, now)
            messages = self._transaction(lambda: self._end(ended))
            self._settle_ended([ended], messages)
            return ended

        question = await self._call(job)
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
        messages: list[QueuedMessage] = []

        def body() -> Run:
            stored = self._stored_run(run_id)
            if settled_already(stored, status, error, checkpoint):
                return self._fetch_run(run_id)  # a repeat whose first reply was lost
            held = stored.lease
            if held is None or held.owner != owner:
                raise LeaseLostError(run_id)
            cancel = cancel_wins(stored, status)
            lease = "" if keep_lease and not cancel else f", {CLEAR_LEASE}"
            self._con.execute(
                f"UPDATE runs SET status = ?, error = ?, checkpoint = ?, updated_at = ?,"
                f" cancel_requested = false{lease} WHERE id = ?",
                ["cancelled" if cancel else status, error, encode_json(checkpoint),
                 to_db(self._clock()), run_id],
            )  # fmt: skip
            open_ = self.mirror.pending(run_id, None, None, now=None)
            ended.extend(lifecycle.ended_with_run(open_, run_id, status, self._clock()))
            for question in ended:  # before the run's last event, which followers stop at
                messages.extend(self._end(question))
            said = CANCELLED_EVENT if cancel else event
            if said is not None:
                self._event_now(run_id, said[0], said[1])
            return self._fetch_run(run_id)

        def job() -> Run:
            settled = self._transaction(body, checkpoints=True)
            self._settle_ended(ended, messages)
            return settled

        settled = await self._call(job)
        for question in ended:
            self.doorbell.ring(node_key(question.run_id, question.node_id))
        return settled

    async def amend(
        self,
        interaction_id: str,
        *,
        questions: tuple[str, ...] | None = None,
        options: tuple[Option, ...] | None = None,
        allow_free_text: bool | None = None,
    ) -> Interaction:
        def job() -> Interaction:
            current = self.mirror.get(interaction_id) or self._fetch_interaction(interaction_id)
            if current.due(self._clock()):
                current = self._expire_now(current)
            if not current.pending:
                raise lifecycle.not_pending(current)
            amended = lifecycle.amend(current, questions, options, allow_free_text)

            def body() -> None:
                self._con.execute(
                    "UPDATE interactions SET questions = ?, options = ?, allow_free_text = ?,"
                    " revision = ? WHERE id = ?",
                    [encode_json(list(amended.questions)),
                     encode_json([{"id": o.id, "label": o.label} for o in amended.options]),
                     amended.allow_free_text, amended.revision, amended.id],
                )  # fmt: skip
                self._event_now(
                    amended.run_id, "interaction_amended", lifecycle.amended_event(amended),
                    amended.node_id, amended.branch_id,
                )  # fmt: skip

            self._transaction(body)
            self.mirror.stored(amended)
            return amended

        question = await self._call(job)
        self.doorbell.ring(node_key(question.run_id, question.node_id))
        return question
