"""Questions that live and end: expiry, retraction, amendment — one outcome each, on every store."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from iterion_nb.errors import AlreadyAnsweredError, NotFoundError, QuestionClosedError
from iterion_nb.runtime.ports import Store
from iterion_nb.runtime.records import Option

from .conftest import Clock, make_question, make_run


async def asked(store: Store, clock: Clock, expires_in: float | None = None, **kw: object) -> None:
    await store.create_run(make_run())
    expires_at = None if expires_in is None else clock.now + timedelta(seconds=expires_in)
    await store.add_interaction(make_question(expires_at=expires_at, **kw))  # type: ignore[arg-type]


async def test_new_fields_round_trip(store: Store, clock: Clock) -> None:
    accepts = {"fields": {"tone": {"type": "string", "enum": ["formal", "casual"]}}}
    await asked(store, clock, expires_in=600, accepts=accepts)
    stored = await store.get_interaction("q1")
    assert stored.expires_at is not None and stored.accepts == accepts
    assert (stored.ended, stored.revision) == (None, 0)


async def test_a_question_past_its_expiry_leaves_the_inbox_and_takes_no_answer(
    store: Store, clock: Clock
) -> None:
    await asked(store, clock, expires_in=60)
    assert [q.id for q in await store.pending_interactions("r1")] == ["q1"]
    clock.now += timedelta(seconds=61)
    assert await store.pending_interactions("r1") == []  # even before its expiry is recorded
    with pytest.raises(QuestionClosedError) as info:
        await store.answer("q1", "formal")
    assert info.value.ended == "expired"
    ended = await store.get_interaction("q1")
    assert (ended.ended, ended.pending, ended.answers) == ("expired", False, None)
    assert await store.expire_due("r1") == []  # recorded once
    types = [e.type for e in await store.events("r1")]
    assert types == ["interaction_expired"]
    (told,) = await store.drain_messages("r1", "gatherer")
    assert told.text == "[Question q1 expired unanswered]"


async def test_expire_due_records_each_expiry_once(store: Store, clock: Clock) -> None:
    await asked(store, clock, expires_in=10)
    await store.add_interaction(make_question("q2", minute=1))  # never expires
    assert await store.expire_due() == []
    clock.now += timedelta(seconds=11)
    (ended,) = await store.expire_due("r1")
    assert (ended.id, ended.ended) == ("q1", "expired")
    assert await store.expire_due("r1") == []
    assert [q.id for q in await store.pending_interactions("r1")] == ["q2"]
    assert [e.data["interaction_id"] for e in await store.events("r1")] == ["q1"]


async def test_an_answer_at_the_expiry_instant_has_exactly_one_outcome(
    store: Store, clock: Clock
) -> None:
    for n in range(6):
        await store.create_run(make_run(f"r{n}"))
        expires_at = clock.now + timedelta(milliseconds=3)
        await store.add_interaction(make_question(f"q{n}", run_id=f"r{n}", expires_at=expires_at))
        outcomes = await asyncio.gather(
            store.answer(f"q{n}", "formal"), store.expire_due(f"r{n}"), return_exceptions=True
        )
        final = await store.get_interaction(f"q{n}")
        types = [e.type for e in await store.events(f"r{n}")]
        if final.ended == "expired":
            assert isinstance(outcomes[0], QuestionClosedError) and final.answers is None
            assert types == ["interaction_expired"]
        else:
            assert final.answers == "formal" and outcomes[1] == []
            assert types == ["interaction_answered"]


async def test_retraction_ends_a_question_with_its_reason(store: Store, clock: Clock) -> None:
    await asked(store, clock)
    retracted = await store.retract("q1", "found it in the docs")
    assert (retracted.ended, retracted.end_reason, retracted.pending) == (
        "retracted", "found it in the docs", False
    )  # fmt: skip
    assert await store.pending_interactions("r1") == []
    with pytest.raises(QuestionClosedError) as info:
        await store.answer("q1", "formal")
    assert (info.value.ended, info.value.reason) == ("retracted", "found it in the docs")
    again = await store.retract("q1", "twice")  # already ended: unchanged
    assert again.end_reason == "found it in the docs"
    events = await store.events("r1")
    assert [(e.type, e.data.get("reason")) for e in events] == [
        ("interaction_retracted", "found it in the docs")
    ]
    assert await store.drain_messages("r1", "gatherer") == []  # the asker knows already
    with pytest.raises(NotFoundError):
        await store.retract("nope", "x")


async def test_an_answer_racing_a_retraction_has_exactly_one_outcome(
    store: Store, clock: Clock
) -> None:
    await store.create_run(make_run())
    for n in range(6):
        await store.add_interaction(make_question(f"q{n}", minute=n))
        answer, retraction = await asyncio.gather(
            store.answer(f"q{n}", "formal"), store.retract(f"q{n}", "not needed"),
            return_exceptions=True,
        )  # fmt: skip
        assert not isinstance(retraction, Exception)
        if retraction.ended == "retracted":
            assert isinstance(answer, QuestionClosedError)
        else:  # the answer came first: the asker is told it was answered
            assert not isinstance(answer, Exception) and retraction.answers == "formal"


async def test_amendment_rewrites_a_pending_question_in_place(store: Store, clock: Clock) -> None:
    await asked(store, clock)
    amended = await store.amend(
        "q1", questions=("Formal, casual or playful?",),
        options=(Option("f", "Formal"), Option("c", "Casual"), Option("p", "Playful")),
    )  # fmt: skip
    assert (amended.question, amended.revision) == ("Formal, casual or playful?", 1)
    assert [o.id for o in amended.options] == ["f", "c", "p"]
    (listed,) = await store.pending_interactions("r1")
    assert listed.revision == 1 and listed.question == "Formal, casual or playful?"
    (event,) = await store.events("r1")
    assert (event.type, event.data["revision"]) == ("interaction_amended", 1)
    await store.answer("q1", "p")
    with pytest.raises(AlreadyAnsweredError):
        await store.amend("q1", questions=("too late",))
    await store.add_interaction(make_question("q2", minute=2))
    await store.retract("q2", "never mind")
    with pytest.raises(QuestionClosedError):
        await store.amend("q2", questions=("too late",))
