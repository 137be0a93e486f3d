"""How records map to DuckDB rows and back (shared by the DuckDB store's modules)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from iterion_nb.runtime.records import (
    Interaction,
    Lease,
    Option,
    QueuedMessage,
    Run,
    encode_json,
)

RUN_COLUMNS = (
    "id, workflow, source_hash, status, created_at, updated_at, source, vars, error, checkpoint,"
    " owner_id, owner_pid, owner_host, owner_since, lease_expires_at, launch, cancel_requested"
)
INTERACTION_COLUMNS = (
    "id, run_id, node_id, branch_id, kind, questions, options, allow_free_text, waits_on,"
    " requested_at, answered_at, answers, answered_by, expires_at, ended, ended_at,"
    " end_reason, revision, accepts"
)
#: Placeholders for one row of ``INTERACTION_COLUMNS``.
INTERACTION_VALUES = ", ".join("?" for _ in INTERACTION_COLUMNS.split(","))
MESSAGE_COLUMNS = "id, run_id, node_id, text, created_at, delivered_at"


def to_db(moment: datetime) -> datetime:
    """A UTC datetime as DuckDB's naive TIMESTAMP."""
    if moment.tzinfo is not UTC:
        moment = moment.astimezone(UTC)
    return moment.replace(tzinfo=None)


def from_db(moment: datetime | None) -> datetime | None:
    """A TIMESTAMP back as an aware UTC datetime."""
    return moment.replace(tzinfo=UTC) if moment is not None else None


def json_or_none(text: str | None) -> Any:
    """JSON text, or None for SQL NULL."""
    return json.loads(text) if text is not None else None


def lease_params(lease: Lease | None) -> list[Any]:
    """The five lease columns (owner id, pid, host, since, expiry)."""
    if lease is None:
        return [None, None, None, None, None]
    return [lease.owner, lease.pid, lease.host, to_db(lease.since), to_db(lease.expires_at)]


def run_from_row(row: tuple[Any, ...]) -> Run:
    """A ``runs`` row (``RUN_COLUMNS``) as a Run, as stored (not yet effective)."""
    lease = None
    if row[10] is not None and row[14] is not None:
        lease = Lease(row[10], int(row[11]), row[12], row[13].replace(tzinfo=UTC),
                      row[14].replace(tzinfo=UTC))  # fmt: skip
    return Run(
        id=row[0], workflow=row[1], source_hash=row[2], status=row[3],
        created_at=row[4].replace(tzinfo=UTC), updated_at=row[5].replace(tzinfo=UTC),
        source=row[6], vars=json.loads(row[7]), error=row[8], checkpoint=json_or_none(row[9]),
        lease=lease, launch=json_or_none(row[15]) or {}, cancel_requested=bool(row[16]),
    )  # fmt: skip


def interaction_from_row(row: tuple[Any, ...]) -> Interaction:
    """An ``interactions`` row (``INTERACTION_COLUMNS``) as an Interaction."""
    return Interaction(
        id=row[0], run_id=row[1], node_id=row[2], branch_id=row[3], kind=row[4],
        questions=tuple(json.loads(row[5])),
        options=tuple(Option(o["id"], o["label"]) for o in json.loads(row[6])),
        allow_free_text=row[7], waits_on=tuple(json.loads(row[8])),
        requested_at=row[9].replace(tzinfo=UTC), answered_at=from_db(row[10]),
        answers=json_or_none(row[11]), answered_by=row[12], expires_at=from_db(row[13]),
        ended=row[14], ended_at=from_db(row[15]), end_reason=row[16], revision=int(row[17] or 0),
        accepts=json_or_none(row[18]),
    )  # fmt: skip


def interaction_params(i: Interaction) -> list[Any]:
    """One question as a row of ``INTERACTION_COLUMNS``."""
    return [
        i.id, i.run_id, i.node_id, i.branch_id, i.kind, encode_json(list(i.questions)),
        encode_json([{"id": o.id, "label": o.label} for o in i.options]),
        i.allow_free_text, encode_json(list(i.waits_on)), to_db(i.requested_at),
        None if i.answered_at is None else to_db(i.answered_at),
        None if i.answered_at is None else encode_json(i.answers), i.answered_by,
        None if i.expires_at is None else to_db(i.expires_at), i.ended,
        None if i.ended_at is None else to_db(i.ended_at), i.end_reason, i.revision,
        None if i.accepts is None else encode_json(i.accepts),
    ]  # fmt: skip


def message_from_row(row: tuple[Any, ...]) -> QueuedMessage:
    """A ``messages`` row (``MESSAGE_COLUMNS``) as a QueuedMessage."""
    created = row[4].replace(tzinfo=UTC)
    return QueuedMessage(row[0], row[1], row[2], row[3], created, from_db(row[5]))
