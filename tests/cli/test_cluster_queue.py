"""A run waiting in a cluster's queue, as the terminal shows it: never "resumed" before it is.

Real parts: a PostgreSQL server, a ``dask scheduler`` process with no worker at first,
then one ``dask worker`` (with the watcher), and the ``iterion-nb`` command.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import sys
from pathlib import Path

import iterion_nb as it
from iterion_nb.session import Session
from tests.cluster.procs import CliCluster

CLI = str(Path(sys.executable).parent / "iterion-nb")

GATE = """\
human gate:
  instructions: "Ship it?"

compute after:
  expr:
    v: "1"

workflow w:
  entry: gate
  gate -> after
  after -> done
"""

_schemas = itertools.count()


def _store(postgres_url: str) -> str:
    sep = "&" if "?" in postgres_url else "?"
    return f"{postgres_url}{sep}schema=queue_{os.getpid()}_{next(_schemas)}"


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ITERION_NB_")}
    return subprocess.run(
        [CLI, *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=env, check=False
    )


async def _answer_on(
    cluster: CliCluster, cwd: Path, store: str, run_id: str, question_id: str
) -> subprocess.CompletedProcess[str]:
    """`runs answer` with the cluster named: it queues the answered run there itself."""
    return await asyncio.to_thread(
        _cli, cwd, "runs", "answer", run_id, question_id, "yes",
        "--store", store, "--cluster", cluster.address,
    )  # fmt: skip


async def _paused_run(store: str, workdir: Path) -> tuple[str, str]:
    """A run paused at its gate, executed in a session (no cluster) that is gone since."""
    session = Session(store, workdir=workdir)
    try:
        run = await session.start(it.compile(GATE))
        assert await run.wait(60) == "paused_waiting_human"
        (question,) = await run.pending_questions()
        return run.id, question.id
    finally:
        await session.close()


async def test_an_answer_queued_on_a_cluster_without_workers_says_it_waits_there(
    tmp_path: Path, postgres_url: str
) -> None:
    """`runs answer --cluster` queues the run; with no worker up it says the run waits in
    the queue (not that a worker resumed it); `runs show` and `runs follow` say so too; the
    first worker that comes up runs it to the end."""
    store = _store(postgres_url)
    run_id, question_id = await _paused_run(store, tmp_path)
    cluster = await asyncio.to_thread(CliCluster, tmp_path, 0, store)
    try:
        answered = await _answer_on(cluster, tmp_path, store, run_id, question_id)
        assert answered.returncode == 0, answered.stderr
        assert answered.stdout == (
            "answer recorded; the run waits in the cluster's queue: no worker is connected to"
            f" the scheduler at {cluster.address}; the first one that comes up resumes it (the"
            " run reads `interrupted` after a minute without one)\n"
        ), answered.stdout
        as_json = await asyncio.to_thread(
            _cli, tmp_path, "runs", "show", run_id, "--store", store, "--json"
        )
        assert as_json.returncode == 0, as_json.stderr
        assert '"queued": true' in as_json.stdout
        shown = await asyncio.to_thread(_cli, tmp_path, "runs", "show", run_id, "--store", store)
        assert shown.returncode == 0, shown.stderr
        first = shown.stdout.splitlines()[0]
        assert first.startswith(f"run {run_id} (w): running — waits in a cluster's queue since")
        assert first.endswith(": no worker has taken it up yet"), first
        followed = await asyncio.to_thread(
            _cli, tmp_path, "runs", "follow", run_id, "--store", store, "--timeout", "2"
        )
        lines = followed.stdout.splitlines()
        # the events so far, then what the run waits for: said once, not at every look
        assert lines[-1].startswith(f"run {run_id} waits in a cluster's queue (since "), lines
        assert lines[-1].endswith("UTC): no worker has taken it up yet"), lines
        assert sum("cluster's queue" in line for line in lines) == 1, lines
        await asyncio.to_thread(cluster.add_worker)  # the first worker that comes up ...
        done = await asyncio.to_thread(
            _cli, tmp_path, "runs", "follow", run_id, "--store", store, "--timeout", "60"
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[-1] == f"run {run_id} is finished", done.stdout
    finally:
        await asyncio.to_thread(cluster.close)


async def test_an_answer_a_worker_takes_up_at_once_says_a_worker_resumed_it(
    tmp_path: Path, postgres_url: str
) -> None:
    """With a worker up, the same command waits the moment it takes for a worker to take the
    run up, and says so."""
    store = _store(postgres_url)
    run_id, question_id = await _paused_run(store, tmp_path)
    cluster = await asyncio.to_thread(CliCluster, tmp_path, 1, store)
    try:
        answered = await _answer_on(cluster, tmp_path, store, run_id, question_id)
        assert answered.returncode == 0, answered.stderr
        assert answered.stdout.startswith(
            "answer recorded; a cluster worker resumed the run; it is "
        ), answered.stdout
        done = await asyncio.to_thread(
            _cli, tmp_path, "runs", "follow", run_id, "--store", store, "--timeout", "60"
        )
        assert done.stdout.splitlines()[-1] == f"run {run_id} is finished", done.stdout
    finally:
        await asyncio.to_thread(cluster.close)
