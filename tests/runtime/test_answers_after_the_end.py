"""Answers to a run that ended for good, and answers given all at once.

A run that ends ``finished`` or ``failed`` withdraws its open questions, in
the commit that records its end (kill -9 right after it: none is left open):
no agent would read an answer, so none is taken (410 ``retracted`` on REST)
and they leave every inbox. A run that can still go on (``failed_resumable``,
``cancelled``, ``interrupted``) keeps them. ``answer_human`` writes all of its
answers or none.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

import iterion_nb as it
from iterion_nb.errors import AlreadyAnsweredError, QuestionClosedError
from iterion_nb.runtime.answers import AnswerService
from iterion_nb.runtime.ports import Store
from iterion_nb.runtime.records import Interaction
from iterion_nb.session import RunHandle, Session

ASKS_THEN_ENDS = """\
schema out:
  text: string

agent a:
  model: "scripted"
  interaction: async
  output: out

workflow w:
  entry: a
  a -> {after}
"""
ASK = {"tool_calls": [{"name": "ask_user_async", "input": {"question": "Formal or casual?"}}]}
SCENARIO = {"nodes": {"a": [ASK, {"output": {"text": "drafted"}}]}}

ASKS_TWO_AND_AWAITS = """\
schema out:
  text: string

agent asker:
  model: "scripted"
  interaction: async
  output: out

workflow w:
  entry: asker
  asker -> done
"""
TWO = {
    "nodes": {
        "asker": [
            {"tool_calls": [
                {"name": "ask_user_async", "input": {"question": "Q1?"}},
                {"name": "ask_user_async", "input": {"question": "Q2?"}},
            ]},
            {"tool_calls": [{"name": "await_answers", "input": {}}]},
            {"output": {"text": "v1"}},
        ]
    }
}  # fmt: skip


async def ended_with_a_question(store: Store, after: str) -> tuple[str, Interaction]:
    session = Session(store, scenario=SCENARIO)
    try:
        run = await session.start(it.compile(ASKS_THEN_ENDS.format(after=after)))
        await run.wait(10)
        (asked,) = await store.interactions(run.id)
        return run.id, asked
    finally:
        await session.close()


@pytest.mark.parametrize(("after", "status"), [("done", "finished"), ("fail", "failed")])
async def test_a_run_that_ended_withdraws_its_open_questions(
    store: Store, after: str, status: str
) -> None:
    run_id, asked = await ended_with_a_question(store, after)
    assert (await store.get_run(run_id)).status == status
    assert asked.ended == "retracted" and asked.answered_at is None
    assert f"its run {run_id} {status} before it was answered" in (asked.end_reason or "")
    assert await store.pending_interactions(run_id) == []  # no inbox lists it
    assert asked.id not in {q.id for q in await store.pending_interactions()}
    events = [e.type for e in await store.events(run_id)]
    assert "interaction_retracted" in events
    with pytest.raises(QuestionClosedError) as refused:
        await AnswerService(store).answer(run_id, asked.id, "formal", "ana")
    assert refused.value.ended == "retracted"
    assert str(refused.value) == (
        f"question '{asked.id}' was withdrawn: its run {run_id} {status} before it was"
        " answered, and nothing would read an answer; it takes no answer"
    )
    assert (await store.get_interaction(asked.id)).answers is None  # nothing was stored


async def test_an_open_question_of_an_ended_run_is_withdrawn_when_answered(store: Store) -> None:
    # a run that ended before this rule (or whose process died between its end and the
    # withdrawal) still lists the question: the first answer withdraws it, and is refused
    run_id, _ = await ended_with_a_question(store, "done")
    open_again = Interaction(
        "old-q", run_id, "a", "async", ("Still there?",), datetime.now(UTC), branch_id="b0"
    )
    await store.add_interaction(open_again)
    with pytest.raises(QuestionClosedError, match=r"was withdrawn: its run \w+ finished"):
        await AnswerService(store).answer(run_id, "old-q", "yes", "ana")
    now = await store.get_interaction("old-q")
    assert (now.ended, now.answers) == ("retracted", None)


async def test_a_run_that_can_go_on_keeps_its_questions(store: Store) -> None:
    typed_end = ASKS_THEN_ENDS.format(after="stop") + "\nfail stop:\n  resumable: true\n"
    session = Session(store, scenario=SCENARIO)
    try:
        run = await session.start(it.compile(typed_end))
        assert await run.wait(10) == "failed_resumable"
        (asked,) = await run.pending_questions()
        outcome = await AnswerService(store).answer(run.id, asked.id, "formal", "ana")
        assert (outcome.queued, outcome.run_status) == (True, "failed_resumable")
        assert (await store.get_interaction(asked.id)).answers == "formal"
    finally:
        await session.close()


async def paused_on_two(session: Session) -> tuple[RunHandle, Interaction, Interaction]:
    """A run of ASKS_TWO_AND_AWAITS paused on its two questions (Q1, Q2, in that order)."""
    run = await session.start(it.compile(ASKS_TWO_AND_AWAITS))
    assert await run.wait(10) == "paused_waiting_human"
    q1, q2 = sorted((q for q in await run.pending_questions() if q.kind == "async"),
                    key=lambda q: q.question)  # fmt: skip
    return run, q1, q2


async def test_answer_human_writes_every_answer_or_none(store: Store) -> None:
    session = Session(store, scenario=TWO)
    try:
        run, q1, q2 = await paused_on_two(session)
        service = AnswerService(store)
        await service.answer(run.id, q1.id, "A1", "ana")
        # one of them answered already, by someone else: refused before anything is written
        with pytest.raises(AlreadyAnsweredError):
            await service.answer_human(run.id, {q2.id: "A2", q1.id: "again"}, "ops")
        assert (await store.get_interaction(q2.id)).pending
        assert (await run.refresh()).status == "paused_waiting_human"
        # a retry repeating what is in (same answer, same person) writes the rest: it resumes
        await service.answer_human(run.id, {q1.id: "A1", q2.id: "A2"}, "ana")
        assert await run.wait(10) == "finished", run.error
        assert (await store.get_interaction(q2.id)).answers == "A2"
    finally:
        await session.close()


async def test_a_retry_giving_an_option_by_its_label_is_taken_as_done(store: Store) -> None:
    """The option was recorded by its id: comparing the raw label refused the retry (409)."""
    labelled = {"tool_calls": [
        {"name": "ask_user_async", "input": {"question": "Q1?", "options": [
            {"id": "f", "label": "Formal"}, {"id": "c", "label": "Casual"}]}},
        {"name": "ask_user_async", "input": {"question": "Q2?"}},
    ]}  # fmt: skip
    scenario = {"nodes": {"asker": [labelled, *TWO["nodes"]["asker"][1:]]}}
    session = Session(store, scenario=scenario)
    try:
        run, q1, q2 = await paused_on_two(session)
        service = AnswerService(store)
        await service.answer(run.id, q1.id, "Formal", "ana")  # kept as "f"
        await service.answer_human(run.id, {q1.id: "Formal", q2.id: "A2"}, "ana")
        assert await run.wait(10) == "finished", run.error
        assert (await store.get_interaction(q1.id)).answers == "f"
    finally:
        await session.close()


#: Runs ASKS_THEN_ENDS in this process and kills it with SIGKILL the moment the
#: commit that records the run's end has returned, before anything else happens.
KILLED_AT_THE_END = """
import asyncio, os, signal, sys
import iterion_nb as it
from iterion_nb.store.duckdb_store import DuckDBStore

settle = DuckDBStore.settle_run

async def settle_then_die(self, *args, **kwargs):
    settled = await settle(self, *args, **kwargs)
    if kwargs["status"] == "finished":
        os.kill(os.getpid(), signal.SIGKILL)
    return settled

DuckDBStore.settle_run = settle_then_die

async def main():
    session = it.Session(sys.argv[1], scenario=SCENARIO)
    run = await session.start(it.compile(SOURCE))
    print(run.id, flush=True)
    await run.wait(30)

asyncio.run(main())
"""


async def test_kill_9_just_after_the_end_leaves_no_question_open(tmp_path: Path) -> None:
    """The withdrawal is in the end's own commit: no moment between them to die in."""
    script = f"SCENARIO = {SCENARIO!r}\nSOURCE = {ASKS_THEN_ENDS.format(after='done')!r}\n"
    db = tmp_path / "runs.duckdb"
    proc = subprocess.run(
        [sys.executable, "-c", script + KILLED_AT_THE_END, str(db)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    run_id = proc.stdout.split()[0]
    session = Session(db)
    try:
        assert (await session.store.get_run(run_id)).status == "finished"
        (asked,) = await session.store.interactions(run_id)
        assert asked.ended == "retracted" and asked.answers is None
        assert await session.store.pending_interactions() == []
        types = [e.type for e in await session.store.events(run_id)]
        assert types[-2:] == ["interaction_retracted", "run_finished"]
    finally:
        await session.close()
