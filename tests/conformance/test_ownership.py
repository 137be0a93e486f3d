"""Run ownership: leases taken, renewed, lost, released; interrupted runs; atomic stops."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from datetime import timedelta

import pytest

from iterion_nb.errors import (
    LeaseLostError,
    NotFoundError,
    QuestionClosedError,
    ResumeError,
    RunOwnedError,
    StoreError,
)
from iterion_nb.runtime.ownership import Claimant, this_host
from iterion_nb.runtime.ports import Store

from .conftest import Clock, make_question, make_run


def owner(ttl: float = 10.0) -> Claimant:
    return Claimant.here(ttl)


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


async def test_a_run_created_with_an_owner_is_running_and_names_it(store: Store) -> None:
    me = owner()
    run = await store.create_run(make_run(status="running"), owner=me)
    assert run.status == "running"
    assert run.lease is not None
    assert (run.lease.owner, run.lease.pid, run.lease.host) == (me.id, me.pid, this_host())
    assert run.lease.expires_at > run.lease.since
    assert (await store.get_run("r1")).lease == run.lease


async def test_running_without_a_live_owner_reads_interrupted(store: Store, clock: Clock) -> None:
    await store.create_run(make_run("orphan", status="running"))  # nobody owns it
    await store.create_run(make_run("live", status="running"), owner=owner(ttl=30))
    await store.create_run(make_run("lapsing", status="running"), owner=owner(ttl=5))
    dead = Claimant("x", dead_pid(), this_host(), 3600)
    await store.create_run(make_run("dead", status="running"), owner=dead)
    assert (await store.get_run("orphan")).status == "interrupted"
    assert (await store.get_run("dead")).status == "interrupted"  # its process is gone
    assert (await store.get_run("dead")).lease is None
    assert (await store.get_run("lapsing")).status == "running"
    clock.now += timedelta(seconds=6)
    assert (await store.get_run("lapsing")).status == "interrupted"
    assert (await store.get_run("live")).status == "running"
    interrupted = {r.id for r in await store.list_runs(status="interrupted")}
    assert interrupted == {"orphan", "dead", "lapsing"}
    assert [r.id for r in await store.list_runs(status="running")] == ["live"]
    with pytest.raises(StoreError):
        await store.update_run("live", status="interrupted")  # never stored


async def test_a_live_owner_keeps_others_out(store: Store, clock: Clock) -> None:
    first, second = owner(ttl=10), owner(ttl=10)
    await store.create_run(make_run(status="running"), owner=first)
    with pytest.raises(RunOwnedError) as info:
        await store.acquire_run("r1", second)
    assert (info.value.pid, info.value.host) == (first.pid, this_host())
    assert f"another session of this process ({first.pid} on host" in str(info.value)
    clock.now += timedelta(seconds=11)  # first stopped renewing: anyone may take it
    taken = await store.acquire_run("r1", second)
    assert taken.status == "running"
    assert taken.lease is not None and taken.lease.owner == second.id


async def test_acquire_checks_the_status(store: Store) -> None:
    me = owner()
    await store.create_run(make_run("done", status="finished"))
    with pytest.raises(ResumeError, match="finished"):
        await store.acquire_run("done", me)
    with pytest.raises(NotFoundError):
        await store.acquire_run("ghost", me)
    await store.create_run(make_run("mine", status="running"), owner=me)
    with pytest.raises(ResumeError, match="running"):
        await store.acquire_run("mine", me)  # already running under this owner


async def test_exactly_one_of_many_claimants_takes_a_run(store: Store) -> None:
    await store.create_run(make_run(status="failed_resumable"))
    claimants = [owner() for _ in range(10)]
    results = await asyncio.gather(
        *(store.acquire_run("r1", c) for c in claimants), return_exceptions=True
    )
    winners = [c for c, r in zip(claimants, results, strict=True) if not isinstance(r, Exception)]
    assert len(winners) == 1
    assert all(isinstance(r, RunOwnedError) for r in results if isinstance(r, Exception))
    run = await store.get_run("r1")
    assert run.lease is not None and run.lease.owner == winners[0].id


async def test_renewal_extends_and_reports_loss_and_cancel(store: Store, clock: Clock) -> None:
    me, other = owner(ttl=5), owner(ttl=5)
    await store.create_run(make_run("a", status="running"), owner=me)
    await store.create_run(make_run("b", status="running"), owner=me)
    clock.now += timedelta(seconds=4)
    report = await store.renew_leases(me, ["a", "b"])
    assert (report.lost, report.cancel) == ((), ())
    clock.now += timedelta(seconds=4)  # 8 s after creation, 4 after the renewal
    assert (await store.get_run("a")).status == "running"
    clock.now += timedelta(seconds=2)  # both lapsed; another takes "b" meanwhile
    await store.acquire_run("b", other)
    report = await store.renew_leases(me, ["a", "b"])
    assert report.lost == ("b",)  # "a" was lapsed but nobody took it: renewed
    assert (await store.get_run("a")).status == "running"
    assert (await store.get_run("b")).lease.owner == other.id  # type: ignore[union-attr]


async def test_cancel_asks_a_live_owner_and_stops_others_at_once(store: Store) -> None:
    me = owner()
    await store.create_run(make_run("live", status="running"), owner=me)
    await store.create_run(make_run("paused"))
    await store.create_run(make_run("done", status="finished"))
    asked = await store.cancel_run("live")
    assert (asked.status, asked.cancel_requested) == ("running", True)
    assert (await store.renew_leases(me, ["live"])).cancel == ("live",)
    stopped = await store.cancel_run("paused")
    assert stopped.status == "cancelled" and stopped.lease is None
    assert [e.type for e in await store.events("paused")] == ["run_cancelled"]
    assert (await store.cancel_run("done")).status == "finished"
    assert await store.events("done") == []


async def test_settle_commits_status_checkpoint_and_event_together(store: Store) -> None:
    me = owner()
    await store.create_run(make_run(status="running"), owner=me)
    await store.append_event("r1", "node_finished")
    done = await store.settle_run(
        "r1", me.id, status="finished", error=None, checkpoint={"outputs": {"a": 1}},
        event=("run_finished", {"outputs": ["a"]}),
    )  # fmt: skip
    assert (done.status, done.lease, done.checkpoint) == ("finished", None, {"outputs": {"a": 1}})
    events = await store.events("r1")
    assert [(e.seq, e.type) for e in events] == [(1, "node_finished"), (2, "run_finished")]
    assert events[1].data == {"outputs": ["a"]}


@pytest.mark.parametrize("status", ["finished", "failed"])
async def test_a_run_that_ends_for_good_withdraws_its_questions_in_the_same_commit(
    store: Store, clock: Clock, status: str
) -> None:
    """No crash between the end and a withdrawal can leave its question in an inbox."""
    me = owner()
    await store.create_run(make_run(status="running"), owner=me)
    soon = clock.now + timedelta(seconds=30)
    await store.add_interaction(make_question("q1", minute=0), owner=me.id)
    await store.add_interaction(make_question("q2", minute=1, expires_at=soon), owner=me.id)
    await store.add_interaction(make_question("q3", minute=2), owner=me.id)
    await store.answer("q3", "f", answered_by="ana")
    await store.create_run(make_run("r2", status="running"), owner=me)
    await store.add_interaction(make_question("other", run_id="r2"), owner=me.id)
    clock.now += timedelta(seconds=31)  # q2 is past its expiry, not yet recorded expired
    await store.settle_run(
        "r1", me.id, status=status, error=None, checkpoint={},  # type: ignore[arg-type]
        event=(f"run_{status}", {}),
    )  # fmt: skip
    assert [q.id for q in await store.pending_interactions()] == ["other"]
    q1, q2, q3 = [await store.get_interaction(i) for i in ("q1", "q2", "q3")]
    assert (q1.ended, q1.answers) == ("retracted", None)
    assert f"its run r1 {status} before it was answered" in (q1.end_reason or "")
    assert q2.ended == "expired"  # its expiry came first
    assert (q3.ended, q3.answers) == (None, "f")  # answered: kept as it was
    events = [(e.type, e.data.get("interaction_id")) for e in await store.events("r1")]
    # withdrawn before the run's last event, which a follower stops at
    assert events[-3:] == [
        ("interaction_retracted", "q1"), ("interaction_expired", "q2"), (f"run_{status}", None),
    ]  # fmt: skip
    with pytest.raises(QuestionClosedError):
        await store.answer("q1", "f")
    assert (await store.get_interaction("q1")).answers is None


@pytest.mark.parametrize("status", ["failed_resumable", "cancelled", "paused_waiting_human"])
async def test_a_run_that_can_go_on_keeps_its_questions_open(store: Store, status: str) -> None:
    me = owner()
    await store.create_run(make_run(status="running"), owner=me)
    await store.add_interaction(make_question("q1"), owner=me.id)
    await store.settle_run(
        "r1", me.id, status=status, error=None, checkpoint={},  # type: ignore[arg-type]
        event=("run_paused", {}),
    )  # fmt: skip
    assert [q.id for q in await store.pending_interactions("r1")] == ["q1"]
    assert (await store.answer("q1", "f")).interaction.answers == "f"


@pytest.mark.parametrize("keep_lease", [False, True])
async def test_a_pause_with_a_cancel_pending_is_recorded_cancelled(
    store: Store, keep_lease: bool
) -> None:
    """The cancel was asked on the run's way to a gate: recording the pause would drop it."""
    me = owner()
    await store.create_run(make_run(status="running"), owner=me)
    asked = await store.cancel_run("r1")
    assert (asked.status, asked.cancel_requested) == ("running", True)
    settle = {
        "status": "paused_waiting_human", "error": None, "checkpoint": {"at": "gate"},
        "event": ("run_paused", {"interaction_id": "q1"}), "keep_lease": keep_lease,
    }  # fmt: skip
    stopped = await store.settle_run("r1", me.id, **settle)  # type: ignore[arg-type]
    assert (stopped.status, stopped.lease, stopped.cancel_requested) == ("cancelled", None, False)
    assert [e.type for e in await store.events("r1")] == ["run_cancelled"]
    again = await store.settle_run("r1", me.id, **settle)  # type: ignore[arg-type]
    assert again.status == "cancelled"  # a repeat whose reply was lost: nothing more written
    assert len(await store.events("r1")) == 1
    # without a cancel pending, a pause is a pause
    await store.create_run(make_run("r2", status="running"), owner=me)
    paused = await store.settle_run("r2", me.id, **settle)  # type: ignore[arg-type]
    assert paused.status == "paused_waiting_human"


async def test_a_paused_run_can_stay_parked_with_its_owner(store: Store) -> None:
    me, other = owner(), owner()
    await store.create_run(make_run(status="running"), owner=me)
    parked = await store.settle_run(
        "r1", me.id, status="paused_waiting_human", error=None, checkpoint={},
        event=("run_paused", {}), keep_lease=True,
    )  # fmt: skip
    assert parked.status == "paused_waiting_human"
    assert parked.lease is not None and parked.lease.owner == me.id
    with pytest.raises(RunOwnedError):
        await store.acquire_run("r1", other)
    again = await store.acquire_run("r1", me)  # its owner resumes it
    assert again.status == "running" and again.lease is not None
    assert again.lease.since == parked.lease.since
    await store.release_runs(me.id, ["r1"])
    assert (await store.get_run("r1")).status == "interrupted"


async def test_a_lost_owner_writes_nothing(store: Store, clock: Clock) -> None:
    me, other = owner(ttl=5), owner(ttl=5)
    await store.create_run(make_run(status="running"), owner=me)
    await store.save_checkpoint("r1", {"step": 1}, owner=me.id, durable=True)
    clock.now += timedelta(seconds=6)
    await store.acquire_run("r1", other)
    await store.save_checkpoint("r1", {"step": 2}, owner=other.id, durable=True)
    await store.save_checkpoint("r1", {"stale": True}, owner=me.id)
    with pytest.raises(LeaseLostError):
        await store.save_checkpoint("r1", {"stale": True}, owner=me.id, durable=True)
    with pytest.raises(LeaseLostError):
        await store.settle_run(
            "r1", me.id, status="finished", error=None, checkpoint={"stale": True},
            event=("run_finished", {}),
        )  # fmt: skip
    run = await store.get_run("r1")
    assert (run.status, run.checkpoint) == ("running", {"step": 2})
    assert "run_finished" not in [e.type for e in await store.events("r1")]


async def test_a_lost_owner_asks_no_question(store: Store, clock: Clock) -> None:
    """A process that lost the run records no question: nobody would read its answer."""
    me, other = owner(ttl=5), owner(ttl=5)
    await store.create_run(make_run(status="running"), owner=me)
    await store.add_interaction(make_question("q1", minute=0), owner=me.id)  # its own run: recorded
    clock.now += timedelta(seconds=6)
    # lapsed, but nobody took it: still its own
    await store.add_interaction(make_question("q2", minute=1), owner=me.id)
    await store.acquire_run("r1", other)
    with pytest.raises(LeaseLostError):
        await store.add_interaction(make_question("q3", minute=2), owner=me.id)
    await store.add_interaction(make_question("q4", minute=3), owner=other.id)
    await store.release_runs(other.id, ["r1"])
    with pytest.raises(LeaseLostError):  # nobody holds it now: not this owner either
        await store.add_interaction(make_question("q5", minute=4), owner=other.id)
    pending = [i.id for i in await store.pending_interactions("r1")]
    assert pending == ["q1", "q2", "q4"]
    with pytest.raises(NotFoundError):
        await store.get_interaction("q3")


async def test_an_answer_and_its_event_are_one_record(store: Store) -> None:
    await store.create_run(make_run())
    await store.add_interaction(make_question())
    await store.answer("q1", "formal", answered_by="ana")
    events = await store.events("r1")
    assert [(e.type, e.data, e.node_id) for e in events] == [
        ("interaction_answered",
         {"interaction_id": "q1", "kind": "async", "answered_by": "ana"}, "gatherer"),
    ]  # fmt: skip


async def test_a_run_is_handed_over_to_the_claimant_it_was_queued_for(store: Store) -> None:
    queue, worker, stranger = owner(ttl=60), owner(), owner()
    await store.create_run(make_run(status="running"), owner=queue)  # queued for a worker
    with pytest.raises(RunOwnedError):
        await store.acquire_run("r1", stranger)
    with pytest.raises(RunOwnedError):
        await store.acquire_run("r1", stranger, take_from="someone else")
    taken = await store.acquire_run("r1", worker, take_from=queue.id)
    assert taken.status == "running" and taken.lease is not None
    assert taken.lease.owner == worker.id and taken.lease.pid == worker.pid
    # handed over once: the token no longer opens it
    with pytest.raises(RunOwnedError):
        await store.acquire_run("r1", stranger, take_from=queue.id)


async def test_a_cancel_asked_while_a_run_is_queued_reaches_its_worker(store: Store) -> None:
    queue, worker = owner(ttl=60), owner()
    await store.create_run(make_run("q", status="running"), owner=queue)
    assert (await store.cancel_run("q")).cancel_requested  # nothing executes it yet
    taken = await store.acquire_run("q", worker, take_from=queue.id)
    assert taken.cancel_requested and taken.lease is not None
    assert (await store.renew_leases(worker, ["q"])).cancel == ("q",)
    # a resume afterwards starts afresh: taking a run otherwise clears the request
    await store.settle_run(
        "q", worker.id, status="cancelled", error=None, checkpoint={}, event=("run_cancelled", {})
    )
    assert not (await store.acquire_run("q", worker)).cancel_requested


async def test_a_run_copies_whole_and_a_second_copy_changes_nothing(store: Store) -> None:
    from iterion_nb.store import MemoryStore

    await store.create_run(make_run(vars={"é": [1, {"x": None}]}, checkpoint={"k": [1]}))
    await store.append_event("r1", "node_started", {"n": 1}, node_id="a", branch_id="b0")
    await store.add_interaction(make_question("q1"))
    await store.add_interaction(make_question("q2", minute=1))
    await store.answer("q1", {"tone": "formal"}, answered_by="ana")
    await store.put_artifact("r1", "a", "plan", {"steps": ["é"]})
    await store.queue_message("r1", "writer", "hello")
    bundle = await store.export_run("r1")
    assert [e.type for e in bundle.events] == ["node_started", "interaction_answered"]
    assert [i.id for i in bundle.interactions] == ["q1", "q2"]
    assert len(bundle.messages) == 2  # the answer's, and "hello"
    # into another store, and back into this one
    other = MemoryStore()
    assert await other.import_run(bundle) == "created"
    assert await other.import_run(bundle) == "unchanged"
    assert await other.export_run("r1") == bundle
    assert await store.import_run(bundle) == "unchanged"
    await store.append_event("r1", "node_finished", node_id="a")  # the source went on
    newer = await store.export_run("r1")
    assert await other.import_run(newer) == "updated"
    assert await other.export_run("r1") == newer
    assert [p.id for p in await other.pending_interactions("r1")] == ["q2"]
    assert [m.text for m in await other.drain_messages("r1", "writer")] == ["hello"]
    # a copy into a store that has the run live is refused
    live = MemoryStore()
    await live.create_run(make_run(status="running"), owner=owner())
    with pytest.raises(RunOwnedError):
        await live.import_run(newer)


async def test_a_copy_never_replaces_what_only_the_destination_recorded(store: Store) -> None:
    """``import_run`` keeps a copy that went on here (``newer``) or both ways (``diverged``)."""
    from iterion_nb.store import MemoryStore

    await store.create_run(make_run())
    await store.add_interaction(make_question("q1"))
    before = await store.export_run("r1")
    other = MemoryStore()
    assert await other.import_run(before) == "created"
    await store.answer("q1", "formal", answered_by="ana")  # answered here only
    assert await store.import_run(before) == "newer"  # the older copy replaces nothing
    await other.answer("q1", "casual", answered_by="bob")  # and otherwise there
    assert await store.import_run(await other.export_run("r1")) == "diverged"
    (kept,) = await store.interactions("r1")
    assert (kept.answers, kept.answered_by) == ("formal", "ana")
    # forced, it is replaced as asked; then the copies agree
    assert await store.import_run(await other.export_run("r1"), force=True) == "updated"
    (taken,) = await store.interactions("r1")
    assert (taken.answers, taken.answered_by) == ("casual", "bob")
    assert await store.import_run(await other.export_run("r1")) == "unchanged"


async def test_a_stop_repeated_after_its_reply_was_lost_is_recorded_once(store: Store) -> None:
    me = owner()
    await store.create_run(make_run(status="running"), owner=me)
    for _ in range(2):  # the second time: the same stop, repeated after its holder died
        parked = await store.settle_run(
            "r1", me.id, status="paused_waiting_human", error=None, checkpoint={"at": "gate"},
            event=("run_paused", {}), keep_lease=True,
        )  # fmt: skip
        assert parked.status == "paused_waiting_human"
    await store.acquire_run("r1", me)
    for _ in range(2):
        done = await store.settle_run(
            "r1", me.id, status="finished", error=None, checkpoint={"at": "end"},
            event=("run_finished", {}),
        )  # fmt: skip
        assert done.status == "finished"
    assert [e.type for e in await store.events("r1")] == ["run_paused", "run_finished"]
