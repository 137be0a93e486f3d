"""A worker that cannot open the run store (its Python lacks psycopg) passes runs on at once.

Real processes only: a PostgreSQL server, a ``dask scheduler``, and ``dask worker``
processes, one of which cannot import psycopg (a ``psycopg.py`` that raises
ImportError, first on its ``PYTHONPATH``): a worker missing the ``[postgres]``
extras.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

import iterion_nb as it
from iterion_nb.errors import IterionError
from iterion_nb.session import Session

from .procs import CliCluster
from .test_faults import CLI, chdir, ran, schema_url, until  # noqa: F401 - chdir: a fixture

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


async def test_a_launch_on_a_cluster_no_worker_of_which_can_open_the_store_is_refused(
    chdir: Path,  # noqa: F811 - the fixture
    postgres_url: str,
) -> None:
    """The launching notebook or command says why at once (the workers lack psycopg), and
    records no run, rather than leave one in the queue with the reason in a worker's log."""
    store = schema_url(postgres_url)
    cluster = await asyncio.to_thread(CliCluster, chdir, 0, store)
    session = Session(store, cluster=cluster.address, workdir=chdir)
    flow = chdir / "quick.iter"
    flow.write_text(QUICK)
    try:
        for _ in range(2):
            await asyncio.to_thread(cluster.add_worker, None, None, without_psycopg(chdir))
        await asyncio.to_thread(cluster.wait_for_workers, 2)
        with pytest.raises(IterionError) as refused:
            await session.start(it.compile(QUICK))
        said = str(refused.value)
        assert said.startswith(
            f"no worker of the Dask cluster at {cluster.address} can open the run store"
        ), said
        assert " and 1 more: cannot open the store " in said and "psycopg" in said, said
        assert await session.store.list_runs() == []
        done = await asyncio.to_thread(
            subprocess.run, [CLI, "run", str(flow), "--cluster", cluster.address, "--store", store],
            capture_output=True, text=True, timeout=120, cwd=chdir, check=False,
        )  # fmt: skip
        assert done.returncode == 1, (done.stdout, done.stderr)
        assert "no worker of the Dask cluster" in done.stderr and "psycopg" in done.stderr
        assert "Traceback" not in done.stderr, done.stderr
        assert await session.store.list_runs() == []
        # one worker that can is enough: the run goes to the cluster, and there to that one
        await asyncio.to_thread(cluster.add_worker)
        await asyncio.to_thread(cluster.wait_for_workers, 3)
        run = await session.start(it.compile(QUICK))
        assert await run.wait(60) == "finished"
    finally:
        await session.close()
        await asyncio.to_thread(cluster.close)
    assert ran(chdir) == Counter({"one": 1})


async def test_when_no_worker_can_open_the_store_the_worker_says_why_once(
    chdir: Path,  # noqa: F811 - the fixture
    postgres_url: str,
) -> None:
    """A run queued while no worker was up, taken by one that cannot open the store, does
    not sit silent: the worker says why in one line, and leaves the run in the cluster's
    queue, neither failed nor run (its hold then lapses to ``interrupted`` and the first
    worker that can takes it up, as with no worker up: see test_faults)."""
    store = schema_url(postgres_url)
    cluster = await asyncio.to_thread(CliCluster, chdir, 0, store)
    bad_log = chdir / "bad.log"
    session = Session(store, cluster=cluster.address, workdir=chdir)
    try:
        run = await session.start(it.compile(QUICK))  # no worker up: queued
        await asyncio.to_thread(cluster.add_worker, None, bad_log, without_psycopg(chdir))
        await asyncio.to_thread(cluster.wait_for_workers, 1)

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
