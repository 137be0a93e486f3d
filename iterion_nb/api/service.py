"""What the REST API needs from the process that serves it, and how data looks on the wire.

The handlers talk to a :class:`RunService` (implemented by the session, the
composition root), so the same handlers serve the store holder's loopback
server and, later, the Jupyter server extension.
"""

from __future__ import annotations

import re
from dataclasses import asdict
from datetime import datetime
from typing import Any, Protocol

from iterion_nb.runtime.records import Event, Interaction, Run

#: Ids in URLs: what our ids look like, and nothing that could be a path trick.
ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\-]{0,199}\Z")


class RunService(Protocol):
    """The operations behind the REST routes."""

    async def list_runs(self, status: str | None, limit: int) -> list[Run]:
        """Runs, newest first."""
        ...

    async def get_run(self, run_id: str) -> Run:
        """One run (NotFoundError if none)."""
        ...

    async def events(self, run_id: str, after: int) -> list[Event]:
        """A run's events after ``after``."""
        ...

    async def pending(self, run_id: str) -> list[Interaction]:
        """A run's unanswered questions."""
        ...

    async def answer(
        self, run_id: str, interaction_id: str, answer: Any, answered_by: str
    ) -> dict[str, bool]:
        """Answer one question: ``{"queued", "resumed"}``."""
        ...

    async def answer_human(
        self, run_id: str, answers: dict[str, Any], answered_by: str
    ) -> dict[str, bool]:
        """Answer what a paused run waits on and resume it."""
        ...

    async def cancel(self, run_id: str) -> str:
        """Cancel a run; returns its status."""
        ...


def _time(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def run_json(run: Run, *, full: bool = False) -> dict[str, Any]:
    """A run on the wire (``full`` adds vars, outputs and the error details)."""
    data: dict[str, Any] = {
        "id": run.id,
        "workflow": run.workflow,
        "status": run.status,
        "created_at": _time(run.created_at),
        "updated_at": _time(run.updated_at),
        "error": run.error,
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
    }
