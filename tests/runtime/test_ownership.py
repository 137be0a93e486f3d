"""Run ownership inside one process: sessions are owners, leases decide who executes a run."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

import iterion_nb as it
from iterion_nb.errors import ResumeError, RunOwnedError
from iterion_nb.runtime.ownership import Claimant, this_host
from iterion_nb.runtime.records import Run, utcnow
from iterion_nb.session import Session
from iterion_nb.store import MemoryStore, open_duckdb_store

TOOLS = """\
tool one:
  command: "echo one >> ran.txt"

tool slow:
  command: "echo slow >> ran.txt; sleep {seconds}"

tool two:
  command: "echo two >> ran.txt"

workflow w:
  entry: one
  one -> slow
  slow -> two
  two -> done
"""

GATE = """\
human gate:
  instructions: "Ship it?"

tool after:
  command: "echo after >> ran.txt"

workflow w:
  entry: gate
  gate -> after
  after -> done
"""


def ran(tmp_path: Path) -> list[str]:
    path = tmp_path / "ran.txt"
    return path.read_text().split() if path.exists() else []


@pytest.fixture
async def db(tmp_path: Path) -> Path:
    return tmp_path / "runs.duckdb"


async def started(session: Session, source: str, node: str) -> str:
    run = await session.start(it.compile(source))
    for _ in range(400):
        events = await run.events()
        if any(e.type == "node_started" and e.node_id == node for e in events):
            return run.id
        await asyncio.sleep(0.01)
    raise AssertionError(f"{node} never started")


async def test_resume_is_refused_while_another_session_runs_the_run(
    db: Path, tmp_path: Path
) -> None:
    store = open_duckdb_store(db)
    owner, other = Session(store, workdir=tmp_path), Session(store, workdir=tmp_path)
    try:
        run_id = await started(owner, TOOLS.format(seconds=30), "slow")
        with pytest.raises(RunOwnedError) as info:
            await other.resume(run_id)
        # named as what it is: another session of this very process, not a stranger to stop
        assert f"another session of this process ({info.value.pid} on host" in str(info.value)
        assert info.value.pid == owner.claimant.pid
        # the owner itself cannot start it twice either
        with pytest.raises(RunOwnedError):
            await owner.resume(run_id)
        record = await store.get_run(run_id)
        assert record.status == "running" and record.lease is not None
        assert record.lease.owner == owner.claimant.id
        await owner.run(run_id).cancel()
        resumed = await other.resume(run_id)  # cancelled: anyone may resume it now
        assert resumed.id == run_id
        await other.run(run_id).cancel()
    finally:
        await owner.close()
        await other.close()
        await store.close()
    assert ran(tmp_path).count("one") == 1  # the finished node never ran again


async def test_a_parked_run_resumes_in_its_owner_whoever_answers(db: Path, tmp_path: Path) -> None:
    store = open_duckdb_store(db)
    owner, other = Session(store, workdir=tmp_path), Session(store, workdir=tmp_path)
    try:
        run = await owner.start(it.compile(GATE))
        assert await run.wait(10) == "paused_waiting_human"
        parked = await store.get_run(run.id)
        assert parked.lease is not None and parked.lease.owner == owner.claimant.id
        with pytest.raises(RunOwnedError):
            await other.resume(run.id)  # parked with its owner: answer it instead
        (question,) = await other.run(run.id).pending_questions()
        outcome = await other.run(run.id).answer(question.id, "yes", answered_by="ana")
        assert outcome.items() >= {"queued": False, "resumed": True}.items()
        assert await other.run(run.id).wait(10) == "finished"
        assert other.engine(run.id) is None  # it ran in its owner's session
        events = await run.events()
        assert [e.type for e in events].count("run_resumed") == 1
    finally:
        await owner.close()
        await other.close()
        await store.close()
    assert ran(tmp_path) == ["after"]


async def test_two_sessions_racing_to_resume_one_run_execute_it_once(
    db: Path, tmp_path: Path
) -> None:
    store = open_duckdb_store(db)
    first = Session(store, workdir=tmp_path)
    run_id = await started(first, TOOLS.format(seconds=30), "slow")
    await first.run(run_id).cancel()
    racers = [Session(store, workdir=tmp_path) for _ in range(6)]
    (tmp_path / "ran.txt").unlink()
    try:
        results = await asyncio.gather(*(s.resume(run_id) for s in racers), return_exceptions=True)
        winners = [s for s, r in zip(racers, results, strict=True) if not isinstance(r, Exception)]
        assert len(winners) == 1
        losers = [r for r in results if isinstance(r, Exception)]
        assert all(isinstance(r, RunOwnedError | ResumeError) for r in losers), losers
        for _ in range(1000):  # the winner runs the interrupted node (then it is cancelled)
            if ran(tmp_path):
                break
            await asyncio.sleep(0.01)
        await winners[0].run(run_id).cancel()
    finally:
        for session in (first, *racers):
            await session.close()
        await store.close()
    assert ran(tmp_path) == ["slow"]  # resumed at the interrupted node, once


async def test_two_resumes_at_once_in_one_session_execute_the_run_once(
    db: Path, tmp_path: Path
) -> None:
    """An answer's resume and the parked watcher's, in one owner: one wins, nothing runs twice.

    (Both take the run with the same claimant, which the store allows its
    owner; the crash campaign saw a node run twice in one process this way.)
    """
    store = open_duckdb_store(db)
    owner = Session(store, workdir=tmp_path)
    try:
        run = await owner.start(it.compile(GATE))
        assert await run.wait(10) == "paused_waiting_human"
        (question,) = await run.pending_questions()
        await owner.store.answer(question.id, "yes", answered_by="test")  # no resume yet
        results = await asyncio.gather(
            *(owner.resume(run.id) for _ in range(4)), return_exceptions=True
        )
        assert sum(not isinstance(r, Exception) for r in results) == 1, results
        assert all(isinstance(r, RunOwnedError) for r in results if isinstance(r, Exception))
        assert await run.wait(10) == "finished"
    finally:
        await owner.close()
        await store.close()
    assert ran(tmp_path) == ["after"]


async def test_a_session_that_lost_its_lease_stops_and_writes_nothing(
    db: Path, tmp_path: Path
) -> None:
    store = open_duckdb_store(db)
    owner = Session(store, workdir=tmp_path, lease_seconds=0.6)
    taker = Session(store, workdir=tmp_path)
    try:
        run_id = await started(owner, TOOLS.format(seconds=1.5), "slow")
        await owner.leases.stop()  # as if its process froze: the lease lapses
        await asyncio.sleep(0.8)
        assert (await store.get_run(run_id)).status == "interrupted"
        taken = await taker.resume(run_id)
        assert await taken.wait(15) == "finished"
        # the old owner saw the loss before its next node, and recorded nothing
        assert await owner._tasks[run_id] == "interrupted"
        types = [e.type for e in await store.events(run_id)]
        assert types.count("run_finished") == 1
    finally:
        await owner.close()
        await taker.close()
        await store.close()
    runs = ran(tmp_path)
    assert runs.count("one") == 1 and runs.count("two") == 1  # nobody ran a node twice
    assert runs.count("slow") == 2  # in flight when the lease lapsed: redone by the taker


async def test_an_owner_that_froze_during_a_node_publishes_nothing(
    db: Path, tmp_path: Path
) -> None:
    """Its node's output is not published: the run's artifact has the taker's version only."""
    source = TOOLS.format(seconds=1.5).replace(
        'command: "echo slow >> ran.txt; sleep 1.5"',
        'command: "echo slow >> ran.txt; sleep 1.5; echo $$"\n  publish: report',
    )
    store = open_duckdb_store(db)
    owner = Session(store, workdir=tmp_path, lease_seconds=0.6)
    taker = Session(store, workdir=tmp_path)
    try:
        run_id = await started(owner, source, "slow")
        await owner.leases.stop()  # as if its process froze: the lease lapses
        await asyncio.sleep(0.8)
        taken = await taker.resume(run_id)
        assert await owner._tasks[run_id] == "interrupted"  # its slow node ended meanwhile
        assert await taken.wait(15) == "finished"
        versions = [a for a in await store.list_artifacts(run_id) if a.name == "report"]
        assert len(versions) == 1, versions
        assert versions[0].version == 1
    finally:
        await owner.close()
        await taker.close()
        await store.close()


async def test_cancel_from_another_session_stops_the_owner(db: Path, tmp_path: Path) -> None:
    store = open_duckdb_store(db)
    owner = Session(store, workdir=tmp_path, lease_seconds=1.0)
    other = Session(store, workdir=tmp_path)
    try:
        run_id = await started(owner, TOOLS.format(seconds=30), "slow")
        assert await other.run(run_id).cancel() == "cancelled"
        assert await owner.run(run_id).wait(5) == "cancelled"
        record = await store.get_run(run_id)
        assert record.lease is None
        types = [e.type for e in await store.events(run_id)]
        assert types.count("run_cancelled") == 1
    finally:
        await owner.close()
        await other.close()
        await store.close()


@pytest.mark.parametrize("kind", ["memory", "duckdb"])
async def test_a_cancel_reaches_the_owner_before_its_next_node_not_at_its_next_beat(
    kind: str, db: Path, tmp_path: Path
) -> None:
    """The cancel rings the run's doorbell; its owner renews at once and stops: a node that
    ends before the owner's next heartbeat (2.5 s here) is the last one that runs."""
    store = MemoryStore() if kind == "memory" else open_duckdb_store(db)
    owner = Session(store, workdir=tmp_path)  # the default lease: a heartbeat every 2.5 s
    other = Session(store, workdir=tmp_path)
    try:
        run_id = await started(owner, TOOLS.format(seconds=0.8), "slow")
        await store.cancel_run(run_id)  # as another process would
        assert await owner.run(run_id).wait(10) == "cancelled"
    finally:
        await owner.close()
        await other.close()
        await store.close()
    assert "two" not in ran(tmp_path)


async def test_closing_a_session_lets_go_of_its_parked_runs(db: Path, tmp_path: Path) -> None:
    store = open_duckdb_store(db)
    owner = Session(store, workdir=tmp_path)
    run = await owner.start(it.compile(GATE))
    assert await run.wait(10) == "paused_waiting_human"
    await owner.close()
    record = await store.get_run(run.id)
    assert record.status == "paused_waiting_human" and record.lease is None
    other = Session(store, workdir=tmp_path)
    try:
        (question,) = await other.run(run.id).pending_questions()
        # nobody keeps it parked: the answer resumes it here
        assert (await other.run(run.id).answer(question.id, "yes"))["resumed"] is True
        assert other.engine(run.id) is not None or (await other.run(run.id).wait(10)) == "finished"
        assert await other.run(run.id).wait(10) == "finished"
    finally:
        await other.close()
        await store.close()


async def test_sessions_of_one_process_share_one_server(tmp_path: Path) -> None:
    """A notebook with the magics' session and a Session of its own serves one API, not two."""
    import json
    import urllib.request

    from iterion_nb.store.holder_file import holder_file

    first, second = Session(tmp_path / "store"), Session(tmp_path / "store")
    try:
        assert first.serve() is second.serve() is not None
        run = await second.start(it.compile(GATE))
        assert await run.wait(10) == "paused_waiting_human"
        await first.close()  # the session that started the server goes: it keeps serving
        holder = second.holder
        assert holder is not None and holder.running
        published = json.loads(holder_file(holder.db_path).read_text())
        request = urllib.request.Request(
            f"{published['url']}/api/runs/{run.id}",
            headers={"Authorization": f"Bearer {published['token']}"},
        )
        body = await asyncio.to_thread(lambda: json.loads(urllib.request.urlopen(request).read()))
        assert body["status"] == "paused_waiting_human"
    finally:
        await first.close()
        await second.close()


def tools_run() -> Run:
    """The record of a run of ``TOOLS`` (no sleep) as a launcher creates it: ``r1``, running."""
    wf = it.compile(TOOLS.format(seconds=0))
    now = utcnow()
    return Run(
        id="r1", workflow=wf.name, source_hash=wf.source_hash, status="running",
        created_at=now, updated_at=now, source=TOOLS.format(seconds=0), vars={},
    )  # fmt: skip


def dead_claimant() -> Claimant:
    """A claimant of this host whose process has exited (its lease is void at once)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return Claimant(uuid.uuid4().hex, proc.pid, this_host(), 60)


async def test_a_run_queued_by_a_process_that_exited_stays_queued() -> None:
    """A cluster's queue outlives the process that queued the run; a process's lease does not.

    The launcher of a cluster run (``iterion-nb run --detach``) exits at once: its run must
    still read ``running`` and say it waits for a worker, not ``interrupted``.
    """
    store = MemoryStore()
    gone = dead_claimant()
    queue = Claimant.queue(60)
    queue = Claimant(queue.id, gone.pid, gone.host, 60)  # queued by the process that exited
    await store.create_run(tools_run(), owner=queue)
    await store.create_run(replace(tools_run(), id="r2"), owner=gone)
    queued, orphan = await store.get_run("r1"), await store.get_run("r2")
    assert queued.status == "running" and queued.lease is not None and queued.lease.queued
    assert orphan.status == "interrupted" and orphan.lease is None
    with pytest.raises(RunOwnedError, match="queued") as refused:
        await store.acquire_run("r1", Claimant.here(60), statuses=("running",))
    assert refused.value.queued


@pytest.mark.parametrize("kind", ["memory", "duckdb"])
async def test_a_queued_run_whose_worker_died_before_its_first_checkpoint_is_resumed(
    kind: str, db: Path, tmp_path: Path
) -> None:
    """``run_started`` may commit before the start checkpoint; a worker killed between
    the two leaves a run that started: Dask's retry of the task resumes it, once."""
    store = MemoryStore() if kind == "memory" else open_duckdb_store(db)
    record = tools_run()
    queue = Claimant.here(60)
    await store.create_run(record, owner=queue)
    worker = dead_claimant()  # took the run from its queue, logged run_started, was killed
    await store.acquire_run("r1", worker, take_from=queue.id)
    await store.append_event("r1", "run_started", {"workflow": "w"})
    await store.flush()
    assert (await store.get_run("r1")).checkpoint is None

    retry = Session(store, workdir=tmp_path, serve=False)  # the same task, run again
    try:
        status = await retry.execute_queued(await store.get_run("r1"), queue.id)
    finally:
        await retry.close()
    assert status == "finished"
    types = [e.type for e in await store.events("r1")]
    assert types.count("run_started") == 1 and "run_resumed" in types, types
    assert ran(tmp_path) == ["one", "slow", "two"]


@pytest.mark.parametrize("logged", [False, True], ids=["before-its-first-batch", "after"])
async def test_a_run_whose_owner_died_before_its_first_checkpoint_starts_or_resumes_once(
    logged: bool, tmp_path: Path
) -> None:
    """Resumed by anyone (a cluster's watcher, a notebook): one ``run_started`` either way."""
    store = MemoryStore()
    record = tools_run()
    await store.create_run(record, owner=dead_claimant())
    if logged:  # its run_started was written, its start checkpoint not yet
        await store.append_event("r1", "run_started", {"workflow": "w"})
        await store.flush()
    assert (await store.get_run("r1")).status == "interrupted"
    session = Session(store, workdir=tmp_path, serve=False)
    try:
        assert await (await session.resume("r1")).wait(30) == "finished"
    finally:
        await session.close()
    types = [e.type for e in await store.events("r1")]
    assert types[0] == "run_started" and types.count("run_started") == 1, types
    assert ("run_resumed" in types) == logged, types
    assert ran(tmp_path) == ["one", "slow", "two"]


async def test_a_queued_run_still_held_by_its_queue_starts(tmp_path: Path) -> None:
    """The common case: the worker's task takes the run from its queue and starts it."""
    store = MemoryStore()
    record = tools_run()
    queue = Claimant.here(60)
    await store.create_run(record, owner=queue)
    worker = Session(store, workdir=tmp_path, serve=False)
    try:
        assert await worker.execute_queued(await store.get_run("r1"), queue.id) == "finished"
    finally:
        await worker.close()
    types = [e.type for e in await store.events("r1")]
    assert types.count("run_started") == 1 and "run_resumed" not in types, types


async def test_a_run_cancelled_while_queued_is_cancelled_by_its_worker_untouched(
    tmp_path: Path,
) -> None:
    """Cancel asked before a worker took the run: the worker ends it, no node runs."""
    store = MemoryStore()
    record = tools_run()
    queue = Claimant.here(60)
    await store.create_run(record, owner=queue)
    await store.cancel_run("r1")
    worker = Session(store, workdir=tmp_path, serve=False)
    try:
        assert await worker.execute_queued(await store.get_run("r1"), queue.id) == "cancelled"
    finally:
        await worker.close()
    assert ran(tmp_path) == []
    run = await store.get_run("r1")
    assert (run.status, run.cancel_requested, run.lease) == ("cancelled", False, None)
    assert [e.type for e in await store.events("r1")][-1] == "run_cancelled"
    # and it can be resumed like any cancelled run: from its start
    other = Session(store, workdir=tmp_path, serve=False)
    try:
        assert await (await other.resume("r1")).wait(30) == "finished"
    finally:
        await other.close()
    assert ran(tmp_path) == ["one", "slow", "two"]


async def test_a_run_cancelled_while_queued_whose_task_was_lost_is_cancelled_not_run(
    tmp_path: Path,
) -> None:
    """The scheduler lost the queued task: once the queue's lease lapses a watcher
    submits the run again, without a hand-over; that task honours the cancel too."""
    skew = [timedelta(0)]
    store = MemoryStore(clock=lambda: utcnow() + skew[0])
    record = tools_run()
    queue = Claimant.queue(60)
    await store.create_run(record, owner=queue)
    await store.cancel_run("r1")
    skew[0] = timedelta(seconds=61)  # the queue's lease lapsed: the run reads interrupted
    seen = await store.get_run("r1")
    assert (seen.status, seen.lease, seen.cancel_requested) == ("interrupted", None, True)
    worker = Session(store, workdir=tmp_path, serve=False)
    try:
        assert await worker.execute_queued(seen, None) == "cancelled"
    finally:
        await worker.close()
    assert ran(tmp_path) == []
    run = await store.get_run("r1")
    assert (run.status, run.cancel_requested, run.lease) == ("cancelled", False, None)
    # a person's resume still starts it afresh
    other = Session(store, workdir=tmp_path, serve=False)
    try:
        assert await (await other.resume("r1")).wait(30) == "finished"
    finally:
        await other.close()
    assert ran(tmp_path) == ["one", "slow", "two"]


async def test_a_renewal_about_an_earlier_take_spares_the_run_taken_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Parked, cancelled, resumed here while a renewal was on its way: the renewal found the
    first take gone (lost, or cancel asked) and stopped the resumed run, silently."""
    from iterion_nb.runtime.records import LeaseReport
    from iterion_nb.session.leases import LeaseKeeper

    store = MemoryStore()
    entered, answer = asyncio.Event(), asyncio.Event()

    async def renew_leases(owner: Claimant, run_ids: list[str]) -> LeaseReport:
        entered.set()
        await answer.wait()
        return LeaseReport(("r1",), ("r1",))

    monkeypatch.setattr(store, "renew_leases", renew_leases)
    lost: list[str] = []
    cancelled: list[str] = []
    keeper = LeaseKeeper(store, Claimant.here(30), on_lost=lost.append, on_cancel=cancelled.append)
    keeper.hold("r1")
    renewing = asyncio.ensure_future(keeper.renew())
    await entered.wait()
    keeper.drop("r1")  # settled (cancelled) ...
    keeper.hold("r1")  # ... and taken again here
    answer.set()
    await renewing
    assert (lost, cancelled, keeper.runs) == ([], [], {"r1"})
    await keeper.renew()  # a report about this take counts
    assert (lost, cancelled, keeper.runs) == (["r1"], ["r1"], set())
    await keeper.stop()
