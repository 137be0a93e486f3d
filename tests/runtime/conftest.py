from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import iterion_nb as it
from iterion_nb.backends import FunctionBackend
from iterion_nb.runtime.ports import BackendRequest, Store
from iterion_nb.runtime.records import Interaction
from iterion_nb.session import RunHandle, Session
from iterion_nb.store import MemoryStore, open_duckdb_store


@pytest.fixture(params=["memory", "duckdb"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    impl: Store = (
        MemoryStore() if request.param == "memory" else open_duckdb_store(tmp_path / "r.duckdb")
    )
    yield impl
    await impl.close()


SessionFactory = Callable[..., Session]


@pytest.fixture
async def make_session(store: Store, tmp_path: Path) -> AsyncIterator[SessionFactory]:
    made: list[Session] = []

    def factory(functions: dict[str, Any] | None = None, **kwargs: Any) -> Session:
        backend = FunctionBackend(functions or {})
        session = Session(store, backend=backend, workdir=tmp_path, **kwargs)
        made.append(session)
        return session

    yield factory
    for session in made:
        await session.close()


async def run_to_end(session: Session, source: str, **kwargs: Any) -> RunHandle:
    run = await session.start(it.compile(source), **kwargs)
    await run.wait(timeout=20)
    return run


async def ask(request: BackendRequest, question: str, iid: str) -> None:
    """What an async agent's ask_user_async does: post a question, keep going."""
    assert request.context is not None
    await request.context.store.add_interaction(
        Interaction(
            iid, request.run_id, request.node.name, "async", (question,),
            datetime.now(UTC), branch_id=request.branch_id,
        )
    )  # fmt: skip
    await request.context.emit(
        "human_input_requested", {"interaction_id": iid, "question": question, "async": True}
    )
