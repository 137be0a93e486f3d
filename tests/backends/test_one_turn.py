"""llm routers and llm human gates through the in-process loop (one turn, no tools)."""

from __future__ import annotations

import pytest

import iterion_nb as it
from iterion_nb.store import MemoryStore

#: The two ways out of the llm router ``pick`` and the workflow: the same in both flows below.
BRANCHES = """\
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

FLOW = (
    """\
router pick:
  mode: llm
  user: "Which way?"

human approve:
  instructions: "Approve?"
  interaction: llm_or_human

"""
    + BRANCHES
)


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


# -- upstream's interaction_model / interaction_prompt, and an llm router's reasoning_effort --
ANSWERED_BY_A_MODEL = (
    """\
prompt decide:
  Answer for the release manager.

router pick:
  mode: llm
  model: "scripted/chooser"
  reasoning_effort: "${PICK_EFFORT:-low}"
  user: "Which way?"

human approve:
  instructions: "Approve?"
  interaction: llm
  model: "scripted/general"
  system: "Not this one."
  interaction_model: "scripted/answerer"
  interaction_prompt: decide

"""
    + BRANCHES
)


async def _start_answered(source: str) -> tuple[it.Session, it.RunHandle]:
    """``source`` started in a new session: its scenario approves at the gate, picks left."""
    scenario = {"nodes": {"pick": [{"text": "left"}], "approve": [{"text": "approved"}]}}
    session = it.Session(MemoryStore(), scenario=scenario)
    return session, await session.start(it.compile(source))


async def test_interaction_model_and_prompt_answer_for_the_person_and_effort_reaches_the_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PICK_EFFORT", "high")
    session, run = await _start_answered(ANSWERED_BY_A_MODEL)
    assert await run.wait(10) == "finished", run.error
    asked = {e.node_id: e.data for e in await run.events() if e.type == "llm_request"}
    # the gate: interaction_model over model, interaction_prompt over system
    assert asked["approve"]["model"] == "scripted/answerer"
    assert asked["approve"]["system"] == "Answer for the release manager."
    assert "reasoning_effort" not in asked["approve"]
    # the router's reasoning_effort, its ${ENV} read when it runs
    assert (asked["pick"]["model"], asked["pick"]["reasoning_effort"]) == (
        "scripted/chooser", "high",
    )  # fmt: skip
    await session.close()


async def test_a_reasoning_effort_the_environment_spells_wrong_fails_the_router(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PICK_EFFORT", "extreme")
    session, run = await _start_answered(ANSWERED_BY_A_MODEL)
    assert await run.wait(10) == "failed_resumable"
    assert "reasoning_effort 'extreme'" in (run.error or "")
    await session.close()


async def test_a_reasoning_effort_whose_variable_is_unset_is_no_effort(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """It once failed the node, maybe after costly ones, for a setting no provider sends yet."""
    monkeypatch.delenv("NO_SUCH_EFFORT", raising=False)
    source = ANSWERED_BY_A_MODEL.replace("${PICK_EFFORT:-low}", "${NO_SUCH_EFFORT}")
    assert "${NO_SUCH_EFFORT}" in source
    session, run = await _start_answered(source)
    assert await run.wait(10) == "finished", run.error
    asked = {e.node_id: e.data for e in await run.events() if e.type == "llm_request"}
    assert "reasoning_effort" not in asked["pick"]
    await session.close()
