"""Run ownership across real processes: refusals on every surface, kill -9, races, polling.

Every test uses real processes on one DuckDB file: an owner that is killed
with SIGKILL, the ``iterion-nb`` CLI, the holder's REST API on loopback.
Tool nodes append their name to ``ran.txt`` in the working directory, so the
file says how many times each node ran, whoever ran it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from iterion_nb.errors import RunOwnedError
from iterion_nb.session import Session
from iterion_nb.store.holder_file import find_holder

CLI = str(Path(sys.executable).parent / "iterion-nb")


def chain(count: int, sleep: float, slow: int | None = None) -> str:
    """Tool nodes t0..t{count-1}, a compute node between each two.

    The ``slow`` one waits until a file ``go`` exists (the test creates it
    once the first owner is gone, so the node is in flight when it dies).
    """
    parts, edges = [], []
    for n in range(count):
        pause = "while [ ! -f go ]; do sleep 0.05; done" if n == slow else f"sleep {sleep}"
        parts.append(f'tool t{n}:\n  command: "echo t{n} >> ran.txt; {pause}"\n')
        parts.append(f'compute c{n}:\n  expr:\n    n: "{n}"\n')
        nxt = f"t{n + 1}" if n + 1 < count else "done"
        edges += [f"  t{n} -> c{n}", f"  c{n} -> {nxt}"]
    return "\n".join(parts) + "\nworkflow w:\n  entry: t0\n" + "\n".join(edges) + "\n"


OWNER = textwrap.dedent(
    """
    import asyncio, sys
    import iterion_nb as it

    async def main():
        db, workdir, run_id, flow = sys.argv[1:5]
        session = it.Session(db, workdir=workdir)
        run = await session.start(it.compile(open(flow).read()), run_id=run_id)
        print("started", session.claimant.pid, flush=True)
        status = await run.wait()
        print("settled", status, flush=True)
        await asyncio.sleep(120)

    asyncio.run(main())
    """
)


def ran(workdir: Path) -> Counter[str]:
    path = workdir / "ran.txt"
    return Counter(path.read_text().split()) if path.exists() else Counter()


def start_owner(tmp_path: Path, db: Path, source: str, run_id: str = "r1") -> subprocess.Popen[str]:
    flow = tmp_path / "flow.iter"
    flow.write_text(source)
    proc = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(db), str(tmp_path), run_id, str(flow)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    assert proc.stdout.readline().split()[0] == "started"
    return proc


def wait_for(check: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("timed out")


def cli(
    *args: str, cwd: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, check=False
    )


def post(url: str, token: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def kill(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


async def test_resume_is_refused_on_every_surface_while_the_owner_lives(tmp_path: Path) -> None:
    db = tmp_path / "runs.duckdb"
    owner = start_owner(tmp_path, db, chain(3, 0.01, slow=1))
    try:
        wait_for(lambda: ran(tmp_path)["t1"])
        holder = find_holder(db)
        assert holder is not None and holder.pid == owner.pid
        # the CLI: a message naming the owner, exit code 3
        refused = cli("resume", "r1", "--store", str(db))
        assert refused.returncode == 3, refused.stderr
        assert f"owned by process {owner.pid}" in refused.stderr
        assert "Traceback" not in refused.stderr
        # REST: 409 run_owned, naming the owner
        status, body = post(f"{holder.url}/api/runs/r1/resume", holder.token, {})
        assert status == 409 and body["code"] == "run_owned"
        assert body["owner"]["pid"] == owner.pid
        # the Python API in this process (through the holder)
        session = Session(db, workdir=tmp_path)
        try:
            with pytest.raises(RunOwnedError) as info:
                await session.resume("r1")
            assert info.value.pid == owner.pid
            listed = json.loads(cli("runs", "list", "--json", "--store", str(db)).stdout)
            (run,) = listed["runs"]
            assert run["status"] == "running" and run["owner"]["pid"] == owner.pid
        finally:
            await session.close()
    finally:
        kill(owner)
        (tmp_path / "go").touch()
    # killed: the run reads "interrupted" at once on this host, and anyone may resume it
    started = time.monotonic()
    shown = cli("runs", "list", "--store", str(db))
    assert "interrupted" in shown.stdout, shown.stdout + shown.stderr
    assert time.monotonic() - started < 15
    resumed = cli("resume", "r1", "--store", str(db), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "finished" in resumed.stdout
    counts = ran(tmp_path)
    assert counts["t0"] == 1  # finished before the kill: never again
    assert counts["t1"] == 2  # in flight when killed: redone
    assert counts["t2"] == 1


async def test_a_frozen_owner_reads_interrupted_within_15_s(tmp_path: Path) -> None:
    """An owner that stops renewing (frozen, or dead on another host) loses its lease."""
    db = tmp_path / "runs.duckdb"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
    owner = start_owner(tmp_path, db, chain(2, 0.01, slow=0))  # a client of the holder

    def status() -> str:
        out = cli("runs", "list", "--json", "--store", str(db))
        assert out.returncode == 0, out.stderr
        return str(json.loads(out.stdout)["runs"][0]["status"])

    try:
        wait_for(lambda: ran(tmp_path)["t0"])
        assert status() == "running"
        owner.send_signal(signal.SIGSTOP)  # alive to the OS, silent to the store
        frozen = time.monotonic()
        wait_for(lambda: status() == "interrupted", timeout=30)
        assert time.monotonic() - frozen <= 15
        owner.send_signal(signal.SIGCONT)  # nobody took it meanwhile: it renews and goes on
        wait_for(lambda: status() == "running", timeout=15)
    finally:
        owner.send_signal(signal.SIGCONT)
        kill(owner)
        kill(holder)
        (tmp_path / "go").touch()


async def test_two_processes_racing_to_resume_execute_the_run_once(tmp_path: Path) -> None:
    db = tmp_path / "runs.duckdb"
    owner = start_owner(tmp_path, db, chain(4, 0.2, slow=1))
    wait_for(lambda: ran(tmp_path)["t1"])
    kill(owner)
    (tmp_path / "go").touch()
    # a third process holds the file (as the Jupyter server would); both resumers are clients
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        racers = [
            subprocess.Popen(
                [CLI, "resume", "r1", "--store", str(db)],
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        results = [(p.wait(90), *p.communicate()) for p in racers]
    finally:
        kill(holder)
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 3], results
    loser = next(err for code, _, err in results if code == 3)
    assert "owned by process" in loser
    counts = ran(tmp_path)
    assert counts["t0"] == 1 and counts["t2"] == 1 and counts["t3"] == 1
    assert counts["t1"] == 2  # in flight at the kill, then redone by the winner only


HOLDER = textwrap.dedent(
    """
    import asyncio, sys
    from iterion_nb.api.holder import open_served_store

    async def main():
        store = open_served_store(sys.argv[1])
        await store.list_runs()
        print("ready", flush=True)
        await asyncio.sleep(300)

    asyncio.run(main())
    """
)

NODES = 50

POLLER = textwrap.dedent(
    """
    import json, sys, time, urllib.request
    url, token = sys.argv[1], sys.argv[2]
    while True:
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        try:
            urllib.request.urlopen(request, timeout=5).read()
        except Exception:
            pass
        time.sleep(0.01)
    """
)


@pytest.mark.parametrize("kill_at", [2, 17, 38])
async def test_polled_every_10_ms_then_killed_only_the_node_in_flight_runs_again(
    tmp_path: Path, kill_at: int
) -> None:
    db = tmp_path / "runs.duckdb"
    owner = start_owner(tmp_path, db, chain(NODES, 0.05))
    holder = find_holder(db)
    assert holder is not None
    poller = subprocess.Popen(
        [sys.executable, "-c", POLLER, f"{holder.url}/api/runs/r1/events", holder.token]
    )
    try:
        wait_for(lambda: sum(ran(tmp_path).values()) >= kill_at)
        kill(owner)
    finally:
        poller.kill()
        poller.wait()
    before = ran(tmp_path)
    assert kill_at <= sum(before.values()) < NODES, before
    session = Session(db, workdir=tmp_path)
    try:
        record = await session.store.get_run("r1")
        assert record.status == "interrupted"
        run = await session.resume("r1")
        assert await run.wait(60) == "finished", run.error
    finally:
        await session.close()
    counts = ran(tmp_path)
    assert set(counts) == {f"t{n}" for n in range(NODES)}
    twice = [name for name, times in counts.items() if times > 1]
    assert len(twice) <= 1, counts  # at most the one in flight at the kill
    assert all(times <= 2 for times in counts.values())
    assert os.path.getsize(db) > 0
    again = [n for n in twice if before[n] == 1]
    assert again == twice


async def test_a_run_started_from_the_cli_executes_through_a_holder_and_hears_its_rings(
    tmp_path: Path, examples_dir: Path
) -> None:
    db = tmp_path / "runs.duckdb"
    holder_proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder_proc.stdout is not None
        assert holder_proc.stdout.readline().strip() == "ready"
        holder = find_holder(db)
        assert holder is not None and holder.pid == holder_proc.pid
        run = subprocess.Popen(
            [CLI, "run", str(examples_dir / "async_questions.iter"), "--scenario",
             str(examples_dir / "async_questions.scenario.yaml"), "--store", str(db), "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        session = Session(db)
        try:

            def listed() -> list[Any]:
                out = cli("runs", "list", "--json", "--store", str(db)).stdout
                return list(json.loads(out)["runs"])

            run_id = wait_for(listed)[0]["id"]
            handle = session.run(run_id)
            questions: list[Any] = []
            for _ in range(400):
                questions = await handle.pending_questions()
                if len(questions) == 2:
                    break
                time.sleep(0.02)
            assert len(questions) == 2
            await handle.answer(questions[0].id, "formal", answered_by="me")
            answered = time.monotonic()
            await handle.answer(questions[1].id, "the inbox first", answered_by="me")
            out, err = run.communicate(timeout=60)
            took = time.monotonic() - answered
        finally:
            await session.close()
    finally:
        kill(holder_proc)
    assert run.returncode == 0, err
    result = json.loads(out)
    assert result["status"] == "finished"
    # the gate woke on the holder's pushed ring, not on its 5 s fallback poll
    assert took < 3.0, took


async def test_an_interrupted_run_says_so_on_every_surface(tmp_path: Path) -> None:
    from iterion_nb.widgets import RunWidget

    db = tmp_path / "runs.duckdb"
    owner = start_owner(tmp_path, db, chain(2, 0.01, slow=0))
    wait_for(lambda: ran(tmp_path)["t0"])
    kill(owner)
    (tmp_path / "go").touch()
    listed = cli("runs", "list", "--store", str(db))
    assert "r1  interrupted" in listed.stdout
    shown = json.loads(cli("runs", "show", "r1", "--json", "--store", str(db)).stdout)
    assert shown["status"] == "interrupted" and shown["owner"] is None
    report = cli("report", "r1", "--format", "md", "--store", str(db))
    assert "interrupted" in report.stdout.splitlines()[0]
    session = Session(db, workdir=tmp_path)
    try:
        holder = session.serve()
        assert holder is not None
        request = urllib.request.Request(
            f"{holder.url}/api/runs/r1", headers={"Authorization": f"Bearer {holder.token}"}
        )

        def get() -> dict[str, Any]:
            with urllib.request.urlopen(request, timeout=10) as response:
                return dict(json.loads(response.read()))

        body = await asyncio.to_thread(get)
        assert body["status"] == "interrupted"
        widget = RunWidget(session.store, "r1")
        await widget.refresh()
        assert widget.status == "interrupted"
        widget.close()
        html = await session.run("r1").report("html")
        assert "interrupted" in html
    finally:
        await session.close()
