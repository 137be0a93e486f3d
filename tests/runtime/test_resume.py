"""Statuses, checkpoints and resume; budgets."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import iterion_nb as it
from iterion_nb.errors import ResumeError
from iterion_nb.runtime.ports import BackendRequest, BackendResult, Store
from iterion_nb.session import Session
from iterion_nb.store import open_duckdb_store

from .conftest import SessionFactory, run_to_end

CHAIN = """\
agent a:
  model: "m"

agent b:
  model: "m"

agent c:
  model: "m"

workflow w:
  entry: a
  a -> b
  b -> c
  c -> done
"""


async def test_failure_then_resume_reruns_only_the_failing_node(
    make_session: SessionFactory,
) -> None:
    calls: list[str] = []
    broken = {"b": True}

    def agent(req: BackendRequest) -> str:
        calls.append(req.node.name)
        if broken.get(req.node.name):
            raise RuntimeError("flaky")
        return f"out-{req.node.name}"

    session = make_session({"a": agent, "b": agent, "c": agent})
    run = await run_to_end(session, CHAIN)
    assert run.status == "failed_resumable"
    assert calls == ["a", "b"]
    broken.clear()
    again = await session.resume(run.id)
    assert await again.wait(10) == "finished"
    assert calls == ["a", "b", "b", "c"]
    assert again.outputs == {"a": {"text": "out-a"}, "b": {"text": "out-b"}, "c": {"text": "out-c"}}
    types = [e.type for e in await run.events()]
    assert types.count("run_failed") == 1 and types.count("run_resumed") == 1


async def test_cancel_then_resume(make_session: SessionFactory) -> None:
    release = asyncio.Event()
    calls: list[str] = []

    async def slow(req: BackendRequest) -> str:
        calls.append(req.node.name)
        if req.node.name == "b" and not release.is_set():
            await asyncio.sleep(30)
        return "ok"

    session = make_session({"a": slow, "b": slow, "c": slow})
    run = await session.start(it.compile(CHAIN))
    while calls != ["a", "b"]:
        await asyncio.sleep(0.01)
    assert await run.cancel() == "cancelled"
    record = await run.refresh()
    assert record.checkpoint is not None
    assert [f["node"] for f in record.checkpoint["frontier"]] == ["b"]
    release.set()
    again = await run.resume()
    assert await again.wait(10) == "finished"
    assert calls == ["a", "b", "b", "c"]
    assert "run_cancelled" in [e.type for e in await run.events()]


async def test_resume_refuses_a_changed_source_unless_forced(make_session: SessionFactory) -> None:
    session = make_session({"a": lambda r: "x", "b": lambda r: 1 / 0, "c": lambda r: "z"})
    run = await run_to_end(session, CHAIN)
    assert run.status == "failed_resumable"
    changed = it.compile(CHAIN + "\n## edited\n")
    with pytest.raises(ResumeError, match="changed since it started; pass force=True"):
        await session.resume(run.id, workflow=changed)
    session.backend.functions["b"] = lambda r: "fixed"  # type: ignore[union-attr]
    again = await session.resume(run.id, workflow=changed, force=True)
    assert await again.wait(10) == "finished"
    assert (await again.refresh()).source_hash == changed.source_hash


async def test_finished_and_live_runs_are_not_resumable(make_session: SessionFactory) -> None:
    session = make_session({"a": lambda r: "x", "b": lambda r: "y", "c": lambda r: "z"})
    run = await run_to_end(session, CHAIN)
    with pytest.raises(ResumeError, match="is finished"):
        await session.resume(run.id)


BUDGET = """\
agent a:
  model: "m"

workflow w:
  entry: a
  budget:
    LIMIT
  a -> a as spin(50)
"""


@pytest.mark.parametrize(
    ("limit", "kind", "used_at_stop"),
    [
        ("max_tokens: 100", "max_tokens", 100),
        ("max_cost_usd: 0.05", "max_cost_usd", 0.05),
        ("max_iterations: 7", "max_iterations", 7),
    ],
)
async def test_budgets_warn_then_stop_resumably(
    make_session: SessionFactory, limit: str, kind: str, used_at_stop: float
) -> None:
    session = make_session({"a": lambda r: BackendResult("x", tokens_in=5, tokens_out=5,
                                                         cost_usd=0.005)})  # fmt: skip
    run = await run_to_end(session, BUDGET.replace("LIMIT", limit))
    assert run.status == "failed_resumable"
    assert run.error is not None and run.error.startswith(f"budget exceeded: {kind}")
    events = await run.events()
    warning = next(e for e in events if e.type == "budget_warning")
    exceeded = next(e for e in events if e.type == "budget_exceeded")
    assert warning.data["kind"] == exceeded.data["kind"] == kind
    assert warning.seq < exceeded.seq
    assert exceeded.data["limit"] == pytest.approx(used_at_stop)
    assert exceeded.data["used"] >= exceeded.data["limit"]
    assert warning.data["used"] >= 0.8 * warning.data["limit"]


async def test_max_duration_stops_a_slow_run(make_session: SessionFactory) -> None:
    flow = (
        'tool slow:\n  command: "sleep 20"\n\nworkflow w:\n  entry: slow\n'
        '  budget:\n    max_duration: "300ms"\n  slow -> done\n'
    )
    run = await run_to_end(make_session(), flow)
    assert run.status == "failed_resumable"
    assert run.error is not None and run.error.startswith("budget exceeded: max_duration")
    kinds = [e.data.get("kind") for e in await run.events() if e.type.startswith("budget_")]
    assert kinds == ["max_duration", "max_duration"]


DEAD = textwrap.dedent(
    """
    import asyncio, sys
    import iterion_nb as it

    FLOW = '''
    compute first:
      expr:
        n: "1"

    tool hang:
      command: "while [ ! -f go ]; do sleep 0.05; done; echo went"

    compute last:
      expr:
        said: "outputs.hang.stdout"

    workflow w:
      entry: first
      first -> hang
      hang -> last
      last -> done
    '''

    async def main():
        session = it.Session(sys.argv[1], workdir=sys.argv[2])
        run = await session.start(it.compile(FLOW), run_id="orphan")
        while "first" not in run.outputs:
            await asyncio.sleep(0.01)
        await session.store.flush()
        print("started", flush=True)
        await asyncio.sleep(60)

    asyncio.run(main())
    """
)


async def test_a_fresh_session_resumes_a_run_left_by_a_dead_process(tmp_path: Path) -> None:
    db = tmp_path / "runs.duckdb"
    proc = subprocess.Popen(
        [sys.executable, "-c", DEAD, str(db), str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "started"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    (tmp_path / "go").touch()
    session = Session(open_duckdb_store(db), workdir=tmp_path)
    try:
        record = await session.store.get_run("orphan")
        assert record.status == "interrupted"  # its owner died: nothing runs it
        run = await session.resume("orphan")
        assert await run.wait(10) == "finished", run.error
        assert run.outputs["last"] == {"said": "went\n"}
        assert run.outputs["first"] == {"n": 1}
    finally:
        await session.close()
        await session.store.close()


GATES = """\
schema decision:
  ship: bool

human approve:
  instructions: "Ship?"
  output: decision

human again:
  instructions: "Sure?"
  output: decision

workflow w:
  entry: approve
  approve -> again
  again -> done
"""


@pytest.mark.parametrize("delay", [0, 0.001, 0.005, 0.02])
async def test_a_cancel_right_after_a_resume_stops_the_run_on_its_way_to_the_gate(
    make_session: SessionFactory, delay: float
) -> None:
    """The resumed run reaches its gate again at once; a cancel then was lost to the pause."""
    session = make_session()
    run = await session.start(it.compile(GATES))
    assert await run.wait(10) == "paused_waiting_human"
    assert await run.cancel() == "cancelled"
    await session.resume(run.id)
    await asyncio.sleep(delay)
    assert await session.run(run.id).cancel() == "cancelled"
    record = await run.refresh()
    assert (record.status, record.lease) == ("cancelled", None)
    assert [e.type for e in await run.events()].count("run_cancelled") == 2
    (gate,) = await run.pending_questions()
    outcome = await run.answer(gate.id, {"ship": True})
    assert (outcome["resumed"], outcome["run_status"]) == (False, "cancelled")  # stays stopped
    assert (await run.refresh()).status == "cancelled"


GATE_BESIDE_SLOW = """\
schema decision:
  ship: bool

router split:
  mode: fan_out_all

human approve:
  instructions: "Ship?"
  output: decision

agent slow:
  model: "m"

agent before:
  model: "m"

workflow w:
  entry: split
  split -> before
  split -> slow
  before -> approve
  approve -> done
  slow -> done
"""


async def test_a_session_closing_as_its_run_pauses_records_the_pause(
    make_session: SessionFactory, store: Store
) -> None:
    """Closing is nobody's cancel: a pause being recorded stays a pause (answers resume it)."""
    halting, running = asyncio.Event(), asyncio.Event()

    async def before(req: BackendRequest) -> str:
        await running.wait()  # the gate comes once the other branch is busy
        return "ready"

    async def slow(req: BackendRequest) -> str:
        running.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:  # halted as the gate pauses the run: takes a moment
            halting.set()
            await asyncio.shield(asyncio.sleep(0.5))
            raise
        return "done"

    session = make_session({"slow": slow, "before": before})
    run = await session.start(it.compile(GATE_BESIDE_SLOW))
    await asyncio.wait_for(halting.wait(), 10)  # the pause is chosen, not yet recorded
    await session.close()
    assert (await store.get_run(run.id)).status == "paused_waiting_human"


PUBLISHED = """\
agent a:
  model: "m"
  publish: draft

agent b:
  model: "m"

workflow w:
  entry: a
  a -> b
  b -> done
"""


async def test_a_cancel_as_a_finished_node_is_recorded_never_runs_it_again(
    make_session: SessionFactory, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cancel came between ``a``'s node_finished and its checkpoint: halted there, its
    output was lost and resume ran (and paid for) ``a`` again."""
    calls: list[str] = []

    async def record(req: BackendRequest) -> str:
        calls.append(req.node.name)
        return f"out-{req.node.name}"

    writing, release = asyncio.Event(), asyncio.Event()
    put = store.put_artifact

    async def slow_put(*args: Any, **kwargs: Any) -> Any:
        writing.set()  # a finished: its artifact is being written
        await release.wait()
        return await put(*args, **kwargs)

    monkeypatch.setattr(store, "put_artifact", slow_put)
    session = make_session({"a": record, "b": record})
    run = await session.start(it.compile(PUBLISHED))
    await asyncio.wait_for(writing.wait(), 10)
    cancelling = asyncio.ensure_future(run.cancel())
    await asyncio.sleep(0.1)
    release.set()
    assert await cancelling == "cancelled"
    again = await session.resume(run.id)
    assert await again.wait(10) == "finished", again.error
    assert calls == ["a", "b"]
    assert again.outputs["a"] == {"text": "out-a"}
