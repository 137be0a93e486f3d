"""The scheduler going away leaves no traceback of the watcher's in a worker's log.

Real processes only: a PostgreSQL server, a ``dask scheduler`` and a
``dask worker --preload iterion_nb.session.watcher`` whose output is captured.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import signal
from collections import Counter
from pathlib import Path

import pytest

import iterion_nb as it
from iterion_nb.session import Session

from .procs import CliCluster
from .test_faults import GATE, chdir, ran, schema_url, until  # noqa: F401 - chdir: a fixture

#: Where a record of a Dask log starts: its time stamp.
RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ - ", re.MULTILINE)


def records(log: str) -> list[str]:
    """A worker's log cut into records (a traceback stays with the record it belongs to)."""
    starts = [m.start() for m in RECORD.finditer(log)] + [len(log)]
    head = [log[: starts[0]]] if starts[0] else []
    return head + [log[a:b] for a, b in itertools.pairwise(starts)]


def client_noise(log: str) -> list[str]:
    """The records of a worker's log that come from a ``distributed.Client`` with a traceback.

    The watcher's client was the only client in the worker: the worker makes
    one of its own only for a task that asks for it (``get_client``).
    """
    return [
        r for r in records(log)
        if "Traceback" in r and (" - distributed.client - " in r or "distributed/client.py" in r)
    ]  # fmt: skip


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["killed", "stopped"])
async def test_the_scheduler_going_away_leaves_no_traceback_of_the_watcher(
    chdir: Path,  # noqa: F811 - the fixture
    postgres_url: str,
    how: signal.Signals,
) -> None:
    store = schema_url(postgres_url)
    cluster = await asyncio.to_thread(CliCluster, chdir, 0, store)
    log = chdir / "worker.log"
    session = Session(store, cluster=cluster.address, workdir=chdir)
    try:
        await asyncio.to_thread(cluster.add_worker, None, log)
        await asyncio.to_thread(cluster.wait_for_workers, 1)
        # the watcher at work first: it resumes a run whose answer is in
        first = await session.start(it.compile(GATE))
        assert await first.wait(60) == "paused_waiting_human"
        (question,) = await first.pending_questions()
        await first.answer(question.id, "yes")
        assert await first.wait(60) == "finished"
        parked = await session.start(it.compile(GATE))
        assert await parked.wait(60) == "paused_waiting_human"

        cluster.scheduler.send_signal(how)  # the scheduler goes away
        await asyncio.to_thread(cluster.scheduler.wait)
        await asyncio.to_thread(cluster.wait_workers_gone)  # a worker exits without it
        said = log.read_text(errors="replace")
        assert not client_noise(said), said
        assert said.count("iterion_nb watcher: ") <= 1, said

        # it comes back, and so does the worker (its supervisor starts it): the watcher
        # takes up the run answered meanwhile
        cluster.scheduler = await asyncio.to_thread(cluster._scheduler)
        (question,) = await parked.pending_questions()
        await session.store.answer(question.id, "yes", answered_by="elsewhere")
        await asyncio.to_thread(cluster.add_worker)

        async def finished() -> bool:
            return (await parked.refresh()).status == "finished"

        await until(finished, timeout=60)
    finally:
        await session.close()
        await asyncio.to_thread(cluster.close)
    assert ran(chdir) == Counter({"after": 2})


async def test_many_runs_resumed_at_once_leave_the_schedulers_log_clean(
    chdir: Path,  # noqa: F811 - the fixture
    postgres_url: str,
) -> None:
    """Two workers' watchers submit a batch of resumes each and close their clients at
    once; the scheduler takes the batches in after they left, and must not report a task
    that ended meanwhile to a closed client (a CRITICAL record with a traceback)."""
    store = schema_url(postgres_url)
    log = chdir / "scheduler.log"
    cluster = await asyncio.to_thread(CliCluster, chdir, 2, store, log)
    session = Session(store, cluster=cluster.address, workdir=chdir)
    try:
        runs = [await session.start(it.compile(GATE)) for _ in range(150)]
        for run in runs:
            assert await run.wait(60) == "paused_waiting_human"
        for run in runs:  # all at once: the watchers resume them in batches
            (question,) = await run.pending_questions()
            await session.store.answer(question.id, "yes", answered_by="test")

        async def all_finished() -> bool:
            statuses = {(await session.store.get_run(run.id)).status for run in runs}
            return statuses == {"finished"}

        await until(all_finished, timeout=120)
    finally:
        await session.close()
        await asyncio.to_thread(cluster.close)
    assert ran(chdir) == Counter({"after": 150})
    said = log.read_text()
    bad = [r for r in records(said) if " - CRITICAL - " in r or "Traceback" in r]
    assert not bad, "".join(bad[:3])
