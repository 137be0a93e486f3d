"""Answer replay (issue 19): pinned answers answer matching questions at once, in order.

With the real scripted agent loop (async and blocking questions) and human
gates, on the memory and DuckDB stores; the CLI's export / --answers /
--answers-from round trip is in tests/cli/test_replay_cli.py.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import iterion_nb as it
from iterion_nb.errors import NotFoundError
from iterion_nb.runtime import replay
from iterion_nb.runtime.ports import Store
from iterion_nb.runtime.replay import AnswersFileError
from iterion_nb.session import RunHandle, Session
from iterion_nb.session.launch import read_answers
from iterion_nb.store import MemoryStore

from .conftest import SessionFactory

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = (ROOT / "examples" / "async_questions.iter").read_text()
SCENARIO = ROOT / "examples" / "async_questions.scenario.yaml"

LOOP = """\
schema verdict:
  approved: bool
  note: string

human review:
  instructions: "Approve the draft?"
  output: verdict

workflow w:
  entry: review
  review -> done when approved
  review -> review when not approved as again(3)
"""

BLOCKING = """\
agent reviewer:
  model: "scripted"
  interaction: human
  user: "Decide whether to ship."

workflow ship_it:
  entry: reviewer
  reviewer -> done
"""
BLOCKING_SCENARIO: dict[str, Any] = {
    "nodes": {
        "reviewer": [
            {"tool_calls": [{"name": "ask_user", "input": {
                "question": "Ship on Friday?",
                "options": [{"id": "yes", "label": "Yes"}, {"id": "no", "label": "No"}]}}]},
            {"text": "Shipping as the person said."},
        ]
    }
}  # fmt: skip


def normalized(value: Any, run_ids: list[str]) -> Any:
    """A value with run ids, interaction ids and times taken out."""
    text = repr(value)
    for run_id in run_ids:
        text = text.replace(run_id, "RUN")
    return re.sub(r"\d{4}-\d\d-\d\dT[\d:.+]+", "TIME", text)


async def story(run: RunHandle) -> list[tuple[str, str | None, Any]]:
    """What a run did, event by event, without times and ids."""
    return [
        (e.type, e.node_id, normalized(e.data, [run.id]))
        for e in await run.events()
        if e.type not in ("lease_taken",)
    ]


async def by_person(session: Session) -> RunHandle:
    """The example, answered by a person: the first by its option's label, the second typed."""
    run = await session.start(it.compile(EXAMPLE))
    first = await run.next_question(timeout=10)
    assert first is not None
    await run.answer(first.id, "Casual", answered_by="ada")
    second = await run.next_question(timeout=10)
    assert second is not None
    await run.answer(second.id, "the inbox", answered_by="ada")
    assert await run.wait(10) == "finished"
    return run


@pytest.fixture(params=["memory", "duckdb"])
async def session(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    store: Any = tmp_path / "store" if request.param == "duckdb" else MemoryStore()
    s = Session(store, scenario=SCENARIO)
    yield s
    await s.close()


async def test_a_replayed_run_reproduces_the_recorded_one(session: Session, tmp_path: Path) -> None:
    recorded = await by_person(session)
    pins = replay.export(await session.store.interactions(recorded.id))
    assert pins == [
        {"node": "gatherer", "question": "Should the notes be formal or casual?",
         "options": ["formal", "casual"], "answer": "casual"},
        {"node": "gatherer", "question": "Which feature should come first?",
         "answer": "the inbox"},
    ]  # fmt: skip
    first = await session.start(it.compile(EXAMPLE), answers=pins)
    assert await first.wait(10) == "finished"  # nobody answered anything
    second = await session.start(it.compile(EXAMPLE), answers_from=first.id)
    assert await second.wait(10) == "finished"
    ids = [recorded.id, first.id, second.id]
    assert normalized(first.outputs, ids) == normalized(recorded.outputs, ids)
    assert normalized(second.outputs, ids) == normalized(recorded.outputs, ids)
    # two replays of one recording: the same events, in the same order
    assert await story(first) == await story(second)
    asked = await session.store.interactions(first.id)
    assert [(q.answers, q.answered_by) for q in asked] == [
        ("casual", "replay"), ("the inbox", "replay"),
    ]  # fmt: skip
    # the answers reached the agent as a person's do: events say who
    answered = [e.data for e in await first.events() if e.type == "interaction_answered"]
    assert [(a["kind"], a["answered_by"]) for a in answered] == [("async", "replay")] * 2


async def test_the_kth_ask_of_one_question_gets_the_kth_answer(
    make_session: SessionFactory, tmp_path: Path
) -> None:
    session = make_session()
    pins = [
        {
            "node": "review",
            "question": "Approve the draft?",
            "answer": {"approved": False, "note": n},
        }
        for n in ("tone", "typo")
    ]
    run = await session.start(it.compile(LOOP), answers=pins)
    assert await run.wait(10) == "paused_waiting_human"  # the third ask has no pin: a person
    asked = await session.store.interactions(run.id)
    assert [(q.answers, q.answered_by) for q in asked] == [
        ({"approved": False, "note": "tone"}, "replay"),
        ({"approved": False, "note": "typo"}, "replay"),
        (None, None),
    ]
    await run.answer(asked[2].id, {"approved": True, "note": "good"})
    assert await run.wait(10) == "finished"
    assert run.outputs["review"] == {"approved": True, "note": "good"}
    # the export of that run replays all three, with nobody there
    again = await session.start(
        it.compile(LOOP),
        answers={"answers": replay.export(await session.store.interactions(run.id))},
    )
    assert await again.wait(10) == "finished"
    assert again.outputs["review"] == {"approved": True, "note": "good"}


async def test_a_pin_that_no_longer_fits_is_asked(make_session: SessionFactory) -> None:
    session = make_session()
    pins = [{"node": "review", "question": "Approve the draft?", "answer": "yes"}]  # not its form
    run = await session.start(it.compile(LOOP), answers=pins)
    assert await run.wait(10) == "paused_waiting_human"
    (question,) = await run.pending_questions()
    assert question.answered_by is None
    other = [{"node": "review", "question": "Approve the other draft?", "answer": {}}]
    run = await session.start(it.compile(LOOP), answers=other)  # another question: not a match
    assert await run.wait(10) == "paused_waiting_human"


async def test_a_blocking_question_is_answered_without_a_pause(tmp_path: Path) -> None:
    session = Session(MemoryStore(), scenario=BLOCKING_SCENARIO)
    try:
        pins = [{"node": "reviewer", "question": "Ship on Friday?", "options": ["yes", "no"],
                 "answer": "yes"}]  # fmt: skip
        run = await session.start(it.compile(BLOCKING), answers=pins)
        assert await run.wait(10) == "finished"
        types = [e.type for e in await run.events()]
        assert "run_paused" not in types and "interaction_answered" in types
        replayed = await run.events()
        results = [e for e in replayed if e.type == "llm_request"][-1].data["messages"]
        assert "yes" in repr(results[-1])  # the tool result the model read
        # options changed since: the pin does not fit, the person is asked
        moved = [pins[0] | {"options": ["yes", "later"]}]
        run = await session.start(it.compile(BLOCKING), answers=moved)
        assert await run.wait(10) == "paused_waiting_human"
    finally:
        await session.close()


def test_bad_answers_files_say_what_and_where(tmp_path: Path) -> None:
    bad = tmp_path / "answers.yaml"
    bad.write_text("answers:\n  - node: a\n    question: [1\n")
    with pytest.raises(AnswersFileError, match=r"answers\.yaml:\d+:\d+: "):
        read_answers(bad)
    bad.write_text("answers:\n  - node: a\n    question: q\n")
    with pytest.raises(AnswersFileError, match="answer 1: 'answer' is missing"):
        read_answers(bad)
    bad.write_text("answers:\n  - node: a\n    question: q\n    answer: x\n    who: me\n")
    with pytest.raises(AnswersFileError, match="answer 1: unknown field 'who'"):
        read_answers(bad)
    bad.write_text("answers:\n  - node: a\n    questoin: q\n    answer: x\n")
    with pytest.raises(AnswersFileError) as caught:
        read_answers(bad)
    assert str(caught.value) == (
        f"{bad}: answer 1: unknown field 'questoin'; did you mean 'question'? (an answer may"
        " hold: node, question, options, answer)"
    )
    bad.write_text("answers:\n  - node: a\n    question: q\n    answer: x\n    answer: y\n")
    with pytest.raises(AnswersFileError, match=r"answers\.yaml:5:5: the key 'answer' is given tw"):
        read_answers(bad)
    bad.write_text("answers: 3\n")
    with pytest.raises(AnswersFileError, match="expected a list of answers"):
        read_answers(bad)
    with pytest.raises(AnswersFileError, match="cannot read it"):
        read_answers(tmp_path / "missing.yaml")
    with pytest.raises(AnswersFileError, match="answer 2: 'options' must be a list"):
        read_answers([{"node": "a", "question": "q", "answer": 1},
                      {"node": "a", "question": "q", "answer": 1, "options": "x"}])  # fmt: skip


async def test_nothing_is_recorded_for_bad_pins(store: Store, tmp_path: Path) -> None:
    session = Session(store)
    try:
        with pytest.raises(AnswersFileError):
            await session.start(it.compile(LOOP), answers=[{"node": "review"}])
        with pytest.raises(NotFoundError, match="nope"):
            await session.start(it.compile(LOOP), answers_from="nope")
        stray = [{"node": "reveiw", "question": "Approve the draft?", "answer": {}}]
        with pytest.raises(AnswersFileError) as caught:  # it would answer nothing, silently
            await session.start(it.compile(LOOP), answers=stray)
        assert str(caught.value) == (
            "the answers: answer 1: node 'reveiw' is not in workflow 'w'; did you mean"
            " 'review'? (its nodes: review)"
        )
        pinned = tmp_path / "answers.yaml"
        pinned.write_text("answers:\n  - node: nobody\n    question: q\n    answer: x\n")
        with pytest.raises(AnswersFileError) as caught:
            await session.start(it.compile(LOOP), answers=pinned)
        assert str(caught.value) == (
            f"{pinned}: answer 1: node 'nobody' is not in workflow 'w' (its nodes: review)"
        )
        assert await session.runs() == []
    finally:
        await session.close()
