from __future__ import annotations

from datetime import UTC, datetime

import pytest

from iterion_nb.errors import ConflictError, NotFoundError
from iterion_nb.runtime.ports import Store

from .conftest import make_run

NESTED = {"é": ["ünï", {"deep": [1, 2.5, None, True, {"x": "🙂"}]}], "empty": {}}


async def test_run_round_trips_exactly(store: Store) -> None:
    run = make_run(vars=NESTED, checkpoint={"node": "a", "outputs": NESTED}, error=None)
    assert await store.create_run(run) == run
    assert await store.get_run("r1") == run


async def test_unknown_run_is_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError) as info:
        await store.get_run("nope")
    assert (info.value.kind, info.value.key) == ("run", "nope")
    with pytest.raises(NotFoundError):
        await store.update_run("nope", status="finished")


async def test_creating_a_run_twice_is_a_conflict(store: Store) -> None:
    await store.create_run(make_run())
    with pytest.raises(ConflictError):
        await store.create_run(make_run())


async def test_update_changes_only_what_is_given(store: Store) -> None:
    await store.create_run(make_run(error="old"))
    paused = await store.update_run(
        "r1", status="paused_waiting_human", checkpoint={"next": "gate", "n": [1]}
    )
    assert paused.status == "paused_waiting_human"
    assert paused.checkpoint == {"next": "gate", "n": [1]}
    assert paused.error == "old"
    assert paused.updated_at > paused.created_at
    cleared = await store.update_run("r1", error=None, source_hash="h2", source="new")
    assert (cleared.error, cleared.source_hash, cleared.source) == (None, "h2", "new")
    assert cleared.checkpoint == {"next": "gate", "n": [1]}
    assert await store.get_run("r1") == cleared
    moved = await store.update_run("r1", launch={"executor": "dask", "workdir": "/w"})
    assert moved.launch == {"executor": "dask", "workdir": "/w"}
    assert (moved.source, moved.checkpoint) == ("new", {"next": "gate", "n": [1]})
    assert await store.get_run("r1") == moved


async def test_list_runs_newest_first_with_filter_and_limit(store: Store) -> None:
    for n in range(5):
        at = datetime(2026, 12, 1, 8, n, tzinfo=UTC)
        status = "finished" if n % 2 else "running"
        await store.create_run(make_run(f"r{n}", created_at=at, updated_at=at, status=status))
    assert [r.id for r in await store.list_runs()] == ["r4", "r3", "r2", "r1", "r0"]
    assert [r.id for r in await store.list_runs(status="finished")] == ["r3", "r1"]
    assert [r.id for r in await store.list_runs(limit=2)] == ["r4", "r3"]


async def test_progress_checkpoints_keep_the_latest(store: Store) -> None:
    await store.create_run(make_run())
    await store.save_checkpoint("r1", {"frontier": ["a"]})
    await store.append_event("r1", "node_finished")
    await store.save_checkpoint("r1", {"frontier": ["b"], "é": [1]})
    assert (await store.get_run("r1")).checkpoint == {"frontier": ["b"], "é": [1]}

    async def save_then_flush() -> None:
        await store.save_checkpoint("ghost", {})
        await store.flush()  # a batching remote store says so at its next call

    with pytest.raises(NotFoundError):
        await save_then_flush()
