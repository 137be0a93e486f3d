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

import distributed
import pytest

import iterion_nb as it
from iterion_nb.session import Session
from iterion_nb.session.cluster import SCAN_INTERVAL

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


#: Shows the watcher's INFO lines in a worker's log too (Dask configures the logger).
INFO_LOG = {"DASK_LOGGING__ITERION_NB": "info"}
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def iterion_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if "iterion_nb" in line]


@pytest.mark.timeout(300)
async def test_a_duckdb_store_whose_holder_exited_leaves_the_workers_quiet(
    chdir: Path,  # noqa: F811 - the fixture
) -> None:
    """A CLI run on its own DuckDB store registers the store's watcher on the cluster; once
    the command exits, nobody holds the file: said once (INFO), then quiet, until a new
    holder comes (read from the holder file again), whose runs the workers take up."""
    import subprocess
    import sys

    from iterion_nb.store.remote import RECOVER_SECONDS

    cli = str(Path(sys.executable).parent / "iterion-nb")
    cluster = await asyncio.to_thread(CliCluster, chdir, 0)
    log = chdir / "worker.log"

    def run_cli() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [cli, "run", str(EXAMPLES / "minimal.iter"), "--scenario",
             str(EXAMPLES / "minimal.scenario.yaml"), "--cluster", cluster.address],
            capture_output=True, text=True, timeout=120, cwd=chdir, check=False,
        )  # fmt: skip

    try:
        await asyncio.to_thread(cluster.add_worker, None, log, INFO_LOG)
        await asyncio.to_thread(cluster.wait_for_workers, 1)
        done = await asyncio.to_thread(run_cli)
        assert done.returncode == 0, done.stderr
        await asyncio.sleep(RECOVER_SECONDS + 2 * SCAN_INTERVAL)  # long past a holder's wait
        quiet = iterion_lines(log.read_text(errors="replace"))
        again = await asyncio.to_thread(run_cli)  # a new holder: its run goes as the first
        assert again.returncode == 0, again.stderr
    finally:
        await asyncio.to_thread(cluster.close)
    assert not [line for line in quiet if " - INFO - " not in line], quiet
    assert not [line for line in quiet if "did not answer" in line], quiet
    assert not [line for line in quiet if "cannot use the store" in line], quiet
    gone = [line for line in quiet if "holds the run store" in line or "no process holds" in line]
    assert len(gone) <= 2, quiet  # said once, not every half minute
    assert all(str(chdir / ".iterion") in line for line in gone), gone


async def test_a_store_trouble_is_said_once_when_the_schedulers_watcher_replaces_the_preloaded(
    chdir: Path,  # noqa: F811 - the fixture
) -> None:
    """A scheduler hands a new worker the watchers clients registered; one of the store the
    worker preloaded replaces the preloaded one (one watcher per store): the new one does
    not say again what the first said."""
    from iterion_nb.session.cluster import plugin_name
    from iterion_nb.session.watcher import RunWatcher

    from .procs import free_port

    bad = f"postgresql://iterion:s3cret@127.0.0.1:{free_port()}/agents"  # nothing listens
    cluster = await asyncio.to_thread(CliCluster, chdir, 0)
    log = chdir / "worker.log"
    unset_log = chdir / "unset.log"

    def register() -> None:  # as a session on that store did before
        with distributed.Client(cluster.address, timeout="60s") as client:
            client.register_plugin(RunWatcher(bad), name=plugin_name(bad))

    try:
        await asyncio.to_thread(register)
        await asyncio.to_thread(cluster.add_worker, bad, log)
        await asyncio.to_thread(cluster.add_worker, None, unset_log, None, True)
        await asyncio.to_thread(cluster.wait_for_workers, 2)

        async def told() -> bool:
            return "Starting Worker plugin iterion-run-watcher" in log.read_text(
                errors="replace"
            ) and "cannot connect to the run store" in log.read_text(errors="replace")

        await until(told, timeout=60)
        await asyncio.sleep(2 * SCAN_INTERVAL)  # both watchers tried, twice
    finally:
        await asyncio.to_thread(cluster.close)
    said = log.read_text(errors="replace")
    assert said.count("cannot connect to the run store") == 1, said
    assert "s3cret" not in said
    unset = unset_log.read_text(errors="replace")
    assert unset.count("ITERION_NB_STORE is not set") == 1, unset
