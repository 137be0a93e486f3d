"""Faults on a cluster of real processes over PostgreSQL: no worker up, restarts of all kinds.

Workers start with the watcher preloaded (``--preload iterion_nb.session.watcher``
with ``ITERION_NB_STORE``), the setup docs/scale-out.md describes.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import distributed
import psycopg
import pytest

import iterion_nb as it
from iterion_nb.api.holder import StoreService
from iterion_nb.server.inbox import snapshot
from iterion_nb.session import Session
from iterion_nb.session.cluster import SCAN_INTERVAL
from iterion_nb.store.remote import open_store
from iterion_nb.widgets.common import outcome_text
from iterion_nb.widgets.inbox import InboxWidget
from tests.api.test_crash_campaign import HOLDER
from tests.pgserver import PgServer

from .procs import CliCluster, free_port

CLI = str(Path(sys.executable).parent / "iterion-nb")

GATE = """\
human gate:
  instructions: "Ship it?"

tool after:
  command: "echo after >> ran.txt"

workflow w:
  entry: gate
  gate -> after
  after -> done
"""

ANSWER = textwrap.dedent(
    """
    import asyncio, sys
    from iterion_nb.store.remote import open_store

    async def main():
        store = open_store(sys.argv[1])
        await store.answer(sys.argv[2], "yes", answered_by="elsewhere")
        await store.close()

    asyncio.run(main())
    """
)


def chain(count: int, slow: int | None = None) -> str:
    parts, edges = [], []
    for n in range(count):
        pause = "while [ ! -f go ]; do sleep 0.05; done" if n == slow else "sleep 0.1"
        parts.append(f'tool t{n}:\n  command: "echo t{n} >> ran.txt; {pause}"\n')
        edges.append(f"  t{n} -> {f't{n + 1}' if n + 1 < count else 'done'}")
    return "\n".join(parts) + "\nworkflow w:\n  entry: t0\n" + "\n".join(edges) + "\n"


def ran(tmp_path: Path) -> Counter[str]:
    path = tmp_path / "ran.txt"
    return Counter(path.read_text().split()) if path.exists() else Counter()


_schemas = iter(range(10**6))


def schema_url(base: str) -> str:
    return base + ("&" if "?" in base else "?") + f"schema=faults_{os.getpid()}_{next(_schemas)}"


async def until(check: Any, timeout: float) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not await check():
        assert loop.time() < end, "timed out"
        await asyncio.sleep(0.05)


@pytest.fixture
def chdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("scheduler_away", ["no", "cli", "python", "server"])
async def test_answered_while_no_worker_is_up_the_first_worker_that_comes_up_takes_it(
    chdir: Path, postgres_url: str, scheduler_away: str
) -> None:
    """Answered by a CLI without the cluster, or whose ITERION_NB_CLUSTER does not answer
    (then it says why it did not queue the run itself), from Python with such a cluster
    (the answer's outcome says why, as ``resume_error``), or by the store service a
    Jupyter server answers REST and the sidebar with (it runs nothing: ``awaiting_worker``
    alone says that a worker takes the run up)."""
    store = schema_url(postgres_url)
    cluster = await asyncio.to_thread(CliCluster, chdir, 2, store)
    session = Session(store, cluster=cluster.address, workdir=chdir)
    try:
        run = await session.start(it.compile(GATE))
        assert await run.wait(60) == "paused_waiting_human"
        await asyncio.to_thread(cluster.kill_workers)  # nobody is up
        (question,) = await run.pending_questions()
        # answered with the CLI of a process without the cluster: it does not run it itself
        env = {k: v for k, v in os.environ.items() if not k.startswith("ITERION_NB_")}
        away = f"tcp://127.0.0.1:{free_port()}"  # nothing listens there
        if scheduler_away == "python":
            elsewhere = Session(store, cluster=away, workdir=chdir)
            try:
                said = await elsewhere.run(run.id).answer(question.id, "yes", answered_by="ada")
            finally:
                await elsewhere.close()
            assert said["resumed"] is False and said["run_status"] == "paused_waiting_human"
            assert said["awaiting_worker"] is True and said["resume_needed"] is False, said
            assert said["resume_error"].startswith(f"no Dask scheduler at {away}: "), said
            # what a widget's banner and %iterion answer say of it
            assert outcome_text(said, run.id).startswith(
                f"Saved — every answer run {run.id} waits for is in, but this session could not"
                f" send it to its cluster (no Dask scheduler at {away}: "
            ), outcome_text(said, run.id)
        elif scheduler_away == "server":
            served = open_store(store)
            try:
                said = await StoreService(served).answer(run.id, question.id, "yes", "ada")
            finally:
                await served.close()
            assert said == {
                "queued": False, "resumed": False, "run_status": "paused_waiting_human",
                "resume_needed": False, "awaiting_worker": True,
            }  # fmt: skip
            assert outcome_text(said, run.id) == (
                f"Saved — every answer run {run.id} waits for is in; no worker of its cluster"
                " has taken it up yet: the first one free resumes it (with no worker up:"
                f" %iterion resume {run.id})"
            )
        else:
            if scheduler_away == "cli":
                env["ITERION_NB_CLUSTER"] = away
            answered = await asyncio.to_thread(
                subprocess.run,
                [CLI, "runs", "answer", run.id, question.id, "yes", "--store", store],
                capture_output=True, text=True, timeout=120, env=env, check=False,
            )  # fmt: skip
            assert answered.returncode == 0, answered.stderr
            assert "the first one that comes up resumes it" in answered.stdout, answered.stdout
            why = f"(this command could not queue it itself: no Dask scheduler at {away}: nothing"
            assert (why in answered.stdout) is (scheduler_away == "cli"), answered.stdout
            assert "Traceback" not in answered.stderr
        assert (await run.refresh()).status == "paused_waiting_human"  # nobody to take it
        await asyncio.to_thread(cluster.add_worker)  # the first worker that comes up ...

        async def finished() -> bool:
            return (await run.refresh()).status == "finished"

        await until(finished, timeout=60)  # ... takes it
    finally:
        await session.close()
        await asyncio.to_thread(cluster.close)
    assert ran(chdir) == Counter({"after": 1})


async def test_a_run_outside_the_cluster_answered_by_a_session_whose_cluster_is_away(
    chdir: Path, postgres_url: str
) -> None:
    """Its outcome says to resume it — no worker ever takes up a run that is not the
    cluster's — and not that "the first worker that comes up takes it"."""
    store = schema_url(postgres_url)
    local = Session(store, workdir=chdir)
    try:
        run = await local.start(it.compile(GATE))
        assert await run.wait(30) == "paused_waiting_human"
        (question,) = await run.pending_questions()
    finally:
        await local.close()  # its owner gone: nothing executes it
    away = Session(store, cluster=f"tcp://127.0.0.1:{free_port()}", workdir=chdir)
    try:
        said = await away.run(run.id).answer(question.id, "yes", answered_by="ada")
    finally:
        await away.close()
    assert said["resume_needed"] is True and "resume_error" not in said, said
    assert outcome_text(said, run.id) == (
        f"Saved — every answer run {run.id} waits for is in, but nothing executes it:"
        f" resume it (%iterion resume {run.id})"
    )


TWO_GATES = """\
human first:
  instructions: "Draft it?"

human second:
  instructions: "Ship it?"

workflow w:
  entry: first
  first -> second
  second -> done
"""


async def test_an_answer_whose_run_a_worker_resumed_and_parked_again_says_so_at_once(
    chdir: Path, postgres_url: str
) -> None:
    """The watchers resume the run and it parks at its next gate within milliseconds: the
    answering command (no cluster of its own) sees the run was taken up — it does not wait
    out its hand-over time and say no worker took it."""
    store = schema_url(postgres_url)
    cluster = await asyncio.to_thread(CliCluster, chdir, 2, store)
    session = Session(store, cluster=cluster.address, workdir=chdir)
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ITERION_NB_")}
        for _ in range(3):  # the resume lands before, between or after the command's looks
            run = await session.start(it.compile(TWO_GATES))
            assert await run.wait(60) == "paused_waiting_human"
            (question,) = await run.pending_questions()
            began = time.monotonic()
            answered = await asyncio.to_thread(
                subprocess.run,
                [CLI, "runs", "answer", run.id, question.id, "yes", "--store", store],
                capture_output=True, text=True, timeout=120, env=env, check=False,
            )  # fmt: skip
            took = time.monotonic() - began
            assert answered.returncode == 0, answered.stderr
            assert "no cluster worker" not in answered.stdout, answered.stdout
            said = answered.stdout.rstrip()
            # taken up while the command looked (running, or parked again already), or even
            # before its first look (it then finds the run waiting on the next question)
            assert re.fullmatch(
                r"answer recorded; (a cluster worker resumed the run; it is"
                r" (running|paused_waiting_human)|the run is paused_waiting_human)",
                said,
            ), said
            assert took < 8, took  # not the 10 s hand-over wait
            (second,) = await run.pending_questions()
            assert second.question == "Ship it?"
            await run.cancel()
    finally:
        await session.close()
        await asyncio.to_thread(cluster.close)


async def test_a_run_cancelled_while_it_waits_for_a_worker_never_runs(
    chdir: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelled in the queue, a run ends ``cancelled`` when a worker comes up, no node run:
    whether the queue still held it (its cancel reaches the worker that takes it) or had
    let it lapse (it reads ``interrupted``, and the cancel settles it at once)."""
    store = schema_url(postgres_url)
    cluster = await asyncio.to_thread(CliCluster, chdir, 0, store)  # nobody is up
    session = Session(store, cluster=cluster.address, workdir=chdir)
    flow = it.compile(
        'tool mark:\n  command: "echo {{vars.who}} >> ran.txt"\n\n'
        "vars:\n  who: string\n\nworkflow w:\n  entry: mark\n  mark -> done\n"
    )
    try:
        held = await session.start(flow, {"who": "held"})  # the queue holds it a minute
        began = time.monotonic()
        cancel = await asyncio.to_thread(
            subprocess.run, [CLI, "cancel", held.id, "--store", store],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert cancel.returncode == 0, cancel.stderr
        # a request, said as one; not the 30 s wait for a run's owner to stop it
        assert cancel.stdout.startswith("running — cancel requested: "), cancel.stdout
        assert "waits in a cluster's queue; it ends cancelled, without running a node" in (
            cancel.stdout
        )
        assert time.monotonic() - began < 20
        asked = await held.refresh()
        assert asked.status == "running" and asked.cancel_requested
        monkeypatch.setattr("iterion_nb.session.cluster.QUEUE_TTL", 3.0)
        lapsed = await session.start(flow, {"who": "lapsed"})

        async def lapsed_out() -> bool:
            return (await lapsed.refresh()).status == "interrupted"

        await until(lapsed_out, timeout=30)
        assert await lapsed.cancel() == "cancelled"
        await asyncio.to_thread(cluster.add_worker)  # now a worker comes up
        after = await session.start(flow, {"who": "after"})
        assert await after.wait(60) == "finished"

        async def settled() -> bool:
            return (await held.refresh()).status == "cancelled"

        await until(settled, timeout=30)
        await asyncio.sleep(SCAN_INTERVAL + 1)  # a watcher's full look leaves them be too
        assert (await lapsed.refresh()).status == "cancelled"
        assert (await held.refresh()).status == "cancelled"
        types = [event.type for event in await session.store.events(lapsed.id)]
        assert "run_started" not in types and types[-1] == "run_cancelled", types
    finally:
        await session.close()
        await asyncio.to_thread(cluster.close)
    assert ran(chdir) == Counter({"after": 1})


async def test_a_worker_whose_store_cannot_be_used_says_so_in_its_log(chdir: Path) -> None:
    """A wrong host or password would leave the worker silent while its calls wait."""
    cluster = await asyncio.to_thread(CliCluster, chdir, 0)
    bad = f"postgresql://iterion:s3cret@127.0.0.1:{free_port()}/agents"  # nothing listens
    log = chdir / "worker.log"
    try:
        await asyncio.to_thread(cluster.add_worker, bad, log)

        async def warned() -> bool:
            return "iterion_nb watcher: " in log.read_text(errors="replace")

        await until(warned, timeout=60)
    finally:
        await asyncio.to_thread(cluster.close)
    said = log.read_text(errors="replace")
    assert f"postgresql://iterion:***@127.0.0.1:{bad.rsplit(':', 1)[1]}" in said, said
    assert "s3cret" not in said


async def test_a_preloaded_watcher_and_a_clients_make_one_watcher_per_worker(
    chdir: Path, postgres_url: str
) -> None:
    store = schema_url(postgres_url)
    cluster = await asyncio.to_thread(CliCluster, chdir, 2, store)
    session = Session(store, cluster=cluster.address, workdir=chdir)
    try:
        run = await session.start(it.compile(GATE))  # registers the client's watcher
        assert await run.wait(60) == "paused_waiting_human"
        client = session.executor.client  # type: ignore[union-attr]

        def watching() -> int:
            return sum(t.name == "iterion-watcher" and t.is_alive() for t in threading.enumerate())

        async def one_each() -> bool:
            counts = await asyncio.to_thread(client.run, watching)
            return sorted(counts.values()) == [1, 1]

        await until(one_each, timeout=30)
        (question,) = await run.pending_questions()
        await run.answer(question.id, "yes")
        assert await run.wait(60) == "finished"
    finally:
        await session.close()
        await asyncio.to_thread(cluster.close)
    assert ran(chdir) == Counter({"after": 1})


async def test_detached_with_no_worker_up_the_cli_warns_and_the_first_worker_runs_it(
    chdir: Path, postgres_url: str
) -> None:
    store = schema_url(postgres_url)
    cluster = await asyncio.to_thread(CliCluster, chdir, 0, store)  # nobody is up
    flow = chdir / "mark.iter"
    flow.write_text('tool mark:\n  command: "echo mark >> ran.txt"\n\nworkflow w:\n'
                    "  entry: mark\n  mark -> done\n")  # fmt: skip
    session = Session(store, cluster=False)
    try:
        done = await asyncio.to_thread(
            subprocess.run,
            [CLI, "run", str(flow), "--cluster", cluster.address, "--detach", "--store", store],
            capture_output=True, text=True, timeout=120, cwd=chdir, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        run_id = done.stdout.strip()
        assert done.stderr == (
            f"iterion-nb: warning: no worker is connected to the scheduler at {cluster.address}:"
            " the run waits for one (it reads `interrupted` after a minute); the first worker"
            " that comes up takes it\n"
        )
        assert not ran(chdir)
        # the run waits in the scheduler's queue, not in the command that exited
        shown = await asyncio.to_thread(
            subprocess.run, [CLI, "runs", "show", run_id, "--json", "--store", store],
            capture_output=True, text=True, timeout=60, cwd=chdir, check=False,
        )  # fmt: skip
        assert json.loads(shown.stdout)["status"] == "running", shown.stdout
        assert json.loads(shown.stdout)["owner"]["queued"] is True, shown.stdout
        again = await asyncio.to_thread(
            subprocess.run, [CLI, "resume", run_id, "--store", store, "--cluster", cluster.address],
            capture_output=True, text=True, timeout=60, cwd=chdir, check=False,
        )  # fmt: skip
        assert again.returncode == 3, again.stderr
        assert f"run '{run_id}' waits in a cluster's queue since" in again.stderr
        assert "the first worker that takes it up runs it" in again.stderr
        await asyncio.to_thread(cluster.add_worker)

        async def finished() -> bool:
            return (await session.store.get_run(run_id)).status == "finished"

        await until(finished, timeout=60)
    finally:
        await session.close()
        await asyncio.to_thread(cluster.close)
    assert ran(chdir) == Counter({"mark": 1})


async def test_the_scheduler_restarting_loses_no_run(chdir: Path, postgres_url: str) -> None:
    """``dask worker`` exits when it loses its scheduler: a supervisor starts it again."""
    store = schema_url(postgres_url)
    cluster = await asyncio.to_thread(CliCluster, chdir, 2, store)
    session = Session(store, cluster=cluster.address, workdir=chdir)
    try:
        run = await session.start(it.compile(chain(4, slow=1)))

        async def in_flight() -> bool:
            return ran(chdir)["t1"] == 1

        await until(in_flight, timeout=60)
        await asyncio.to_thread(cluster.restart_scheduler)
        await asyncio.to_thread(cluster.wait_workers_gone)  # with the run in flight
        assert (await run.refresh()).status == "interrupted"
        (chdir / "go").touch()
        for _ in range(2):  # the supervisor (systemd, Kubernetes, a shell loop) restarts them
            await asyncio.to_thread(cluster.add_worker)

        async def finished() -> bool:
            return (await run.refresh()).status == "finished"

        await until(finished, timeout=90)
    finally:
        await session.close()
        await asyncio.to_thread(cluster.close)
    counts = ran(chdir)
    assert counts["t0"] == 1 and counts["t2"] == 1 and counts["t3"] == 1, counts
    assert counts["t1"] in (1, 2)  # in flight when the scheduler died: maybe redone


@pytest.fixture
def own_postgres() -> Iterator[PgServer]:
    """A server of this test alone: it is restarted mid-run."""
    server = PgServer.start(durable=True)
    try:
        yield server
    finally:
        server.stop()


async def test_postgresql_restarting_mid_run_the_run_waits_and_goes_on(
    chdir: Path, own_postgres: PgServer
) -> None:
    store = schema_url(own_postgres.url)
    cluster = await asyncio.to_thread(CliCluster, chdir, 2, store)
    session = Session(store, cluster=cluster.address, workdir=chdir)
    try:
        run = await session.start(it.compile(chain(12)))

        async def going() -> bool:
            return ran(chdir)["t3"] == 1

        await until(going, timeout=60)
        await asyncio.to_thread(own_postgres.restart)  # the database goes away and comes back

        async def finished() -> bool:
            return (await run.refresh()).status == "finished"

        await until(finished, timeout=120)
    finally:
        await session.close()
        await asyncio.to_thread(cluster.close)
    # the runs' calls wait for the server and go on: nothing is redone
    assert ran(chdir) == Counter({f"t{n}": 1 for n in range(12)})


async def test_postgresql_away_longer_than_a_lease_the_owner_keeps_its_run(
    chdir: Path, own_postgres: PgServer
) -> None:
    """Every lease lapses while the server is away; the owner, alive and waiting, renews
    first (the other worker does not take the run over); the node that ended meanwhile
    is recorded, not run again."""
    store = schema_url(f"{own_postgres.url}?connect_timeout=2")
    cluster = await asyncio.to_thread(CliCluster, chdir, 2, store)
    session = Session(store, cluster=cluster.address, workdir=chdir)
    try:
        run = await session.start(it.compile(chain(4, slow=1)))

        async def slow_running() -> bool:
            return ran(chdir)["t1"] == 1

        await until(slow_running, timeout=60)
        await asyncio.to_thread(own_postgres.stop, False)  # fast: every connection is cut
        (chdir / "go").touch()  # the node ends while the server is away
        await asyncio.sleep(12)  # longer than a lease (10 s)
        await asyncio.to_thread(own_postgres.restart)
        # a follower waits through the outage: the run is the cluster's, it goes on
        assert await run.wait(90) == "finished", run.error
        types = [e.type for e in await session.store.events(run.id)]
    finally:
        await session.close()
        await asyncio.to_thread(cluster.close)
    assert ran(chdir) == Counter({"t0": 1, "t1": 1, "t2": 1, "t3": 1})
    assert types.count("run_started") == 1 and "run_resumed" not in types, types


def _cli(cwd: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    return subprocess.run(
        [CLI, *args], capture_output=True, text=True, timeout=120, cwd=cwd, check=False,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


GATE_THEN_SLOW = """\
human gate:
  instructions: "Ship it?"

tool slow:
  command: "echo slow-$PPID >> ran.txt; while [ ! -f go ]; do sleep 0.05; done"

workflow w:
  entry: gate
  gate -> slow
  slow -> done
"""


GATE_SLOW_GATE = """\
human gate:
  instructions: "Ship it?"

tool slow:
  command: "echo slow-$PPID >> ran.txt; while [ ! -f go ]; do sleep 0.05; done"

human again:
  instructions: "Sure?"

tool last:
  command: "echo last-$PPID >> ran.txt"

workflow w:
  entry: gate
  gate -> slow
  slow -> again
  again -> last
  last -> done
"""


@pytest.mark.parametrize("named_by", ["env", "flag"])
async def test_answering_a_run_started_here_resumes_it_on_the_cluster_and_returns(
    chdir: Path, postgres_url: str, named_by: str
) -> None:
    """A run that executed in a CLI (no cluster) is answered with a cluster at hand
    (``ITERION_NB_CLUSTER``, or ``--cluster`` as docs/scale-out.md says): the answering
    command hands it over and returns while the run goes on. From then on it is a
    cluster run: answered again from a command that names no cluster, a worker resumes
    it, not that command."""
    store = schema_url(postgres_url)
    cluster = await asyncio.to_thread(CliCluster, chdir, 1, store)
    flow = chdir / "flow.iter"
    flow.write_text(GATE_SLOW_GATE)
    try:
        started = await asyncio.to_thread(_cli, chdir, "run", str(flow), "--store", store)
        assert started.returncode == 0, started.stderr  # paused: no cluster involved
        run_id = started.stdout.split()[1]
        listed = await asyncio.to_thread(_cli, chdir, "runs", "questions", run_id,
                                         "--store", store, "--json")  # fmt: skip
        (question,) = json.loads(listed.stdout)["interactions"]
        flag = ["--cluster", cluster.address] if named_by == "flag" else []
        answered = await asyncio.to_thread(
            _cli, chdir, "runs", "answer", run_id, question["id"], "yes", "--store", store,
            *flag, env={"ITERION_NB_CLUSTER": cluster.address} if named_by == "env" else {},
        )  # fmt: skip
        assert answered.returncode == 0, answered.stderr
        assert (
            answered.stdout == "answer recorded; a cluster worker resumed the run; it is running\n"
        )
        assert not (chdir / "go").exists()  # it returned while the slow node still runs
        (chdir / "go").touch()
        followed = await asyncio.to_thread(_cli, chdir, "runs", "follow", run_id,
                                           "--store", store, "--timeout", "60")  # fmt: skip
        assert followed.returncode == 0, followed.stderr
        assert "paused" in followed.stdout.splitlines()[-1], followed.stdout
        listed = await asyncio.to_thread(_cli, chdir, "runs", "questions", run_id,
                                         "--store", store, "--json")  # fmt: skip
        (question,) = json.loads(listed.stdout)["interactions"]
        again = await asyncio.to_thread(
            _cli, chdir, "runs", "answer", run_id, question["id"], "yes", "--store", store
        )
        assert again.returncode == 0, again.stderr
        assert again.stdout.startswith("answer recorded; a cluster worker resumed the run")
        followed = await asyncio.to_thread(_cli, chdir, "runs", "follow", run_id,
                                           "--store", store, "--timeout", "60")  # fmt: skip
        assert "finished" in followed.stdout.splitlines()[-1], followed.stdout
    finally:
        await asyncio.to_thread(cluster.close)
    slow, last = (chdir / "ran.txt").read_text().split()
    assert slow.startswith("slow-") and last.startswith("last-")
    assert int(slow.split("-")[1]) != os.getpid()


@pytest.mark.parametrize("told", [True, False], ids=["cluster-named", "no-cluster-named"])
async def test_answered_on_a_duckdb_store_nobody_else_holds_the_answer_serves_the_workers(
    chdir: Path, told: bool
) -> None:
    """Workers use a DuckDB file through its holder: the answering command is that holder
    until the run it handed to the cluster settles, and says so — whether or not it was
    told the cluster's address (the workers' watchers find the answered run either way)."""
    cluster = await asyncio.to_thread(CliCluster, chdir, 1)
    flow = chdir / "flow.iter"
    flow.write_text(GATE_THEN_SLOW)
    store = str(chdir / "store")

    def go_once_the_tool_runs() -> None:
        # the resumed run is still going when the answer looks (not finished in a blink):
        # the command then holds the store for it, and says so
        while not (chdir / "ran.txt").exists():
            time.sleep(0.05)
        time.sleep(0.5)
        (chdir / "go").touch()

    try:
        started = await asyncio.to_thread(
            _cli, chdir, "run", str(flow), "--store", store, "--cluster", cluster.address
        )
        assert started.returncode == 0, started.stderr
        run_id = started.stdout.split()[1]
        listed = await asyncio.to_thread(_cli, chdir, "runs", "questions", run_id,
                                         "--store", store, "--json")  # fmt: skip
        (question,) = json.loads(listed.stdout)["interactions"]
        releaser = threading.Thread(target=go_once_the_tool_runs, daemon=True)
        releaser.start()
        answered = await asyncio.to_thread(
            _cli, chdir, "runs", "answer", run_id, question["id"], "yes", "--store", store,
            env={"ITERION_NB_CLUSTER": cluster.address} if told else {},
        )  # fmt: skip
        assert answered.returncode == 0, answered.stderr
        assert f"cluster workers execute run {run_id} through this process" in answered.stderr
        assert answered.stdout == (
            "answer recorded; a cluster worker resumed the run; it is finished\n"
        )
    finally:
        await asyncio.to_thread(cluster.close)
    assert len((chdir / "ran.txt").read_text().split()) == 1


async def test_answered_on_a_duckdb_store_a_run_that_pauses_again_at_once_is_said_resumed(
    chdir: Path,
) -> None:
    """The worker takes the run and pauses it at its next gate within moments: the
    answering command sees that it went on (not a run nobody took up) and returns."""
    cluster = await asyncio.to_thread(CliCluster, chdir, 1)
    flow = chdir / "flow.iter"
    flow.write_text(GATE_SLOW_GATE)
    (chdir / "go").touch()
    store = str(chdir / "store")
    try:
        started = await asyncio.to_thread(
            _cli, chdir, "run", str(flow), "--store", store, "--cluster", cluster.address
        )
        assert started.returncode == 0, started.stderr
        run_id = started.stdout.split()[1]
        listed = await asyncio.to_thread(_cli, chdir, "runs", "questions", run_id,
                                         "--store", store, "--json")  # fmt: skip
        (question,) = json.loads(listed.stdout)["interactions"]
        answered = await asyncio.to_thread(
            _cli, chdir, "runs", "answer", run_id, question["id"], "yes", "--store", store
        )
        assert answered.returncode == 0, answered.stderr
        assert answered.stdout == (
            "answer recorded; a cluster worker resumed the run; it is paused_waiting_human\n"
        )
        asked = await asyncio.to_thread(_cli, chdir, "runs", "questions", run_id,
                                        "--store", store, "--json")  # fmt: skip
        assert [q["node_id"] for q in json.loads(asked.stdout)["interactions"]] == ["again"]
    finally:
        await asyncio.to_thread(cluster.close)


async def test_answered_on_a_duckdb_store_with_no_worker_up_the_answer_says_who_resumes_it(
    chdir: Path,
) -> None:
    """No worker takes the run up while the answering command holds the file: it waits
    for one a while, then says the run goes on once a process holds the store again."""
    cluster = await asyncio.to_thread(CliCluster, chdir, 1)
    flow = chdir / "flow.iter"
    flow.write_text(GATE_THEN_SLOW)
    store = str(chdir / "store")
    try:
        started = await asyncio.to_thread(
            _cli, chdir, "run", str(flow), "--store", store, "--cluster", cluster.address
        )
        assert started.returncode == 0, started.stderr
        run_id = started.stdout.split()[1]
    finally:
        await asyncio.to_thread(cluster.close)  # no worker is up any more
    listed = await asyncio.to_thread(_cli, chdir, "runs", "questions", run_id,
                                     "--store", store, "--json")  # fmt: skip
    (question,) = json.loads(listed.stdout)["interactions"]
    answered = await asyncio.to_thread(
        _cli, chdir, "runs", "answer", run_id, question["id"], "yes", "--store", store
    )
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout.startswith(
        "answer recorded; no cluster worker took the run up while this command held the store"
    ), answered.stdout
    assert f"`iterion-nb resume {run_id} --cluster ADDRESS`" in answered.stdout
    shown = await asyncio.to_thread(_cli, chdir, "runs", "show", run_id, "--store", store,
                                    "--json")  # fmt: skip
    assert json.loads(shown.stdout)["status"] == "paused_waiting_human"
    assert not (chdir / "ran.txt").exists()


async def _never_answers(*_: Any) -> dict[str, Any]:
    raise AssertionError("nothing is answered through this widget")


async def _listed(inbox: Any, count: int) -> bool:
    return len(inbox.pending) == count


ASKS_THEN_SLOW = """\
agent asker:
  model: "scripted"
  interaction: async
  user: "Ask, then go on."

tool slow:
  command: "echo slow-$PPID >> ran.txt; while [ ! -f go ]; do sleep 0.05; done"

workflow w:
  entry: asker
  asker -> slow
  slow -> done
"""


async def test_a_question_of_a_cluster_run_whose_worker_was_lost_says_a_worker_takes_it(
    chdir: Path, postgres_url: str
) -> None:
    """Every worker is lost mid-run: the run reads ``interrupted``, and its workers take it up
    again by themselves. Its pending questions say so (``run_cluster`` beside the status, for
    the sidebar's and the widgets' cards), and so does an answer (``awaiting_worker``), from
    Python and from the CLI — not "resume it"; the first worker that comes up takes it."""
    store = schema_url(postgres_url)
    cluster = await asyncio.to_thread(CliCluster, chdir, 1, store)
    questions = [{"name": "ask_user_async", "input": {"question": q}} for q in ("Red?", "Blue?")]
    scenario = {"nodes": {"asker": [{"tool_calls": questions}, {"text": "Asked."}]}}
    session = Session(store, cluster=cluster.address, workdir=chdir, scenario=scenario)
    try:
        run = await session.start(it.compile(ASKS_THEN_SLOW))

        async def in_slow() -> bool:
            return (chdir / "ran.txt").exists()

        await until(in_slow, timeout=60)
        await asyncio.to_thread(cluster.kill_workers)

        async def interrupted() -> bool:
            return (await run.refresh()).status == "interrupted"

        await until(interrupted, timeout=60)  # its lease lapsed with its worker
        served = open_store(store)
        try:
            shown = (await snapshot(served))["pending"]
        finally:
            await served.close()
        assert [(q["run_status"], q["run_cluster"]) for q in shown] == [("interrupted", True)] * 2
        inbox = InboxWidget(session.store, _never_answers, None)  # a notebook's inbox: the same
        try:
            await until(lambda: _listed(inbox, 2), timeout=30)
            assert {(q["run_status"], q["run_cluster"]) for q in inbox.pending} == {
                ("interrupted", True)
            }
        finally:
            inbox.close()
        red, blue = await run.pending_questions()
        elsewhere = Session(store, cluster=False, workdir=chdir)
        try:
            said = await elsewhere.run(run.id).answer(red.id, "yes", answered_by="ada")
        finally:
            await elsewhere.close()
        assert said == {
            "queued": True, "resumed": False, "run_status": "interrupted",
            "resume_needed": False, "awaiting_worker": True,
        }  # fmt: skip
        assert outcome_text(said, run.id) == (
            f"Saved — run {run.id} is interrupted; the first worker of its cluster free to take"
            " it up resumes it, and the agent gets your answer then (with no worker up:"
            f" %iterion resume {run.id})"
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("ITERION_NB_")}
        answered = await asyncio.to_thread(
            subprocess.run,
            [CLI, "runs", "answer", run.id, blue.id, "no", "--store", store],
            capture_output=True, text=True, timeout=120, env=env, check=False,
        )  # fmt: skip
        assert answered.stdout.startswith(
            "answer queued for the agent; the run is interrupted: the first cluster worker free"
            f" to take it up resumes it (with no worker up: `iterion-nb resume {run.id} --store"
        ), (answered.stdout, answered.stderr)
        (chdir / "go").touch()
        await asyncio.to_thread(cluster.add_worker)  # the first worker that comes up ...

        async def finished() -> bool:
            return (await run.refresh()).status == "finished"

        await until(finished, timeout=90)  # ... takes it up
    finally:
        await session.close()
        await asyncio.to_thread(cluster.close)


async def test_answered_through_a_holder_with_no_worker_up_says_the_first_worker_takes_it(
    chdir: Path,
) -> None:
    """A process holds the DuckDB store and every worker is gone: the command answers through
    the holder (which runs nothing), says that no worker has taken the run up yet and the
    first one that comes up resumes it (``awaiting_worker`` in ``--json``) — not a bare
    "answer recorded" — and the first worker that comes up does, through the holder."""
    cluster = await asyncio.to_thread(CliCluster, chdir, 1)
    flow = chdir / "flow.iter"
    flow.write_text(GATE)
    store = str(chdir / "store")
    holder = None
    try:
        run_ids = []
        for _ in range(2):
            started = await asyncio.to_thread(
                _cli, chdir, "run", str(flow), "--store", store, "--cluster", cluster.address
            )
            assert started.returncode == 0, started.stderr
            run_ids.append(started.stdout.split()[1])
        await asyncio.to_thread(cluster.kill_workers)  # the scheduler stays, with its watchers
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, store], cwd=chdir,
                                  stdout=subprocess.PIPE, text=True)  # fmt: skip
        assert holder.stdout is not None
        assert await asyncio.to_thread(holder.stdout.readline) == "ready\n"
        said = []
        for run_id, json_flag in zip(run_ids, (["--json"], []), strict=True):
            listed = await asyncio.to_thread(_cli, chdir, "runs", "questions", run_id,
                                             "--store", store, "--json")  # fmt: skip
            (question,) = json.loads(listed.stdout)["interactions"]
            answered = await asyncio.to_thread(_cli, chdir, "runs", "answer", run_id,
                                               question["id"], "yes", "--store", store,
                                               *json_flag)  # fmt: skip
            assert answered.returncode == 0, answered.stderr
            said.append(answered.stdout)
        outcome = json.loads(said[0])
        assert outcome["awaiting_worker"] is True and outcome["resumed"] is False, outcome
        assert outcome["run_status"] == "paused_waiting_human", outcome
        assert said[1] == (
            "answer recorded; no cluster worker has taken the run up yet: the first one that"
            " comes up resumes it\n"
        )
        await asyncio.to_thread(cluster.add_worker)  # the first worker that comes up ...

        async def finished() -> bool:
            for run_id in run_ids:
                shown = await asyncio.to_thread(_cli, chdir, "runs", "show", run_id,
                                                "--store", store, "--json")  # fmt: skip
                if json.loads(shown.stdout)["status"] != "finished":
                    return False
            return True

        await until(finished, timeout=90)  # ... takes them up
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
        await asyncio.to_thread(cluster.close)
    assert ran(chdir) == Counter({"after": 2})


async def test_an_interrupted_cluster_run_on_a_duckdb_file_nobody_holds_says_who_takes_it(
    chdir: Path,
) -> None:
    """Its worker and the command that held the DuckDB file both killed: an answer through
    the file says that no worker can take the run up until a process holds the store — not
    that the first free worker does — and once one holds it, a worker that comes up does."""
    cluster = await asyncio.to_thread(CliCluster, chdir, 1)
    (chdir / "flow.iter").write_text(ASKS_THEN_SLOW)
    asks = {"name": "ask_user_async", "input": {"question": "Red?"}}
    scenario = {"nodes": {"asker": [{"tool_calls": [asks]}, {"text": "Asked."}]}}
    (chdir / "scenario.json").write_text(json.dumps(scenario))
    store = str(chdir / "store")
    holder = None
    command = subprocess.Popen(
        [CLI, "run", "flow.iter", "--scenario", "scenario.json", "--store", store,
         "--cluster", cluster.address], cwd=chdir, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:

        async def in_slow() -> bool:
            return (chdir / "ran.txt").exists()

        await until(in_slow, timeout=60)
        await asyncio.to_thread(cluster.kill_workers)
        command.kill()  # it held the file: nobody does now
        await asyncio.to_thread(command.wait)
        await asyncio.sleep(11)  # the worker's lease lapses: the run reads interrupted
        listed = await asyncio.to_thread(_cli, chdir, "runs", "questions", "--store", store,
                                         "--json")  # fmt: skip
        (question,) = json.loads(listed.stdout)["interactions"]
        run_id = question["run_id"]
        answered = await asyncio.to_thread(
            _cli, chdir, "runs", "answer", run_id, question["id"], "red", "--store", store
        )
        assert answered.returncode == 0, answered.stderr
        assert answered.stdout == (
            "answer queued for the agent; the run is interrupted: no cluster worker can take it"
            f" up while no process holds the store {store}/iterion.duckdb; one does once a"
            " process holds it"
            f" (a notebook, JupyterLab, or `iterion-nb resume {run_id} --cluster ADDRESS`)\n"
        )
        (chdir / "go").touch()
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, store], cwd=chdir,
                                  stdout=subprocess.PIPE, text=True)  # fmt: skip
        assert holder.stdout is not None
        assert await asyncio.to_thread(holder.stdout.readline) == "ready\n"
        await asyncio.to_thread(cluster.add_worker)

        async def finished() -> bool:
            shown = await asyncio.to_thread(_cli, chdir, "runs", "show", run_id,
                                            "--store", store, "--json")  # fmt: skip
            return bool(json.loads(shown.stdout)["status"] == "finished")

        await until(finished, timeout=90)
    finally:
        if command.poll() is None:
            command.kill()
        if holder is not None:
            holder.kill()
            holder.wait()
        await asyncio.to_thread(cluster.close)


async def test_the_cli_following_a_run_says_nothing_of_dasks_own_when_the_scheduler_dies(
    chdir: Path, postgres_url: str
) -> None:
    """Its Dask client gives up on a scheduler away for over 10 s: no log line of Dask's
    reaches the terminal, and the command follows the run to its end once the cluster is
    back."""
    store = schema_url(postgres_url)
    cluster = await asyncio.to_thread(CliCluster, chdir, 1, store)
    flow = chdir / "flow.iter"
    flow.write_text(chain(3, slow=1))
    proc = subprocess.Popen(
        [CLI, "run", str(flow), "--store", store, "--cluster", cluster.address],
        cwd=chdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:

        async def in_flight() -> bool:
            return ran(chdir)["t1"] == 1

        await until(in_flight, timeout=60)
        cluster.scheduler.kill()
        await asyncio.to_thread(cluster.scheduler.wait)
        await asyncio.to_thread(cluster.wait_workers_gone)
        await asyncio.sleep(12)  # the command's client gives up after 10 s
        cluster.scheduler = await asyncio.to_thread(cluster._scheduler)
        (chdir / "go").touch()
        await asyncio.to_thread(cluster.add_worker)
        out, err = await asyncio.to_thread(proc.communicate, timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        await asyncio.to_thread(cluster.close)
    assert proc.returncode == 0, err
    assert "(w): finished" in out, out
    assert "distributed" not in err and "Traceback" not in err, err
    assert ran(chdir)["t2"] == 1


async def test_a_password_from_pgpassword_reaches_the_workers(chdir: Path) -> None:
    """docs/cli.md suggests PGPASSWORD (a password kept out of the URL): the workers, which
    may not have it, are sent the URL with the password the command connected with."""
    server = PgServer.start()
    cluster = None
    try:
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute("CREATE ROLE ana LOGIN SUPERUSER PASSWORD 's3cret-PW'")
            hba = conn.execute("SHOW hba_file").fetchone()[0]  # type: ignore[index]
            rules = Path(hba).read_text()
            Path(hba).write_text("host all ana 127.0.0.1/32 scram-sha-256\n" + rules)
            conn.execute("SELECT pg_reload_conf()")
        store = f"postgresql://ana@127.0.0.1:{server.port}/postgres?schema=pw_env"
        # the worker watches the URL without a password, and has no PGPASSWORD
        cluster = await asyncio.to_thread(CliCluster, chdir, 1, store)
        flow = chdir / "flow.iter"
        flow.write_text(chain(2))
        refused = await asyncio.to_thread(_cli, chdir, "runs", "list", "--store", store)
        assert "password" in refused.stderr, refused.stderr  # the server does ask for it
        done = await asyncio.to_thread(
            _cli, chdir, "run", str(flow), "--store", store, "--cluster", cluster.address,
            env={"PGPASSWORD": "s3cret-PW"},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "(w): finished" in done.stdout
        assert "s3cret" not in done.stdout + done.stderr
        # the command's watcher (sent with the password) replaced the worker's own: one
        # watcher per store, not a second one that fails to log in
        with distributed.Client(cluster.address, timeout="30s") as client:
            plugins = client.run(lambda dask_worker: sorted(dask_worker.plugins))
        watchers = [[n for n in names if "iterion" in n] for names in plugins.values()]
        assert watchers == [[f"iterion-run-watcher:{store}"]], watchers
    finally:
        if cluster is not None:
            await asyncio.to_thread(cluster.close)
        server.stop()
    assert ran(chdir) == Counter({"t0": 1, "t1": 1})


async def test_postgresql_back_from_a_long_outage_a_persons_resume_waits_for_the_owner(
    chdir: Path, own_postgres: PgServer
) -> None:
    """Right after the server is back, every lease has lapsed and the run reads
    `interrupted`: a person's `resume` then would take it from an owner still alive and
    run again the node that owner finished meanwhile. It is refused for a lease's time."""
    store = schema_url(f"{own_postgres.url}?connect_timeout=2")
    cluster = await asyncio.to_thread(CliCluster, chdir, 1, store)
    session = Session(store, cluster=cluster.address, workdir=chdir)
    try:
        # t2 waits for go2: the run cannot finish before the person's resume is tried
        last = "echo t2 >> ran.txt; while [ ! -f go2 ]; do sleep 0.05; done"
        run = await session.start(
            it.compile(chain(3, slow=1).replace("echo t2 >> ran.txt; sleep 0.1", last))
        )

        async def slow_running() -> bool:
            return ran(chdir)["t1"] == 1

        await until(slow_running, timeout=60)
        await asyncio.to_thread(own_postgres.stop, False)
        (chdir / "go").touch()  # the node ends while the server is away
        await asyncio.sleep(12)  # longer than a lease (10 s)
        await asyncio.to_thread(own_postgres.restart)
        again = await asyncio.to_thread(
            _cli, chdir, "resume", run.id, "--store", store, "--cluster", cluster.address
        )
        assert again.returncode == 3, (again.stdout, again.stderr)
        said = again.stderr
        assert "may still be alive" in said or "that process runs it" in said, said
        (chdir / "go2").touch()
        assert await run.wait(90) == "finished", run.error
    finally:
        await session.close()
        await asyncio.to_thread(cluster.close)
    assert ran(chdir) == Counter({"t0": 1, "t1": 1, "t2": 1})


async def test_resume_detaches_as_run_does(chdir: Path, postgres_url: str) -> None:
    store = schema_url(postgres_url)
    cluster = await asyncio.to_thread(CliCluster, chdir, 1, store)
    flow = chdir / "flow.iter"
    flow.write_text(chain(2, slow=0))
    try:
        started = await asyncio.to_thread(
            _cli, chdir, "run", str(flow), "--store", store, "--cluster", cluster.address,
            "--detach",
        )  # fmt: skip
        run_id = started.stdout.strip()

        async def in_flight() -> bool:
            return ran(chdir)["t0"] == 1

        await until(in_flight, timeout=60)
        stopped = await asyncio.to_thread(_cli, chdir, "cancel", run_id, "--store", store)
        assert stopped.returncode == 0, stopped.stderr
        alone = await asyncio.to_thread(
            _cli, chdir, "resume", run_id, "--store", store, "--detach",
            env={"ITERION_NB_CLUSTER": ""},
        )  # fmt: skip
        assert alone.returncode == 2
        assert "--detach needs a cluster" in alone.stderr
        again = await asyncio.to_thread(
            _cli, chdir, "resume", run_id, "--store", store, "--cluster", cluster.address,
            "--detach",
        )  # fmt: skip
        assert (again.returncode, again.stdout) == (0, f"{run_id}\n"), again.stderr
        assert not (chdir / "go").exists()  # it returned while the slow node runs again
        (chdir / "go").touch()
        followed = await asyncio.to_thread(
            _cli, chdir, "runs", "follow", run_id, "--store", store, "--timeout", "60"
        )
        assert followed.returncode == 0, followed.stderr
    finally:
        await asyncio.to_thread(cluster.close)
    assert ran(chdir)["t1"] == 1


async def test_a_closed_notebooks_duckdb_store_adds_no_warning_to_new_workers(
    chdir: Path,
) -> None:
    """A notebook on a DuckDB file registers its watcher on the cluster for good: once it is
    closed, nobody holds the file, which is no fault of the workers that start later."""
    cluster = await asyncio.to_thread(CliCluster, chdir, 1)
    store = str(chdir / "store")
    log = chdir / "worker.log"
    try:
        session = Session(store, cluster=cluster.address, workdir=chdir)
        run = await session.start(it.compile(GATE))  # registers its watcher on the cluster
        assert await run.wait(60) == "paused_waiting_human"
        await session.close()  # the notebook is closed: the file has no holder now
        await asyncio.to_thread(cluster.add_worker, None, log)
        await asyncio.to_thread(cluster.wait_for_workers, 2)
        await asyncio.sleep(2 * SCAN_INTERVAL)  # the new worker's watcher looked, twice
    finally:
        await asyncio.to_thread(cluster.close)
    said = log.read_text(errors="replace")
    assert "iterion_nb" not in said, said
