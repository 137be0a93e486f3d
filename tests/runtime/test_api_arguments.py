"""The Python API's arguments: a mistake is a TypeError or ValueError naming the argument.

Found by a new user: `start(wf, run_id=5)` came back as a DuckDB conversion
error blamed on the store, `Session(backend="claw")` recorded runs that failed
at their first node, `start("flow.iter")` compiled the file's name.
Each is refused where it is given, and nothing is recorded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import iterion_nb as it
from iterion_nb.session import Session

GATE = 'human gate:\n  instructions: "Ship it?"\n\nworkflow w:\n  entry: gate\n  gate -> done\n'


@pytest.mark.parametrize(
    ("given", "error", "says"),
    [
        ({"backend": "claw"}, TypeError, "backend must be a Backend"),
        ({"workdir": "/nonexistent/dir"}, ValueError, "workdir '/nonexistent/dir' is not a dir"),
        ({"poll_interval": "x"}, TypeError, "poll_interval must be a number of seconds, not str"),
        ({"lease_seconds": 0}, ValueError, "lease_seconds must be a positive number"),
        ({"lease_seconds": float("inf")}, ValueError, "lease_seconds must be a positive number"),
    ],
)  # fmt: skip
def test_session_settings_are_checked_before_the_store_opens(
    tmp_path: Path, given: dict[str, Any], error: type[Exception], says: str
) -> None:
    with pytest.raises(error, match=says.replace("(", r"\(")):
        Session(tmp_path / "store", **given)
    assert not (tmp_path / "store").exists()  # no store made for a session refused
    with pytest.raises(TypeError, match="store must be a path, a postgresql:// URL or a Store"):
        Session(5)  # type: ignore[arg-type]


async def test_start_and_lookups_name_the_argument_and_record_nothing(tmp_path: Path) -> None:
    session = Session(tmp_path / "store")
    wf = it.compile(GATE)
    refused: list[tuple[Any, type[Exception], str]] = [
        (lambda: session.start(wf, run_id=5), TypeError, "run_id must be a str, not int"),
        (lambda: session.start(wf, run_id="a b"), ValueError, "run_id 'a b' is not an id"),
        (lambda: session.start(wf, run_id=""), ValueError, "run_id '' is not an id"),
        (lambda: session.start("flow.iter"), ValueError, "looks like a file's name"),
        (lambda: session.start(42), TypeError, "workflow must be a compiled workflow"),
        (lambda: session.start(wf, attachments=["spec.txt"]), TypeError,
         "attachments must be a mapping of name -> value, not list"),
        (lambda: session.start(wf, vars=[1]), TypeError, "vars must be a mapping"),
        (lambda: session.start(wf, answers_from=5), TypeError, "answers_from must be a str"),
        (lambda: session.runs(limit="x"), TypeError, "limit must be an int, not str"),
        (lambda: session.runs(limit=0), ValueError, "limit must be 1 or more, not 0"),
        (lambda: session.runs(status="nope"), ValueError, "status must be one of running,"),
        (lambda: session.resume(123), TypeError, "run_id must be a str, not int"),
        (lambda: session.resume("r", answers=["yes"]), TypeError, "answers must be a mapping"),
        (lambda: session.resume("r", answered_by=1), TypeError, "answered_by must be a str"),
    ]  # fmt: skip
    for call, error, says in refused:
        with pytest.raises(error) as raised:
            await call()
        assert says in str(raised.value)
    assert await session.runs() == []  # nothing recorded
    with pytest.raises(TypeError, match="run_id must be a str, not int"):
        session.run(7)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"compile takes a workflow's source text \(str\), not int"):
        it.compile(123)
    run = await session.start(wf, run_id="release-1.2:rc_3")  # an id REST and the CLI take
    question = await run.next_question(5)
    assert question is not None
    for call, error, says in [
        (lambda: run.answer(123, "x"), TypeError, "interaction_id must be a str, not int"),
        (lambda: run.answer(question.id, "x", answered_by=1), TypeError, "answered_by must be"),
        (lambda: run.events(after="x"), TypeError, "after must be an int, not str"),
        (lambda: run.events(after=-1), ValueError, "after must be 0 or more, not -1"),
        (lambda: run.wait(timeout="x"), TypeError, "timeout must be a number of seconds"),
        (lambda: run.next_question(timeout=-1), ValueError, "timeout must be a positive"),
    ]:  # fmt: skip
        with pytest.raises(error) as raised:
            await call()
        assert says in str(raised.value)
    assert await run.wait(5) == "paused_waiting_human"  # nothing was answered
    assert [q.id for q in await run.pending_questions()] == [question.id]
    await session.close()


async def test_resuming_a_run_this_session_already_resumed_says_so(tmp_path: Path) -> None:
    """It once named this very process as the owner to stop."""
    from iterion_nb.errors import ResumeError

    (tmp_path / "go").unlink(missing_ok=True)
    source = GATE.replace("gate -> done", "gate -> slow\n  slow -> done") + (
        f'\ntool slow:\n  command: "while [ ! -f {tmp_path}/go ]; do sleep 0.05; done"\n'
    )
    session = Session(tmp_path / "store")
    run = await session.start(it.compile(source))
    question = await run.next_question(5)
    assert question is not None and await run.wait(5) == "paused_waiting_human"
    await run.answer(question.id, "yes")  # resumes it here
    with pytest.raises(ResumeError, match="is already running in this session"):
        await run.resume()
    (tmp_path / "go").touch()
    assert await run.wait(10) == "finished"
    await session.close()


FORGOT_TO_WAIT = """
import asyncio, sys
import iterion_nb as it

async def main():
    session = it.Session(sys.argv[1])
    run = await session.start(it.compile(sys.argv[2]))
    print(run.id)  # and returns: asyncio.run cancels the run's task

asyncio.run(main())
"""


def test_a_script_that_returns_before_its_run_ends_is_told_so(tmp_path: Path) -> None:
    """The run read `cancelled`, exit 0, and nothing said why."""
    import subprocess
    import sys

    slow = 'tool slow:\n  command: "sleep 5"\n\nworkflow w:\n  entry: slow\n  slow -> done\n'
    done = subprocess.run(
        [sys.executable, "-c", FORGOT_TO_WAIT, str(tmp_path / "store"), slow],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    run_id = done.stdout.strip()
    store = tmp_path / "store" / "iterion.duckdb"
    assert done.stderr == (
        f"iterion_nb: run {run_id} was cancelled: the task that executed it was cancelled (its"
        " event loop stopping? a script must `await run.wait()` before it returns); it is"
        f" resumable: `iterion-nb resume {run_id} --store {store}`\n"
    )
    # the command it gives works as given (not in the store's own directory, either)
    command = done.stderr.split("`")[-2].split()
    cli = Path(sys.executable).parent / "iterion-nb"
    resumed = subprocess.run([str(cli), *command[1:]], capture_output=True, text=True,
                             timeout=60, check=False, cwd=Path.home())  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert f"run {run_id} (w): finished" in resumed.stdout


async def test_a_scenario_for_one_run_naming_a_node_the_workflow_lacks_is_refused(
    tmp_path: Path,
) -> None:
    from iterion_nb.errors import RunError

    flow = (
        'agent poet:\n  model: "scripted"\n  user: "Write."\n\n'
        "workflow haiku:\n  entry: poet\n  poet -> done\n"
    )
    session = Session(tmp_path / "store")
    with pytest.raises(
        RunError, match=r"node 'poett' is not in workflow 'haiku'; did you mean 'poet'"
    ):
        await session.start(it.compile(flow), scenario={"nodes": {"poett": [{"text": "x"}]}})
    assert await session.runs() == []
    await session.close()
