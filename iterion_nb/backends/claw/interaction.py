"""The three interaction tools of ADR-081, for the in-process loop.

``ask_user`` blocks (pauses the run), ``ask_user_async`` posts a question and
returns at once, ``await_answers`` returns the answers or pauses until they
are all in. Their input schemas and result texts are shared with every
backend (the Claude Code adapter serves the same ones over MCP).
"""

from __future__ import annotations

import json
from typing import Any

from iterion_nb.backends.providers.base import ToolSpec
from iterion_nb.runtime.records import Interaction, Option, utcnow

_OPTIONS = {
    "type": "array",
    "description": "Choices to offer; the person picks one (or writes text if allowed).",
    "items": {
        "type": "object",
        "properties": {"id": {"type": "string"}, "label": {"type": "string"}},
        "required": ["id", "label"],
    },
}

ASK_USER = ToolSpec(
    "ask_user",
    "Ask the person a question and stop until they answer. Use only when you cannot go on"
    " without the answer.",
    {
        "type": "object",
        "properties": {"question": {"type": "string"}, "options": _OPTIONS},
        "required": ["question"],
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
        },
        "required": ["question"],
    },
)
AWAIT_ANSWERS = ToolSpec(
    "await_answers",
    "Get the answers to every question you posted; waits (pausing the run) while any is"
    " still unanswered. Call it only when you are blocked.",
    {
        "type": "object",
        "properties": {"note": {"type": "string", "description": "Shown to the person."}},
    },
)

PROTOCOL = """\
## Asking the person
You can ask the person questions without stopping your work:
- Front-load: post every question you have as early as you can with ask_user_async.
- Keep working on everything that does not depend on the answers.
- Answers arrive in your messages as "[Answer to question <id>] Q: ... — A: ...".
- Call await_answers only when you cannot continue without the answers.
- ask_user stops everything until the person answers: use it only as a last resort."""

POSTED = "question posted (id {id}); the answer will arrive in your messages; keep working"
ANSWERED = "question {id} was asked before and is answered: {answer}"
IN_BRANCH = (
    "await_answers cannot pause the run from inside a parallel branch; keep working, or"
    " let the workflow's await_answers node wait for the answers"
)


def tools_for(interaction: str) -> list[ToolSpec]:
    """The interaction tools an ``interaction:`` mode grants."""
    if interaction == "async":
        return [ASK_USER, ASK_USER_ASYNC, AWAIT_ANSWERS]
    if interaction == "human":
        return [ASK_USER]
    return []


def question_of(arguments: dict[str, Any]) -> tuple[str, tuple[Option, ...], bool]:
    """Validate a question tool's input; ValueError explains what is wrong."""
    question = arguments.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ValueError("'question' must be a non-empty string")
    raw = arguments.get("options") or []
    if not isinstance(raw, list) or not all(
        isinstance(o, dict) and isinstance(o.get("id"), str) and isinstance(o.get("label"), str)
        for o in raw
    ):
        raise ValueError("'options' must be a list of {id, label} objects")
    options = tuple(Option(o["id"], o["label"]) for o in raw)
    free = arguments.get("allow_free_text")
    allow = bool(free) if isinstance(free, bool) else not options
    return question, options, allow


def new_question(
    iid: str, run_id: str, node: str, branch: str, kind: Any, arguments: dict[str, Any]
) -> Interaction:
    """The interaction a question tool call creates."""
    question, options, allow = question_of(arguments)
    return Interaction(
        iid, run_id, node, kind, (question,), utcnow(), branch_id=branch, options=options,
        allow_free_text=allow,
    )  # fmt: skip


def answers_text(records: list[Interaction]) -> str:
    """What ``await_answers`` returns: every answer, as JSON."""
    return json.dumps(
        [{"interaction_id": r.id, "question": r.question, "answer": r.answers} for r in records],
        ensure_ascii=False,
    )
