"""An ``await_answers`` gate's timeout across kill -9, resume and loops (no cluster).

The gate records its deadline in the run's checkpoint when it first waits; a
run whose process was killed during the wait, resumed by another process,
waits only what is left of that timeout (nothing once it has passed), and a
new visit of the gate (a loop coming back to it) waits a whole timeout of its
own. Real processes on one DuckDB file: the ``iterion-nb`` CLI runs the
workflow with the scripted model and is killed with SIGKILL while the gate
waits; this process resumes the run. Times are compared with generous margins
(the timeouts are several seconds), never to the exact second.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import iterion_nb as it
from iterion_nb.session import Session
from iterion_nb.store import open_duckdb_store

CLI = str(Path(sys.executable).parent / "iterion-nb")

ONCE = """\
agent a:
  model: "scripted"
  interaction: async
  user: "Ask, then go on."

await_answers gate:
  from: a
  timeout: "{timeout}s"

workflow w:
  entry: a
  a -> gate
  gate -> done
"""

#: ``a`` asks one question, then goes on (in-process runs of ONCE).
WHICH_DAY = {"nodes": {"a": [
    {"tool_calls": [{"name": "ask_user_async", "input": {"question": "Which day?"}}]},
    {"text": "Asked."},
]}}  # fmt: skip

#: The gate twice: its first visit loops back to ``a``, which asks again.
TWICE = ONCE.replace("  gate -> done\n", "  gate -> a as again(1)\n  gate -> done\n")


def asking(*questions: str) -> str:
    """A scenario: ``a`` asks one async question on each of its visits, then goes on."""
    visits = "".join(
        f"      - - tool_calls: [{{name: ask_user_async, input: {{question: {q!r}}}}}]\n"
        f"        - text: 'asked {n}'\n"
        for n, q in enumerate(questions)
    )
    return f"nodes:\n  a:\n    visits:\n{visits}"


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    """The processes a test starts; any still alive at the end is killed."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()


def launch(
    tmp_path: Path, source: str, scenario: str, procs: list[subprocess.Popen[str]]
) -> tuple[subprocess.Popen[str], str]:
    """``iterion-nb run`` in the background; the process and its run's id."""
    (tmp_path / "g.iter").write_text(source)
    (tmp_path / "g.yaml").write_text(scenario)
    with (tmp_path / "run.err").open("w") as err:
        proc = subprocess.Popen(
            [CLI, "run", "g.iter", "--scenario", "g.yaml", "--store", "g.duckdb"],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=err, text=True,
        )  # fmt: skip
    procs.append(proc)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "run ID running (answer its questions with …)"
    assert line.startswith("run "), line + (tmp_path / "run.err").read_text()
    return proc, line.split()[1]


async def gate_waiting(db: Path, run_id: str, visit: int = 1) -> float:
    """When the gate's ``visit``-th run started (epoch seconds), once it is waiting.

    Read through the running process (it holds the file). The deadline the
    gate records is at least this time plus the timeout.
    """
    session = Session(db, workdir=db.parent)
    try:
        for _ in range(600):
            events = await session.store.events(run_id)
            starts = [e for e in events if e.type == "node_started" and e.node_id == "gate"]
            if len(starts) >= visit:
                return starts[visit - 1].at.timestamp()
            await asyncio.sleep(0.05)
        raise AssertionError(f"the gate never started (visit {visit})")
    finally:
        await session.close()


def kill(proc: subprocess.Popen[str]) -> None:
    """SIGKILL ``proc`` (one of this test's) and reap it."""
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(30) == -signal.SIGKILL


async def sleep_until(moment: float) -> None:
    """Sleep until the wall-clock time ``moment``."""
    await asyncio.sleep(max(0.0, moment - time.time()))


async def resume_and_time(db: Path, run_id: str) -> tuple[str, str | None, float]:
    """Resume the run here, in a fresh process's store: its end status, error, and seconds."""
    store = open_duckdb_store(db)
    session = Session(store, workdir=db.parent)
    try:
        record = await store.get_run(run_id)
        assert record.status == "interrupted"  # its owner died in the wait
        began = time.monotonic()
        run = await session.resume(run_id)
        status = await run.wait(60)
        return status, run.error, time.monotonic() - began
    finally:
        await session.close()
        await store.close()


async def test_a_gate_resumed_after_its_deadline_fails_at_once(
    tmp_path: Path, procs: list[subprocess.Popen[str]]
) -> None:
    """kill -9 while the gate waits; resumed once its timeout has run out: it times out now."""
    timeout = 6.0
    db = tmp_path / "g.duckdb"
    proc, run_id = launch(tmp_path, ONCE.format(timeout=6), asking("Which colour?"), procs)
    waited_at = await gate_waiting(db, run_id)
    await sleep_until(waited_at + 1.5)  # well into the wait: its deadline is recorded
    kill(proc)
    await sleep_until(waited_at + timeout + 1.0)  # the timeout has run out while nothing ran
    status, error, took = await resume_and_time(db, run_id)
    assert status == "failed_resumable", error
    assert error is not None and "timed out after 6s; unanswered:" in error
    assert "Which colour?" in error
    assert took < timeout / 2, f"the resumed gate waited {took:.1f}s: a fresh timeout"


async def test_a_gate_resumed_before_its_deadline_waits_only_what_is_left(
    tmp_path: Path, procs: list[subprocess.Popen[str]]
) -> None:
    """kill -9 while the gate waits; resumed halfway: it waits the rest, not a whole timeout."""
    timeout = 8.0
    db = tmp_path / "g.duckdb"
    proc, run_id = launch(tmp_path, ONCE.format(timeout=8), asking("Which size?"), procs)
    waited_at = await gate_waiting(db, run_id)
    await sleep_until(waited_at + 1.5)
    kill(proc)
    await sleep_until(waited_at + timeout / 2)
    left = waited_at + timeout - time.time()  # at least this is left of its timeout
    status, error, took = await resume_and_time(db, run_id)
    assert status == "failed_resumable", error
    assert error is not None and "timed out after 8s; unanswered:" in error
    assert "Which size?" in error
    assert took > left - 1.0, f"gave up after {took:.1f}s with {left:.1f}s left"
    assert took < timeout - 1.5, f"the resumed gate waited {took:.1f}s: a fresh timeout"


async def test_a_new_visit_of_the_gate_waits_its_own_timeout(
    tmp_path: Path, procs: list[subprocess.Popen[str]]
) -> None:
    """A loop back to the gate: its new visit counts from when it waited, not the first visit.

    The first visit waits most of its timeout before its question is answered;
    the second visit is killed, and resumed after the first visit's deadline
    but before its own: it waits what is left of its own timeout.
    """
    timeout = 8.0
    db = tmp_path / "g.duckdb"
    scenario = asking("First question?", "Second question?")
    proc, run_id = launch(tmp_path, TWICE.format(timeout=8), scenario, procs)
    first = await gate_waiting(db, run_id)
    await sleep_until(first + 5.0)
    answered = subprocess.run(
        [CLI, "runs", "answer", run_id, f"{run_id}-toolu_a_0_0_0", "yes", "--store", "g.duckdb"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert answered.returncode == 0, answered.stderr
    second = await gate_waiting(db, run_id, visit=2)
    await sleep_until(second + 1.5)
    kill(proc)
    await sleep_until(max(first + timeout + 1.0, second + timeout / 2))
    left = second + timeout - time.time()  # past the first visit's deadline, not the second's
    assert left > 2.0, "the test's own timing went wrong: too little left to tell"
    status, error, took = await resume_and_time(db, run_id)
    assert status == "failed_resumable", error
    assert error is not None and "Second question?" in error and "First question?" not in error
    assert took > left - 1.0, f"gave up after {took:.1f}s with {left:.1f}s left: an old deadline"
    assert took < timeout - 1.5, f"the resumed gate waited {took:.1f}s: a fresh timeout"


async def test_a_timed_out_gate_resumed_is_not_given_a_fresh_timeout(tmp_path: Path) -> None:
    """As on a cluster: the deadline stays the visit's. Resumed unanswered, the gate fails
    again at once; answered (the run failed, its questions stay open), it passes at once."""
    timeout = 4.0
    store = open_duckdb_store(tmp_path / "g.duckdb")
    session = Session(store, workdir=tmp_path, scenario=WHICH_DAY)
    try:
        run = await session.start(it.compile(ONCE.format(timeout=4)))
        assert await run.wait(30) == "failed_resumable", run.error
        began = time.monotonic()
        again = await session.resume(run.id)
        assert await again.wait(30) == "failed_resumable"
        took = time.monotonic() - began
        assert again.error is not None and "timed out after 4s; unanswered:" in again.error
        assert took < timeout / 2, f"the resumed gate waited {took:.1f}s: a fresh timeout"
        (question,) = await again.pending_questions()
        await again.answer(question.id, "Tuesday")
        began = time.monotonic()
        last = await session.resume(run.id)
        assert await last.wait(30) == "finished", last.error
        assert time.monotonic() - began < timeout / 2
        assert [a["answer"] for a in last.outputs["gate"]["answers"]] == ["Tuesday"]
    finally:
        await session.close()
        await store.close()


async def test_a_timed_out_gate_resumed_on_a_longer_timeout_waits_the_longer_time(
    tmp_path: Path,
) -> None:
    """Raising `timeout` in the file and resuming with it (forced) is how a person gives a gate
    more time: the deadline counts from the first wait with the new timeout (it once kept the
    old deadline, and failed at once "after 3600s")."""
    store = open_duckdb_store(tmp_path / "g.duckdb")
    session = Session(store, workdir=tmp_path, scenario=WHICH_DAY)
    try:
        run = await session.start(it.compile(ONCE.format(timeout=2)))
        assert await run.wait(30) == "failed_resumable", run.error
        longer = it.compile(ONCE.format(timeout=3600))
        again = await session.resume(run.id, workflow=longer, force=True)
        await asyncio.sleep(2.0)  # well past the old deadline: it still waits
        assert (await again.refresh()).status == "running", again.error
        (question,) = await again.pending_questions()
        await again.answer(question.id, "Tuesday")
        assert await again.wait(30) == "finished", again.error
    finally:
        await session.close()
        await store.close()
