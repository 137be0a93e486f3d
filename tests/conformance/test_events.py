from __future__ import annotations

import asyncio
import itertools

import pytest

from iterion_nb.errors import NotFoundError
from iterion_nb.runtime.ports import Store

from .conftest import make_run


async def test_events_keep_order_and_per_run_seq(store: Store) -> None:
    await store.create_run(make_run("a"))
    await store.create_run(make_run("b"))
    for n in range(3):
        await store.append_event("a", "node_started", {"n": n}, node_id="x")
        await store.append_event("b", "tick", {"n": n}, branch_id="b1")
    a = await store.events("a")
    b = await store.events("b")
    assert [(e.seq, e.type, e.data["n"], e.node_id) for e in a] == [
        (1, "node_started", 0, "x"), (2, "node_started", 1, "x"), (3, "node_started", 2, "x")
    ]  # fmt: skip
    assert [(e.seq, e.branch_id) for e in b] == [(1, "b1"), (2, "b1"), (3, "b1")]
    assert all(x.at < y.at for x, y in itertools.pairwise(a))


async def test_appended_data_round_trips(store: Store) -> None:
    await store.create_run(make_run())
    data = {"tokens": {"in": 3, "é": "ü"}, "text": "tab\tnew\nline \u001f"}
    await store.append_event("r1", "llm_step_finished", data, node_id="n")
    data["tokens"] = "changed after the call"
    (stored,) = await store.events("r1")
    assert stored.data == {"tokens": {"in": 3, "é": "ü"}, "text": "tab\tnew\nline \u001f"}
    assert (stored.seq, stored.type, stored.node_id, stored.branch_id) == (
        1, "llm_step_finished", "n", None
    )  # fmt: skip


async def test_events_after_and_limit(store: Store) -> None:
    await store.create_run(make_run())
    for n in range(10):
        await store.append_event("r1", "tick", {"n": n})
    assert [e.seq for e in await store.events("r1", after=7)] == [8, 9, 10]
    assert [e.seq for e in await store.events("r1", after=2, limit=3)] == [3, 4, 5]


async def test_concurrent_appends_get_distinct_consecutive_seqs(store: Store) -> None:
    await store.create_run(make_run())
    await asyncio.gather(*(store.append_event("r1", "tick", {"n": n}) for n in range(200)))
    stored = await store.events("r1")
    assert [e.seq for e in stored] == list(range(1, 201))
    assert sorted(e.data["n"] for e in stored) == list(range(200))


async def test_status_change_is_never_ahead_of_its_events(store: Store) -> None:
    await store.create_run(make_run())
    await store.append_event("r1", "run_finished")
    run = await store.update_run("r1", status="finished")
    assert run.status == "finished"
    assert [e.type for e in await store.events("r1")] == ["run_finished"]


async def test_events_of_unknown_run(store: Store) -> None:
    await store.create_run(make_run())

    async def append_then_flush() -> None:
        # local stores refuse at once; a batching remote store at its next call
        await store.append_event("ghost", "tick")
        await store.flush()

    with pytest.raises(NotFoundError):
        await append_then_flush()
    with pytest.raises(NotFoundError):
        await store.events("ghost")
    # a bad event does not take the good ones of its batch with it
    await store.append_event("r1", "tick")
    assert [e.type for e in await store.events("r1")] == ["tick"]
