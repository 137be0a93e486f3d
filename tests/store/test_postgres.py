"""The PostgreSQL store across processes, its schema, and store URLs.

Everything runs against a real PostgreSQL server started for the test
session on loopback (``postgres_url``); each test uses a schema of its own.
The conformance suite runs against this store too (tests/conformance).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import subprocess
import sys
import textwrap
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any

import psycopg
import pytest

import iterion_nb as it
from iterion_nb.errors import (
    AlreadyAnsweredError,
    ConflictError,
    OwnerMayRenewError,
    RunOwnedError,
    StoreError,
    StoreFileError,
)
from iterion_nb.runtime.ownership import Claimant
from iterion_nb.runtime.records import Interaction, Run
from iterion_nb.session import Session
from iterion_nb.store import STORE_ENV, resolve_store_path
from iterion_nb.store.location import is_store_url, mask_url, without_password
from iterion_nb.store.postgres_schema import MIGRATIONS
from iterion_nb.store.postgres_store import PostgresStore, open_postgres_store
from iterion_nb.store.remote import open_store

HERE = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


@pytest.fixture
def url(postgres_url: str) -> str:
    """A store of its own for this test: a fresh schema on the session's server."""
    return f"{postgres_url}?schema=p_{uuid.uuid4().hex[:12]}"


def a_run(run_id: str = "r1") -> Run:
    return Run(run_id, "w", "h", "paused_waiting_human", HERE, HERE)


def a_question(iid: str = "q1", run_id: str = "r1") -> Interaction:
    return Interaction(iid, run_id, "asker", "async", ("Formal or casual?",), HERE)


def spawn(code: str, *args: str) -> subprocess.Popen[str]:
    """A Python process running ``code`` with ``args`` (line-buffered text pipes)."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        bufsize=1,
    )  # fmt: skip


def finish(proc: subprocess.Popen[str], timeout: float = 30) -> str:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return out


async def raw(url: str, query: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    """Run one statement on the server outside the store (to look, or to tamper)."""
    base = url.split("?")[0]
    async with await psycopg.AsyncConnection.connect(base, autocommit=True) as conn:
        cur = await conn.execute(query, params)
        return await cur.fetchall() if cur.description else []


# -- across processes -------------------------------------------------------------------
ANSWERER = """
    import asyncio, sys
    from iterion_nb.errors import AlreadyAnsweredError
    from iterion_nb.store.remote import open_store

    async def main(url, n):
        store = open_store(url)              # the URL selects PostgreSQL
        print("ready", flush=True)
        sys.stdin.readline()                  # everyone answers at once
        try:
            await store.answer("q1", f"answer {n}", answered_by=f"p{n}")
            print("won", flush=True)
        except AlreadyAnsweredError as err:
            print("lost", err.existing, flush=True)
        await store.close()

    asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


async def test_ten_processes_answer_one_question_exactly_one_wins(url: str) -> None:
    store = open_postgres_store(url)
    try:
        await store.create_run(a_run())
        await store.add_interaction(a_question())
        procs = [spawn(ANSWERER, url, str(n)) for n in range(10)]
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outcomes = [finish(proc).strip() for proc in procs]
        winners = [o for o in outcomes if o == "won"]
        answered = await store.get_interaction("q1")
        assert len(winners) == 1, outcomes
        assert sorted(outcomes).count(f"lost {answered.answers}") == 9
        assert answered.answered_by == f"p{outcomes.index('won')}"
        assert len(await store.drain_messages("r1", "asker")) == 1
        assert [e.type for e in await store.events("r1")] == ["interaction_answered"]
        with pytest.raises(AlreadyAnsweredError):
            await store.answer("q1", "late")
    finally:
        await store.close()


async def test_a_question_held_locked_as_its_run_ends_is_withdrawn_once_let_go(url: str) -> None:
    """An amendment (or any transaction) holds the row as the run ends: settle_run skips it
    (waiting could deadlock against an answer), then withdraws it once that commits."""
    schema = url.rsplit("=", 1)[1]
    store = open_postgres_store(url)
    me = Claimant.here(30)
    try:
        await store.create_run(replace(a_run(), status="running"), owner=me)
        await store.add_interaction(a_question(), owner=me.id)
        base = url.split("?")[0]
        async with await psycopg.AsyncConnection.connect(base) as holder:
            await holder.execute(f"SELECT 1 FROM {schema}.interactions WHERE id = 'q1' FOR UPDATE")

            async def let_go() -> None:
                await asyncio.sleep(0.5)
                await holder.commit()  # the question is still pending when it lets go

            releasing = asyncio.ensure_future(let_go())
            settled = await store.settle_run(
                "r1", me.id, status="finished", error=None, checkpoint={},
                event=("run_finished", {}),
            )  # fmt: skip
            await releasing
        assert settled.status == "finished"
        assert await store.pending_interactions("r1") == []
        assert (await store.get_interaction("q1")).ended == "retracted"
    finally:
        await store.close()


async def test_a_cancelled_callers_store_error_is_not_logged_as_never_retrieved(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The work goes on when its caller stops waiting (a cancel, a resume racing it): its
    error is nobody's to report, and asyncio logged it as 'never retrieved'."""
    import gc

    store = open_postgres_store(url)
    try:
        for _ in range(5):
            call = asyncio.ensure_future(store.get_run("nosuchrun"))  # NotFoundError, later
            await asyncio.sleep(0)
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await call
        await asyncio.sleep(0.5)  # the work ended meanwhile, with its error
        gc.collect()
        await asyncio.sleep(0)
        assert "never retrieved" not in caplog.text
    finally:
        await store.close()


WAITER = """
    import asyncio, sys, time
    from iterion_nb.store.postgres_store import open_postgres_store

    async def main(url):
        store = open_postgres_store(url)
        with store.doorbell.arm("r1") as ticket:       # arm, then check, then wait
            pending = await store.pending_interactions("r1")
            print("armed", len(pending), flush=True)
            rung = await ticket.wait(timeout=10)
            print("woke", rung, time.time(), flush=True)
        print("pending", len(await store.pending_interactions("r1")), flush=True)
        await store.close()

    asyncio.run(main(sys.argv[1]))
"""


async def test_an_answer_in_one_process_wakes_a_waiter_in_another(url: str) -> None:
    store = open_postgres_store(url)
    try:
        await store.create_run(a_run())
        await store.add_interaction(a_question())
        waiter = spawn(WAITER, url)
        assert waiter.stdout is not None
        assert waiter.stdout.readline().split() == ["armed", "1"]
        await asyncio.sleep(0.2)  # nothing rings meanwhile: the waiter really waits
        committed = time.time()
        await store.answer("q1", "formal")
        lines = finish(waiter).splitlines()
        _, rung, woke = lines[0].split()
        assert rung == "True"
        assert float(woke) - committed < 1.0  # LISTEN/NOTIFY, not a poll
        assert lines[1] == "pending 0"
    finally:
        await store.close()


APPENDER = """
    import asyncio, sys
    from iterion_nb.store.postgres_store import open_postgres_store

    async def main(url):
        store = open_postgres_store(url, flush_rows=37)
        sys.stdin.readline()
        for n in range(300):
            await store.append_event("r1", "tick", {"by": "child", "n": n})
            if n % 50 == 0:
                await asyncio.sleep(0.01)
        await store.close()          # writes what waits

    asyncio.run(main(sys.argv[1]))
"""


async def test_events_of_two_processes_get_distinct_gap_free_seqs(url: str) -> None:
    store = open_postgres_store(url, flush_rows=23)
    try:
        await store.create_run(a_run())
        child = spawn(APPENDER, url)
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
        for n in range(300):
            await store.append_event("r1", "tick", {"by": "parent", "n": n})
            if n % 40 == 0:
                await asyncio.sleep(0.01)
        await asyncio.to_thread(finish, child)
        events = await store.events("r1")
        assert [e.seq for e in events] == list(range(1, 601))
        for who in ("parent", "child"):  # each process's events keep its order
            assert [e.data["n"] for e in events if e.data["by"] == who] == list(range(300))
    finally:
        await store.close()


# -- one process ------------------------------------------------------------------------
async def test_reopening_keeps_everything(url: str) -> None:
    first = open_postgres_store(url)
    await first.create_run(a_run())
    await first.add_interaction(a_question())
    await first.add_interaction(a_question("q2"))
    await first.answer("q1", {"tone": "é"}, answered_by="ana")
    await first.put_artifact("r1", "writer", "draft", ["v1"])
    await first.queue_message("r1", "writer", "note")
    for n in range(5):
        await first.append_event("r1", "tick", {"n": n})
    await first.save_checkpoint("r1", {"frontier": ["b"]})  # batched: close writes it
    await first.close()
    with pytest.raises(StoreError, match="closed"):
        await first.get_run("r1")

    again = open_postgres_store(url)
    try:
        assert (await again.get_run("r1")).checkpoint == {"frontier": ["b"]}
        types = [e.type for e in await again.events("r1")]
        assert types == ["interaction_answered", *["tick"] * 5]
        assert (await again.get_interaction("q1")).answers == {"tone": "é"}
        assert [i.id for i in await again.pending_interactions()] == ["q2"]
        assert (await again.get_artifact("r1", "draft")).value == ["v1"]
        drained = [m.text for m in await again.drain_messages("r1", "asker")]
        assert drained == ['[Answer to question q1] Q: "Formal or casual?" — A: {"tone": "é"}']
        assert [m.text for m in await again.drain_messages("r1", "writer")] == ["note"]
        await again.append_event("r1", "tock")
        assert (await again.events("r1", after=6))[0].seq == 7
    finally:
        await again.close()


class AnHourAhead(datetime):
    """This machine's clock, set an hour fast (the server's stays right)."""

    @classmethod
    def now(cls, tz: tzinfo | None = None) -> AnHourAhead:
        real = datetime.now(tz) + timedelta(hours=1)
        return cls.fromtimestamp(real.timestamp(), tz)


async def test_a_run_created_with_an_owner_is_leased_from_the_servers_clock(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One statement creates the run and its lease: it starts at the server's now(),
    whatever this machine's clock says (leases of many machines are compared)."""
    import iterion_nb.runtime.records as records
    import iterion_nb.store.postgres_base as base
    import iterion_nb.store.postgres_runs as runs
    import iterion_nb.store.postgres_store as pg

    for module in (base, runs, pg):
        monkeypatch.setattr(module, "datetime", AnHourAhead)
    monkeypatch.setattr(records, "utcnow", lambda: AnHourAhead.now(UTC))
    store = open_postgres_store(url)
    try:
        owner = Claimant.here(ttl=7.5)
        created = await store.create_run(a_run(), owner=owner)
        [(server_now,)] = await raw(url, "SELECT now()")
        assert created.lease is not None and created.lease.owner == owner.id
        assert created.lease.expires_at - created.lease.since == timedelta(seconds=7.5)
        assert timedelta(0) <= server_now - created.lease.since < timedelta(seconds=5)
        assert (await store.get_run("r1")).lease == created.lease
        with pytest.raises(ConflictError, match="already exists"):
            await store.create_run(a_run(), owner=Claimant.here())
        assert (await store.get_run("r1")).lease == created.lease  # the first owner keeps it
    finally:
        await store.close()


async def test_a_queued_run_is_handed_over_to_exactly_one_of_racing_workers(url: str) -> None:
    """Workers of a cluster take a queued run from its queue claimant: one of them only."""
    stores = [open_postgres_store(url) for _ in range(6)]
    try:
        queue = Claimant.here(ttl=60)
        await stores[0].create_run(replace(a_run(), status="running"), owner=queue)
        workers = [Claimant.here() for _ in stores]
        pairs = zip(stores, workers, strict=True)
        takes = [s.acquire_run("r1", w, take_from=queue.id) for s, w in pairs]
        results = await asyncio.gather(*takes, return_exceptions=True)
        won = [r for r in results if isinstance(r, Run)]
        assert len(won) == 1 and won[0].status == "running"
        assert all(isinstance(r, RunOwnedError) for r in results if not isinstance(r, Run))
        winner = won[0].lease
        assert winner is not None and winner.owner in {w.id for w in workers}
        assert (await stores[1].get_run("r1")).lease == winner
        # the queue claimant no longer holds it: a late task of the same hand-over is refused
        with pytest.raises(RunOwnedError):
            await stores[2].acquire_run("r1", Claimant.here(), take_from=queue.id)
    finally:
        for store in stores:
            await store.close()


async def test_a_cancel_asked_while_queued_survives_the_one_statement_hand_over(
    url: str,
) -> None:
    """The hand-over on the server's clock (a cluster task's start) keeps a cancel request."""
    store = open_postgres_store(url)
    try:
        queue, worker = Claimant.here(ttl=60), Claimant.here()
        await store.create_run(replace(a_run(), status="running"), owner=queue)
        await store.cancel_run("r1")
        taken = await store.acquire_run("r1", worker, take_from=queue.id)
        assert taken.cancel_requested and taken.lease is not None
        assert taken.lease.owner == worker.id
        assert (await store.renew_leases(worker, ["r1"])).cancel == ("r1",)
    finally:
        await store.close()


async def test_stores_in_two_schemas_of_one_database_are_apart(postgres_url: str) -> None:
    one = open_postgres_store(f"{postgres_url}?schema=apart_one")
    two = open_postgres_store(f"{postgres_url}?schema=apart_two")
    try:
        await one.create_run(a_run())
        with two.doorbell.arm() as ticket:
            await one.add_interaction(a_question())
            assert not await ticket.wait(timeout=0.2)  # another schema's channel
        assert await two.list_runs() == []
        await two.create_run(a_run())  # the same id, elsewhere
    finally:
        await one.close()
        await two.close()


async def test_a_schema_from_a_newer_version_is_refused_untouched(url: str) -> None:
    schema = url.rsplit("=", 1)[1]
    await (open_postgres_store(url)).close()
    await raw(url, f"INSERT INTO {schema}.schema_migrations (version) VALUES (99)")
    before = await raw(url, f"SELECT version FROM {schema}.schema_migrations ORDER BY 1")
    with pytest.raises(StoreFileError, match=r"newer iterion_nb \(schema 99"):
        open_postgres_store(url)
    assert await raw(url, f"SELECT version FROM {schema}.schema_migrations ORDER BY 1") == before


async def test_a_schema_of_another_application_is_refused_untouched(postgres_url: str) -> None:
    await raw(postgres_url, "CREATE SCHEMA theirs")
    await raw(postgres_url, "CREATE TABLE theirs.runs (id int)")
    await raw(postgres_url, "INSERT INTO theirs.runs VALUES (7)")
    with pytest.raises(StoreFileError, match="another application") as info:
        open_postgres_store(f"{postgres_url}?schema=theirs")
    assert "left untouched" in str(info.value)
    tables = await raw(postgres_url, "SELECT tablename FROM pg_tables WHERE schemaname = 'theirs'")
    assert tables == [("runs",)]
    assert await raw(postgres_url, "SELECT id FROM theirs.runs") == [(7,)]


async def test_concurrent_openers_migrate_once(postgres_url: str) -> None:
    target = f"{postgres_url}?schema=racing"
    stores = await asyncio.gather(
        *(asyncio.to_thread(open_postgres_store, target) for _ in range(6))
    )
    try:
        versions = await raw(postgres_url, "SELECT version FROM racing.schema_migrations")
        assert versions == [(v,) for v, _ in MIGRATIONS]  # each applied once
    finally:
        for store in stores:
            await store.close()


async def test_the_store_survives_losing_its_connections(url: str) -> None:
    """Killed backends: the pool replaces them, the listener reconnects and rings ANY."""
    store = open_postgres_store(f"{url}&application_name=t_survivor")
    other = open_postgres_store(url)
    try:
        await store.create_run(a_run())
        await store.add_interaction(a_question())
        with store.doorbell.arm("r1") as ticket:
            ticket.consume()
            await raw(
                url,
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = 't_survivor'",
            )
            assert await ticket.wait(timeout=5)  # listening again: everyone re-checks
        with store.doorbell.arm("r1") as ticket:
            await other.answer("q1", "yes")
            assert await ticket.wait(timeout=2)  # and hears other processes again
        await store.append_event("r1", "tick")
        assert [e.type for e in await store.events("r1")] == ["interaction_answered", "tick"]
    finally:
        await store.close()
        await other.close()


async def test_events_written_during_an_outage_are_kept_and_written_after() -> None:
    from tests.pgserver import PgServer

    server = PgServer.start()
    try:
        store = open_postgres_store(f"{server.url}?connect_timeout=2")
        await store.create_run(a_run())
        await store.append_event("r1", "before")
        await store.flush()
        await asyncio.to_thread(server.stop, False)
        for n in range(50):  # the batch cannot be written: it waits, nothing is lost
            await store.append_event("r1", "during", {"n": n})
        await asyncio.sleep(0.3)
        await asyncio.to_thread(server.restart)
        await store.flush()
        events = await store.events("r1")
        assert [e.seq for e in events] == list(range(1, 52))
        assert [e.data.get("n") for e in events[1:]] == list(range(50))
        await store.close()
    finally:
        server.stop()


RESTARTED = """\
tool one:
  command: "echo one >> ran.txt"

tool slow:
  command: "echo slow >> ran.txt; while [ ! -f go ]; do sleep 0.05; done"

tool two:
  command: "echo two >> ran.txt"

workflow w:
  entry: one
  one -> slow
  slow -> two
  two -> done
"""


async def slow_started(workdir: Path) -> Path:
    """Once a run of ``RESTARTED`` is in its slow node: its ``ran.txt``."""
    ran = workdir / "ran.txt"
    for _ in range(1000):
        if ran.exists() and "slow" in ran.read_text():
            return ran
        await asyncio.sleep(0.02)
    raise AssertionError("the slow node never started")


async def test_a_run_waits_through_a_server_restart_and_goes_on(tmp_path: Path) -> None:
    """The server stops mid-node and comes back: the run waits, goes on, runs each node once."""
    from tests.pgserver import PgServer

    server = PgServer.start()
    try:
        session = Session(f"{server.url}?connect_timeout=2", workdir=tmp_path)
        run = await session.start(it.compile(RESTARTED))
        ran = await slow_started(tmp_path)
        await asyncio.to_thread(server.stop, False)  # fast: every connection is cut
        (tmp_path / "go").touch()  # the node ends while the server is away
        await asyncio.sleep(1.5)
        assert run.status == "running"  # it waits (its checkpoint cannot be written yet)
        await asyncio.to_thread(server.restart)
        assert await run.wait(60) == "finished", run.error
        assert ran.read_text().split() == ["one", "slow", "two"]
        types = [e.type for e in await session.store.events(run.id)]
        assert types.count("run_started") == 1 and types[-1] == "run_finished", types
        await session.close()
    finally:
        server.stop()


@pytest.mark.parametrize("held_by", ["an-owner", "a-queue"])
async def test_a_lease_that_lapsed_before_a_crash_recovery_is_left_to_its_owner_a_while(
    held_by: str,
) -> None:
    """A backend killed: PostgreSQL recovers without restarting its postmaster, and every
    session is cut, so an owner elsewhere could not renew either. For the grace after the
    recovery, nobody takes its run over (as after a restart); then anyone may."""
    import os
    import signal

    from tests.pgserver import PgServer

    server = PgServer.start()
    try:
        store = open_postgres_store(f"{server.url}?connect_timeout=2")
        owner = Claimant(uuid.uuid4().hex, 4242, "another-machine", ttl=1.0)
        if held_by == "a-queue":  # a run waiting for a cluster's worker
            owner = Claimant.queue(1.0)
        await store.create_run(replace(a_run(), status="running"), owner=owner)
        await asyncio.sleep(1.5)  # its lease lapsed (the owner is cut off, or slow)
        with psycopg.connect(server.url, autocommit=True) as conn:
            backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
            os.kill(backend, signal.SIGKILL)  # the postmaster resets every process
        deadline = time.monotonic() + 30
        while True:  # until recovered
            try:
                psycopg.connect(server.url, connect_timeout=2).close()
                break
            except psycopg.OperationalError:
                assert time.monotonic() < deadline, server.log()
                await asyncio.sleep(0.1)
        with pytest.raises(OwnerMayRenewError) as refused:
            await store.acquire_run("r1", Claimant.here())
        assert 0 < refused.value.wait <= 10, refused.value.wait
        said = str(refused.value)
        if held_by == "a-queue":
            assert "waited in a cluster's queue" in said and "a worker may take" in said, said
        else:
            assert "was executing (process 4242 on host 'another-machine')" in said, said
            assert "may still be alive" in said, said
        await asyncio.sleep(refused.value.wait + 0.5)  # nobody renewed it meanwhile
        taken = await store.acquire_run("r1", Claimant.here())
        assert taken.status == "running"
        await store.close()
    finally:
        server.stop()


async def test_a_call_waits_for_the_server_but_not_past_its_outage_timeout() -> None:
    """A read during an outage waits and answers once the server is back; a store told
    to wait less fails with a clear StoreError."""
    from tests.pgserver import PgServer

    server = PgServer.start()
    try:
        store = open_postgres_store(f"{server.url}?connect_timeout=2")
        brief = open_postgres_store(f"{server.url}?connect_timeout=2", outage_timeout=1.0)
        await store.create_run(a_run())
        await asyncio.to_thread(server.stop, False)
        reading = asyncio.ensure_future(store.get_run("r1"))
        began = time.monotonic()
        with pytest.raises(StoreError, match="failed"):
            await brief.get_run("r1")
        assert time.monotonic() - began < 30
        assert not reading.done()  # still waiting
        assert store.back_at is None
        await asyncio.to_thread(server.restart)
        assert (await asyncio.wait_for(reading, 60)).id == "r1"
        # it knows the server came back a moment ago (its listener is back): a cluster's
        # watcher lets live owners renew their lapsed leases before it takes runs over
        for _ in range(200):
            if store.back_at is not None:
                break
            await asyncio.sleep(0.05)
        assert store.back_at is not None and time.monotonic() - store.back_at < 30
        await store.close()
        await brief.close()
    finally:
        server.stop()


async def test_an_outage_is_logged_once_not_at_every_attempt_to_reconnect(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """psycopg_pool logs each failed reconnection: the first is shown, then that it is back.

    Each on one line (libpq's hint joined on), naming the store by its schema,
    not the pool's internal name, and never its password.
    """
    from tests.pgserver import PgServer

    caplog.set_level(logging.WARNING)
    server = PgServer.start()
    secret = server.url.replace("postgres@", "postgres:s3cret@")  # trust auth: accepted
    try:
        store = open_postgres_store(f"{secret}?connect_timeout=2")
        other = open_postgres_store(f"{secret}?connect_timeout=2&schema=other")  # one filter
        await store.create_run(a_run())
        await asyncio.gather(*(store.get_run("r1") for _ in range(16)))  # several connections
        await asyncio.to_thread(server.stop, False)
        reading = asyncio.ensure_future(store.get_run("r1"))
        await asyncio.sleep(5)  # the pools try to reconnect again and again meanwhile
        await asyncio.to_thread(server.restart)
        assert (await asyncio.wait_for(reading, 60)).id == "r1"
        assert await other.list_runs() == []
        await store.close()
        await other.close()
    finally:
        server.stop()
    pool = logging.getLogger("psycopg.pool")
    assert len([f for f in pool.filters if type(f).__name__ == "OutageLogFilter"]) == 1
    said = [r.getMessage() for r in caplog.records if r.name == "psycopg.pool"]
    ours_failed = "the run store (schema 'iterion_nb') cannot connect to its PostgreSQL server: "
    failed = [m for m in said if m.startswith(ours_failed)]
    assert len(failed) == 1, said  # not one per attempt
    assert "(it keeps trying; its next failures are logged once a minute at most)" in failed[0]
    back = [
        m for m in said
        if m.startswith("the run store (schema 'iterion_nb') connected again to its PostgreSQL"
                        " server after ")
    ]  # fmt: skip
    assert len(back) == 1, said
    assert said.index(failed[0]) < said.index(back[0])
    for line in said:  # what a terminal shows: one line, no pool name, no password
        assert "\n" not in line and "iterion-nb:" not in line and "s3cret" not in line, line
    ours = [r.getMessage() for r in caplog.records if r.name.startswith("iterion_nb")]
    assert [m for m in ours if "is away, waiting" in m] == [m for m in ours], ours  # only that


CANCELLER = """
    import asyncio, sys
    from iterion_nb.store.remote import open_store

    async def main(url, run_id):
        store = open_store(url)
        await store.cancel_run(run_id)
        await store.close()

    asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


async def test_a_cancel_from_another_process_stops_the_run_before_its_next_node(
    url: str, tmp_path: Path
) -> None:
    """The cancel's NOTIFY wakes the owner at once (not at its next heartbeat, 2.5 s)."""
    session = Session(url, workdir=tmp_path)
    try:
        run = await session.start(it.compile(RESTARTED))
        ran = await slow_started(tmp_path)
        await asyncio.to_thread(finish, spawn(CANCELLER, url, run.id))
        await asyncio.sleep(0.5)
        (tmp_path / "go").touch()  # the node would end now, and the next one start
        assert await run.wait(10) == "cancelled"
        assert ran.read_text().split() == ["one", "slow"]
    finally:
        await session.close()


async def test_a_session_runs_and_resumes_on_postgres(url: str, tmp_path: Path) -> None:
    """Session(store=URL) works; an answer from another process resumes the parked run."""
    gate = 'human gate:\n  instructions: "Ship it?"\n\nworkflow w:\n  entry: gate\n  gate -> done\n'
    session = Session(url, workdir=tmp_path, poll_interval=60)  # a poll would be too late
    try:
        assert isinstance(session.store, PostgresStore)
        run = await session.start(it.compile(gate))
        assert await run.wait(10) == "paused_waiting_human"
        (question,) = await run.pending_questions()
        answerer = spawn(ANSWERER.replace('"q1"', repr(question.id)), url, "0")
        assert answerer.stdout is not None and answerer.stdout.readline().strip() == "ready"
        assert answerer.stdin is not None
        answerer.stdin.write("go\n")
        answerer.stdin.flush()
        assert (await asyncio.to_thread(finish, answerer)).strip() == "won"
        assert await run.wait(10) == "finished"  # resumed by its owner, woken by NOTIFY
    finally:
        await session.close()


def test_the_outage_filter_passes_the_first_failure_then_one_a_minute() -> None:
    from iterion_nb.store.postgres_base import OutageLogFilter

    now = [100.0]
    quiet = OutageLogFilter(clock=lambda: now[0])

    def shown(msg: str, *args: object) -> str | None:
        record = logging.LogRecord("psycopg.pool", logging.WARNING, "x", 1, msg, args, None)
        return record.getMessage() if quiet.filter(record) else None

    def failure(pool: str = "iterion-nb:a") -> str | None:
        return shown("error connecting in %r: %s", pool, "connection refused")

    assert "refused (it keeps trying;" in str(failure())
    assert [failure() for _ in range(30)] == [None] * 30
    assert failure("iterion-nb:b") is not None  # another pool: its own outage
    assert shown("discarding broken connection: %s", "c") == "discarding broken connection: c"
    now[0] += 61
    assert "(still failing after 61 s; 30 failed attempts not shown)" in str(failure())
    assert failure() is None
    quiet.back("iterion-nb:a")  # logged on psycopg.pool (not through this filter here)
    assert failure() is not None  # a new outage: its first failure is shown
    quiet.back("iterion-nb:nothing")  # connected, no outage: nothing to say


def test_the_outage_line_is_one_line_naming_the_store_not_its_pool(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What a terminal shows of libpq's two-line error: one line, the schema, no password."""
    from iterion_nb.store.postgres_base import OutageLogFilter
    from tests.pgserver import free_port

    now = [0.0]
    quiet = OutageLogFilter(clock=lambda: now[0])
    with pytest.raises(psycopg.OperationalError) as refused:  # a real one: nobody listens
        psycopg.connect(f"postgresql://ana:s3cret@127.0.0.1:{free_port()}/db", connect_timeout=2)
    assert "\n" in str(refused.value)  # libpq's hint, on a line of its own

    def shown(msg: str, *args: object) -> str | None:
        record = logging.LogRecord("psycopg.pool", logging.WARNING, "x", 1, msg, args, None)
        return record.getMessage() if quiet.filter(record) else None

    line = str(shown("error connecting in %r: %s", "iterion-nb:team_a", refused.value))
    assert line.startswith(
        "the run store (schema 'team_a') cannot connect to its PostgreSQL server:"
        ' connection failed: connection to server at "127.0.0.1", port '
    ), line
    assert "Connection refused — Is the server running on that host" in line
    assert "\n" not in line and "\t" not in line and "iterion-nb:" not in line
    said = "connection failed\n\tfor postgresql://ana:s3cret@h/db?password=s3cret"
    now[0] += 61
    masked = str(shown("error connecting in %r: %s", "iterion-nb:team_a", said))
    assert "s3cret" not in masked and "\n" not in masked
    assert "connection failed — for postgresql://ana:***@h/db?password=***" in masked
    other = shown("task run %s failed: %s: %s", "t", "E", "a\n\tpassword=s3cret 100%")
    assert other == "task run t failed: E: a — password=*** 100%"
    caplog.set_level(logging.WARNING, "psycopg.pool")
    quiet.back("iterion-nb:team_a")
    (back,) = [r.getMessage() for r in caplog.records if r.name == "psycopg.pool"]
    assert back == (
        "the run store (schema 'team_a') connected again to its PostgreSQL server after 61.0 s"
        " (0 failed attempts not shown)"
    )


# -- URLs -------------------------------------------------------------------------------
def test_urls_are_told_from_paths() -> None:
    assert is_store_url("postgresql://h/db") and is_store_url("postgres://h/db")
    assert is_store_url("http://x") and is_store_url("postgresql:/h/db")
    assert not is_store_url("runs.duckdb") and not is_store_url("C:/runs")
    assert not is_store_url(Path("postgresql://h/db")) and not is_store_url("./a:b/c")


def test_passwords_are_masked() -> None:
    assert mask_url("postgresql://ana:s3cret@h:5/db?schema=x") == (
        "postgresql://ana:***@h:5/db?schema=x"
    )
    assert "s3cret" not in mask_url("postgresql://h/db?user=ana&password=s3cret")
    assert mask_url("postgresql://ana@h/db") == "postgresql://ana@h/db"


def test_a_store_has_one_name_with_or_without_its_password() -> None:
    """A worker's watcher is named by it: one per store, however the password came."""
    bare = "postgresql://ana@h:5/db?schema=x"
    assert without_password("postgresql://ana:s3cret@h:5/db?schema=x") == bare
    assert without_password(bare) == bare
    assert without_password("postgresql://ana@h:5/db?password=s3cret&schema=x") == bare
    assert "s3cret" not in without_password("postgresql://ana:s3cret@h:5:6/db")  # malformed


@pytest.mark.parametrize("spec", ["mysql://ana:s3cret@h/db", "http://h/x", "postgresql:/h/db"])
def test_a_url_this_build_cannot_open_is_a_clear_error(
    spec: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreError) as info:
        open_store(spec)
    assert "cannot open the store" in str(info.value) and "s3cret" not in str(info.value)
    monkeypatch.setenv(STORE_ENV, spec)
    with pytest.raises(StoreError):
        open_store()
    with pytest.raises(StoreError, match="is a URL, not a DuckDB path"):
        resolve_store_path(spec)
    assert list(tmp_path.iterdir()) == []  # no directory named after the URL


def test_a_missing_postgresql_client_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg now fails
    with pytest.raises(StoreError, match=r"pip install 'iterion-nb\[postgres\]'") as info:
        open_store("postgresql://ana:s3cret@127.0.0.1/db")
    assert "s3cret" not in str(info.value) and "ana:***@" in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_passwords_never_show_in_errors_or_repr(postgres_url: str) -> None:
    from tests.pgserver import free_port

    with pytest.raises(StoreError) as unreachable:
        open_store(f"postgresql://ana:s3cret@127.0.0.1:{free_port()}/db?connect_timeout=2")
    assert "s3cret" not in str(unreachable.value) and "***" in str(unreachable.value)
    with_password = postgres_url.replace("postgres@", "postgres:s3cret@")
    with pytest.raises(StoreError) as missing_db:
        open_store(with_password.rsplit("/", 1)[0] + "/nodb")
    assert "nodb" in str(missing_db.value) and "s3cret" not in str(missing_db.value)
    store = open_store(f"{with_password}?schema=masked")  # trust auth: accepted
    try:
        assert isinstance(store, PostgresStore)
        assert "s3cret" not in repr(store) and "s3cret" not in store.display_url
        assert store.url.startswith(with_password)  # to open it elsewhere (a cluster worker)
    finally:
        asyncio.run(store.close())


def test_an_unknown_schema_name_is_refused(postgres_url: str) -> None:
    with pytest.raises(StoreError, match="schema name"):
        open_postgres_store(f"{postgres_url}?schema=no;drop")


def test_json_payloads_keep_their_exact_text(url: str) -> None:
    async def check() -> None:
        store = open_postgres_store(url)
        try:
            await store.create_run(a_run())
            await store.append_event("r1", "x", {"z": 1, "a": {"é": [2, 1]}})
            (event,) = await store.events("r1")
            assert list(event.data) == ["z", "a"]  # key order kept (jsonb would sort)
        finally:
            await store.close()
        schema = url.rsplit("=", 1)[1]
        assert await raw(url, f"SELECT data FROM {schema}.events") == [
            (json.dumps({"z": 1, "a": {"é": [2, 1]}}, ensure_ascii=False),)
        ]

    asyncio.run(check())


# -- a run taken over while this process's events waited -----------------------------
async def test_events_buffered_by_an_owner_that_lost_the_run_are_not_written(url: str) -> None:
    """PostgreSQL away longer than a lease: the old owner's waiting events must not land
    among the new owner's (its checkpoints never do either)."""
    from iterion_nb.runtime.ownership import Claimant

    old = open_postgres_store(url, flush_interval=60)  # its batch waits
    new = open_postgres_store(url)
    try:
        first = Claimant.here(ttl=0.2)
        run = Run("r1", "w", "h", "running", HERE, HERE)
        await old.create_run(run, owner=first)
        await old.append_event("r1", "node_started", node_id="a")
        await old.flush()
        await old.append_event("r1", "node_finished", node_id="a")  # waits in the batch
        await old.save_checkpoint("r1", {"stale": True}, owner=first.id)
        await asyncio.sleep(0.3)  # its lease lapses: another process takes the run over
        await new.acquire_run("r1", Claimant.here(), statuses=("running", "interrupted"))
        await new.append_event("r1", "run_resumed")
        await new.flush()
        await old.flush()  # back: what it kept is void now
        events = await new.events("r1")
        assert [(e.seq, e.type) for e in events] == [(1, "node_started"), (2, "run_resumed")]
        assert (await new.get_run("r1")).checkpoint != {"stale": True}
        # the same process keeps writing the runs it still holds
        mine = Claimant.here()
        await old.create_run(Run("r2", "w", "h", "running", HERE, HERE), owner=mine)
        await old.append_event("r2", "node_started")
        await old.flush()
        assert [e.type for e in await old.events("r2")] == ["node_started"]
    finally:
        await old.close()
        await new.close()


async def test_a_caller_cancelled_mid_flush_loses_no_event(url: str) -> None:
    """A branch cancelled while its save waits: the batch it took (other runs' events
    too) is still written, never dropped half way."""
    store = open_postgres_store(url, flush_interval=60)
    try:
        await store.create_run(a_run("x"))
        await store.create_run(a_run("y"))
        schema = url.split("schema=")[1]
        async with await psycopg.AsyncConnection.connect(url.split("?")[0]) as locker:
            await locker.execute(f"SELECT 1 FROM {schema}.runs WHERE id = 'y' FOR UPDATE")
            await store.append_event("y", "of_y")  # returned: in the batch
            await store.append_event("x", "of_x")
            save = asyncio.ensure_future(store.save_checkpoint("x", {"n": 1}, durable=True))
            await asyncio.sleep(0.5)  # its flush took the batch and waits on y's row lock
            save.cancel()
            await asyncio.gather(save, return_exceptions=True)
            await locker.rollback()
        assert [e.type for e in await store.events("y")] == ["of_y"]
        assert [e.type for e in await store.events("x")] == ["of_x"]
    finally:
        await store.close()
