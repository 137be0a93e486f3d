"""Human gates that do not wait forever, and answers checked before anything is written
(issue 19), on the memory and DuckDB stores."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import iterion_nb as it
from iterion_nb.errors import InvalidAnswerError, QuestionClosedError
from iterion_nb.session import RunHandle

from .conftest import SessionFactory

GATE = """\
schema decision:
  ship: bool
  channel: string [enum: "email", "slack"]

human approve:
  instructions: "Ship the notes?"
  output: decision
{extra}
workflow w:
  entry: approve
  approve -> done
"""


async def until(predicate: Any, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if await predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not met in time")


async def settled(run: RunHandle) -> bool:
    return (await run.refresh()).status in ("finished", "failed", "failed_resumable")


async def test_a_gate_that_expires_goes_on_with_its_default(make_session: SessionFactory) -> None:
    session = make_session()
    extra = '  expires_in: "300ms"\n  on_expire: default({ship: false, channel: "email"})\n'
    run = await session.start(it.compile(GATE.format(extra=extra)))
    assert await run.wait(10) == "paused_waiting_human"
    (question,) = await run.pending_questions()
    assert question.expires_at is not None
    await until(lambda: settled(run))  # nobody answers: the owner wakes at the expiry
    assert run.status == "finished", run.error
    assert run.outputs["approve"] == {"ship": False, "channel": "email"}
    events = {e.type: e for e in await run.events()}
    assert events["interaction_expired"].data["interaction_id"] == question.id
    recorded = events["human_answers_recorded"].data
    assert (recorded["by"], recorded["defaulted"]) == (["default"], [question.id])
    with pytest.raises(QuestionClosedError, match="expired unanswered"):
        await run.answer(question.id, {"ship": True, "channel": "slack"})


async def test_a_gate_that_expires_fails_by_default(make_session: SessionFactory) -> None:
    session = make_session()
    run = await session.start(it.compile(GATE.format(extra='  expires_in: "300ms"\n')))
    await until(lambda: settled(run))
    assert run.status == "failed_resumable"
    assert run.error is not None and "expired unanswered" in run.error
    assert "approve" in run.error


async def test_an_answer_in_time_wins(make_session: SessionFactory) -> None:
    session = make_session()
    extra = '  expires_in: "1h"\n  on_expire: default({ship: false, channel: "email"})\n'
    run = await session.start(it.compile(GATE.format(extra=extra)))
    assert await run.wait(10) == "paused_waiting_human"
    (question,) = await run.pending_questions()
    await run.answer(question.id, {"ship": True, "channel": "slack"})
    await until(lambda: settled(run))
    assert run.outputs["approve"] == {"ship": True, "channel": "slack"}
    assert "interaction_expired" not in [e.type for e in await run.events()]


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ({"ship": "yes", "channel": "email"}, "'ship' must be bool"),
        ({"ship": True, "channel": "fax"}, "'channel' must be one of email, slack"),
        ({"ship": True}, "'channel' is missing"),
        ({"ship": True, "channel": "email", "cc": "x"}, "no field 'cc'"),
        ("ship it", "must be an object with the fields ship, channel"),
    ],
)
async def test_an_answer_that_does_not_fit_the_form_is_refused_and_the_gate_stays_open(
    make_session: SessionFactory, answer: Any, reason: str
) -> None:
    session = make_session()
    run = await session.start(it.compile(GATE.format(extra="")))
    assert await run.wait(10) == "paused_waiting_human"
    (question,) = await run.pending_questions()
    with pytest.raises(InvalidAnswerError, match=reason):
        await run.answer(question.id, answer)
    with pytest.raises(InvalidAnswerError, match=reason):  # the other path: answer_human
        await session.answers.answer_human(run.id, {"": answer}, "cli")
    # nothing written: still open, no event, and a good answer goes through
    assert [q.id for q in await run.pending_questions()] == [question.id]
    assert "interaction_answered" not in [e.type for e in await run.events()]
    await run.answer(question.id, {"ship": True, "channel": "email"})
    await until(lambda: settled(run))
    assert run.status == "finished"


async def test_options_and_free_text_rules(make_session: SessionFactory) -> None:
    from iterion_nb.runtime.records import Interaction, Option, utcnow

    session = make_session()
    run = await session.start(it.compile(GATE.format(extra="")))
    assert await run.wait(10) == "paused_waiting_human"
    store = session.store
    only_options = Interaction(
        f"{run.id}-q1", run.id, "approve", "async", ("Tone?",), utcnow(),
        options=(Option("f", "Formal"), Option("c", "Casual")), allow_free_text=False,
    )  # fmt: skip
    free = Interaction(f"{run.id}-q2", run.id, "approve", "async", ("Why?",), utcnow())
    await store.add_interaction(only_options)
    await store.add_interaction(free)
    for bad in ("", "   ", "Chatty", None, {"id": "f"}):
        with pytest.raises(InvalidAnswerError):
            await run.answer(only_options.id, bad)
    with pytest.raises(InvalidAnswerError, match="is empty"):
        await run.answer(free.id, "  ")
    await run.answer(only_options.id, "Formal")  # a label is accepted as well as an id
    await run.answer(free.id, "because")
