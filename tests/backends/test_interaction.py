"""ADR-081 through the in-process loop, identical on every provider."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

import iterion_nb as it
from iterion_nb.errors import AlreadyAnsweredError, InvalidAnswerError
from iterion_nb.runtime.ownership import Claimant
from iterion_nb.runtime.records import Interaction
from iterion_nb.session import RunHandle

from .conftest import Harness


class _Hold:
    """Lets a test decide when the `hold` tool returns (a fresh event per test loop)."""

    event: asyncio.Event | None = None

    def set(self) -> None:
        assert self.event is not None
        self.event.set()


HOLD = _Hold()


@it.tool
async def hold() -> str:
    """Wait until the test lets go (stands for slow work)."""
    assert HOLD.event is not None
    await HOLD.event.wait()
    return "done holding"


@pytest.fixture(autouse=True)
async def reset_hold() -> None:
    HOLD.event = asyncio.Event()


def agent_flow(interaction: str = "async", extra: str = "", tools: str = "[hold]") -> str:
    return f"""\
schema result:
  summary: string

agent writer:
  model: "scripted"
  interaction: {interaction}
  tools: {tools}
  output: result
{extra}
workflow w:
  entry: writer
  writer -> done
"""


def ask(question: str, **extra: Any) -> dict[str, Any]:
    return {"name": "ask_user_async", "input": {"question": question, **extra}}


FINAL = {"output": {"summary": "all done"}}


async def wait_for(predicate: Any, timeout: float = 5.0) -> None:
    for _ in range(int(timeout / 0.01)):
        if await predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not met in time")


async def questions(run: RunHandle, count: int) -> list[Interaction]:
    await wait_for(lambda: _has(run, count))
    return await run.pending_questions()


async def _has(run: RunHandle, count: int) -> bool:
    return len(await run.pending_questions()) >= count


async def test_post_and_keep_working(harness_factory: Any) -> None:
    h: Harness = harness_factory({"nodes": {"writer": [
        {"text": "asking", "tool_calls": [ask("Formal or casual?", options=[
            {"id": "f", "label": "Formal"}, {"id": "c", "label": "Casual"}])]},
        FINAL,
    ]}})  # fmt: skip
    run = await h.start(agent_flow())
    assert await run.wait(10) == "finished", run.error
    assert run.outputs["writer"] == {"summary": "all done"}
    assert await run.pending_questions() == []  # unanswered when the run ended: withdrawn
    (question,) = await run.questions()
    assert (question.kind, question.question, [o.id for o in question.options]) == (
        "async", "Formal or casual?", ["f", "c"]
    )  # fmt: skip
    assert question.ended == "retracted"
    assert question.allow_free_text is False
    assert "question posted" in h.last_user_text("writer", 1)
    requested = [e for e in await run.events() if e.type == "human_input_requested"]
    assert [e.data["async"] for e in requested] == [True]
    assert "front-load" in _system(h).lower()


def _system(h: Harness) -> str:
    if h.server is None:
        return h.provider.requests[0].system  # type: ignore[attr-defined]
    body = h.server.requests[0]["body"]
    if "system" in body:
        return str(body["system"])
    return str(body["messages"][0].get("content"))


async def test_an_answer_given_mid_run_is_in_the_next_turn(harness_factory: Any) -> None:
    h: Harness = harness_factory({"nodes": {"writer": [
        {"tool_calls": [ask("Tone?"), {"name": "hold"}]},
        FINAL,
    ]}})  # fmt: skip
    run = await h.start(agent_flow())
    (question,) = await questions(run, 1)
    assert await run.answer(question.id, "formal") == {
        "queued": True,
        "resumed": False,
        "run_status": "running",
        "resume_needed": False,
        "awaiting_worker": False,
    }
    HOLD.set()
    assert await run.wait(10) == "finished", run.error
    text = h.last_user_text("writer", 1)
    assert f'[Answer to question {question.id}] Q: "Tone?" — A: formal' in text
    assert "done holding" in text


async def test_a_late_answer_buys_one_more_turn(harness_factory: Any) -> None:
    h: Harness = harness_factory({"nodes": {"writer": [
        {"tool_calls": [ask("Tone?")]},
        {"delay": 0.6, "output": {"summary": "premature"}},
        {"output": {"summary": "with the answer"}},
    ]}})  # fmt: skip
    run = await h.start(agent_flow())
    (question,) = await questions(run, 1)
    await asyncio.sleep(0.2)  # the second turn is under way
    await run.answer(question.id, "formal")
    assert await run.wait(10) == "finished", run.error
    assert run.outputs["writer"] == {"summary": "with the answer"}
    assert len(h.turns("writer")) == 3
    assert "A: formal" in h.last_user_text("writer", 2)


async def test_await_tool_answers_inline_when_nothing_is_pending(harness_factory: Any) -> None:
    h: Harness = harness_factory({"nodes": {"writer": [
        {"tool_calls": [ask("Tone?"), {"name": "hold"}]},
        {"tool_calls": [{"name": "await_answers", "input": {}}]},
        FINAL,
    ]}})  # fmt: skip
    run = await h.start(agent_flow())
    (question,) = await questions(run, 1)
    await run.answer(question.id, "casual")
    HOLD.set()
    assert await run.wait(10) == "finished", run.error
    assert '"answer": "casual"' in h.last_user_text("writer", 2)
    assert "run_paused" not in [e.type for e in await run.events()]


async def test_await_tool_pauses_and_resumes_itself_with_all_answers(
    harness_factory: Any,
) -> None:
    h: Harness = harness_factory({"nodes": {"writer": [
        {"tool_calls": [ask("Tone?"), ask("Length?")]},
        {"tool_calls": [{"name": "await_answers", "input": {"note": "need both"}}]},
        FINAL,
    ]}})  # fmt: skip
    run = await h.start(agent_flow())
    assert await run.wait(10) == "paused_waiting_human"
    asked = await run.pending_questions()  # the questions, not the pause record
    assert sorted(q.kind for q in asked) == ["async", "async"]
    (pause,) = await run.session.store.pending_interactions(run.id, kind="await")
    assert sorted(pause.waits_on) == sorted(q.id for q in asked)
    assert pause.question == "need both"
    with pytest.raises(InvalidAnswerError, match="answer the questions it waits on"):
        await run.answer(pause.id, "go on")  # refused: it would do nothing
    assert await run.answer(asked[0].id, "formal") == {
        "queued": True,
        "resumed": False,
        "run_status": "paused_waiting_human",
        "resume_needed": False,
        "awaiting_worker": False,
    }
    assert (await run.answer(asked[1].id, "short")).items() >= {
        "queued": True,
        "resumed": True,
    }.items()
    assert await run.wait(10) == "finished", run.error
    last = h.last_user_text("writer", 2)
    assert '"answer": "formal"' in last and '"answer": "short"' in last
    assert "[Answer to question" not in last  # not delivered twice
    assert await run.pending_questions() == []
    assert len(h.turns("writer")) == 3


async def test_await_tool_inside_a_branch_is_a_tool_error(harness_factory: Any) -> None:
    flow = agent_flow(extra="router split:\n  mode: fan_out_all\n\ncompute other:\n  expr:\n"
                      "    x: \"1\"\n\ncompute joined:\n  await: wait_all\n  expr:\n"
                      "    ok: \"true\"\n").replace(
        "  entry: writer\n  writer -> done",
        "  entry: split\n  split -> writer\n  split -> other\n  writer -> joined\n"
        "  other -> joined\n  joined -> done",
    )  # fmt: skip
    h: Harness = harness_factory({"nodes": {"writer": [
        {"tool_calls": [ask("Tone?")]},
        {"tool_calls": [{"name": "await_answers", "input": {}}]},
        FINAL,
    ]}})  # fmt: skip
    run = await h.start(flow)
    assert await run.wait(10) == "finished", run.error
    assert "cannot pause the run from inside a parallel branch" in h.last_user_text("writer", 2)
    errors = [e.data for e in await run.events() if e.type == "tool_error"]
    assert errors and errors[0]["tool"] == "await_answers"


async def test_ask_user_pauses_and_resume_continues_the_same_conversation(
    harness_factory: Any,
) -> None:
    h: Harness = harness_factory({"nodes": {"writer": [
        {"text": "I must know.", "tool_calls": [{"name": "ask_user",
                                                 "input": {"question": "Which audience?"}}]},
        FINAL,
    ]}})  # fmt: skip
    run = await h.start(agent_flow(interaction="human", tools="[]"))
    assert await run.wait(10) == "paused_waiting_human"
    (question,) = await run.pending_questions()
    assert question.kind == "ask_user"
    assert (await run.answer(question.id, "data scientists")).items() >= {
        "queued": False,
        "resumed": True,
    }.items()
    assert await run.wait(10) == "finished", run.error
    first, second = h.turns("writer")
    assert second[: len(first)] == first  # the same conversation, not a re-rendered prompt
    assert "data scientists" in h.last_user_text("writer", 1)
    assert len(h.turns("writer")) == 2  # the tool call was not repeated


async def test_a_second_answer_is_a_conflict(harness_factory: Any) -> None:
    h: Harness = harness_factory({"nodes": {"writer": [
        {"tool_calls": [ask("Tone?"), {"name": "hold"}]}, FINAL]}})  # fmt: skip
    run = await h.start(agent_flow())
    (question,) = await questions(run, 1)
    await run.answer(question.id, "formal")
    with pytest.raises(AlreadyAnsweredError) as info:
        await run.answer(question.id, "casual")
    assert info.value.existing == "formal"
    HOLD.set()
    assert await run.wait(10) == "finished"


async def test_answers_given_while_paused_arrive_after_resume(harness_factory: Any) -> None:
    h: Harness = harness_factory({"nodes": {"writer": [
        {"tool_calls": [ask("Tone?")]},
        {"tool_calls": [{"name": "ask_user", "input": {"question": "Go ahead?"}}]},
        FINAL,
    ]}})  # fmt: skip
    run = await h.start(agent_flow())
    assert await run.wait(10) == "paused_waiting_human"
    by_kind = {q.kind: q for q in await run.pending_questions()}
    assert await run.answer(by_kind["async"].id, "formal") == {
        "queued": True,
        "resumed": False,
        "run_status": "paused_waiting_human",
        "resume_needed": False,
        "awaiting_worker": False,
    }
    assert run.status == "paused_waiting_human"
    assert (await run.answer(by_kind["ask_user"].id, "yes")).items() >= {
        "queued": False,
        "resumed": True,
    }.items()
    assert await run.wait(10) == "finished", run.error
    text = h.last_user_text("writer", 2)
    assert "yes" in text and "A: formal" in text


GATED = """\
agent asker:
  model: "scripted"
  interaction: async

await_answers gate:
  from: asker
  timeout: "30m"

workflow w:
  entry: asker
  asker -> gate
  gate -> done
"""


async def test_a_new_session_rediscovers_pending_questions(
    harness_factory: Any, duckdb_store: Any
) -> None:
    scenario = {"nodes": {"asker": [{"tool_calls": [ask("Q1?"), ask("Q2?")]}, {"text": "ok"}]}}
    first: Harness = harness_factory(scenario, store=duckdb_store)
    run = await first.start(GATED)
    await questions(run, 2)
    await first.session.close()  # the process goes away; the run stays resumable
    second: Harness = harness_factory(scenario, store=duckdb_store)
    again = second.session.run(run.id)
    found = await again.pending_questions()
    assert sorted(q.question for q in found) == ["Q1?", "Q2?"]
    for q in found:
        await again.answer(q.id, "fine")
    resumed = await second.session.resume(run.id)
    assert await resumed.wait(10) == "finished", resumed.error
    assert len(resumed.outputs["gate"]["answers"]) == 2


async def test_unknown_tool_and_bad_input_are_tool_errors_the_model_recovers_from(
    harness_factory: Any,
) -> None:
    h: Harness = harness_factory({"nodes": {"writer": [
        {"tool_calls": [{"name": "teleport", "input": {}},
                        {"name": "read_file", "input": {"path": 7}}]},
        FINAL,
    ]}})  # fmt: skip
    run = await h.start(agent_flow(tools="[read_file]"))
    assert await run.wait(10) == "finished", run.error
    text = h.last_user_text("writer", 1)
    if h.kind == "claude_code":  # the CLI refuses these calls itself, in its own words
        assert "No such tool available: teleport" in text
        assert "Input validation error: 7 is not of type 'string'" in text
    else:
        assert "unknown tool 'teleport'" in text
        assert "invalid input for read_file" in text
    assert len([e for e in await run.events() if e.type == "tool_error"]) == 2


async def test_a_scenario_out_of_turns_fails_naming_node_and_turn(harness_factory: Any) -> None:
    h: Harness = harness_factory({"nodes": {"writer": [{"tool_calls": [ask("Tone?")]}]}})
    run = await h.start(agent_flow())
    assert await run.wait(10) == "failed_resumable"
    assert run.error is not None
    assert "node 'writer'" in run.error
    assert "no turn 1 for node 'writer'" in run.error


async def test_a_scenario_answer_the_schema_refused_is_named_when_turns_run_out(
    harness_factory: Any,
) -> None:
    """The repair turn asked for a turn the scenario lacks: the error says why it was asked."""
    h: Harness = harness_factory({"nodes": {"writer": [{"output": {"summary": True}}]}})
    run = await h.start(agent_flow())
    assert await run.wait(10) == "failed_resumable"
    said = (run.error or "").replace("\\'", "'")  # the SDKs' errors quote the server's body
    assert (
        "the scenario has no turn 1 for node 'writer' (run 1 of the node; it has 1 turn(s)):"
        " its turn 0's answer was refused (field 'summary' should be string, got a bool),"
        " so the node asked for another"
    ) in said, said


async def test_output_repair_turn_then_failure(harness_factory: Any) -> None:
    h: Harness = harness_factory({"nodes": {"writer": [
        {"output": {"wrong": 1}},
        {"output": {"summary": "fixed"}},
    ]}})  # fmt: skip
    run = await h.start(agent_flow())
    assert await run.wait(10) == "finished", run.error
    assert run.outputs["writer"] == {"summary": "fixed"}
    assert "field 'summary' is missing" in h.last_user_text("writer", 1)
    bad: Harness = harness_factory({"nodes": {"writer": [{"text": "no json"}, {"text": "still"}]}})
    failed = await bad.start(agent_flow())
    assert await failed.wait(10) == "failed_resumable"
    assert "final answer does not match schema 'result'" in (failed.error or "")


async def test_transient_errors_are_retried_and_usage_counted(harness_factory: Any) -> None:
    h: Harness = harness_factory({"nodes": {"writer": [
        {"fail_first": 2, "tokens": {"in": 30, "out": 12}, "output": {"summary": "ok"}},
    ]}})  # fmt: skip
    run = await h.start(agent_flow())
    assert await run.wait(10) == "finished", run.error
    steps = [e.data for e in await run.events() if e.type == "llm_step_finished"]
    assert [(s["tokens_in"], s["tokens_out"]) for s in steps] == [(30, 12)]
    record = await run.refresh()
    assert record.checkpoint is not None
    assert record.checkpoint["usage"]["tokens"] == 42


async def test_tool_max_steps_is_honoured(harness_factory: Any) -> None:
    flow = agent_flow(tools="[list_files]").replace(
        "  output: result", "  output: result\n  tool_max_steps: 1"
    )
    h: Harness = harness_factory({"nodes": {"writer": [
        {"tool_calls": [{"name": "list_files", "input": {}}]},
        {"tool_calls": [{"name": "list_files", "input": {}}]},
        FINAL,
    ]}})  # fmt: skip
    run = await h.start(flow)
    assert await run.wait(10) == "failed_resumable"
    assert "used more than tool_max_steps (1)" in (run.error or "")


async def test_a_blocking_call_beside_another_still_pauses(harness_factory: Any) -> None:
    """Parallel calls: the other one runs, the run pauses on ask_user, the answer resumes it."""
    h: Harness = harness_factory({"nodes": {"writer": [
        {"tool_calls": [ask("Tone?"), {"name": "ask_user", "input": {"question": "Go?"}}]},
        FINAL,
    ]}})  # fmt: skip
    run = await h.start(agent_flow(tools="[]"))
    assert await run.wait(30) == "paused_waiting_human"
    pending = {q.kind: q for q in await run.pending_questions()}
    assert sorted(pending) == ["ask_user", "async"]
    assert (await run.answer(pending["ask_user"].id, "yes")).items() >= {
        "queued": False,
        "resumed": True,
    }.items()
    assert await run.wait(30) == "finished", run.error
    text = h.last_user_text("writer", 1)
    assert "question posted" in text and "yes" in text  # both calls' results, one turn later
    assert len(h.turns("writer")) == 2


async def test_a_question_asked_again_after_a_restart_brings_its_answer(
    harness_factory: Any,
) -> None:
    """A node re-run after its process died asks its question again: the answer comes back.

    The dead execution may have taken the answer from the inbox already; the
    re-run must not be left without it, nor get it twice.
    """
    h: Harness = harness_factory({"nodes": {"writer": [
        {"tool_calls": [{"name": "hold"}]},
        {"tool_calls": [ask("Tone?")]},
        FINAL,
    ]}})  # fmt: skip
    run = await h.start(agent_flow(), run_id="again")
    store = h.session.store
    # what the dead execution left: its question (the id the re-run asks with), answered,
    # the answer's message taken from the inbox
    iid = "again-toolu_writer_0_1_0"
    await wait_for(lambda: _started(run))
    await store.add_interaction(
        Interaction(iid, "again", "writer", "async", ("Tone?",), datetime.now(UTC))
    )
    await store.answer(iid, "formal", answered_by="ana")
    assert [m.text[:40] for m in await store.drain_messages("again", "writer")] == [
        f'[Answer to question {iid}] Q: "Tone'[:40]
    ]
    HOLD.set()
    assert await run.wait(30) == "finished", run.error
    told = h.last_user_text("writer", 2)
    assert f"question {iid} was asked before and is answered: formal" in told
    assert "[Answer to question" not in told  # not a second time through the inbox


async def _started(run: RunHandle) -> bool:
    return any(e.type == "tool_called" for e in await run.events())


async def test_the_events_hold_what_the_model_was_told_and_said(harness_factory: Any) -> None:
    """Each message once: llm_request carries what is new at its turn, the reply is recorded."""
    h: Harness = harness_factory({"nodes": {"writer": [
        {"text": "first, a tool", "tool_calls": [{"name": "hold"}]},
        FINAL,
    ]}})  # fmt: skip
    run = await h.start(agent_flow())
    HOLD.set()
    assert await run.wait(30) == "finished", run.error
    if h.kind == "claude_code":
        return  # the CLI's own conversation: its requests are in ScenarioServer.requests
    events = [e for e in await run.events() if e.node_id == "writer"]
    requests = [e.data for e in events if e.type == "llm_request"]
    replies = [e.data for e in events if e.type == "llm_step_finished"]
    assert [r["turn"] for r in requests] == [0, 1]
    assert "front-load" in requests[0]["system"].lower() and "system" not in requests[1]
    assert requests[0]["messages"][0]["role"] == "user"  # the node's prompt
    (told,) = requests[1]["messages"][1:]  # after the assistant's reply: the tool's result
    assert "done holding" in str(told)
    assert replies[0]["text"] == "first, a tool"
    assert [(c["name"], c["input"]) for c in replies[0]["calls"]] == [("hold", {})]
    (result,) = [e.data for e in events if e.type == "tool_result"]
    assert (result["tool"], result["result"]) == ("hold", "done holding")


async def test_an_agent_whose_run_was_taken_over_asks_nobody(harness_factory: Any) -> None:
    """A frozen owner that wakes after another process took its run records no question.

    Its question would sit in every inbox, and an answer to it would be acknowledged
    and then read by nobody: the store refuses it, and the old owner stops there.
    """
    h: Harness = harness_factory({"nodes": {"writer": [
        {"tool_calls": [{"name": "hold"}]},
        {"tool_calls": [ask("Formal or casual?")]},
        FINAL,
        FINAL,
    ]}}, lease_seconds=0.6)  # fmt: skip
    run = await h.start(agent_flow())
    store = h.session.store
    await wait_for(lambda: _called(run, "hold"))
    await h.session.leases.stop()  # as if its process froze: the lease lapses
    await asyncio.sleep(0.8)
    taker = Claimant.here(60)
    await store.acquire_run(run.id, taker)  # another process took the run
    HOLD.set()  # the frozen owner wakes up and goes on to its next turn
    outcome = await asyncio.wait_for(h.session._tasks[run.id], 20)
    assert outcome == "interrupted"  # this process's execution stopped: the run is not its own
    assert await store.interactions(run.id) == []  # nobody is asked a thing
    # it stopped there: no failure of its own recorded, no later turn, no finish
    types = [e.type for e in await store.events(run.id)]
    assert "node_failed" not in types and "node_finished" not in types, types
    record = await store.get_run(run.id)
    assert record.lease is not None and record.lease.owner == taker.id


async def _called(run: RunHandle, tool: str) -> bool:
    return any(e.type == "tool_called" and e.data.get("tool") == tool for e in await run.events())
