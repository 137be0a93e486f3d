"""Records as JSON: the shapes the REST API, the CLI's ``--json`` and the widgets share."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict
from datetime import datetime
from typing import Any

from iterion_nb.runtime.records import Event, Interaction, Run


def _time(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def run_json(run: Run, *, full: bool = False) -> dict[str, Any]:
    """A run on the wire (``full`` adds vars, outputs and the error details).

    ``owner`` names the process that executes the run, or keeps it parked
    (paused) to resume it when answered — or, ``queued``, the one that sent it
    to a cluster's queue, where it waits for a worker; None when no live process
    does.
    """
    lease = run.lease
    owner = None
    if lease is not None:
        owner = {"pid": lease.pid, "host": lease.host, "since": _time(lease.since),
                 "expires_at": _time(lease.expires_at),
                 "queued": lease.queued}  # fmt: skip
    data: dict[str, Any] = {
        "id": run.id,
        "workflow": run.workflow,
        "status": run.status,
        "created_at": _time(run.created_at),
        "updated_at": _time(run.updated_at),
        "error": run.error,
        "owner": owner,
    }
    if full:
        checkpoint = run.checkpoint or {}
        data |= {
            "source_hash": run.source_hash,
            "vars": run.vars,
            "outputs": checkpoint.get("outputs", {}),
            "waiting_on": checkpoint.get("waiting_on", []),
        }
    return data


def event_json(event: Event) -> dict[str, Any]:
    """An event on the wire."""
    return {
        "seq": event.seq,
        "type": event.type,
        "at": _time(event.at),
        "node_id": event.node_id,
        "branch_id": event.branch_id,
        "data": event.data,
    }


def waited_on(interactions: Iterable[Interaction]) -> set[str]:
    """The questions a run paused at a sync point waits on: its pending ``await`` records'.

    An answer to one of them is what the run waits for, async or not.
    """
    return {ident for q in interactions if q.kind == "await" and q.pending for ident in q.waits_on}


def interaction_json(item: Interaction) -> dict[str, Any]:
    """A question on the wire."""
    return {
        "id": item.id,
        "run_id": item.run_id,
        "node_id": item.node_id,
        "branch_id": item.branch_id,
        "kind": item.kind,
        "question": item.question,
        "questions": list(item.questions),
        "options": [asdict(o) for o in item.options],
        "allow_free_text": item.allow_free_text,
        "waits_on": list(item.waits_on),
        "requested_at": _time(item.requested_at),
        "answered_at": _time(item.answered_at),
        "answers": item.answers,
        "answered_by": item.answered_by,
        "expires_at": _time(item.expires_at),
        "ended": item.ended,
        "ended_at": _time(item.ended_at),
        "end_reason": item.end_reason,
        "revision": item.revision,
        "accepts": item.accepts,
    }
