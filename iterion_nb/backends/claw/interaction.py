"""The interaction tools of ADR-081, for the in-process loop.

``ask_user`` blocks (pauses the run), ``ask_user_async`` posts a question and
returns at once, ``await_answers`` returns the answers or pauses until they
are all in; ``retract_question`` withdraws a question the agent no longer
needs answered and ``amend_question`` rewrites one in place. A question may
expire (``expires_in``). Their input schemas and result texts are shared
with every backend (the Claude Code adapter serves the same ones over MCP),
and so is the strict check of their input: an argument a tool does not know,
or one of the wrong type, is a tool error naming it.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from iterion_nb.backends.providers.base import ToolSpec
from iterion_nb.ir.values import parse_duration
from iterion_nb.runtime.lifecycle import MAX_EXPIRY_SECONDS
from iterion_nb.runtime.records import Interaction, Option, answer_text, utcnow

_OPTIONS = {
    "type": "array",
    "description": "Choices to offer; the person picks one (or writes text if allowed).",
    "items": {
        "type": "object",
        "properties": {"id": {"type": "string"}, "label": {"type": "string"}},
        "required": ["id", "label"],
        "additionalProperties": False,
    },
}
_EXPIRES_IN = {
    "type": ["string", "number"],
    "description": "How long the person has to answer: seconds, or a duration such as"
    ' "90s", "10m" or "1h". Past it the question expires unanswered and you are told so.',
}

ASK_USER = ToolSpec(
    "ask_user",
    "Ask the person a question and stop until they answer. Use only when you cannot go on"
    " without the answer.",
    {
        "type": "object",
        "properties": {
            "question": {"type": "string"},
            "options": _OPTIONS,
            "expires_in": _EXPIRES_IN,
        },
        "required": ["question"],
        "additionalProperties": False,
    },
)
ASK_USER_ASYNC = ToolSpec(
    "ask_user_async",
    "Post a question to the person and keep working; the answer arrives later in your messages.",
    {
        "type": "object",
        "properties": {
            "question": {"type": "string"},
            "options": _OPTIONS,
            "allow_free_text": {
                "type": "boolean",
                "description": "Whether a free-text answer is accepted (default: true when"
                " there are no options).",
            },
            "expires_in": _EXPIRES_IN,
        },
        "required": ["question"],
        "additionalProperties": False,
    },
)
AWAIT_ANSWERS = ToolSpec(
    "await_answers",
    "Get the answers to every question you posted; waits (pausing the run) while any is"
    " still unanswered. Call it only when you are blocked.",
    {
        "type": "object",
        "properties": {"note": {"type": "string", "description": "Shown to the person."}},
        "additionalProperties": False,
    },
)
RETRACT_QUESTION = ToolSpec(
    "retract_question",
    "Withdraw a question you posted with ask_user_async that you no longer need answered"
    " (you found the answer yourself, or it no longer matters); the person stops seeing it."
    " If the person answered first, you get the answer instead.",
    {
        "type": "object",
        "properties": {
            "id": {"type": "string", "description": "The question's id."},
            "reason": {"type": "string", "description": "Why, shown to the person."},
        },
        "required": ["id", "reason"],
        "additionalProperties": False,
    },
)
AMEND_QUESTION = ToolSpec(
    "amend_question",
    "Rewrite a question you posted with ask_user_async that is still unanswered: its text,"
    " its options, or both. The person sees the new version in place.",
    {
        "type": "object",
        "properties": {
            "id": {"type": "string", "description": "The question's id."},
            "question": {"type": "string"},
            "options": _OPTIONS,
            "allow_free_text": {"type": "boolean"},
        },
        "required": ["id"],
        "additionalProperties": False,
    },
)

PROTOCOL = """\
## Asking the person
You can ask the person questions without stopping your work:
- Front-load: post every question you have as early as you can with ask_user_async.
- Keep working on everything that does not depend on the answers.
- Answers arrive in your messages as "[Answer to question <id>] Q: ... — A: ...".
- Call await_answers only when you cannot continue without the answers.
- A question you no longer need answered: retract_question; one to reword: amend_question.
- A question may expire (expires_in): "[Question <id> expired unanswered]" tells you so;
  go on without that answer.
- ask_user stops everything until the person answers: use it only as a last resort."""

POSTED = "question posted (id {id}); the answer will arrive in your messages; keep working"
ANSWERED = "question {id} was asked before and is answered: {answer}"
EXPIRED = "question {id} expired unanswered: go on without the answer"
IN_BRANCH = (
    "await_answers cannot pause the run from inside a parallel branch; keep working, or"
    " let the workflow's await_answers node wait for the answers"
)


def tools_for(interaction: str) -> list[ToolSpec]:
    """The interaction tools an ``interaction:`` mode grants."""
    if interaction == "async":
        return [ASK_USER, ASK_USER_ASYNC, AWAIT_ANSWERS, RETRACT_QUESTION, AMEND_QUESTION]
    if interaction == "human":
        return [ASK_USER]
    return []


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "boolean": (bool,), "number": (int, float), "integer": (int,),
    "array": (list,), "object": (dict,),
}  # fmt: skip


def _kind_ok(value: Any, wanted: Any) -> bool:
    kinds = wanted if isinstance(wanted, list) else [wanted]
    for kind in kinds:
        python = _JSON_TYPES.get(kind, ())
        if isinstance(value, bool) and kind in ("number", "integer"):
            continue  # JSON true is not a number
        if isinstance(value, python):
            return True
    return False


def check_input(spec: ToolSpec, arguments: Any) -> dict[str, Any]:
    """The input of a call of one of these tools, checked strictly against its schema.

    Raises:
        ValueError: Naming every argument the tool does not know, every
            required one missing, and every one of the wrong type.
    """
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        kind = type(arguments).__name__
        raise ValueError(f"{spec.name} takes an object of arguments, not {kind}")
    schema = spec.input_schema
    properties: dict[str, Any] = schema.get("properties", {})
    problems = []
    unknown = [name for name in arguments if name not in properties]
    if unknown:
        names = ", ".join(f"'{name}'" for name in unknown)
        known = ", ".join(properties) or "none"
        plural = "s" if len(unknown) > 1 else ""
        problems.append(f"unknown argument{plural} {names} (it takes: {known})")
    for name in schema.get("required", []):
        if name not in arguments:
            problems.append(f"'{name}' is required")
    for name, value in arguments.items():
        wanted = properties.get(name, {}).get("type")
        if wanted is not None and not _kind_ok(value, wanted):
            shown = " or ".join(wanted) if isinstance(wanted, list) else wanted
            problems.append(f"'{name}' must be a {shown}")
    if problems:
        raise ValueError(f"{spec.name}: {'; '.join(problems)}")
    return arguments


def options_of(raw: Any) -> tuple[Option, ...]:
    """``[{id, label}]`` as options; ValueError explains what is wrong."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(
        isinstance(o, dict) and isinstance(o.get("id"), str) and isinstance(o.get("label"), str)
        and set(o) <= {"id", "label"}
        for o in raw
    ):  # fmt: skip
        raise ValueError("'options' must be a list of {id, label} objects")
    ids = [o["id"] for o in raw]
    if len(set(ids)) != len(ids) or not all(i.strip() for i in ids):
        raise ValueError("'options' need distinct, non-empty ids")
    return tuple(Option(o["id"], o["label"]) for o in raw)


def expires_in_of(raw: Any) -> float | None:
    """Seconds of an ``expires_in`` argument (a number or a duration text); ValueError if bad."""
    if raw is None:
        return None
    seconds = float(raw) if isinstance(raw, int | float) else parse_duration(str(raw))
    if seconds is None or not 0 < seconds <= MAX_EXPIRY_SECONDS:
        raise ValueError(
            "'expires_in' must be a positive duration of at most a year: seconds, or text"
            ' such as "90s", "10m", "1h"'
        )
    return seconds


def question_of(arguments: dict[str, Any]) -> tuple[str, tuple[Option, ...], bool]:
    """Validate a question tool's input; ValueError explains what is wrong."""
    question = arguments.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ValueError("'question' must be a non-empty string")
    options = options_of(arguments.get("options") or [])
    free = arguments.get("allow_free_text")
    allow = bool(free) if isinstance(free, bool) else not options
    return question, options, allow


def new_question(
    iid: str, run_id: str, node: str, branch: str, kind: Any, arguments: dict[str, Any]
) -> Interaction:
    """The interaction a question tool call creates (its input checked strictly)."""
    spec = ASK_USER if kind == "ask_user" else ASK_USER_ASYNC
    arguments = check_input(spec, arguments)
    question, options, allow = question_of(arguments)
    seconds = expires_in_of(arguments.get("expires_in"))
    now = utcnow()
    expires = None if seconds is None else now + timedelta(seconds=seconds)
    return Interaction(
        iid, run_id, node, kind, (question,), now, branch_id=branch, options=options,
        allow_free_text=allow, expires_at=expires,
    )  # fmt: skip


def status_of(record: Interaction) -> str:
    """``answered``, ``expired``, ``retracted`` or ``pending``."""
    if record.ended is not None:
        return record.ended
    return "pending" if record.pending else "answered"


def answers_text(records: list[Interaction]) -> str:
    """What ``await_answers`` returns: every answer (or how the question ended), as JSON."""
    out = []
    for r in records:
        item: dict[str, Any] = {"interaction_id": r.id, "question": r.question,
                                "answer": r.answers}  # fmt: skip
        if r.ended is not None:
            item["status"] = r.ended
        out.append(item)
    return json.dumps(out, ensure_ascii=False)


def blocking_result(record: Interaction) -> str:
    """What a resumed ``ask_user`` returns: the answer, or that the question expired."""
    if record.ended is not None:
        return EXPIRED.format(id=record.id)
    return answer_text(record.answers)


def retracted_text(before: Interaction, after: Interaction) -> str:
    """What ``retract_question`` tells the agent: withdrawn, or what came first."""
    if after.ended == "retracted" and before.ended is None:
        return f"question {after.id} withdrawn; the person no longer sees it"
    if after.ended == "expired":
        return f"question {after.id} had expired unanswered"
    if after.ended == "retracted":
        return f"question {after.id} was already withdrawn"
    return (
        f"question {after.id} was answered before it could be withdrawn:"
        f" {answer_text(after.answers)}"
    )
