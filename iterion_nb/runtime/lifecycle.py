"""How a question lives and ends: answered, expired, retracted, amended.

Pure helpers every store uses, so the rules are one: a question is pending
until it is answered, it expires (at ``expires_at``, if nobody answered
first), or its asker retracts it; while pending its asker may amend it.
Which of an answer, a retraction and an expiry came first is decided by the
store, atomically: exactly one outcome.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from typing import Any

from iterion_nb.dsl.diagnostics import did_you_mean
from iterion_nb.errors import (
    RUN_ENDED,
    AlreadyAnsweredError,
    InvalidAnswerError,
    QuestionClosedError,
)
from iterion_nb.ir import model as m
from iterion_nb.ir.values import matches_type as fits
from iterion_nb.runtime.ports import Store
from iterion_nb.runtime.records import Interaction, Option, RunStatus

#: The longest a question may stay open (a year): beyond, a mistake.
MAX_EXPIRY_SECONDS = 365 * 24 * 3600.0
#: Statuses after which nothing reads an answer: a run's open questions end with it.
OVER: tuple[RunStatus, ...] = ("finished", "failed")


def run_ended_reason(run_id: str, status: str) -> str:
    """Why an open question of a run that ended for good is withdrawn (``QuestionClosedError``)."""
    return f"{RUN_ENDED}{run_id} {status} before it was answered, and nothing would read an answer"


def ended_with_run(
    open_questions: list[Interaction], run_id: str, status: str, now: datetime
) -> list[Interaction]:
    """How the open questions of a run settling as ``status`` end in the same commit.

    A run that ends for good (``OVER``) withdraws each (one past its expiry
    expires instead); any other status keeps them open. Every store applies
    this inside ``settle_run``, so no crash can leave a finished run's
    question in an inbox.
    """
    if status not in OVER:
        return []
    reason = run_ended_reason(run_id, status)
    return [expire(q) if q.due(now) else retract(q, reason, now) for q in open_questions]


async def retire_questions(store: Store, run_id: str, status: str) -> list[Interaction]:
    """Withdraw every open question of a run that ended ``finished`` or ``failed``.

    Each is retracted as its asker would (its ``interaction_retracted`` event):
    it leaves every inbox, and an answer to it is refused (410 ``retracted``)
    instead of being stored where no agent will read it. Returns those withdrawn.
    """
    withdrawn = []
    for question in await store.pending_interactions(run_id):
        ended = await store.retract(question.id, run_ended_reason(run_id, status))
        if ended.ended == "retracted":
            withdrawn.append(ended)
    return withdrawn


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


# -- what an answer must be ------------------------------------------------------
def accepts_of(schema: m.Schema) -> dict[str, Any]:
    """What a human gate with output ``schema`` accepts: its fields, their types and values."""
    fields: dict[str, Any] = {}
    for name, spec in schema.fields.items():
        entry: dict[str, Any] = {"type": str(spec.type)}
        if spec.enum:
            entry["enum"] = list(spec.enum)
        fields[name] = entry
    return {"fields": fields}


def form_fields(accepts: dict[str, Any] | None) -> str:
    """A form's fields in a line (``ship: bool, tone: one of formal|casual``); "" for no form."""
    fields: dict[str, Any] = (accepts or {}).get("fields") or {}
    shown = []
    for name, entry in fields.items():
        allowed = entry.get("enum")
        kind = "one of " + "|".join(map(str, allowed)) if allowed else entry.get("type", "json")
        shown.append(f"{name}: {kind}")
    return ", ".join(shown)


def _empty(answer: Any) -> bool:
    if answer is None:
        return True
    if isinstance(answer, str):
        return not answer.strip()
    return isinstance(answer, list | dict) and not answer


def _field_problems(value: Any, name: str, entry: dict[str, Any]) -> list[str]:
    written = str(entry.get("type", "json"))
    spec = m.TypeSpec(written.removesuffix("[]"), written.endswith("[]"))
    if not fits(value, spec):
        return [f"'{name}' must be {written}"]
    allowed = entry.get("enum")
    if allowed and value not in allowed:
        return [f"'{name}' must be one of {', '.join(map(str, allowed))}"]
    return []


def _accepts_problems(answer: Any, accepts: dict[str, Any]) -> list[str]:
    fields: dict[str, Any] = accepts.get("fields") or {}
    if not isinstance(answer, dict):
        if len(fields) == 1:  # a gate with one field takes the bare value
            name, entry = next(iter(fields.items()))
            return _field_problems(answer, name, entry)
        return [f"the answer must be an object with the fields {', '.join(fields)}"]
    problems = []
    for name, entry in fields.items():
        if name not in answer:
            problems.append(f"'{name}' is missing")
        else:
            problems.extend(_field_problems(answer[name], name, entry))
    unknown = [key for key in answer if key not in fields]
    if unknown:
        problems.append(f"no field {', '.join(repr(k) for k in unknown)} in this form")
    return problems


#: How the refusal of an answer to a gate's form begins (surfaces add how to send JSON).
FORM_REFUSAL = "does not fit question"


def check_fits(question: Interaction, answer: Any) -> Any:
    """The answer as it is kept, or refused saying why (nothing is written).

    A question with options and no free text takes one of its options (by
    id, or by label: an option given by its label is kept as its id, so what
    the asker reads does not depend on which surface answered); free text
    must not be empty; a human gate with an output schema takes its fields,
    of their types.

    Raises:
        InvalidAnswerError: Empty, not an option, or not of the form's fields and types.
    """
    if question.accepts:
        problems = _accepts_problems(answer, question.accepts)
        if problems:
            raise InvalidAnswerError(
                f"the answer {FORM_REFUSAL} '{question.id}': {'; '.join(problems)}"
            )
        return answer
    if _empty(answer):
        raise InvalidAnswerError(f"the answer to question '{question.id}' is empty")
    if not question.options:
        return answer
    if isinstance(answer, str):
        by_id = {o.id: o.id for o in question.options}
        by_label = {o.label: o.id for o in question.options if o.label}
        if answer in by_id or answer in by_label:
            return by_id.get(answer) or by_label[answer]
    if question.allow_free_text:
        return answer
    offered = ", ".join(
        o.id if o.label in ("", o.id) else f"{o.id} ({o.label})" for o in question.options
    )
    names = [n for o in question.options for n in (o.id, o.label) if n]
    hint = did_you_mean(answer, names) if isinstance(answer, str) else ""
    raise InvalidAnswerError(
        f"{json.dumps(answer, ensure_ascii=False)[:80]} is not one of the options of question"
        f" '{question.id}': {offered}{hint}"
    )
