"""Fan-out, joins, slots, emit/wait and the await_answers sync point."""

from __future__ import annotations

import asyncio
import time

import pytest

import iterion_nb as it
from iterion_nb.runtime.ports import BackendRequest

from .conftest import SessionFactory, ask, run_to_end

JOIN = """\
router split:
  mode: fan_out_all

agent left:
  model: "m"

agent right:
  model: "m"

agent merge:
  await: {mode}

workflow w:
  entry: split
  split -> left
  split -> right
  left -> merge
  right -> merge
  merge -> done
"""


def boom(req: BackendRequest) -> str:
    raise RuntimeError("the right branch broke")


async def test_wait_all_join_gets_every_branch(make_session: SessionFactory) -> None:
    got: list[object] = []
    session = make_session({"left": lambda r: "L", "right": lambda r: "R",
                            "merge": lambda r: got.append(r.input) or "merged"})  # fmt: skip
    run = await run_to_end(session, JOIN.format(mode="wait_all"))
    assert run.status == "finished", run.error
    assert got == [{"left": {"text": "L"}, "right": {"text": "R"}}]
    events = await run.events()
    ready = next(e for e in events if e.type == "join_ready")
    assert ready.node_id == "merge" and ready.data["failed"] == {}
    branches = {e.branch_id for e in events if e.type == "node_started" and e.node_id in
                ("left", "right")}  # fmt: skip
    assert len(branches) == 2 and None not in branches


async def test_wait_all_with_a_failing_branch_fails_resumably(make_session: SessionFactory) -> None:
    session = make_session({"left": lambda r: "L", "right": boom, "merge": lambda r: "x"})
    run = await run_to_end(session, JOIN.format(mode="wait_all"))
    assert run.status == "failed_resumable"
    assert run.error == "node 'right': backend failed: the right branch broke"
    assert "merge" not in run.outputs


async def test_best_effort_join_goes_on_without_the_failed_branch(
    make_session: SessionFactory,
) -> None:
    got: list[object] = []
    session = make_session({"left": lambda r: "L", "right": boom,
                            "merge": lambda r: got.append(r.input) or "merged"})  # fmt: skip
    run = await run_to_end(session, JOIN.format(mode="best_effort"))
    assert run.status == "finished", run.error
    assert got == [{"left": {"text": "L"}}]
    ready = next(e for e in await run.events() if e.type == "join_ready")
    assert list(ready.data["failed"].values()) == [
        "node 'right': backend failed: the right branch broke"
    ]


PING_PONG = """\
router split:
  mode: fan_out_all

emit ping:
  event: ping
  with { n: "1" }

wait wait_ping:
  event: ping
  timeout: "10s"

emit pong:
  event: pong

wait wait_pong:
  event: pong
  timeout: "10s"

compute end:
  await: wait_all
  expr:
    ok: "true"

workflow w:
  entry: split
  budget:
    max_parallel_branches: 1
  split -> wait_ping
  split -> ping
  wait_ping -> pong
  ping -> wait_pong
  pong -> end
  wait_pong -> end
  end -> done
"""


async def test_one_slot_emit_wait_ping_pong_completes(make_session: SessionFactory) -> None:
    run = await run_to_end(make_session(), PING_PONG)
    assert run.status == "finished", run.error
    assert run.outputs["wait_ping"] == {"n": "1"}
    assert run.outputs["end"] == {"ok": True}


async def test_wait_times_out(make_session: SessionFactory) -> None:
    flow = PING_PONG.replace("  split -> ping\n", "").replace("  ping -> wait_pong\n", "")
    flow = flow.replace('timeout: "10s"', 'timeout: "200ms"')
    flow = flow.replace("  wait_pong -> end\n", "")
    result = it.analyze(flow)
    run = await run_to_end(make_session(), flow) if result.ok else None
    assert run is not None
    assert run.status == "failed_resumable"
    assert run.error == "node 'wait_ping': timed out after 0.2s waiting for event 'ping'"


GATE = """\
agent asker:
  model: "m"
  interaction: async

await_answers gate:
  from: asker
  timeout: "{timeout}"

compute use:
  expr:
    n: "length(outputs.gate.answers)"

workflow w:
  entry: asker
  asker -> gate
  gate -> use
  use -> done
"""


def asking(*questions: str):  # type: ignore[no-untyped-def]
    async def agent(req: BackendRequest) -> str:
        for n, q in enumerate(questions):
            await ask(req, q, f"{req.run_id}-q{n}")
        return "asked"

    return agent


async def test_nothing_asked_passes_at_once(make_session: SessionFactory) -> None:
    run = await run_to_end(make_session({"asker": asking()}), GATE.format(timeout="30m"))
    assert run.status == "finished"
    assert run.outputs["gate"] == {"answers": []}


async def test_already_answered_passes_with_the_answers(make_session: SessionFactory) -> None:
    async def ask_and_get_answered(req: BackendRequest) -> str:
        await ask(req, "Tone?", "t1")
        assert req.context is not None
        await req.context.store.answer("t1", "formal", answered_by="fast")
        return "asked"

    run = await run_to_end(
        make_session({"asker": ask_and_get_answered}), GATE.format(timeout="30m")
    )
    assert run.status == "finished"
    assert run.outputs["gate"] == {"answers": [
        {"interaction_id": "t1", "node": "asker", "question": "Tone?", "answer": "formal"}
    ]}  # fmt: skip


async def test_timeout_names_the_unanswered(make_session: SessionFactory) -> None:
    session = make_session({"asker": asking("Tone?", "Length?")}, poll_interval=0.05)
    run = await run_to_end(session, GATE.format(timeout="300ms"))
    assert run.status == "failed_resumable"
    assert run.error is not None
    assert "node 'gate': timed out after 0.3s; unanswered:" in run.error
    assert f"{run.id}-q0 (asker): 'Tone?'" in run.error
    assert f"{run.id}-q1 (asker): 'Length?'" in run.error


SIBLING = """\
agent asker:
  model: "m"
  interaction: async

router split:
  mode: fan_out_all

await_answers gate:
  from: asker
  timeout: "30m"

compute busy:
  expr:
    done: "true"

compute end:
  await: wait_all
  expr:
    ok: "true"

workflow w:
  entry: asker
  budget:
    max_parallel_branches: 1
  asker -> split
  split -> gate
  split -> busy
  gate -> end
  busy -> end
  end -> done
"""


async def test_gate_parks_only_its_branch_and_an_answer_releases_it(
    make_session: SessionFactory,
) -> None:
    session = make_session({"asker": asking("Tone?")}, poll_interval=60)
    run = await session.start(it.compile(SIBLING))
    question = await run.next_question(timeout=5)
    assert question is not None
    # the sibling finishes while the gate is parked (one slot: the gate gave it up)
    for _ in range(200):
        if "busy" in run.outputs:
            break
        await asyncio.sleep(0.01)
    assert "busy" in run.outputs and run.status == "running"

    async def answer_later() -> dict[str, bool]:
        await asyncio.sleep(0.05)
        return await run.answer(question.id, "formal")

    outcome = await asyncio.create_task(answer_later())
    assert outcome == {
        "queued": True,
        "resumed": False,
        "run_status": "running",
        "resume_needed": False,
        "awaiting_worker": False,
    }
    assert await run.wait(5) == "finished"
    assert run.outputs["gate"]["answers"][0]["answer"] == "formal"


async def test_the_gate_never_misses_a_ring(make_session: SessionFactory) -> None:
    """Fallback poll at 60 s: only the doorbell can release the gate in time."""
    session = make_session({"asker": asking("Q?")}, poll_interval=60)
    wf = it.compile(GATE.format(timeout="30m"))
    for _ in range(50):
        started = time.monotonic()
        run = await session.start(wf)
        question = await run.next_question(timeout=5)
        assert question is not None
        await run.answer(question.id, "A")  # races the gate arming and checking
        assert await run.wait(timeout=2) == "finished"
        assert time.monotonic() - started < 2


async def test_twenty_parked_branches_with_four_slots(make_session: SessionFactory) -> None:
    edges = "\n".join(f"  split -> g{n}\n  g{n} -> end" for n in range(20))
    gates = "\n".join(f'await_answers g{n}:\n  timeout: "1m"\n' for n in range(20))
    flow = (
        'agent asker:\n  model: "m"\n  interaction: async\n\nrouter split:\n  mode: fan_out_all\n\n'
        f'{gates}\ncompute end:\n  await: wait_all\n  expr:\n    ok: "true"\n\n'
        "workflow w:\n  entry: asker\n  budget:\n    max_parallel_branches: 4\n"
        f"  asker -> split\n{edges}\n  end -> done\n"
    )
    session = make_session({"asker": asking(*[f"q{n}?" for n in range(20)])}, poll_interval=60)
    run = await session.start(it.compile(flow))
    for _ in range(200):
        if len(await run.pending_questions()) == 20:
            break
        await asyncio.sleep(0.01)
    for question in reversed(await run.pending_questions()):
        await run.answer(question.id, "ok")
    assert await run.wait(10) == "finished", run.error
    assert len(run.outputs["g7"]["answers"]) == 20


@pytest.mark.parametrize("mode", ["wait_all", "best_effort"])
async def test_nested_fan_outs_join_inside_out(make_session: SessionFactory, mode: str) -> None:
    flow = """\
router outer:
  mode: fan_out_all

router inner:
  mode: fan_out_all

compute a:
  expr:
    v: "1"

compute b:
  expr:
    v: "2"

compute c:
  expr:
    v: "3"

compute inner_join:
  await: MODE
  expr:
    n: "length(input)"

compute outer_join:
  await: wait_all
  expr:
    n: "length(input)"

workflow w:
  entry: outer
  outer -> inner
  outer -> c
  inner -> a
  inner -> b
  a -> inner_join
  b -> inner_join
  inner_join -> outer_join
  c -> outer_join
  outer_join -> done
""".replace("MODE", mode)
    run = await run_to_end(make_session(), flow)
    assert run.status == "finished", run.error
    assert run.outputs["inner_join"] == {"n": 2}
    assert run.outputs["outer_join"] == {"n": 2}
