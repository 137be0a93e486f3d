"""What the widgets share: JSON shapes of records and the ES modules they load."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from iterion_nb.runtime.records import Interaction

STATIC = Path(__file__).resolve().parent.parent / "static"


def when(moment: datetime | None) -> str | None:
    """A time as ISO text (what the front-end shows)."""
    return None if moment is None else moment.isoformat(timespec="seconds")


def question_json(q: Interaction) -> dict[str, Any]:
    """One interaction as the widgets show it (all text shown as text, never as HTML)."""
    return {
        "id": q.id,
        "run_id": q.run_id,
        "node_id": q.node_id,
        "kind": q.kind,
        "questions": list(q.questions),
        "options": [{"id": o.id, "label": o.label} for o in q.options],
        "allow_free_text": q.allow_free_text,
        "waits_on": list(q.waits_on),
        "requested_at": when(q.requested_at),
        "answered_at": when(q.answered_at),
        "answer": q.answers,
        "answered_by": q.answered_by,
    }
