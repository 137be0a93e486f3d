"""Answer replay: pinned answers answer matching questions the moment they are asked.

Each question has a stable key: the node that asks it, its text and its
options' ids (what a person sees; not its id, which changes with every
run). A run started with pins (``launch["answers"]``, recorded with the run
so a resume anywhere replays the same) answers the k-th question of a key
with the k-th pinned answer of that key, as ``answered_by: "replay"``,
through the store's one answer path (so the ``interaction_answered`` event
and an async asker's queued message are as for a person). A question with
no pin left, or whose pin no longer fits it (its options changed), is asked
as usual.

This module is pure: files are read and written by the session and the CLI.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from iterion_nb.dsl.diagnostics import did_you_mean
from iterion_nb.errors import BadTextError, ConflictError, InvalidAnswerError, RunError
from iterion_nb.runtime import lifecycle
from iterion_nb.runtime.answers import check_answer_text
from iterion_nb.runtime.ports import Store
from iterion_nb.runtime.records import Interaction

#: Who answered, for an answer taken from pins.
REPLAY = "replay"

#: The fields of one pinned answer.
FIELDS = ("node", "question", "options", "answer")
#: What an answers document may hold (``run`` and ``workflow`` say whose answers they were).
DOCUMENT_KEYS = ("answers", "run", "workflow")

Key = tuple[str, str, tuple[str, ...]]


class AnswersFileError(RunError):
    """A pinned-answers document that is not one (names the entry and the problem)."""


def key_of(question: Interaction) -> Key:
    """The stable key of a question: its node, its text, its options' ids."""
    return (question.node_id, question.question, tuple(o.id for o in question.options))


def _pin_key(pin: Mapping[str, Any]) -> Key:
    return (pin["node"], pin["question"], tuple(pin.get("options") or ()))


def pins_of(document: Any, where: str = "the answers") -> list[dict[str, Any]]:
    """Check a pinned-answers document (``{"answers": [...]}`` or the bare list).

    Raises:
        AnswersFileError: Not a list of ``{node, question, options?, answer}``
            entries (the message names the entry and the field).
    """
    pins = []
    for n, entry in enumerate(_entries(document, where), start=1):
        at = f"{where}: answer {n}"
        if not isinstance(entry, Mapping):
            raise AnswersFileError(f"{at}: expected a mapping with node, question and answer")
        unknown = [str(k) for k in entry if k not in FIELDS]
        if unknown:
            raise AnswersFileError(
                f"{at}: unknown field '{unknown[0]}'{did_you_mean(unknown[0], FIELDS)}"
                f" (an answer may hold: {', '.join(FIELDS)})"
            )
        for name in ("node", "question"):
            if not isinstance(entry.get(name), str) or not entry[name]:
                raise AnswersFileError(f"{at}: '{name}' must be a non-empty string")
        if "answer" not in entry:
            raise AnswersFileError(f"{at}: 'answer' is missing")
        options = entry.get("options") or []
        if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
            raise AnswersFileError(f"{at}: 'options' must be a list of option ids")
        answer = _pinned_answer(entry["answer"], at)
        pin: dict[str, Any] = {"node": entry["node"], "question": entry["question"]}
        if options:
            pin["options"] = list(options)
        pins.append(pin | {"answer": answer})
    return pins


def pin_strays(pins: Sequence[Mapping[str, Any]], nodes: Iterable[str], whose: str) -> str | None:
    """What is wrong when a pin names a node that is not among ``nodes``, else None.

    Such a pin answers nothing (no question of that node is ever asked): a
    typo, mostly. The first is named, with its entry, the node it is close to
    ("did you mean …?") and the nodes there are (``whose`` names their workflow).
    """
    known = [str(n) for n in nodes]
    for n, pin in enumerate(pins, start=1):
        node = pin["node"]
        if node not in known:
            shown = ", ".join(known[:8]) + (f" and {len(known) - 8} more" if len(known) > 8 else "")
            return (
                f"answer {n}: node '{node}' is not in {whose}{did_you_mean(node, known)}"
                f" (its nodes: {shown or 'none'})"
            )
    return None


def _entries(document: Any, where: str) -> list[Any]:
    """The entries of an answers document: its ``answers:`` list, or the bare list."""
    entries = document
    if isinstance(document, Mapping):
        extra = [str(k) for k in document if k not in DOCUMENT_KEYS]
        if extra:
            raise AnswersFileError(
                f"{where}: unknown key '{extra[0]}'{did_you_mean(extra[0], DOCUMENT_KEYS)}"
                " (expected 'answers', the list of answers; 'run' and 'workflow' may say whose)"
            )
        entries = document.get("answers")
    if not isinstance(entries, list):
        raise AnswersFileError(f"{where}: expected a list of answers under 'answers'")
    return entries


def _pinned_answer(value: Any, at: str) -> Any:
    """A pin's answer as JSON data, checked as any answer is (no U+0000, no control).

    Raises:
        AnswersFileError: Naming the entry ``at`` and what is wrong.
    """
    try:
        answer = json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):
        raise AnswersFileError(f"{at}: 'answer' is not JSON data") from None
    try:
        check_answer_text(answer)
    except BadTextError as err:
        raise AnswersFileError(f"{at}: {err}") from None
    return answer


def export(questions: Iterable[Interaction]) -> list[dict[str, Any]]:
    """The answers a run got, as pins (in the order asked): questions with no answer are left out.

    An answer by a human gate's default is not a person's: it is left out too.
    """
    pins = []
    for q in questions:
        if q.kind == "await" or q.answered_at is None:
            continue
        pin: dict[str, Any] = {"node": q.node_id, "question": q.question}
        if q.options:
            pin["options"] = [o.id for o in q.options]
        pins.append(pin | {"answer": q.answers})
    return pins


def pin_for(
    pins: Sequence[Mapping[str, Any]], asked: Iterable[Interaction], question: Interaction
) -> tuple[bool, Any]:
    """The pin that answers ``question`` among the run's questions ``asked`` (found, answer).

    The k-th ask of a key (in the order asked) takes the k-th pin of that key.
    """
    key = key_of(question)
    same = [q for q in asked if q.kind != "await" and key_of(q) == key]
    ids = [q.id for q in sorted(same, key=lambda q: q.requested_at)]
    index = ids.index(question.id) if question.id in ids else len(ids)
    return pinned_for(pins, key, index)


def pinned_for(pins: Sequence[Mapping[str, Any]], key: Key, index: int) -> tuple[bool, Any]:
    """The ``index``-th pinned answer of ``key`` (found, answer)."""
    matching = [p["answer"] for p in pins if _pin_key(p) == key]
    if index < len(matching):
        return True, matching[index]
    return False, None


async def answer_pinned(store: Store, question: Interaction) -> Interaction | None:
    """Answer a question just asked from its run's pins; the question as it is now, or None.

    None when the run has no pin for it (or the pin no longer fits it): it is
    asked as usual.
    """
    if question.kind == "await" or not question.pending:
        return None
    run = await store.get_run(question.run_id)
    pins = run.launch.get("answers")
    if not pins:
        return None
    found, answer = pin_for(pins, await store.interactions(question.run_id), question)
    if not found:
        return None
    try:
        answer = lifecycle.check_fits(question, answer)
        await store.answer(question.id, answer, answered_by=REPLAY)
    except InvalidAnswerError:
        return None  # its options or form changed since the answer was pinned: ask
    except ConflictError:
        pass  # somebody was faster (or it expired): the store has the outcome
    return await store.get_interaction(question.id)
