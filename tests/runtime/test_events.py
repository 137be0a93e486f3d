"""Every event type of SPEC §2 is emitted, with its data, by some run."""

from __future__ import annotations

import asyncio

import iterion_nb as it
from iterion_nb.runtime.ports import BackendRequest, BackendResult

from .conftest import SessionFactory, ask, run_to_end

SPEC_TYPES = {
    "run_started", "node_started", "node_finished", "edge_selected", "branch_started",
    "branch_finished", "join_ready", "llm_request", "llm_step_finished", "tool_called",
    "tool_error", "artifact_written", "human_input_requested", "interaction_answered",
    "human_answers_recorded", "run_paused", "run_resumed", "budget_warning",
    "budget_exceeded", "run_finished", "run_failed", "run_cancelled",
}  # fmt: skip

FLOW = """\
agent asker:
  model: "m"
  interaction: async
  publish: notes

router split:
  mode: fan_out_all

await_answers gate:
  from: asker
  timeout: "1m"

tool shout:
  command: "echo hi"

compute join:
  await: wait_all
  expr:
    n: "length(input)"

human approve:
  instructions: "ok?"

tool broken:
  command: "exit 1"

workflow w:
  entry: asker
  budget:
    max_tokens: 10
  asker -> split
  split -> gate
  split -> shout
  gate -> join
  shout -> join
  join -> approve
  approve -> broken
  broken -> done
"""


async def test_every_spec_event_type_is_emitted(make_session: SessionFactory) -> None:
    async def asker(req: BackendRequest) -> BackendResult:
        await ask(req, "Tone?", "tone")
        return BackendResult("asked", tokens_in=4, tokens_out=5)

    session = make_session({"asker": asker}, poll_interval=60)
    run = await session.start(it.compile(FLOW))
    question = await run.next_question(timeout=5)
    assert question is not None
    await run.answer(question.id, "formal")
    assert await run.wait(10) == "paused_waiting_human"
    gate = await run.next_question(timeout=5)
    assert gate is not None
    await session.resume(run.id, answers={gate.id: "yes"})
    assert await run.wait(10) == "failed_resumable"  # broken tool (and budget at 9/10)
    again = await session.resume(run.id)
    await asyncio.sleep(0)
    await again.cancel()
    events = await run.events()
    seen = {e.type for e in events}
    # budget_exceeded and run_finished: the test below and test_nodes.py
    assert SPEC_TYPES - seen == {"budget_exceeded", "run_finished"}
    by_type = {e.type: e for e in reversed(events)}  # the first of each type
    assert by_type["human_input_requested"].data["async"] is True
    assert by_type["interaction_answered"].data == {
        "interaction_id": "tone", "kind": "async", "answered_by": "python"
    }  # fmt: skip
    assert by_type["budget_warning"].data == {"kind": "max_tokens", "limit": 10, "used": 9}
    assert by_type["branch_started"].data["group"] == by_type["join_ready"].data["group"]
    # the failing tool records its own failure, so a timeline can close that step
    failed = [e for e in events if e.type == "node_failed"]
    assert [(e.node_id, e.data["kind"]) for e in failed] == [("broken", "tool")]
    assert failed[0].data["error"].startswith("node 'broken': command exited with 1")


async def test_budget_exceeded_is_emitted(make_session: SessionFactory) -> None:
    flow = (
        'agent a:\n  model: "m"\n\nworkflow w:\n  entry: a\n'
        "  budget:\n    max_tokens: 5\n  a -> a as again(3)\n"
    )
    session = make_session({"a": lambda r: BackendResult("x", tokens_in=3, tokens_out=3)})
    run = await run_to_end(session, flow)
    exceeded = [e for e in await run.events() if e.type == "budget_exceeded"]
    assert [e.data for e in exceeded] == [{"kind": "max_tokens", "limit": 5, "used": 6}]
    assert run.status == "failed_resumable"
