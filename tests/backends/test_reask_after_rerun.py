"""A node re-run asks its questions again under new call ids: the questions it posted are reused.

Real models mint a fresh tool-call id at every call, so a question asked again
by a node re-run (resumed after a failure, or after its process died) has a
new id; it is recognised by its node, visit, kind, text and options. Here
the scenarios give explicit, different call ids to each run, as a real model
would; the runs go through the scripted provider and through the real claude
CLI (against the loopback scenario server), on a DuckDB store.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from iterion_nb.backends import reask
from iterion_nb.runtime.ports import Store
from iterion_nb.runtime.records import Interaction
from iterion_nb.session import RunHandle
from iterion_nb.store import open_duckdb_store

from .conftest import Harness
from .test_interaction import wait_for

KINDS = ["scripted", "claude_code"]

GATED = """\
schema result:
  summary: string

agent asker:
  model: "scripted"
  interaction: async
  output: result

await_answers gate:
  from: asker
  timeout: "30s"

workflow w:
  entry: asker
  asker -> gate
  gate -> done
"""

#: An asker whose verdict loops it back (ok: false) up to three times.
VERDICT = """\
schema verdict:
  ok: bool

agent asker:
  model: "scripted"
  interaction: async
  output: verdict
"""

LOOPED = f"""{VERDICT}
workflow w:
  entry: asker
  asker -> done when ok
  asker -> asker when not ok as again(3)
"""

TONE = "Formal or casual?"
#: Two final answers the schema refuses: the node fails, resumably.
REFUSED = [{"output": {"wrong": 1}}, {"output": {"wrong": 2}}]


def ask(call_id: str, question: str = TONE, **extra: Any) -> dict[str, Any]:
    return {"name": "ask_user_async", "id": call_id, "input": {"question": question, **extra}}


async def failed_run(h: Harness, source: str) -> RunHandle:
    """Start ``source``; it fails resumably; the session goes away (the run stays)."""
    run = await h.start(source)
    assert await run.wait(60) == "failed_resumable", run.error
    await h.session.close()
    return run


async def announced(run: RunHandle) -> list[str]:
    return [e.data["interaction_id"] for e in await run.events()
            if e.type == "human_input_requested"]  # fmt: skip


async def asked(run: RunHandle) -> list[Interaction]:
    return [q for q in await run.questions() if q.kind == "async"]


@pytest.mark.parametrize("provider_kind", KINDS)
async def one_question_then_the_gate_passes(
    h: Harness, resumed: RunHandle, posted: Interaction
) -> None:
    """The re-run asked ``posted`` again under a new call id: it is the one question, and
    answering it lets the gate pass with that answer."""
    await wait_for(lambda: _finished(resumed, "asker"), timeout=60)
    assert [q.id for q in await resumed.pending_questions()] == [posted.id]
    assert f"question posted (id {posted.id})" in h.last_user_text("asker", 1)
    await resumed.answer(posted.id, "casual")
    assert await resumed.wait(60) == "finished", resumed.error
    answers = resumed.outputs["gate"]["answers"]
    assert [(a["interaction_id"], a["answer"]) for a in answers] == [(posted.id, "casual")]
    assert [q.id for q in await asked(resumed)] == [posted.id]


async def test_a_question_asked_again_after_a_failure_is_not_posted_twice(
    harness_factory: Any, duckdb_store: Any
) -> None:
    """The reviewer's scenario: resume with a new call id, one question, the gate passes."""
    first: Harness = harness_factory(
        {"nodes": {"asker": [{"tool_calls": [ask("toolu_01AbCrandomFirst")]}, *REFUSED]}},
        store=duckdb_store,
    )
    run = await failed_run(first, GATED)
    (posted,) = await run.pending_questions()
    assert posted.id == f"{run.id}-toolu_01AbCrandomFirst"

    second: Harness = harness_factory({"nodes": {"asker": [
        {"tool_calls": [ask("toolu_01XyZrandomSecond")]}, {"output": {"summary": "ok"}},
    ]}}, store=duckdb_store)  # fmt: skip
    resumed = await second.session.resume(run.id)
    await one_question_then_the_gate_passes(second, resumed, posted)
    assert await announced(resumed) == [posted.id]  # announced once, when first asked


@pytest.mark.parametrize("provider_kind", KINDS)
async def test_an_answered_question_asked_again_comes_back_with_its_answer(
    harness_factory: Any, duckdb_store: Any
) -> None:
    options = [{"id": "f", "label": "Formal"}, {"id": "c", "label": "Casual"}]
    first: Harness = harness_factory(
        {"nodes": {"asker": [{"tool_calls": [ask("toolu_01One", options=options)]}, *REFUSED]}},
        store=duckdb_store,
    )
    run = await failed_run(first, GATED)
    (posted,) = await run.pending_questions()
    await first.session.run(run.id).answer(posted.id, "c")  # while the run is down

    second: Harness = harness_factory({"nodes": {"asker": [
        {"tool_calls": [ask("toolu_01Two", options=options)]}, {"output": {"summary": "ok"}},
    ]}}, store=duckdb_store)  # fmt: skip
    resumed = await second.session.resume(run.id)
    assert await resumed.wait(60) == "finished", resumed.error
    told = second.last_user_text("asker", 1)
    assert f"question {posted.id} was asked before and is answered: c" in told
    assert "[Answer to question" not in told  # not delivered a second time
    assert [(q.id, q.answers) for q in await asked(resumed)] == [(posted.id, "c")]
    assert await announced(resumed) == [posted.id]
    assert [a["interaction_id"] for a in resumed.outputs["gate"]["answers"]] == [posted.id]


@pytest.mark.parametrize("provider_kind", KINDS)
async def test_identical_questions_asked_again_take_the_earlier_ones_in_order(
    harness_factory: Any, duckdb_store: Any
) -> None:
    first: Harness = harness_factory({"nodes": {"asker": [
        {"tool_calls": [ask("toolu_01A1"), ask("toolu_01A2"), ask("toolu_01A3", "Length?")]},
        *REFUSED,
    ]}}, store=duckdb_store)  # fmt: skip
    run = await failed_run(first, GATED)
    one, two, length = (f"{run.id}-toolu_01A{n}" for n in (1, 2, 3))
    await first.session.run(run.id).answer(one, "formal")

    second: Harness = harness_factory({"nodes": {"asker": [
        {"tool_calls": [ask("toolu_01B1", "Length?"), ask("toolu_01B2"), ask("toolu_01B3"),
                        ask("toolu_01B4")]},
        {"output": {"summary": "ok"}},
    ]}}, store=duckdb_store)  # fmt: skip
    resumed = await second.session.resume(run.id)
    await wait_for(lambda: _finished(resumed, "asker"), timeout=60)
    told = second.last_user_text("asker", 1)
    assert f"question posted (id {length})" in told
    assert f"question {one} was asked before and is answered: formal" in told
    assert f"question posted (id {two})" in told
    fourth = f"{run.id}-toolu_01B4"  # a third identical ask: none left to take, a new one
    assert f"question posted (id {fourth})" in told
    assert {q.id for q in await resumed.pending_questions()} == {two, length, fourth}
    assert await announced(resumed) == [one, two, length, fourth]
    await resumed.cancel()


@pytest.mark.parametrize("provider_kind", KINDS)
async def test_the_same_question_in_a_later_loop_iteration_is_a_new_one(
    harness_factory: Any, duckdb_store: Any
) -> None:
    first: Harness = harness_factory({"nodes": {"asker": {"visits": [
        [{"tool_calls": [ask("toolu_01Visit0")]}, {"output": {"ok": False}}],
        [{"tool_calls": [ask("toolu_01Visit1")]}, *REFUSED],
    ]}}}, store=duckdb_store)  # fmt: skip
    run = await failed_run(first, LOOPED)
    earlier, current = f"{run.id}-toolu_01Visit0", f"{run.id}-toolu_01Visit1"
    assert [q.id for q in await asked(run)] == [earlier, current]  # a new one per iteration

    second: Harness = harness_factory({"nodes": {"asker": {"visits": [
        [],
        [{"tool_calls": [ask("toolu_01Visit1Again")]}, {"output": {"ok": True}}],
    ]}}}, store=duckdb_store)  # fmt: skip
    resumed = await second.session.resume(run.id)
    assert await resumed.wait(60) == "finished", resumed.error
    # the re-run of the second iteration takes its own question, not the first iteration's
    assert f"question posted (id {current})" in second.last_user_text("asker", 1)
    assert [q.id for q in await asked(resumed)] == [earlier, current]
    assert await announced(resumed) == [earlier, current]


async def _finished(run: RunHandle, node: str, times: int = 1) -> bool:
    finished = [e for e in await run.events() if e.type == "node_finished" and e.node_id == node]
    return len(finished) >= times


@pytest.mark.parametrize("provider_kind", KINDS)
async def test_a_conversation_resumed_after_a_pause_asks_anew(
    harness_factory: Any, duckdb_store: Any
) -> None:
    """Its own questions before the pause are its own: asking the same again is a new question."""
    h: Harness = harness_factory({"nodes": {"asker": [
        {"tool_calls": [ask("toolu_01Before")]},
        {"tool_calls": [{"name": "ask_user", "id": "toolu_01Block",
                         "input": {"question": "Go on?"}}]},
        {"tool_calls": [ask("toolu_01After")]},
        {"output": {"summary": "ok"}},
    ]}}, store=duckdb_store)  # fmt: skip
    run = await h.start(GATED)
    assert await run.wait(60) == "paused_waiting_human", run.error
    await h.session.run(run.id).answer(f"{run.id}-toolu_01Block", "yes")
    await wait_for(lambda: _finished(run, "asker"), timeout=60)
    before, after = f"{run.id}-toolu_01Before", f"{run.id}-toolu_01After"
    assert f"question posted (id {after})" in h.last_user_text("asker", 3)
    assert [q.id for q in await run.pending_questions()] == [before, after]
    await run.cancel()


class ReaskReads:
    """Counts the store reads made from ``backends/reask.py`` (the real methods still read)."""

    def __init__(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: Counter[str] = Counter()
        for name in ("events", "interactions"):
            monkeypatch.setattr(store, name, self._spy(name, getattr(store, name)))

    def _spy(self, name: str, real: Any) -> Any:
        def spy(*args: Any, **kwargs: Any) -> Any:
            if sys._getframe(1).f_code.co_filename == reask.__file__:
                self.calls[name] += 1
            return real(*args, **kwargs)

        return spy

    def take(self) -> dict[str, int]:
        """The reads counted since the last take."""
        counted = dict(self.calls)
        self.calls.clear()
        return counted


LONG_LOOP = LOOPED.replace("again(3)", "again(100)")
ITERATIONS = 30


@pytest.mark.parametrize("provider_kind", ["scripted"])
async def test_a_loop_asking_the_same_question_reads_nothing_for_reasks(
    harness_factory: Any, duckdb_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the node execution a resume re-runs looks for its earlier questions.

    A loop whose agent asks "Formal or casual?" at every iteration, 30 times:
    no iteration is a re-run, so none reads the run's questions or its log for
    them (reading both at every iteration made a long loop quadratic). The
    resume re-runs the failed iteration, which reads them once and takes its
    own question; the iterations after it read nothing again.
    """
    reads = ReaskReads(duckdb_store, monkeypatch)
    n = ITERATIONS
    visits = [[{"tool_calls": [ask(f"toolu_01Loop{i}")]}, {"output": {"ok": False}}]
              for i in range(n - 1)]  # fmt: skip
    visits.append([{"tool_calls": [ask(f"toolu_01Loop{n - 1}")]}, *REFUSED])
    first: Harness = harness_factory({"nodes": {"asker": {"visits": visits}}}, store=duckdb_store)
    run = await failed_run(first, LONG_LOOP)
    ids = [f"{run.id}-toolu_01Loop{i}" for i in range(n)]
    assert [q.id for q in await asked(run)] == ids  # a new question at every iteration
    assert reads.take() == {}

    second: Harness = harness_factory({"nodes": {"asker": {"visits": [
        *([] for _ in range(n - 1)),
        [{"tool_calls": [ask("toolu_01LoopAgain")]}, {"output": {"ok": False}}],
        [{"tool_calls": [ask("toolu_01LoopNext")]}, {"output": {"ok": False}}],
        [{"tool_calls": [ask("toolu_01LoopLast")]}, {"output": {"ok": True}}],
    ]}}}, store=duckdb_store)  # fmt: skip
    resumed = await second.session.resume(run.id)
    assert await resumed.wait(60) == "finished", resumed.error
    assert reads.take() == {"interactions": 1, "events": 1}  # the re-run's, once each
    assert f"question posted (id {ids[-1]})" in second.last_user_text("asker", 1)
    later = [f"{run.id}-toolu_01LoopNext", f"{run.id}-toolu_01LoopLast"]
    assert [q.id for q in await asked(resumed)] == [*ids, *later]


#: A process that runs a workflow and is killed (-9) right after its agent's N-th question
#: is committed, before that question's announcement (``human_input_requested``) is written.
KILLED_AFTER_POST = textwrap.dedent(
    """\
    import asyncio, json, os, signal, sys

    import iterion_nb as it
    from iterion_nb.backends.claw import ClawBackend
    from iterion_nb.backends.claw.loop import AgentLoop
    from iterion_nb.backends.providers import ProviderResolver
    from iterion_nb.store import open_duckdb_store

    db, workdir, source, scenario, at = sys.argv[1:]
    announce, made = AgentLoop._announce, []

    async def killed(self, record, **extra):
        made.append(record.id)
        if len(made) == int(at):
            os.kill(os.getpid(), signal.SIGKILL)
        await announce(self, record, **extra)

    AgentLoop._announce = killed

    async def main():
        backend = ClawBackend(ProviderResolver(json.loads(scenario)).scripted)
        session = it.Session(open_duckdb_store(db), backend=backend, workdir=workdir)
        run = await session.start(it.compile(source), run_id="killed")
        await run.wait(60)

    asyncio.run(main())
    """
)


def killed_after_post(tmp_path: Path, source: str, scenario: dict[str, Any], at: int) -> Store:
    """The store a process killed after posting its ``at``-th question left (run "killed")."""
    db = tmp_path / "killed.duckdb"
    args = [str(db), str(tmp_path), source, json.dumps(scenario), str(at)]
    proc = subprocess.run([sys.executable, "-c", KILLED_AFTER_POST, *args],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    return open_duckdb_store(db)


@pytest.mark.parametrize("provider_kind", KINDS)
async def test_a_question_whose_announcement_was_lost_is_not_posted_twice(
    harness_factory: Any, tmp_path: Path
) -> None:
    """Killed between the question's commit and its announcement: the re-run still takes it."""
    store = killed_after_post(tmp_path, GATED, {"nodes": {"asker": [
        {"tool_calls": [ask("toolu_01KilledFirst")]}, {"output": {"summary": "ok"}},
    ]}}, at=1)  # fmt: skip
    second: Harness = harness_factory({"nodes": {"asker": [
        {"tool_calls": [ask("toolu_01KilledSecond")]}, {"output": {"summary": "ok"}},
    ]}}, store=store)  # fmt: skip
    try:
        before = second.session.run("killed")
        (posted,) = await before.pending_questions()
        assert posted.id == "killed-toolu_01KilledFirst"
        assert await announced(before) == []  # the lost announcement

        resumed = await second.session.resume("killed")
        await one_question_then_the_gate_passes(second, resumed, posted)
    finally:
        await second.session.close()
        await store.close()


LOOPED_GATED = f"""{VERDICT}
await_answers gate:
  from: asker
  timeout: "30s"

workflow w:
  entry: asker
  asker -> gate when ok
  asker -> asker when not ok as again(3)
  gate -> done
"""


@pytest.mark.parametrize("provider_kind", KINDS)
async def test_an_unannounced_question_of_a_later_iteration_is_that_iterations(
    harness_factory: Any, tmp_path: Path
) -> None:
    """Killed after posting in the second iteration: the re-run takes that one, not the first's.

    The first iteration's identical question was announced, and the node finished
    after it; the second's was not announced: it is placed by when it was asked.
    """
    store = killed_after_post(tmp_path, LOOPED_GATED, {"nodes": {"asker": {"visits": [
        [{"tool_calls": [ask("toolu_01Iter0")]}, {"output": {"ok": False}}],
        [{"tool_calls": [ask("toolu_01Iter1")]}, {"output": {"ok": True}}],
    ]}}}, at=2)  # fmt: skip
    second: Harness = harness_factory({"nodes": {"asker": {"visits": [
        [],
        [{"tool_calls": [ask("toolu_01Iter1Again")]}, {"output": {"ok": True}}],
    ]}}}, store=store)  # fmt: skip
    try:
        first, orphan = "killed-toolu_01Iter0", "killed-toolu_01Iter1"
        before = second.session.run("killed")
        assert [q.id for q in await before.pending_questions()] == [first, orphan]
        assert await announced(before) == [first]

        resumed = await second.session.resume("killed")
        await wait_for(lambda: _finished(resumed, "asker", times=2), timeout=60)
        assert f"question posted (id {orphan})" in second.last_user_text("asker", 1)
        assert [q.id for q in await resumed.pending_questions()] == [first, orphan]
        for iid in (first, orphan):
            await resumed.answer(iid, "casual")
        assert await resumed.wait(60) == "finished", resumed.error
        assert [q.id for q in await asked(resumed)] == [first, orphan]
    finally:
        await second.session.close()
        await store.close()
