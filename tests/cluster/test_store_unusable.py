"""A worker that cannot open the run store (its Python lacks psycopg) passes runs on at once.

Real processes only: a PostgreSQL server, a ``dask scheduler``, and ``dask worker``
processes, one of which cannot import psycopg (a ``psycopg.py`` that raises
ImportError, first on its ``PYTHONPATH``): a worker missing the ``[postgres]``
extras.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import iterion_nb as it
from iterion_nb.session import Session

from .procs import CliCluster
from .test_faults import chdir, ran, schema_url, until  # noqa: F401 - chdir: a fixture

QUICK = """\
tool one:
  command: "echo one >> ran.txt"

workflow w:
  entry: one
  one -> done
"""


def without_psycopg(tmp_path: Path) -> dict[str, str]:
    """The environment of a worker whose Python cannot import psycopg."""
    shadow = tmp_path / "no-psycopg"
    shadow.mkdir(exist_ok=True)
    (shadow / "psycopg.py").write_text(
        "raise ImportError(\"No module named 'psycopg' (shadowed for a test)\")\n"
    )
    return {"PYTHONPATH": str(shadow)}


def noise(log: str) -> list[str]:
    return [line for line in log.splitlines() if "Traceback" in line or "Compute Failed" in line]


async def test_a_worker_that_cannot_open_the_store_passes_its_runs_to_one_that_can(
    chdir: Path,  # noqa: F811 - the fixture
    postgres_url: str,
) -> None:
    store = schema_url(postgres_url)
    cluster = await asyncio.to_thread(CliCluster, chdir, 0, store)
    bad_log = chdir / "bad.log"
    session = Session(store, cluster=cluster.address, workdir=chdir)
    try:
        await asyncio.to_thread(cluster.add_worker, None, bad_log, without_psycopg(chdir))
        await asyncio.to_thread(cluster.add_worker)
        await asyncio.to_thread(cluster.wait_for_workers, 2)
        started = time.monotonic()
        runs = [await session.start(it.compile(QUICK)) for _ in range(8)]
        for run in runs:
            assert await run.wait(60) == "finished"
        took = time.monotonic() - started
    finally:
        await session.close()
        await asyncio.to_thread(cluster.close)
    assert ran(chdir) == Counter({"one": 8})
    assert took < 30, took  # not a queue hold lapsing (a minute) for each run sent there
    said = bad_log.read_text(errors="replace")
    assert not noise(said), said
    passed = "this worker cannot open the run store"
    assert said.count(passed) == 1, said  # one line, however many runs it passed on
    assert "psycopg" in said


async def test_when_no_worker_can_open_the_store_the_worker_says_why_once(
    chdir: Path,  # noqa: F811 - the fixture
    postgres_url: str,
) -> None:
    """The run does not sit silent: the worker says why in one line, and leaves the run in
    the cluster's queue, neither failed nor run (its hold then lapses to ``interrupted``
    and the first worker that can takes it up, as with no worker up: see test_faults)."""
    store = schema_url(postgres_url)
    cluster = await asyncio.to_thread(CliCluster, chdir, 0, store)
    bad_log = chdir / "bad.log"
    session = Session(store, cluster=cluster.address, workdir=chdir)
    try:
        await asyncio.to_thread(cluster.add_worker, None, bad_log, without_psycopg(chdir))
        await asyncio.to_thread(cluster.wait_for_workers, 1)
        run = await session.start(it.compile(QUICK))

        async def said_why() -> bool:
            return "no worker of this cluster could open" in bad_log.read_text(errors="replace")

        await until(said_why, timeout=30)
        record = await run.refresh()
        assert record.status == "running" and record.lease is not None and record.lease.queued
    finally:
        await session.close()
        await asyncio.to_thread(cluster.close)
    assert ran(chdir) == Counter()
    said = bad_log.read_text(errors="replace")
    assert not noise(said), said
    assert said.count("no worker of this cluster could open") == 1, said
    assert "psycopg" in said
