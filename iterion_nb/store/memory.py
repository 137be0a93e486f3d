"""The in-memory Store: the reference implementation, for tests and throwaway runs.

Everything lives in dicts behind one lock, so it is safe from any thread and
any event loop; nothing survives the process.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from iterion_nb.errors import (
    ConflictError,
    LeaseLostError,
    NotFoundError,
    StoreError,
)
from iterion_nb.runtime import lifecycle
from iterion_nb.runtime.doorbell import Doorbell, node_key
from iterion_nb.runtime.lineage import import_outcome
from iterion_nb.runtime.ownership import (
    CANCELLED_EVENT,
    Claimant,
    cancel_wins,
    check_acquire,
    check_import,
    effective_status,
    keeps_cancel,
    settled_already,
)
from iterion_nb.runtime.ports import UNSET
from iterion_nb.runtime.records import (
    RESUMABLE,
    AnswerResult,
    Artifact,
    Event,
    Interaction,
    InteractionKind,
    LeaseReport,
    Option,
    QueuedMessage,
    Run,
    RunBundle,
    RunStatus,
    answer_message,
    answered_event,
    check_answer,
    encode_json,
    utcnow,
)


def _copy_json(value: Any) -> Any:
    """A deep copy of JSON data, so callers cannot mutate what is stored."""
    import json

    return json.loads(encode_json(value))


class MemoryStore:
    """A Store kept in memory."""

    def __init__(
        self,
        *,
        doorbell: Doorbell | None = None,
        clock: Callable[[], datetime] = utcnow,
        new_id: Callable[[], str] = lambda: uuid.uuid4().hex,
    ) -> None:
        self.doorbell = doorbell or Doorbell()
        self._clock = clock
        self._new_id = new_id
        self._lock = threading.Lock()
        self._runs: dict[str, Run] = {}
        self._events: dict[str, list[Event]] = {}
        self._artifacts: dict[str, list[Artifact]] = {}
        self._interactions: dict[str, Interaction] = {}
        self._messages: list[QueuedMessage] = []
        self._drains: dict[str, list[QueuedMessage]] = {}  # by drain token

    # -- runs ------------------------------------------------------------
    async def create_run(self, run: Run, *, owner: Claimant | None = None) -> Run:
        with self._lock:
            if run.id in self._runs:
                raise ConflictError(f"run '{run.id}' already exists")
            stored = replace(
                run, vars=_copy_json(run.vars), checkpoint=_copy_json(run.checkpoint),
                launch=_copy_json(run.launch),
                lease=owner.lease(self._clock()) if owner is not None else run.lease,
            )  # fmt: skip
            self._runs[run.id] = stored
            self._events[run.id] = []
            return self._seen(stored)

    def _seen(self, run: Run) -> Run:
        return effective_status(run, self._clock())

    def _run(self, run_id: str) -> Run:
        run = self._runs.get(run_id)
        if run is None:
            raise NotFoundError("run", run_id)
        return run

    async def get_run(self, run_id: str) -> Run:
        with self._lock:
            return self._seen(self._run(run_id))

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
        with self._lock:
            run = self._run(run_id)
            changes: dict[str, Any] = {"updated_at": self._clock()}
            if status is not None:
                changes["status"] = status
            if error is not UNSET:
                changes["error"] = error
            if checkpoint is not UNSET:
                changes["checkpoint"] = _copy_json(checkpoint)
            if source_hash is not None:
                changes["source_hash"] = source_hash
            if source is not None:
                changes["source"] = source
            if launch is not None:
                changes["launch"] = _copy_json(launch)
            run = replace(run, **changes)
            self._runs[run_id] = run
            return self._seen(run)

    async def list_runs(self, *, status: RunStatus | None = None, limit: int = 100) -> list[Run]:
        with self._lock:
            runs = [self._seen(r) for r in self._runs.values()]
        runs = [r for r in runs if status is None or r.status == status]
        runs.sort(key=lambda r: (r.created_at, r.id), reverse=True)
        return runs[:limit]

    async def save_checkpoint(
        self,
        run_id: str,
        checkpoint: dict[str, Any],
        *,
        owner: str | None = None,
        durable: bool = False,
    ) -> None:
        with self._lock:
            run = self._run(run_id)
            if owner is not None and (run.lease is None or run.lease.owner != owner):
                if durable:
                    raise LeaseLostError(run_id)
                return
            self._runs[run_id] = replace(run, checkpoint=_copy_json(checkpoint))

    # -- ownership ---------------------------------------------------------
    async def acquire_run(
        self,
        run_id: str,
        owner: Claimant,
        *,
        statuses: tuple[RunStatus, ...] = RESUMABLE,
        take_from: str | None = None,
    ) -> Run:
        with self._lock:
            now = self._clock()
            stored = self._run(run_id)
            since = check_acquire(effective_status(stored, now), owner, statuses, take_from)
            lease = owner.lease(now, since)
            taken = replace(
                self._runs[run_id], status="running", error=None, updated_at=now, lease=lease,
                cancel_requested=keeps_cancel(stored, take_from),
            )  # fmt: skip
            self._runs[run_id] = taken
            return self._seen(taken)

    async def renew_leases(self, owner: Claimant, run_ids: list[str]) -> LeaseReport:
        lost, cancel = [], []
        with self._lock:
            now = self._clock()
            for run_id in run_ids:
                run = self._runs.get(run_id)
                if run is None or run.lease is None or run.lease.owner != owner.id:
                    lost.append(run_id)
                    continue
                self._runs[run_id] = replace(run, lease=owner.lease(now, run.lease.since))
                if run.cancel_requested:
                    cancel.append(run_id)
        return LeaseReport(tuple(lost), tuple(cancel))

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
        with self._lock:
            run = self._run(run_id)
            if settled_already(run, status, error, checkpoint):
                return self._seen(run)  # a repeat whose first reply was lost
            if run.lease is None or run.lease.owner != owner:
                raise LeaseLostError(run_id)
            cancel = cancel_wins(run, status)
            settled = replace(
                run, status="cancelled" if cancel else status, error=error,
                checkpoint=_copy_json(checkpoint), updated_at=self._clock(),
                cancel_requested=False, lease=run.lease if keep_lease and not cancel else None,
            )  # fmt: skip
            self._runs[run_id] = settled
            open_ = [i for i in self._interactions.values() if i.run_id == run_id and i.pending]
            open_.sort(key=lambda i: i.requested_at)
            ended = lifecycle.ended_with_run(open_, run_id, status, self._clock())
            for question in ended:  # before the run's last event, which followers stop at
                self._end(question)
            said = CANCELLED_EVENT if cancel else event
            if said is not None:
                self._append(run_id, said[0], said[1], None, None)
            settled = self._seen(settled)
        for question in ended:
            self.doorbell.ring(node_key(question.run_id, question.node_id))
        return settled

    async def release_runs(self, owner: str, run_ids: list[str]) -> None:
        with self._lock:
            for run_id in run_ids:
                run = self._runs.get(run_id)
                if run is not None and run.lease is not None and run.lease.owner == owner:
                    self._runs[run_id] = replace(run, lease=None)

    async def cancel_run(self, run_id: str) -> Run:
        with self._lock:
            run = self._seen(self._run(run_id))
            stored = self._runs[run_id]
            if run.status == "running":
                stored = replace(stored, cancel_requested=True)
            elif run.status in RESUMABLE and run.status != "cancelled":
                stored = replace(
                    stored, status="cancelled", cancel_requested=False, lease=None,
                    updated_at=self._clock(),
                )  # fmt: skip
                self._append(run_id, "run_cancelled", {}, None, None)
            self._runs[run_id] = stored
            result = self._seen(stored)
        self.doorbell.ring(run_id)
        return result

    # -- events ----------------------------------------------------------
    def _append(
        self, run_id: str, event_type: str, data: dict[str, Any] | None,
        node_id: str | None, branch_id: str | None,
    ) -> None:  # fmt: skip
        """Under the lock: append one event."""
        log = self._events[run_id]
        log.append(Event(
            run_id, len(log) + 1, event_type, self._clock(), _copy_json(data or {}),
            node_id, branch_id,
        ))  # fmt: skip

    async def append_event(
        self,
        run_id: str,
        event_type: str,
        data: dict[str, Any] | None = None,
        *,
        node_id: str | None = None,
        branch_id: str | None = None,
    ) -> None:
        with self._lock:
            self._run(run_id)
            self._append(run_id, event_type, data, node_id, branch_id)

    async def events(self, run_id: str, *, after: int = 0, limit: int | None = None) -> list[Event]:
        with self._lock:
            self._run(run_id)
            selected = self._events[run_id][after:]
        return selected if limit is None else selected[:limit]

    # -- artifacts -------------------------------------------------------
    async def put_artifact(self, run_id: str, node_id: str, name: str, value: Any) -> Artifact:
        with self._lock:
            self._run(run_id)
            versions = [a for a in self._artifacts.get(run_id, []) if a.name == name]
            artifact = Artifact(
                run_id, name, len(versions) + 1, node_id, _copy_json(value), self._clock()
            )
            self._artifacts.setdefault(run_id, []).append(artifact)
            return artifact

    async def get_artifact(self, run_id: str, name: str, version: int | None = None) -> Artifact:
        with self._lock:
            self._run(run_id)
            versions = [a for a in self._artifacts.get(run_id, []) if a.name == name]
        for artifact in reversed(versions):
            if version is None or artifact.version == version:
                return artifact
        label = name if version is None else f"{name} v{version}"
        raise NotFoundError("artifact", label)

    async def list_artifacts(self, run_id: str) -> list[Artifact]:
        with self._lock:
            self._run(run_id)
            found = list(self._artifacts.get(run_id, []))
        return sorted(found, key=lambda a: (a.name, a.version))

    # -- interactions ----------------------------------------------------
    async def add_interaction(
        self, interaction: Interaction, *, owner: str | None = None
    ) -> Interaction:
        with self._lock:
            run = self._run(interaction.run_id)
            if owner is not None and (run.lease is None or run.lease.owner != owner):
                raise LeaseLostError(interaction.run_id)
            if interaction.id in self._interactions:
                raise ConflictError(f"interaction '{interaction.id}' already exists")
            self._interactions[interaction.id] = interaction
        self.doorbell.ring(node_key(interaction.run_id, interaction.node_id))
        return interaction

    async def get_interaction(self, interaction_id: str) -> Interaction:
        with self._lock:
            found = self._interactions.get(interaction_id)
        if found is None:
            raise NotFoundError("interaction", interaction_id)
        return found

    async def pending_interactions(
        self,
        run_id: str | None = None,
        *,
        node_id: str | None = None,
        kind: InteractionKind | None = None,
    ) -> list[Interaction]:
        with self._lock:
            now = self._clock()
            found = [
                i
                for i in self._interactions.values()
                if i.pending
                and not i.due(now)
                and (run_id is None or i.run_id == run_id)
                and (node_id is None or i.node_id == node_id)
                and (kind is None or i.kind == kind)
            ]
        return sorted(found, key=lambda i: i.requested_at)

    async def interactions(self, run_id: str) -> list[Interaction]:
        with self._lock:
            self._run(run_id)
            found = [i for i in self._interactions.values() if i.run_id == run_id]
        return sorted(found, key=lambda i: i.requested_at)

    async def answer(
        self, interaction_id: str, answer: Any, *, answered_by: str = "unknown"
    ) -> AnswerResult:
        check_answer(answer)
        with self._lock:
            current = self._interactions.get(interaction_id)
            if current is None:
                raise NotFoundError("interaction", interaction_id)
            now = self._clock()
            if current.due(now):  # an answer at (or after) the expiry instant: too late
                current = self._end(lifecycle.expire(current))
            if not current.pending:
                raise lifecycle.not_pending(current)
            answered = replace(
                current, answered_at=now, answers=_copy_json(answer), answered_by=answered_by
            )
            self._interactions[interaction_id] = answered
            message = None
            if answered.kind == "async":
                message = QueuedMessage(
                    self._new_id(), answered.run_id, answered.node_id,
                    answer_message(answered, answer), now,
                )  # fmt: skip
                self._messages.append(message)
            self._append(
                answered.run_id, "interaction_answered", answered_event(answered),
                answered.node_id, answered.branch_id,
            )  # fmt: skip
        self.doorbell.ring(node_key(answered.run_id, answered.node_id))
        return AnswerResult(answered, message)

    def _end(self, ended: Interaction) -> Interaction:
        """Under the lock: record how a question ended unanswered (event, asker's message)."""
        self._interactions[ended.id] = ended
        event, data = lifecycle.ended_event(ended)
        self._append(ended.run_id, event, data, ended.node_id, ended.branch_id)
        text = lifecycle.closing_message(ended)
        if text is not None:
            assert ended.ended_at is not None
            self._messages.append(
                QueuedMessage(self._new_id(), ended.run_id, ended.node_id, text, ended.ended_at)
            )
        return ended

    async def expire_due(self, run_id: str | None = None) -> list[Interaction]:
        with self._lock:
            now = self._clock()
            due = [
                i for i in self._interactions.values()
                if i.due(now) and (run_id is None or i.run_id == run_id)
            ]  # fmt: skip
            ended = [self._end(lifecycle.expire(i)) for i in due]
        for question in ended:
            self.doorbell.ring(node_key(question.run_id, question.node_id))
        return ended

    async def retract(self, interaction_id: str, reason: str) -> Interaction:
        with self._lock:
            current = self._interactions.get(interaction_id)
            if current is None:
                raise NotFoundError("interaction", interaction_id)
            now = self._clock()
            if current.due(now):
                current = self._end(lifecycle.expire(current))
            if not current.pending:
                return current
            ended = self._end(lifecycle.retract(current, reason, now))
        self.doorbell.ring(node_key(ended.run_id, ended.node_id))
        return ended

    async def amend(
        self,
        interaction_id: str,
        *,
        questions: tuple[str, ...] | None = None,
        options: tuple[Option, ...] | None = None,
        allow_free_text: bool | None = None,
    ) -> Interaction:
        with self._lock:
            current = self._interactions.get(interaction_id)
            if current is None:
                raise NotFoundError("interaction", interaction_id)
            if current.due(self._clock()):
                current = self._end(lifecycle.expire(current))
            if not current.pending:
                raise lifecycle.not_pending(current)
            amended = lifecycle.amend(current, questions, options, allow_free_text)
            self._interactions[interaction_id] = amended
            self._append(
                amended.run_id, "interaction_amended", lifecycle.amended_event(amended),
                amended.node_id, amended.branch_id,
            )  # fmt: skip
        self.doorbell.ring(node_key(amended.run_id, amended.node_id))
        return amended

    # -- messages --------------------------------------------------------
    async def queue_message(self, run_id: str, node_id: str, text: str) -> QueuedMessage:
        with self._lock:
            self._run(run_id)
            message = QueuedMessage(self._new_id(), run_id, node_id, text, self._clock())
            self._messages.append(message)
        self.doorbell.ring(node_key(run_id, node_id))
        return message

    async def drain_messages(
        self, run_id: str, node_id: str, *, token: str | None = None, repeated: bool = False
    ) -> list[QueuedMessage]:
        with self._lock:
            if repeated and token and self._drains.get(token):
                return list(self._drains[token])
            now = self._clock()
            taken: list[QueuedMessage] = []
            for index, message in enumerate(self._messages):
                if (
                    message.delivered_at is None
                    and message.run_id == run_id
                    and message.node_id == node_id
                ):
                    delivered = replace(message, delivered_at=now)
                    self._messages[index] = delivered
                    taken.append(delivered)
            if token and taken:
                self._drains[token] = taken
        return taken

    async def export_run(self, run_id: str) -> RunBundle:
        with self._lock:
            run = self._run(run_id)
            return RunBundle(
                run,
                tuple(self._events[run_id]),
                tuple(a for a in self._artifacts.get(run_id, [])),
                tuple(sorted((i for i in self._interactions.values() if i.run_id == run_id),
                             key=lambda i: i.requested_at)),
                tuple(m for m in self._messages if m.run_id == run_id),
            )  # fmt: skip

    async def import_run(self, bundle: RunBundle, *, force: bool = False) -> str:
        run_id = bundle.run.id
        with self._lock:
            current = self._runs.get(run_id)
            check_import(current, self._clock())
            here = None if current is None else RunBundle(
                current, tuple(self._events[run_id]),
                tuple(self._artifacts.get(run_id, [])),
                tuple(sorted((i for i in self._interactions.values() if i.run_id == run_id),
                             key=lambda i: i.requested_at)),
                tuple(m for m in self._messages if m.run_id == run_id),
            )  # fmt: skip
            outcome = import_outcome(here, bundle, force=force)
            if outcome not in ("created", "updated"):
                return outcome
            self._runs[run_id] = bundle.run
            self._events[run_id] = list(bundle.events)
            self._artifacts[run_id] = list(bundle.artifacts)
            for iid in [i for i, q in self._interactions.items() if q.run_id == run_id]:
                del self._interactions[iid]
            self._interactions.update({i.id: i for i in bundle.interactions})
            self._messages = [m for m in self._messages if m.run_id != run_id]
            self._messages.extend(bundle.messages)
        self.doorbell.ring(run_id)
        return outcome

    async def flush(self) -> None:
        return None

    async def close(self) -> None:
        return None
