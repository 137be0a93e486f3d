"""PostgreSQL: a write whose connection is lost mid-commit is settled, never doubled or lost.

Between the store and the session's real server sits a loopback proxy
(tests/pgproxy.py) that loses one reply (the write landed; the client cannot
know) or one request (it never reached the server, whose side of the
connection stays open and silent). Either way the call returns as if nothing
had happened, and what it wrote is there exactly once.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

import iterion_nb as it
from iterion_nb.runtime.ownership import Claimant
from iterion_nb.runtime.records import Interaction, Run
from iterion_nb.session import Session
from iterion_nb.store.postgres_store import PostgresStore, open_postgres_store
from tests.pgproxy import Mode, PgProxy

HERE = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
MODES: list[Mode] = ["reply_lost", "request_lost"]


@dataclass
class Faulty:
    """A store whose connections go through ``proxy``; ``direct`` sees the server as it is."""

    store: PostgresStore
    direct: PostgresStore
    proxy: PgProxy


@pytest.fixture
def proxy(postgres_url: str) -> Iterator[PgProxy]:
    port = int(postgres_url.rsplit(":", 1)[1].split("/")[0])
    with PgProxy(port) as proxy:
        yield proxy


@pytest.fixture
async def faulty(postgres_url: str, proxy: PgProxy) -> AsyncIterator[Faulty]:
    schema = f"lost_{uuid.uuid4().hex[:12]}"
    store = open_postgres_store(f"{proxy.url(postgres_url)}&schema={schema}")
    direct = open_postgres_store(f"{postgres_url}?schema={schema}")
    try:
        yield Faulty(store, direct, proxy)
    finally:
        await store.close()
        await direct.close()


def lose(proxy: PgProxy, statement: bytes, mode: Mode) -> None:
    proxy.arm(statement, mode)


def fired(proxy: PgProxy) -> bool:
    return proxy.fired.is_set()


async def a_run(store: PostgresStore, run_id: str = "r1") -> None:
    await store.create_run(Run(run_id, "w", "h", "running", HERE, HERE))


@pytest.mark.parametrize("mode", MODES)
async def test_an_answer_whose_commit_reply_is_lost_is_answered_once(
    faulty: Faulty, mode: Mode
) -> None:
    store, direct = faulty.store, faulty.direct
    await a_run(store)
    await store.add_interaction(Interaction("q1", "r1", "asker", "async", ("Formal?",), HERE))
    await store.flush()
    lose(faulty.proxy, b"COMMIT", mode)
    result = await asyncio.wait_for(store.answer("q1", "formal", answered_by="ada"), 30)
    assert fired(faulty.proxy)  # the COMMIT did lose its reply (or its request)
    assert result.interaction.answers == "formal"
    question = await direct.get_interaction("q1")
    assert (question.answers, question.answered_by) == ("formal", "ada")
    answered = [e for e in await direct.events("r1") if e.type == "interaction_answered"]
    assert len(answered) == 1  # written once, whichever way the loss went
    messages = await direct.drain_messages("r1", "asker")
    assert len(messages) == 1 and "formal" in messages[0].text


@pytest.mark.parametrize("mode", MODES)
async def test_a_batch_of_events_whose_commit_is_lost_is_written_once_in_order(
    faulty: Faulty, mode: Mode
) -> None:
    store, direct = faulty.store, faulty.direct
    await a_run(store)
    await store.flush()
    for n in range(5):
        await store.append_event("r1", "tick", {"n": n})
    lose(faulty.proxy, b"COMMIT", mode)
    await asyncio.wait_for(store.flush(), 30)
    assert fired(faulty.proxy)
    for n in range(5, 8):  # written after the lost batch, in order
        await store.append_event("r1", "tick", {"n": n})
    await asyncio.wait_for(store.flush(), 30)
    events = await direct.events("r1")
    assert [e.data["n"] for e in events] == list(range(8))  # none doubled, none lost
    assert [e.seq for e in events] == list(range(1, 9))


@pytest.mark.parametrize("mode", MODES)
async def test_a_run_created_whose_reply_is_lost_is_created_once(
    faulty: Faulty, mode: Mode
) -> None:
    store, direct = faulty.store, faulty.direct
    owner = Claimant.here()
    lose(faulty.proxy, b"INSERT INTO runs", mode)
    created = await asyncio.wait_for(
        store.create_run(Run("r2", "w", "h", "running", HERE, HERE), owner=owner), 30
    )
    assert fired(faulty.proxy)
    assert created.id == "r2" and created.lease is not None
    assert created.lease.owner == owner.id  # not "already exists": it was this call's
    stored = await direct.get_run("r2")
    assert stored.lease is not None and stored.lease.owner == owner.id


@pytest.mark.parametrize("mode", MODES)
async def test_messages_drained_whose_reply_is_lost_reach_the_drainer(
    faulty: Faulty, mode: Mode
) -> None:
    store, direct = faulty.store, faulty.direct
    await a_run(store)
    for text in ("one", "two"):
        await direct.queue_message("r1", "asker", text)
    await store.flush()
    lose(faulty.proxy, b"UPDATE messages SET delivered_at", mode)
    drained = await asyncio.wait_for(store.drain_messages("r1", "asker"), 30)
    assert fired(faulty.proxy)
    assert [m.text for m in drained] == ["one", "two"]  # taken once, and handed over
    assert await direct.drain_messages("r1", "asker") == []


CHAIN = "\n".join(
    [f'tool t{n}:\n  command: "echo t{n} >> ran.txt; sleep 0.05"\n' for n in range(12)]
    + ["workflow w:", "  entry: t0"]
    + [f"  t{n} -> t{n + 1}" for n in range(11)]
    + ["  t11 -> done", ""]
)


async def test_a_run_whose_commits_keep_losing_replies_runs_each_node_once(
    postgres_url: str, proxy: PgProxy, tmp_path: Path
) -> None:
    """A campaign: while a run goes, its COMMITs keep losing their reply, or themselves."""
    schema = f"lost_{uuid.uuid4().hex[:12]}"
    session = Session(f"{proxy.url(postgres_url)}&schema={schema}", workdir=tmp_path)
    chaos = random.Random(16)
    losses = 0
    try:
        run = await session.start(it.compile(CHAIN))
        deadline = time.monotonic() + 60
        while run.status in ("created", "running") and time.monotonic() < deadline:
            if chaos.random() < 1 / 2 and not proxy.armed:
                proxy.arm(b"COMMIT", chaos.choice(MODES))
            await asyncio.sleep(0.01)
            losses += proxy.fired.is_set()
            proxy.fired.clear()
            await run.refresh()
        assert await run.wait(60) == "finished", run.error
        assert losses >= 5  # the campaign did bite
        assert (tmp_path / "ran.txt").read_text().split() == [f"t{n}" for n in range(12)]
        events = await session.store.events(run.id)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        finished = [e.node_id for e in events if e.type == "node_finished"]
        assert finished == [f"t{n}" for n in range(12)]  # none doubled, none lost
    finally:
        await session.close()
