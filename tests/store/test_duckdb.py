"""DuckDB specifics: the file, its lock, its schema, batching and crash safety."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

from iterion_nb.errors import StoreError, StoreFileError, StoreLockedError
from iterion_nb.store import STORE_ENV, open_duckdb_store, resolve_store_path
from iterion_nb.store.duckdb_schema import LATEST
from iterion_nb.store.duckdb_store import CONNECT_CONFIG

from ..conformance.conftest import make_question, make_run


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_default_location_env_and_argument(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(STORE_ENV, raising=False)
    assert resolve_store_path() == tmp_path / ".iterion" / "iterion.duckdb"
    monkeypatch.setenv(STORE_ENV, str(tmp_path / "elsewhere"))
    assert resolve_store_path() == tmp_path / "elsewhere" / "iterion.duckdb"
    monkeypatch.setenv(STORE_ENV, str(tmp_path / "x.duckdb"))
    assert resolve_store_path() == tmp_path / "x.duckdb"
    assert resolve_store_path(tmp_path / "arg") == tmp_path / "arg" / "iterion.duckdb"


async def test_default_store_is_created_under_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(STORE_ENV, raising=False)
    store = open_duckdb_store()
    await store.create_run(make_run())
    await store.close()
    assert (tmp_path / ".iterion" / "iterion.duckdb").is_file()


async def test_reopen_keeps_everything(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    store = open_duckdb_store(path)
    await store.create_run(make_run(vars={"ü": [1, {"x": None}]}))
    await store.append_event("r1", "run_started", {"a": 1})
    await store.add_interaction(make_question())
    await store.answer("q1", "formal", answered_by="me")
    await store.put_artifact("r1", "n", "plan", {"steps": ["é"]})
    await store.close()

    again = open_duckdb_store(path)
    assert (await again.get_run("r1")).vars == {"ü": [1, {"x": None}]}
    assert [e.type for e in await again.events("r1")] == ["run_started", "interaction_answered"]
    assert (await again.get_interaction("q1")).answered_by == "me"
    assert [m.text for m in await again.drain_messages("r1", "gatherer")] == [
        '[Answer to question q1] Q: "Formal or casual?" — A: formal'
    ]
    assert (await again.get_artifact("r1", "plan")).value == {"steps": ["é"]}
    # seq continues after a reopen
    await again.append_event("r1", "run_resumed")
    assert [e.seq for e in await again.events("r1")] == [1, 2, 3]
    await again.close()


async def test_opening_twice_in_one_process_shares_the_store(tmp_path: Path) -> None:
    first = open_duckdb_store(tmp_path / "s.duckdb")
    second = open_duckdb_store(tmp_path)  # the directory form names the same file
    assert (tmp_path / "s.duckdb") != (tmp_path / "iterion.duckdb")
    third = open_duckdb_store(tmp_path / "s.duckdb")
    assert third is first and second is not first
    await first.close()
    assert not third.closed  # still used once
    await third.close()
    assert first.closed
    await second.close()


async def test_events_are_written_in_batches(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    store = open_duckdb_store(path, flush_rows=100, flush_interval=60.0)
    await store.create_run(make_run())
    peek = duckdb.connect(str(path), config=CONNECT_CONFIG)  # shares the open database

    def on_disk() -> int:
        row = peek.execute("SELECT count(*) FROM events").fetchone()
        return int(row[0]) if row else -1

    for n in range(99):
        await store.append_event("r1", "tick", {"n": n})
    assert on_disk() == 0  # buffered, not one INSERT per event
    await store.append_event("r1", "tick", {"n": 99})
    for _ in range(100):  # the worker writes the full batch promptly
        if on_disk() == 100:
            break
        await asyncio.sleep(0.01)
    assert on_disk() == 100
    await store.append_event("r1", "tick", {"n": 100})
    await store.update_run("r1", status="finished")  # a status change flushes first
    assert on_disk() == 101
    peek.close()
    await store.close()


async def test_interval_flush_bounds_the_lag(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    store = open_duckdb_store(path, flush_rows=10_000, flush_interval=0.05)
    await store.create_run(make_run())
    peek = duckdb.connect(str(path), config=CONNECT_CONFIG)
    await store.append_event("r1", "tick")
    for _ in range(200):
        row = peek.execute("SELECT count(*) FROM events").fetchone()
        if row and row[0] == 1:
            break
        await asyncio.sleep(0.01)
    assert row is not None and row[0] == 1
    peek.close()
    await store.close()


HOLDER = textwrap.dedent(
    """
    import asyncio, sys
    from datetime import datetime, UTC
    from iterion_nb.runtime.records import Interaction, Run
    from iterion_nb.store import open_duckdb_store

    async def main():
        store = open_duckdb_store(sys.argv[1])
        at = datetime.now(UTC)
        for n in range(20):
            await store.create_run(Run(f"r{n}", "w", "h", "running", at, at))
            await store.add_interaction(
                Interaction(f"q{n}", f"r{n}", "asker", "async", ("why?",), at)
            )
            if n % 2:
                await store.answer(f"q{n}", f"because {n}", answered_by="child")
            await store.append_event(f"r{n}", "tick", {"n": n})
            await store.update_run(f"r{n}", status="paused_waiting_human")
        print("committed", flush=True)
        await asyncio.sleep(60)

    asyncio.run(main())
    """
)


def start_holder(path: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "committed"
    return proc


async def test_a_killed_process_keeps_every_committed_record(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    proc = start_holder(path)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    store = open_duckdb_store(path)
    runs = await store.list_runs()
    assert sorted(r.id for r in runs) == sorted(f"r{n}" for n in range(20))
    assert {r.status for r in runs} == {"paused_waiting_human"}
    pending = await store.pending_interactions()
    assert sorted(i.id for i in pending) == sorted(f"q{n}" for n in range(0, 20, 2))
    assert (await store.get_interaction("q7")).answers == "because 7"
    messages = await store.drain_messages("r7", "asker")
    assert [m.text for m in messages] == ['[Answer to question q7] Q: "why?" — A: because 7']
    assert [e.data for e in await store.events("r4")] == [{"n": 4}]
    # an answer's event was committed with the answer, before the batched tick
    assert [e.type for e in await store.events("r3")] == ["interaction_answered", "tick"]
    await store.close()


def test_a_live_holder_is_named_by_pid(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    proc = start_holder(path)
    try:
        with pytest.raises(StoreLockedError) as info:
            open_duckdb_store(path)
        assert info.value.pid == proc.pid
        assert f"held by process {proc.pid}" in str(info.value)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("kind", ["text", "sqlite", "other duckdb", "directory"])
def test_foreign_files_are_refused_and_left_untouched(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "s.duckdb"
    if kind == "text":
        path.write_text("these are my notes, not a database\n" * 10)
    elif kind == "sqlite":
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE t (a)")
        con.commit()
        con.close()
    elif kind == "other duckdb":
        con2 = duckdb.connect(str(path))
        con2.execute("CREATE TABLE invoices (n INTEGER)")
        con2.close()
    else:
        path.mkdir()
    before = digest(path) if path.is_file() else None
    listing = sorted(os.listdir(tmp_path))
    with pytest.raises(StoreFileError) as info:
        open_duckdb_store(path)
    assert str(path) in str(info.value)
    if before is not None:
        assert digest(path) == before
        assert "untouched" in str(info.value)
    assert sorted(os.listdir(tmp_path)) == listing


def test_a_store_from_a_newer_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE iterion_meta (key VARCHAR, value VARCHAR)")
    con.execute("CREATE TABLE schema_migrations (version INTEGER, applied_at TIMESTAMP)")
    con.execute("INSERT INTO schema_migrations VALUES (?, now())", [LATEST + 1])
    con.close()
    with pytest.raises(StoreFileError, match="newer iterion_nb"):
        open_duckdb_store(path)


async def test_schema_version_is_recorded(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    store = open_duckdb_store(path)
    await store.close()
    con = duckdb.connect(str(path))
    versions = [r[0] for r in con.execute("SELECT version FROM schema_migrations").fetchall()]
    mark = con.execute("SELECT value FROM iterion_meta WHERE key = 'app'").fetchone()
    con.close()
    assert versions == list(range(1, LATEST + 1))
    assert mark == ("iterion_nb",)


async def test_a_closed_store_says_so(tmp_path: Path) -> None:
    store = open_duckdb_store(tmp_path / "s.duckdb")
    await store.create_run(make_run())
    await store.close()
    with pytest.raises(StoreError, match="closed"):
        await store.get_run("r1")
    with pytest.raises(StoreError, match="closed"):
        await store.append_event("r1", "tick")
    await store.close()  # closing twice is harmless


@pytest.mark.parametrize("damage", ["header block", "truncated"])
async def test_a_damaged_store_is_refused_and_left_untouched(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "s.duckdb"
    store = open_duckdb_store(path)
    await store.create_run(make_run())
    await store.close()
    data = bytearray(path.read_bytes())
    if damage == "header block":
        data[100:400] = bytes(range(256)) + bytes(44)
    else:
        data = data[: len(data) // 3]
    path.write_bytes(bytes(data))
    before = digest(path)

    async def open_and_read() -> None:
        damaged = open_duckdb_store(path)
        try:
            await damaged.get_run("r1")
        finally:
            await damaged.close()

    with pytest.raises(StoreError) as info:  # on opening, or at the latest on reading
        await open_and_read()
    assert str(path) in str(info.value)
    assert digest(path) == before


async def test_progress_checkpoints_reach_the_file_within_the_interval(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    store = open_duckdb_store(path, flush_interval=0.05)
    await store.create_run(make_run())
    peek = duckdb.connect(str(path), config=CONNECT_CONFIG)
    await store.save_checkpoint("r1", {"frontier": ["x"]})
    row = None
    for _ in range(200):
        row = peek.execute("SELECT checkpoint FROM runs").fetchone()
        if row and row[0]:
            break
        await asyncio.sleep(0.01)
    assert row == ('{"frontier": ["x"]}',)
    peek.close()
    await store.close()


async def test_reading_events_never_holds_back_a_checkpoint(tmp_path: Path) -> None:
    """A client polling events every few ms must not keep progress checkpoints off the file."""
    path = tmp_path / "s.duckdb"
    store = open_duckdb_store(path, flush_interval=0.05)
    await store.create_run(make_run())
    peek = duckdb.connect(str(path), config=CONNECT_CONFIG)
    await store.save_checkpoint("r1", {"frontier": ["y"]})
    loop = asyncio.get_running_loop()
    start, seen = loop.time(), None
    while loop.time() - start < 1.0:
        await store.append_event("r1", "tick")
        await store.events("r1", after=10**9)  # a reader, every 5 ms
        row = peek.execute("SELECT checkpoint FROM runs").fetchone()
        if row and row[0]:
            seen = loop.time() - start
            break
        await asyncio.sleep(0.005)
    peek.close()
    await store.close()
    assert seen is not None, "the checkpoint never reached the file while events were read"
    assert seen < 0.5


async def test_duckdb_never_draws_its_progress_bar(tmp_path: Path) -> None:
    """A slow query must not print DuckDB's progress bar into a cell or `--json` output."""
    store = open_duckdb_store(tmp_path / "s.duckdb")
    try:
        setting = await store._call(
            lambda: store._con.execute("SELECT current_setting('enable_progress_bar')").fetchone()
        )
        assert setting == (False,)
    finally:
        await store.close()


async def test_a_batch_sent_for_a_run_taken_over_since_loses_its_events(tmp_path: Path) -> None:
    """What a holder does with a client's late batch (a worker whose lease lapsed)."""
    from iterion_nb.runtime.ownership import Claimant
    from iterion_nb.store.remote import write_batch

    store = open_duckdb_store(tmp_path / "s.duckdb")
    try:
        old, new = Claimant.here(ttl=0.2), Claimant.here(ttl=0.2)
        await store.create_run(make_run(status="running"), owner=old)
        await asyncio.sleep(0.3)  # its lease lapses; nobody has taken the run yet
        event = ["r1", "late", "{}", None, None]
        await write_batch(store, [event], [], [["r1", old.id]])  # still its run: written
        await store.acquire_run("r1", new, statuses=("running", "interrupted"))
        await write_batch(store, [event], [], [["r1", old.id]])  # taken over: void
        await write_batch(store, [["r1", "mine", "{}", None, None]], [], [["r1", new.id]])
        await asyncio.sleep(0.3)  # the new owner's lease lapses too (it died): a double fault
        assert (await store.get_run("r1")).status == "interrupted"
        await write_batch(store, [event], [], [["r1", old.id]])  # still taken over: void
        await write_batch(store, [["r1", "mine-late", "{}", None, None]], [], [["r1", new.id]])
        await write_batch(store, [["r1", "unheld", "{}", None, None]], [])  # as before
        types = [e.type for e in await store.events("r1")]
        assert types == ["late", "mine", "mine-late", "unheld"]
    finally:
        await store.close()


SERVED = textwrap.dedent(
    """
    import asyncio, sys
    from iterion_nb.api.holder import open_served_store

    async def main():
        store = open_served_store(sys.argv[1])
        await store.list_runs()
        print("ready", flush=True)
        await asyncio.sleep(120)

    asyncio.run(main())
    """
)
TAKE = textwrap.dedent(
    """
    import asyncio, sys
    from iterion_nb.runtime.ownership import Claimant
    from iterion_nb.store.remote import open_store

    async def main():
        store = open_store(sys.argv[1])
        await store.acquire_run("r1", Claimant.here(), statuses=("running", "interrupted"))
        await store.append_event("r1", "run_resumed")
        await store.flush()
        print("taken", flush=True)
        sys.stdin.readline()  # the new owner lives on while the old one's batch arrives
        await store.close()

    asyncio.run(main())
    """
)


async def test_a_worker_that_lost_its_run_writes_none_of_its_late_events(tmp_path: Path) -> None:
    """Through the holder, as a cluster worker on a DuckDB store writes: held runs are named."""
    from iterion_nb.runtime.ownership import Claimant
    from iterion_nb.store.remote import RemoteStore, open_store

    path = tmp_path / "s.duckdb"
    holder = subprocess.Popen([sys.executable, "-c", SERVED, str(path)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"ready"
        client = open_store(path)
        assert isinstance(client, RemoteStore)
        client.batch_interval = 60.0  # what it appends waits, as during an outage
        await client.create_run(make_run(status="running"), owner=Claimant.here(ttl=0.2))
        await client.append_event("r1", "node_finished", node_id="a")
        await asyncio.sleep(0.3)  # its lease lapses; another process takes the run over
        taker = subprocess.Popen(
            [sys.executable, "-c", TAKE, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert taker.stdout is not None and taker.stdin is not None
        assert (await asyncio.to_thread(taker.stdout.readline)).strip() == b"taken"
        await client.flush()  # the late batch arrives: void for that run
        assert [e.type for e in await client.events("r1")] == ["run_resumed"]
        taker.stdin.close()
        assert await asyncio.to_thread(taker.wait, 30) == 0
        await client.close()
    finally:
        holder.kill()
        holder.wait()


async def test_a_question_is_pending_to_every_reader_until_its_answer_commits(
    tmp_path: Path,
) -> None:
    """No moment in which a gate sees the question answered (no longer pending) while the
    run's questions still show it unanswered: it would pass without that answer."""
    import threading

    store = open_duckdb_store(tmp_path / "s.duckdb")
    await store.create_run(make_run())
    await store.add_interaction(make_question())
    await store.interactions("r1")  # the run's questions are read (a widget, a gate)
    entered, release = threading.Event(), threading.Event()
    commit = store._transaction  # type: ignore[attr-defined]

    def held(body, **kwargs):  # type: ignore[no-untyped-def]
        entered.set()  # on the store's worker, inside the answer, before its commit
        release.wait(10)
        return commit(body, **kwargs)

    store._transaction = held  # type: ignore[attr-defined]
    answering = asyncio.ensure_future(store.answer("q1", "formal", answered_by="p"))
    try:
        assert await asyncio.to_thread(entered.wait, 10)
        # the answer is being committed: both views still say "not answered"
        assert [q.id for q in await store.pending_interactions("r1")] == ["q1"]
        assert [q.pending for q in await store.interactions("r1")] == [True]
    finally:
        release.set()
        store._transaction = commit  # type: ignore[attr-defined]
    await answering
    assert await store.pending_interactions("r1") == []
    assert [q.answers for q in await store.interactions("r1")] == ["formal"]
    await store.close()
