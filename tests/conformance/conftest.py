"""The Store conformance suite: every implementation runs every test here."""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from iterion_nb.runtime.ports import Store
from iterion_nb.runtime.records import Interaction, Option, Run
from iterion_nb.session import Session
from iterion_nb.store import MemoryStore, open_duckdb_store
from iterion_nb.store.holder_file import HolderInfo
from iterion_nb.store.remote import RemoteStore

IMPLEMENTATIONS = ["memory", "duckdb", "remote", "postgres"]


class Clock:
    """A deterministic clock: each call is one millisecond after the previous."""

    def __init__(self) -> None:
        self.now = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now


@pytest.fixture
def clock() -> Clock:
    """The store's clock: tests move it forward to let leases lapse."""
    return Clock()


@pytest.fixture(params=IMPLEMENTATIONS)
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, clock: Clock
) -> AsyncIterator[Store]:
    ids = (f"m{n}" for n in itertools.count(1))
    impl: Store
    if request.param == "memory":
        impl = MemoryStore(clock=clock, new_id=lambda: next(ids))
        yield impl
        await impl.close()
        return
    if request.param == "postgres":
        from iterion_nb.store.postgres_store import open_postgres_store

        # a fresh schema per test on the session's server: cheap, and nothing leaks between tests
        base = request.getfixturevalue("postgres_url")
        impl = open_postgres_store(
            f"{base}?schema=t_{uuid.uuid4().hex}", clock=clock, new_id=lambda: next(ids)
        )
        yield impl
        await impl.close()
        return
    local = open_duckdb_store(tmp_path / "runs.duckdb", clock=clock, new_id=lambda: next(ids))
    if request.param == "duckdb":
        yield local
        await local.close()
        return
    # remote: the same DuckDB store, served over HTTP by a holder, used through the client
    session = Session(local)
    holder = session.serve()
    assert holder is not None
    impl = RemoteStore(local.path, HolderInfo(os.getpid(), holder.url, holder.token))
    yield impl
    await impl.close()
    await session.close()
    await local.close()


def make_run(run_id: str = "r1", **overrides: Any) -> Run:
    at = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    fields: dict[str, Any] = {
        "id": run_id, "workflow": "w", "source_hash": "h1", "status": "paused_waiting_human",
        "created_at": at, "updated_at": at, "source": "workflow w:\n", "vars": {},
    }  # fmt: skip
    fields.update(overrides)
    return Run(**fields)


def make_question(
    iid: str = "q1",
    run_id: str = "r1",
    node_id: str = "gatherer",
    kind: Any = "async",
    question: str = "Formal or casual?",
    minute: int = 0,
    **overrides: Any,
) -> Interaction:
    return Interaction(
        id=iid, run_id=run_id, node_id=node_id, kind=kind, questions=(question,),
        requested_at=datetime(2026, 12, 1, 8, minute, tzinfo=UTC),
        options=(Option("f", "Formal"), Option("c", "Casual")), **overrides,
    )  # fmt: skip
