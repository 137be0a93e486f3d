from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from iterion_nb.errors import AlreadyAnsweredError, ConflictError, InvalidAnswerError, NotFoundError
from iterion_nb.runtime.ports import Store

from .conftest import make_question, make_run


async def seeded(store: Store) -> None:
    await store.create_run(make_run("r1"))
    await store.create_run(make_run("r2"))
    await store.add_interaction(make_question("q1", minute=1))
    await store.add_interaction(make_question("q2", node_id="other", minute=2))
    await store.add_interaction(make_question("q3", kind="human", minute=3))
    await store.add_interaction(make_question("q4", run_id="r2", minute=4))


async def test_interaction_round_trips(store: Store) -> None:
    await store.create_run(make_run())
    question = make_question(question='Tone? "é" 🙂', branch_id="b2", allow_free_text=False)
    assert await store.add_interaction(question) == question
    assert await store.get_interaction("q1") == question
    assert question.pending


async def test_pending_filters_by_run_node_and_kind(store: Store) -> None:
    await seeded(store)
    ids = lambda found: [i.id for i in found]  # noqa: E731
    assert ids(await store.pending_interactions()) == ["q1", "q2", "q3", "q4"]
    assert ids(await store.pending_interactions("r1")) == ["q1", "q2", "q3"]
    assert ids(await store.pending_interactions("r1", node_id="gatherer")) == ["q1", "q3"]
    assert ids(await store.pending_interactions("r1", kind="async")) == ["q1", "q2"]
    assert ids(await store.pending_interactions("r1", node_id="gatherer", kind="human")) == ["q3"]


async def test_answer_records_and_queues_the_message_for_the_asking_node(store: Store) -> None:
    await seeded(store)
    result = await store.answer("q1", "formal, please", answered_by="ana@cli")
    answered = result.interaction
    assert (answered.answers, answered.answered_by, answered.pending) == (
        "formal, please", "ana@cli", False
    )  # fmt: skip
    assert answered.answered_at is not None
    assert result.message is not None
    assert result.message.text == (
        '[Answer to question q1] Q: "Formal or casual?" — A: formal, please'
    )
    assert await store.get_interaction("q1") == answered
    assert [i.id for i in await store.pending_interactions("r1")] == ["q2", "q3"]
    assert await store.drain_messages("r1", "other") == []
    (delivered,) = await store.drain_messages("r1", "gatherer")
    assert delivered.text == result.message.text and delivered.delivered_at is not None


async def test_structured_answers_round_trip_and_read_as_json(store: Store) -> None:
    await seeded(store)
    answer: dict[str, Any] = {"choice": "f", "notes": ["ü", {"n": 1.5}]}
    result = await store.answer("q1", answer)
    assert (await store.get_interaction("q1")).answers == answer
    assert result.message is not None
    assert result.message.text.endswith('A: {"choice": "f", "notes": ["ü", {"n": 1.5}]}')


async def test_blocking_kinds_queue_no_message(store: Store) -> None:
    await seeded(store)
    result = await store.answer("q3", "approved")
    assert result.message is None
    assert await store.drain_messages("r1", "gatherer") == []


async def test_second_answer_is_a_conflict_carrying_the_first(store: Store) -> None:
    await seeded(store)
    await store.answer("q1", "formal")
    with pytest.raises(AlreadyAnsweredError) as info:
        await store.answer("q1", "casual")
    assert isinstance(info.value, ConflictError)
    assert info.value.existing == "formal"
    assert (await store.get_interaction("q1")).answers == "formal"
    assert len(await store.drain_messages("r1", "gatherer")) == 1


async def test_bad_answers_are_refused_and_nothing_changes(store: Store) -> None:
    await seeded(store)
    with pytest.raises(NotFoundError) as info:
        await store.answer("nope", "x")
    assert info.value.kind == "interaction"
    with pytest.raises(InvalidAnswerError, match="65,537 bytes"):
        await store.answer("q1", "x" * (64 * 1024 - 1))  # 65,537 bytes as JSON
    with pytest.raises(InvalidAnswerError, match="JSON data"):
        await store.answer("q1", {"when": object()})
    assert (await store.get_interaction("q1")).pending
    await store.answer("q1", "y" * (64 * 1024 - 2))  # exactly at the limit, as JSON


async def test_ten_concurrent_answers_exactly_one_wins(store: Store) -> None:
    await seeded(store)
    outcomes = await asyncio.gather(
        *(store.answer("q1", f"answer {n}") for n in range(10)), return_exceptions=True
    )
    winners = [o for o in outcomes if not isinstance(o, BaseException)]
    losers = [o for o in outcomes if isinstance(o, AlreadyAnsweredError)]
    assert (len(winners), len(losers)) == (1, 9)
    assert all(loser.existing == winners[0].interaction.answers for loser in losers)
    assert len(await store.drain_messages("r1", "gatherer")) == 1


async def test_ten_answers_from_ten_threads_exactly_one_wins(store: Store) -> None:
    await seeded(store)
    results: list[str] = []

    def answer_from_thread(n: int) -> None:
        try:
            asyncio.run(store.answer("q2", f"thread {n}"))
            results.append("won")
        except AlreadyAnsweredError:
            results.append("conflict")

    threads = [threading.Thread(target=answer_from_thread, args=(n,)) for n in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["conflict"] * 9 + ["won"]
    assert len(await store.drain_messages("r1", "other")) == 1


async def test_interactions_lists_answered_and_pending(store: Store) -> None:
    await seeded(store)
    await store.answer("q2", "ok")
    assert [(i.id, i.pending) for i in await store.interactions("r1")] == [
        ("q1", True), ("q2", False), ("q3", True)
    ]  # fmt: skip


async def test_await_interactions_keep_what_they_wait_on(store: Store) -> None:
    await seeded(store)
    pause = make_question("w1", kind="await", question="waiting", waits_on=("q1", "q2"))
    await store.add_interaction(pause)
    assert (await store.get_interaction("w1")).waits_on == ("q1", "q2")
    with pytest.raises(ConflictError):
        await store.add_interaction(pause)
    with pytest.raises(NotFoundError):
        await store.add_interaction(make_question("x", run_id="ghost"))
