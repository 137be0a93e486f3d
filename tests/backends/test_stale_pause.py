"""A process killed right after an agent's ``await_answers`` posted its pause record.

The pause record (kind ``await``) is committed before the checkpoint that holds
the pause. A kill -9 between the two leaves the record open while the run's
checkpoint still has the agent running; the resumed run re-runs the agent,
which calls ``await_answers`` again (under a new call id, as a real model
would). Whatever happens next, the old record must not stay open: before,
it lingered until the run ended and was then withdrawn, unanswered and with
no ``interaction_answered`` event (what the crash campaign reported as an
``answer-event`` violation).

The killed process runs the in-process loop; the resumed run goes through the
scripted provider and through the real claude CLI (against the loopback
scenario server).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from iterion_nb.runtime.records import Interaction
from iterion_nb.session import RunHandle

from .conftest import Harness
from .test_interaction import wait_for
from .test_reask_after_rerun import KINDS, ask, killed_after_post

ASKER = """\
schema result:
  summary: string

agent asker:
  model: "scripted"
  interaction: async
  output: result

workflow w:
  entry: asker
  asker -> done
"""

QUESTION = "killed-toolu_01Asked"
STALE = "killed-toolu_01AwaitFirst-await"


def waits(call_id: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "await_answers", "id": call_id, "input": {}}]}


#: The re-run: the same question and wait, under the new call ids a real model would mint.
RERUN = {"nodes": {"asker": [
    {"tool_calls": [ask("toolu_01AskedAgain")]}, waits("toolu_01AwaitSecond"),
    {"output": {"summary": "done"}},
]}}  # fmt: skip


def killed_while_pausing(tmp_path: Path) -> Any:
    """The store a process left when killed after posting its pause record (its 2nd post)."""
    return killed_after_post(tmp_path, ASKER, {"nodes": {"asker": [
        {"tool_calls": [ask("toolu_01Asked")]}, waits("toolu_01AwaitFirst"),
        {"output": {"summary": "never reached"}},
    ]}}, at=2)  # fmt: skip


async def pause_records(run: RunHandle) -> list[Interaction]:
    return [q for q in await run.session.store.interactions(run.id) if q.kind == "await"]


async def answered_events(run: RunHandle) -> Counter[str]:
    return Counter(e.data["interaction_id"] for e in await run.events()
                   if e.type == "interaction_answered")  # fmt: skip


async def left_open(run: RunHandle) -> None:
    """What the killed process left: its question and its pause, both open."""
    assert [q.id for q in await run.pending_questions()] == [QUESTION]
    (stale,) = await pause_records(run)
    assert (stale.id, stale.pending, stale.waits_on) == (STALE, True, (QUESTION,))
    assert (await run.refresh()).status == "interrupted"  # its owner died; it was not paused


@pytest.mark.parametrize("provider_kind", KINDS)
async def test_answered_before_the_rerun_the_old_pause_is_closed_at_once(
    harness_factory: Any, tmp_path: Path
) -> None:
    """Every answer is in when the re-run waits: it does not pause, and closes the old record.

    The old record is answered by iterion with the answer it waited on, with
    its one event, while the agent is still working (not at the run's end).
    """
    store = killed_while_pausing(tmp_path)
    h: Harness = harness_factory(RERUN, store=store)
    try:
        before = h.session.run("killed")
        await left_open(before)
        await before.answer(QUESTION, "casual")

        resumed = await h.session.resume("killed")
        assert await resumed.wait(60) == "finished", resumed.error
        (closed,) = await pause_records(resumed)  # no second pause record was posted
        assert (closed.id, closed.pending, closed.answered_by) == (STALE, False, "iterion")
        assert closed.answers == {"answers": ["casual"]}
        assert (await answered_events(resumed))[STALE] == 1
        assert "casual" in h.last_user_text("asker", 2)  # the await_answers result
        withdrawn = [e for e in await resumed.events() if e.type == "interaction_withdrawn"]
        assert withdrawn == []
    finally:
        await h.session.close()
        await store.close()


@pytest.mark.parametrize("provider_kind", KINDS)
async def test_still_waiting_the_rerun_pauses_on_one_record(
    harness_factory: Any, tmp_path: Path
) -> None:
    """An answer still missing: the re-run pauses under its new call's record, and only it.

    The old record is closed (answered by iterion, its missing answer ``None``)
    as the new one is posted, so the run has one open pause; answering the
    question resumes the run from the new one, and it finishes.
    """
    store = killed_while_pausing(tmp_path)
    h: Harness = harness_factory(RERUN, store=store)
    try:
        await left_open(h.session.run("killed"))
        resumed = await h.session.resume("killed")
        await wait_for(lambda: _paused(resumed), timeout=60)
        fresh = "killed-toolu_01AwaitSecond-await"
        records = {r.id: r for r in await pause_records(resumed)}
        assert sorted(records) == sorted([STALE, fresh])
        assert [r.id for r in records.values() if r.pending] == [fresh]
        assert records[STALE].answers == {"answers": [None]}
        assert records[STALE].answered_by == "iterion"

        await resumed.answer(QUESTION, "formal")
        assert await resumed.wait(60) == "finished", resumed.error
        done = {r.id: r for r in await pause_records(resumed)}
        assert done[fresh].answers == {"answers": ["formal"]}
        assert not any(r.pending for r in done.values())
        events = await answered_events(resumed)
        assert (events[STALE], events[fresh]) == (1, 1)
    finally:
        await h.session.close()
        await store.close()


async def _paused(run: RunHandle) -> bool:
    record = await run.refresh()
    return record.status == "paused_waiting_human"
