"""``POST /api/runs/{id}/resume`` with ``"source"`` (and ``"force"``), over HTTP on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import iterion_nb as it
from iterion_nb.session import Session
from tests.api.test_rest import call

FAILING = 'tool t:\n  command: "exit 3"\n\nworkflow w:\n  entry: t\n  t -> done\n'
FIXED = FAILING.replace("exit 3", "echo fixed")
OTHER = FIXED.replace("workflow w:", "workflow other:")
BROKEN = FIXED.replace("t -> done", "t -> nowhere")


@pytest.fixture
async def failed(tmp_path: Path) -> AsyncIterator[tuple[Session, str, str, str]]:
    """A session serving its store, a run of FAILING that failed resumably, and the route."""
    session = Session(tmp_path / "s.duckdb", workdir=tmp_path, poll_interval=60)
    session.serve()
    assert session.holder is not None
    handle = await session.start(it.compile(FAILING))
    assert await handle.wait(10) == "failed_resumable"
    url = f"{session.holder.url}/api/runs/{handle.id}/resume"
    yield session, url, session.holder.token, handle.id
    await session.close()


async def post(url: str, token: str, body: Any) -> tuple[int, Any]:
    return await asyncio.to_thread(call, url, "POST", body, token)


async def as_stored(session: Session, run_id: str) -> tuple[Any, ...]:
    """What a refused resume must leave as it was."""
    run = await session.store.get_run(run_id)
    events = [e.type for e in await session.store.events(run_id)]
    return run.status, run.checkpoint, run.source, run.source_hash, run.updated_at, events


async def test_the_fixed_source_resumes_with_force(
    failed: tuple[Session, str, str, str],
) -> None:
    session, url, token, run_id = failed
    status, body = await post(url, token, {"source": FIXED, "force": True})
    assert status == 200, body
    handle = session.run(run_id)
    assert await handle.wait(10) == "finished"
    assert handle.outputs["t"]["stdout"] == "fixed\n"
    run = await session.store.get_run(run_id)
    assert run.source == FIXED and run.source_hash == it.compile(FIXED).source_hash


async def test_a_changed_source_without_force_is_refused_and_the_run_untouched(
    failed: tuple[Session, str, str, str],
) -> None:
    session, url, token, run_id = failed
    before = await as_stored(session, run_id)
    assert before[1] is not None  # a checkpoint
    status, body = await post(url, token, {"source": FIXED})
    assert status == 409 and body["code"] == "not_resumable", body
    said = body["message"]
    assert said.startswith(
        f"the workflow of run '{run_id}' changed since it started; send \"force\": true"
    )
    assert "recorded workflow 'w'" in said and "the source sent has sha256" in said
    assert await as_stored(session, run_id) == before


async def test_force_without_source_is_a_bad_request(
    failed: tuple[Session, str, str, str],
) -> None:
    session, url, token, run_id = failed
    before = await as_stored(session, run_id)
    status, body = await post(url, token, {"force": True})
    assert (status, body) == (400, {
        "code": "bad_request",
        "message": "force needs source: without it the run resumes its recorded source"
        ' (send the edited workflow as "source", with "force": true)',
    })  # fmt: skip
    status, body = await post(url, token, {"source": 3, "force": True})
    assert (status, body["code"]) == (400, "bad_request")
    status, body = await post(url, token, {"sauce": FIXED})  # unknown fields are still refused
    assert (status, body["code"]) == (400, "unknown_field")
    assert await as_stored(session, run_id) == before


async def test_another_workflow_is_refused_even_with_force(
    failed: tuple[Session, str, str, str],
) -> None:
    session, url, token, run_id = failed
    before = await as_stored(session, run_id)
    status, body = await post(url, token, {"source": OTHER, "force": True})
    assert (status, body["code"]) == (409, "not_resumable")
    assert body["message"].startswith(f"run '{run_id}' is a run of workflow 'w', not 'other'")
    assert await as_stored(session, run_id) == before


async def test_a_source_with_errors_says_where(failed: tuple[Session, str, str, str]) -> None:
    session, url, token, run_id = failed
    before = await as_stored(session, run_id)
    status, body = await post(url, token, {"source": BROKEN, "force": True})
    assert (status, body["code"]) == (400, "bad_request")
    assert body["message"].splitlines()[:2] == [
        "<source>: 1 error",
        "<source>:6:3: error[C001]: unknown node 'nowhere' in edge",
    ]
    assert await as_stored(session, run_id) == before


async def test_the_recorded_source_still_resumes_without_a_body(
    failed: tuple[Session, str, str, str],
) -> None:
    session, url, token, run_id = failed
    status, body = await post(url, token, {"force": False})
    assert status == 200, body
    assert await session.run(run_id).wait(10) == "failed_resumable"  # the old command again
