"""llm routers and llm human gates through the in-process loop (one turn, no tools)."""

from __future__ import annotations

import iterion_nb as it
from iterion_nb.store import MemoryStore

FLOW = """\
router pick:
  mode: llm
  user: "Which way?"

human approve:
  instructions: "Approve?"
  interaction: llm_or_human

compute left:
  expr:
    said: "outputs.approve.text"

compute right:
  expr:
    x: "1"

workflow w:
  entry: approve
  approve -> pick
  pick -> left
  pick -> right
  left -> done
  right -> done
"""


async def test_llm_router_and_llm_human_answer_in_one_turn() -> None:
    scenario = {"nodes": {"pick": [{"text": "left, clearly"}], "approve": [{"text": "approved"}]}}
    session = it.Session(MemoryStore(), scenario=scenario)
    run = await session.start(it.compile(FLOW))
    assert await run.wait(10) == "finished", run.error
    assert run.outputs["left"] == {"said": "approved"}
    assert "right" not in run.outputs
    steps = [e for e in await run.events() if e.type == "llm_step_finished"]
    assert [e.node_id for e in steps] == ["approve", "pick"]
    await session.close()


async def test_an_empty_llm_answer_hands_the_gate_to_a_person() -> None:
    scenario = {"nodes": {"approve": [{"text": ""}]}}
    session = it.Session(MemoryStore(), scenario=scenario)
    run = await session.start(it.compile(FLOW))
    assert await run.wait(10) == "paused_waiting_human"
    (question,) = await run.pending_questions()
    assert (question.kind, question.question) == ("human", "Approve?")
    await session.close()
