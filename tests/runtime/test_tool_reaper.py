"""A tool command dies with the process that runs it (kill -9 included)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="process groups are POSIX")

RUNNER = textwrap.dedent(
    """
    import asyncio, sys
    import iterion_nb as it
    from iterion_nb.session import Session
    from iterion_nb.store import MemoryStore

    SOURCE = '''
    tool slow:
      command: "echo start $$ >> log.txt; sleep 4; echo end >> log.txt"

    tool after:
      command: "echo after >> log.txt"

    workflow w:
      entry: slow
      slow -> after
      after -> done
    '''

    async def main():
        session = Session(MemoryStore(), workdir=sys.argv[1], serve=False)
        run = await session.start(it.compile(SOURCE))
        print(await run.wait(60), flush=True)

    asyncio.run(main())
    """
)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z")


def until(check: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


def test_a_tool_of_a_process_killed_with_sigkill_dies_with_it(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    proc = subprocess.Popen([sys.executable, "-c", RUNNER, str(tmp_path)], cwd=tmp_path)
    try:
        assert until(lambda: any(x.startswith("start") for x in lines(log)), 60), lines(log)
        shell = int(lines(log)[0].split()[1])
        proc.kill()  # kill -9: nothing of ours runs in that process any more
        proc.wait()
        # the tool's shell (and its sleep) is killed by the reaper, not left to run on
        assert until(lambda: not alive(shell), 10), "the tool outlived its process"
        time.sleep(4.5)  # past the end of the sleep it was in
        assert lines(log) == [f"start {shell}"]
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_process_killed_before_its_reaper_knows_the_tool_never_runs_it(
    tmp_path: Path,
) -> None:
    """Kill -9 between the command's spawn and the reaper hearing of it: no command runs."""
    # the kill lands at the worst moment: the shell exists, the reaper was not told
    script = RUNNER.replace(
        "import iterion_nb as it",
        "import iterion_nb as it, os, signal\n"
        "from iterion_nb.runtime import reaper\n"
        "reaper.watch = lambda pgid: (\n"
        "    print(pgid, flush=True), os.kill(os.getpid(), signal.SIGKILL))",
    ).replace("sleep 4", "sleep 0.1")
    proc = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], cwd=tmp_path, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    shell = int(proc.stdout.split()[0])
    assert until(lambda: not alive(shell), 10), "the gated shell outlived its process"
    time.sleep(0.5)
    assert lines(tmp_path / "log.txt") == [], "the command ran unwatched"


def test_a_tool_that_ends_is_forgotten_and_the_run_goes_on(tmp_path: Path) -> None:
    """The reaper does not stand in the way of tools that end normally."""
    script = RUNNER.replace("sleep 4", "sleep 0.1")
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], cwd=tmp_path, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "finished"
    assert [x.split()[0] for x in lines(tmp_path / "log.txt")] == ["start", "end", "after"]


def test_the_reaper_kills_a_watched_group_when_its_parent_dies(tmp_path: Path) -> None:
    """The mechanism on its own: a group watched, its parent killed, the group gone."""
    parent = textwrap.dedent(
        """
        import subprocess, sys, time
        from iterion_nb.runtime import reaper
        kept = subprocess.Popen(["sleep", "30"], start_new_session=True)
        ended = subprocess.Popen(["sleep", "30"], start_new_session=True)
        reaper.watch(kept.pid)
        reaper.watch(ended.pid)
        reaper.unwatch(ended.pid)  # as a command that ended here
        print(kept.pid, ended.pid, reaper.reaper_pid(), flush=True)
        time.sleep(60)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True, cwd=tmp_path
    )
    assert proc.stdout is not None
    kept, ended, reaper = map(int, proc.stdout.readline().split())
    try:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert until(lambda: not alive(kept), 10), "the watched group outlived its parent"
        assert until(lambda: not alive(reaper), 10), "the reaper stays after its work"
        assert alive(ended), "a group no longer watched was killed"
    finally:
        for pid in (kept, ended):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
