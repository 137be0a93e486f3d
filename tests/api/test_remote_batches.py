"""A holder's client sends its batched events one batch at a time, whoever waits for them.

Real HTTP on loopback: a session in this process serves its DuckDB file, and a
``RemoteStore`` is its client. A caller that waits for a batch on its way and
is cancelled (a notebook cell interrupted) must not cancel that batch under
its sender or the other callers waiting for it.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from iterion_nb.runtime.ownership import Claimant
from iterion_nb.session import Session
from iterion_nb.store import open_duckdb_store
from iterion_nb.store.holder_file import HolderInfo
from iterion_nb.store.remote import RemoteStore
from tests.conformance.conftest import make_run


async def test_a_cancelled_waiter_leaves_the_batch_to_its_sender_and_the_others(
    tmp_path: Path,
) -> None:
    local = open_duckdb_store(tmp_path / "runs.duckdb")
    session = Session(local)
    holder = session.serve()
    assert holder is not None
    client = RemoteStore(local.path, HolderInfo(os.getpid(), holder.url, holder.token))
    try:
        me = Claimant.here(30)
        await client.create_run(make_run(status="running"), owner=me)
        send = client._request

        def slowly(method: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
            if method == "write_batch":
                time.sleep(0.3)  # a batch on its way to the holder
            return send(method, args, kwargs)

        client._request = slowly  # type: ignore[method-assign]
        await client.append_event("r1", "node_started", {})
        sender = asyncio.ensure_future(client.flush())
        await asyncio.sleep(0.05)
        await client.append_event("r1", "node_finished", {})
        cancelled = asyncio.ensure_future(client.flush())  # waits for the first batch
        patient = asyncio.ensure_future(client.flush())
        await asyncio.sleep(0.05)
        cancelled.cancel()
        await sender  # no InvalidStateError: the batch's future was not cancelled under it
        await patient
        assert [e.type for e in await client.events("r1")] == ["node_started", "node_finished"]
    finally:
        await client.close()
        await session.close()
        await local.close()
