"""``iterion-nb runs follow``: another process's run, event by event, as real subprocesses."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_cli import SCRIPT, run

#: The first tool waits for go.txt: the run cannot finish before the test says so.
WAITING = """\
tool first:
  command: "for i in $(seq 600); do test -e go.txt && break; sleep 0.05; done; echo one"

tool second:
  command: "echo two"

workflow w:
  entry: first
  first -> second
  second -> done
"""

GATE = """\
tool before:
  command: "echo before"

human gate:
  instructions: "Ship it?"

tool after:
  command: "echo after"

workflow w:
  entry: before
  before -> gate
  gate -> after
  after -> done
"""


#: Processes a test started: none outlives it, whatever it asserted.
_STARTED: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def _reaped() -> Iterator[None]:
    yield
    while _STARTED:
        proc = _STARTED.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def _in_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # as a terminal's foreground command has it


def _follow(store: str, run_id: str, *extra: str, cwd: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [str(SCRIPT), "runs", "follow", run_id, "--store", store, *extra],
        cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=_in_a_terminal,
    )  # fmt: skip
    _STARTED.append(proc)
    return proc


def _line_with(proc: subprocess.Popen[str], text: str, timeout: float = 60) -> list[str]:
    """Lines ``proc`` printed, up to the first that holds ``text``."""
    assert proc.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        assert line, f"follow ended before {text!r}: {seen}, {proc.stderr and proc.stderr.read()}"
        seen.append(line)
        if text in line:
            return seen
    raise AssertionError(f"no {text!r} within {timeout} s: {seen}")


def _start_waiting_run(tmp_path: Path) -> tuple[subprocess.Popen[str], str, str]:
    """``iterion-nb run`` of WAITING in the background (it holds the store); its id."""
    (tmp_path / "w.iter").write_text(WAITING)
    store = str(tmp_path / "store")
    proc = subprocess.Popen(
        [str(SCRIPT), "run", "w.iter", "--store", store], cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    _STARTED.append(proc)
    assert proc.stdout is not None
    first = proc.stdout.readline()
    assert first.startswith("run "), (first, proc.stderr and proc.stderr.read())
    return proc, store, first.split()[1]


def _rest(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[str, str]:
    """What ``proc`` prints until it exits (after ``_line_with``: through the same buffer)."""
    assert proc.stdout is not None and proc.stderr is not None
    out = proc.stdout.read()
    proc.wait(timeout=timeout)
    return out, proc.stderr.read()


def _records(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines()]


def test_it_prints_each_event_as_it_happens_then_the_run_s_end(tmp_path: Path) -> None:
    runner, store, run_id = _start_waiting_run(tmp_path)
    follower = _follow(store, run_id, "--json", cwd=tmp_path)
    try:
        # the first tool waits for go.txt: what follow printed so far came from a live run
        early = _line_with(follower, '"node_started"')
        assert json.loads(early[-1])["event"]["node_id"] == "first"
        assert not any("run" in json.loads(line) for line in early)
        (tmp_path / "go.txt").write_text("go")
        out, err = _rest(follower)
        assert runner.wait(timeout=60) == 0  # (it may still be letting go of the file)
    finally:
        runner.kill() if runner.poll() is None else None
    assert follower.returncode == 0, err
    records = _records("".join(early) + out)
    events = [r["event"] for r in records if "event" in r]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))  # none lost, none twice
    assert events[0]["type"] == "run_started" and events[-1]["type"] == "run_finished"
    finished = [e["node_id"] for e in events if e["type"] == "node_finished"]
    assert finished == ["first", "second"]
    assert records[-1]["run"]["status"] == "finished" and records[-1]["run"]["id"] == run_id


def started_pid(store: str, run_id: str) -> int:
    """The pid the run's ``run_started`` event names."""
    import asyncio

    from iterion_nb.store import open_duckdb_store

    async def read() -> int:
        opened = open_duckdb_store(store)
        try:
            first = (await opened.events(run_id, limit=1))[0]
        finally:
            await opened.close()
        return int(first.data["pid"])

    return asyncio.run(read())


def test_text_lines_name_the_nodes_and_what_they_gave(tmp_path: Path) -> None:
    (tmp_path / "w.iter").write_text(GATE.replace("human gate", "tool gate").replace(
        'instructions: "Ship it?"', 'command: "echo gate"'))  # fmt: skip
    store = str(tmp_path / "store")
    started = run("run", "w.iter", "--store", store, "--json", cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout)["id"]
    followed = run("runs", "follow", run_id, "--store", store, cwd=tmp_path)
    assert followed.returncode == 0, followed.stderr
    lines = followed.stdout.splitlines()
    shapes = [line[10:].split()[:2] for line in lines[:-1]]  # after the HH:MM:SS
    # who executed the run: the `run` command's process, on this host
    assert lines[0].split()[1:] == ["run_started", "process", str(started_pid(store, run_id)),
                                    "on", socket.gethostname()]  # fmt: skip
    assert ["node_started", "before"] in shapes and ["tool_called", "before:"] in shapes
    assert any(line.endswith("edge_selected         gate -> after") for line in lines)
    assert lines[-1] == f"run {run_id} is finished"


def test_a_paused_run_ends_the_follow_with_its_question_and_to_end_waits_on(
    tmp_path: Path,
) -> None:
    (tmp_path / "w.iter").write_text(GATE)
    store = str(tmp_path / "store")
    started = run("run", "w.iter", "--store", store, "--json", cwd=tmp_path)
    run_id = json.loads(started.stdout)["id"]
    assert json.loads(started.stdout)["status"] == "paused_waiting_human"

    paused = run("runs", "follow", run_id, "--store", store, cwd=tmp_path)
    assert paused.returncode == 0, paused.stderr
    lines = paused.stdout.splitlines()
    asked = [line for line in lines if line.startswith("  asked: ")]
    assert len(asked) == 1 and asked[0].endswith("[human] Ship it?")
    # right under the event that asked it
    assert " human_input_requested gate: " in lines[lines.index(asked[0]) - 1]
    question = asked[0].split()[1]
    assert paused.stdout.splitlines()[-1] == (
        f"run {run_id} is paused_waiting_human (answer with `iterion-nb runs answer {run_id}"
        f" ID TEXT --store {store}`; --to-end follows on)"
    )

    gave_up = run("runs", "follow", run_id, "--store", store, "--to-end", "--timeout", "1")
    assert gave_up.returncode == 124
    assert gave_up.stderr == (
        f"iterion-nb: gave up following run {run_id} after 1 s; it goes on as it was"
        f" (`iterion-nb runs show {run_id} --store {store}`)\n"
    )

    # following to the end: it holds the file meanwhile and serves it, executing nothing —
    # the answer goes through it, and the run waits for a resume, which goes through it too
    follower = _follow(store, run_id, "--to-end", "--json", cwd=tmp_path)
    _line_with(follower, '{"question": ')
    answered = run("runs", "answer", run_id, question, "yes", "--store", store, cwd=tmp_path)
    assert answered.stdout == (
        f"answer recorded; every answer run {run_id} waits for is in, but nothing executes it:"
        f" resume it with `iterion-nb resume {run_id} --store {store}`\n"
    ), answered.stderr
    assert follower.poll() is None  # still following: the run is still paused
    resumed = run("resume", run_id, "--store", store, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    out, err = _rest(follower)
    assert follower.returncode == 0, err
    tail = _records(out)
    assert tail[-1]["run"]["status"] == "finished"
    types = [r["event"]["type"] for r in tail if "event" in r]
    # (the question comes right under the event that asked it, before run_paused)
    assert types.index("interaction_answered") < types.index("run_resumed")
    assert types[-1] == "run_finished"


def test_what_follow_serves_it_never_executes_nor_stops(tmp_path: Path) -> None:
    """Answers through a follower resume nothing in it: stopping it stops no run."""
    (tmp_path / "w.iter").write_text(GATE)
    store = str(tmp_path / "store")
    ids = [json.loads(run("run", "w.iter", "--store", store, "--json", cwd=tmp_path).stdout)["id"]
           for _ in range(2)]  # fmt: skip
    follower = _follow(store, ids[0], "--to-end", "--timeout", "3", cwd=tmp_path)
    _line_with(follower, "  asked: ")
    other = json.loads(run("runs", "questions", ids[1], "--store", store, "--json").stdout)
    answered = run("runs", "answer", ids[1], other["interactions"][0]["id"], "yes",
                   "--store", store, "--json")  # fmt: skip
    assert json.loads(answered.stdout)["resume_needed"] is True, answered.stderr
    _, err = _rest(follower)
    assert follower.returncode == 124
    assert f"gave up following run {ids[0]} after 3 s; it goes on as it was" in err
    for run_id in ids:  # neither was taken up, nor cancelled, by the follower
        shown = json.loads(run("runs", "show", run_id, "--store", store, "--json").stdout)
        assert shown["status"] == "paused_waiting_human"


def test_a_failed_run_exits_1_and_says_why_and_how_to_go_on(tmp_path: Path) -> None:
    (tmp_path / "w.iter").write_text(
        'tool broken:\n  command: "echo no >&2; exit 3"\n\nworkflow w:\n  entry: broken\n'
        "  broken -> done\n"
    )
    store = str(tmp_path / "store")
    started = run("run", "w.iter", "--store", store, "--json", cwd=tmp_path)
    run_id = json.loads(started.stdout)["id"]
    status = json.loads(started.stdout)["status"]
    assert status.startswith("failed")
    followed = run("runs", "follow", run_id, "--store", store, cwd=tmp_path)
    assert followed.returncode == 1
    last = followed.stdout.splitlines()[-1]
    assert last.startswith(f"run {run_id} is {status}: ") and "exit" in last
    assert any(" tool_error " in line for line in followed.stdout.splitlines())
    if status == "failed_resumable":
        assert last.endswith(f"(`iterion-nb resume {run_id} --store {store}` goes on from its"
                             " checkpoint)")  # fmt: skip


def test_ctrl_c_stops_following_and_leaves_the_run_alone(tmp_path: Path) -> None:
    runner, store, run_id = _start_waiting_run(tmp_path)
    try:
        follower = _follow(store, run_id, cwd=tmp_path)
        _line_with(follower, "node_started")
        follower.send_signal(signal.SIGINT)
        _, err = _rest(follower, 30)
        assert follower.returncode == 130
        # one line: no "iterion-nb: interrupted" after it (a run status the run is not in)
        assert err.startswith(f"iterion-nb: stopped following run {run_id}; it goes on as it was")
        assert err.count("\n") == 1, err
        (tmp_path / "go.txt").write_text("go")
        assert runner.wait(timeout=60) == 0  # the run went on, to its end
    finally:
        runner.kill() if runner.poll() is None else None
    shown = run("runs", "show", run_id, "--store", store, "--json")
    assert json.loads(shown.stdout)["status"] == "finished"


def test_mistakes_are_messages(tmp_path: Path) -> None:
    (tmp_path / "w.iter").write_text(GATE)
    store = str(tmp_path / "store")
    run("run", "w.iter", "--store", store, cwd=tmp_path)
    unknown = run("runs", "follow", "nope", "--store", store)
    assert (unknown.returncode, unknown.stderr) == (1, "iterion-nb: no run 'nope'\n")
    nowhere = run("runs", "follow", "nope", "--store", str(tmp_path / "typo"))
    assert nowhere.returncode == 1 and "no run store at" in nowhere.stderr
    assert not (tmp_path / "typo").exists()
    for bad in ("0", "-1", "soon"):
        refused = run("runs", "follow", "nope", "--store", store, "--timeout", bad)
        assert refused.returncode == 2 and "--timeout" in refused.stderr


def test_on_postgresql_it_follows_a_run_another_process_resumes(
    tmp_path: Path, postgres_url: str
) -> None:
    url = postgres_url + ("&" if "?" in postgres_url else "?") + "schema=cli_follow"
    (tmp_path / "w.iter").write_text(GATE)
    started = run("run", "w.iter", "--store", url, "--json", cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout)["id"]
    follower = _follow(url, run_id, "--to-end", "--json", cwd=tmp_path)
    asked = json.loads(_line_with(follower, '{"question": ')[-1])["question"]
    # the answering process resumes the run itself (no holder with PostgreSQL)
    answered = run("runs", "answer", run_id, asked["id"], "yes", "--store", url, cwd=tmp_path)
    assert answered.stdout == "answer recorded; the run resumed; it is now finished\n"
    out, err = _rest(follower)
    assert follower.returncode == 0, err
    records = _records(out)
    assert records[-1]["run"]["status"] == "finished"
    assert [r["event"]["node_id"] for r in records if r.get("event", {}).get("type") == (
        "node_finished")] == ["gate", "after"]  # fmt: skip
    assert not any(p.suffix == ".duckdb" for p in tmp_path.rglob("*"))


def test_the_timeout_holds_while_the_store_s_holder_hangs(tmp_path: Path) -> None:
    runner, store, run_id = _start_waiting_run(tmp_path)
    follower = _follow(store, run_id, "--timeout", "4", cwd=tmp_path)
    _line_with(follower, "node_started")
    runner.send_signal(signal.SIGSTOP)  # the holder answers nothing now
    try:
        started = time.monotonic()
        _, err = _rest(follower, 30)
        took = time.monotonic() - started
    finally:
        runner.send_signal(signal.SIGCONT)
    assert follower.returncode == 124, err
    assert took < 15  # not the 30 s a hung holder takes to be given up on
    (tmp_path / "go.txt").write_text("go")
    assert runner.wait(timeout=60) == 0  # the run went on
