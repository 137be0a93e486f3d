"""How a question lives and ends: answered, expired, retracted, amended.

Pure helpers every store uses, so the rules are one: a question is pending
until it is answered, it expires (at ``expires_at``, if nobody answered
first), or its asker retracts it; while pending its asker may amend it.
Which of an answer, a retraction and an expiry came first is decided by the
store, atomically: exactly one outcome.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from iterion_nb.errors import AlreadyAnsweredError, QuestionClosedError
from iterion_nb.runtime.records import Interaction, Option

#: The longest a question may stay open (a year): beyond, a mistake.
MAX_EXPIRY_SECONDS = 365 * 24 * 3600.0


def not_pending(question: Interaction) -> AlreadyAnsweredError | QuestionClosedError:
    """The error for an answer (or an amendment) to a question that is no longer pending."""
    if question.ended is not None:
        return QuestionClosedError(question.id, question.ended, question.end_reason)
    return AlreadyAnsweredError(question.id, question.answers)


def expire(question: Interaction) -> Interaction:
    """The question as it ends unanswered, at its expiry."""
    return replace(question, ended="expired", ended_at=question.expires_at)


def retract(question: Interaction, reason: str, now: datetime) -> Interaction:
    """The question as its asker withdraws it."""
    return replace(question, ended="retracted", ended_at=now, end_reason=reason)


def amend(
    question: Interaction,
    questions: tuple[str, ...] | None,
    options: tuple[Option, ...] | None,
    allow_free_text: bool | None,
) -> Interaction:
    """The question as its asker rewrites it (what is not given stays)."""
    changed_options = options if options is not None else question.options
    free = allow_free_text
    if free is None:
        free = question.allow_free_text if options is None else not changed_options
    return replace(
        question,
        questions=questions if questions is not None else question.questions,
        options=changed_options,
        allow_free_text=free,
        revision=question.revision + 1,
    )


def ended_event(question: Interaction) -> tuple[str, dict[str, Any]]:
    """The event recording how ``question`` ended without an answer."""
    data: dict[str, Any] = {"interaction_id": question.id, "kind": question.kind}
    if question.ended == "retracted":
        data["reason"] = question.end_reason
        return "interaction_retracted", data
    return "interaction_expired", data


def amended_event(question: Interaction) -> dict[str, Any]:
    """The data of ``interaction_amended``."""
    return {
        "interaction_id": question.id,
        "kind": question.kind,
        "revision": question.revision,
        "question": question.question,
        "options": [{"id": o.id, "label": o.label} for o in question.options],
    }


def closing_message(question: Interaction) -> str | None:
    """What an async asker is told when its question ended unanswered (None: nothing)."""
    if question.kind != "async" or question.ended != "expired":
        return None
    return f"[Question {question.id} expired unanswered]"
