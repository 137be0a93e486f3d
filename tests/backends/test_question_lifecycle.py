"""Issue 19 on every provider (scripted, the real SDKs and the real claude CLI against
the loopback server): questions that expire, are withdrawn or reworded by their asker,
and tools that refuse arguments they do not know."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import iterion_nb as it
from iterion_nb.errors import AlreadyAnsweredError, InvalidAnswerError, QuestionClosedError

from .conftest import Harness
from .test_interaction import (  # noqa: F401 - reset_hold: a fresh hold per test
    FINAL,
    HOLD,
    agent_flow,
    ask,
    questions,
    reset_hold,
    wait_for,
)


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "input": arguments}


async def events_of(run: Any, kind: str) -> list[Any]:
    return [e for e in await run.events() if e.type == kind]


async def test_an_agent_withdraws_a_question_it_no_longer_needs(harness_factory: Any) -> None:
    h: Harness = harness_factory({"nodes": {"writer": [
        {"tool_calls": [{**ask("Which file holds the config?"), "id": "toolu_q1"},
                        {"name": "hold"}]},
        {"tool_calls": [call("retract_question", id="toolu_q1", reason="found it myself")]},
        FINAL,
    ]}})  # fmt: skip
    run = await h.start(agent_flow())
    (question,) = await questions(run, 1)
    HOLD.set()
    assert await run.wait(30) == "finished", run.error
    assert f"question {question.id} withdrawn" in h.last_user_text("writer", 2)
    assert await run.pending_questions() == []  # gone from every inbox
    (retracted,) = await events_of(run, "interaction_retracted")
    assert retracted.data["reason"] == "found it myself"
    with pytest.raises(QuestionClosedError, match="withdrawn by its asker: found it myself"):
        await run.answer(question.id, "config.yaml")
    stored = await run.session.store.get_interaction(question.id)
    assert (stored.ended, stored.answers) == ("retracted", None)


async def test_an_answer_that_came_first_reaches_the_agent_once(harness_factory: Any) -> None:
    h: Harness = harness_factory({"nodes": {"writer": [
        {"tool_calls": [{**ask("Tone?"), "id": "toolu_q1"}, {"name": "hold"}]},
        {"tool_calls": [call("retract_question", id="toolu_q1", reason="not needed")]},
        FINAL,
    ]}})  # fmt: skip
    run = await h.start(agent_flow())
    (question,) = await questions(run, 1)
    await run.answer(question.id, "formal")  # the person wins the race
    HOLD.set()
    assert await run.wait(30) == "finished", run.error
    told = " ".join(h.last_user_text("writer", t) for t in (1, 2))
    assert f"question {question.id} was answered before it could be withdrawn: formal" in told
    assert told.count("formal") == 2  # in the inbox once, in the tool result once
    assert await events_of(run, "interaction_retracted") == []
    assert (await run.session.store.get_interaction(question.id)).answered_by is not None


async def test_an_agent_rewords_a_question_in_place(harness_factory: Any) -> None:
    h: Harness = harness_factory({"nodes": {"writer": [
        {"tool_calls": [{**ask("Tone?", options=[{"id": "f", "label": "Formal"},
                                                 {"id": "c", "label": "Casual"}]),
                         "id": "toolu_q1"}]},
        {"tool_calls": [call("amend_question", id="toolu_q1", question="Which tone, for the"
                             " board?", options=[{"id": "f", "label": "Formal"},
                                                 {"id": "d", "label": "Dry"}]),
                        {"name": "hold"}]},
        FINAL,
    ]}})  # fmt: skip
    run = await h.start(agent_flow())
    await wait_for(lambda: _amended(run))
    (question,) = await run.pending_questions()
    assert (question.question, [o.id for o in question.options], question.revision) == (
        "Which tone, for the board?", ["f", "d"], 1
    )  # fmt: skip
    with pytest.raises(InvalidAnswerError, match="not one of the options"):
        await run.answer(question.id, "c")  # an option of the first version
    assert (await run.pending_questions())[0].id == question.id  # still open
    await run.answer(question.id, "d")
    HOLD.set()
    assert await run.wait(30) == "finished", run.error
    assert "updated (revision 1)" in h.last_user_text("writer", 2)
    (amended,) = await events_of(run, "interaction_amended")
    assert amended.data["question"] == "Which tone, for the board?"


async def _resumed(run: Any) -> bool:
    return bool(await events_of(run, "run_resumed"))


async def _amended(run: Any) -> bool:
    pending = await run.pending_questions()
    return bool(pending) and pending[0].revision == 1


async def test_an_unanswered_question_expires_and_the_agent_is_told(
    harness_factory: Any,
) -> None:
    h: Harness = harness_factory({"nodes": {"writer": [
        {"tool_calls": [ask("Tone?", expires_in="300ms"), {"name": "hold"}]},
        FINAL,
    ]}})  # fmt: skip
    run = await h.start(agent_flow())
    (question,) = await questions(run, 1)
    assert question.expires_at is not None
    await asyncio.sleep(0.5)
    assert await run.pending_questions() == []  # expired: out of every inbox at once
    with pytest.raises(QuestionClosedError) as refused:
        await run.answer(question.id, "formal")
    assert refused.value.ended == "expired"
    HOLD.set()
    assert await run.wait(30) == "finished", run.error
    assert f"[Question {question.id} expired unanswered]" in h.last_user_text("writer", 1)
    (expired,) = await events_of(run, "interaction_expired")
    assert expired.data["interaction_id"] == question.id


async def test_a_blocking_question_that_expires_resumes_the_run(harness_factory: Any) -> None:
    h: Harness = harness_factory({"nodes": {"writer": [
        {"tool_calls": [call("ask_user", question="Ship it?", expires_in=0.5)]},
        FINAL,
    ]}})  # fmt: skip
    run = await h.start(agent_flow())
    assert await run.wait(30) == "paused_waiting_human"
    await wait_for(lambda: _resumed(run), timeout=30)  # by the expiry: nobody answered
    assert await run.wait(30) == "finished", run.error
    assert "expired unanswered: go on without the answer" in h.last_user_text("writer", 1)
    assert [e.type for e in await run.events()].count("run_resumed") == 1


async def test_unknown_and_ill_typed_arguments_are_named_to_the_model(
    harness_factory: Any,
) -> None:
    h: Harness = harness_factory({"nodes": {"writer": [
        {"tool_calls": [ask("Tone?", expires_after="10m")]},
        {"tool_calls": [ask("Tone?", allow_free_text="yes")]},
        {"tool_calls": [call("word_total", text="a b", unique=False, verbose=True)]},
        FINAL,
    ]}})  # fmt: skip
    run = await h.start(agent_flow(tools="[hold, word_total]"))
    assert await run.wait(30) == "finished", run.error
    assert "expires_after" in h.last_user_text("writer", 1)
    assert "allow_free_text" in h.last_user_text("writer", 2)
    assert "verbose" in h.last_user_text("writer", 3)
    assert await run.pending_questions() == []  # no question was posted by a bad call


@it.tool
def word_total(text: str, unique: bool = False) -> int:
    """Count the words of a text."""
    words = text.split()
    return len(set(words)) if unique else len(words)


async def test_only_its_own_questions(harness_factory: Any) -> None:
    h: Harness = harness_factory({"nodes": {"writer": [
        {"tool_calls": [call("retract_question", id="nobody-asked", reason="x")]},
        FINAL,
    ]}})  # fmt: skip
    run = await h.start(agent_flow())
    assert await run.wait(30) == "finished", run.error
    assert "no question 'nobody-asked' asked by this agent" in h.last_user_text("writer", 1)


async def test_a_second_answer_after_an_amendment_is_still_a_conflict(
    harness_factory: Any,
) -> None:
    h: Harness = harness_factory({"nodes": {"writer": [
        {"tool_calls": [{**ask("Tone?"), "id": "toolu_q1"}, {"name": "hold"}]},
        FINAL,
    ]}})  # fmt: skip
    run = await h.start(agent_flow())
    (question,) = await questions(run, 1)
    await run.answer(question.id, "formal")
    with pytest.raises(AlreadyAnsweredError):
        await run.session.store.amend(question.id, questions=("Tone, again?",))
    HOLD.set()
    assert await run.wait(30) == "finished", run.error
