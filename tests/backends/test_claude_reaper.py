"""The claude CLI of a claude_code node dies with the process that runs it (kill -9 included).

A runner script runs a workflow whose agent is on ``backend: claude_code``:
the real CLI, against a loopback ScenarioServer in this process, with the
node's MCP stdio server (notebooks/words_server.py) started by the CLI. The
runner is killed with SIGKILL while the CLI is mid-turn — its model request
held by the server, or one of our tools running — and the CLI and its MCP
server must be gone within seconds, having asked the model nothing more.
(Left alone, the CLI finished the turn: took the reply, ran the MCP tool and
asked the model again, some six seconds after the kill.)
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from iterion_nb.backends.claude_code.backend import _bundled_cli, _sdk
from iterion_nb.testing import ScenarioServer

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="process groups are POSIX")

WORDS = Path(__file__).resolve().parents[2] / "notebooks" / "words_server.py"
#: How long the server holds the reply of the slow model turn (the kill comes well before).
HELD = 5.0

_RUNNER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    import iterion_nb as it
    from iterion_nb.backends.claude_code import ClaudeCodeBackend
    from iterion_nb.session import Session
    from iterion_nb.store import MemoryStore

    workdir, url = Path(sys.argv[1]), sys.argv[2]

    @it.tool
    async def nap(seconds: float) -> str:
        \"\"\"Rest a while.\"\"\"
        with open(workdir / "log.txt", "a") as log:
            log.write("nap\\n")
        await asyncio.sleep(seconds)
        return "rested"

    SOURCE = '''
    mcp_server words:
      command: "PYTHON"
      args: ["WORDS"]

    agent writer:
      model: "claude-test"
      backend: claude_code
      mcp: [words]
      tools: [nap]
      user: "Shout hello."

    workflow w:
      entry: writer
      writer -> done
    '''

    async def main():
        env = {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-test-key",
               "HOME": str(workdir / "claude-home")}
        session = Session(MemoryStore(), backend=ClaudeCodeBackend(env=env), workdir=workdir,
                          serve=False)
        run = await session.start(it.compile(SOURCE))
        print(await run.wait(120), run.error, flush=True)

    asyncio.run(main())
    """
)
RUNNER = _RUNNER.replace("PYTHON", sys.executable).replace("WORDS", str(WORDS))

SCENARIOS = {
    # the CLI waits for the model: the server holds its reply
    "slow model": [
        {"delay": HELD, "tool_calls": [{"name": "words__shout", "input": {"text": "hello"}}]},
        {"text": "I shouted."},
    ],
    # the CLI waits for one of our tools (served by the runner, which is killed)
    "slow tool": [
        {"tool_calls": [{"name": "nap", "input": {"seconds": 30}}]},
        {"text": "I rested."},
    ],
}


def stat_of(pid: int) -> list[str]:
    """State, ppid, pgid … of a process (fields 3 on of /proc/PID/stat), or []."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return []


def alive(pid: int) -> bool:
    fields = stat_of(pid)
    return bool(fields) and fields[0] != "Z"


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def descendants(pid: int) -> list[int]:
    parents = {int(p.name): stat_of(int(p.name)) for p in Path("/proc").iterdir()
               if p.name.isdigit()}  # fmt: skip
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        kids = [c for c, f in parents.items() if len(f) > 1 and int(f[1]) == parent]
        found += kids
        todo += kids
    return found


def until(check: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.05)
    return None


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.skipif(
    sys.platform != "linux" or _sdk() is None or _bundled_cli(_sdk()) is None,
    reason="reads /proc; needs claude-agent-sdk's bundled CLI",
)
@pytest.mark.parametrize("case", list(SCENARIOS))
def test_the_claude_cli_and_its_mcp_server_die_with_a_runner_killed_mid_turn(
    case: str, tmp_path: Path
) -> None:
    cli_path = _bundled_cli(_sdk())
    assert cli_path is not None
    (tmp_path / "claude-home").mkdir()
    log = tmp_path / "log.txt"
    server = ScenarioServer({"nodes": {"writer": SCENARIOS[case]}}).start()
    proc = subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(tmp_path), server.url], cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    mine: list[int] = []
    try:
        # the CLI mid-turn: its first request held by the server, or our tool running
        if case == "slow tool":
            assert until(lambda: lines(log) == ["nap"], 90), proc.poll()
        assert until(lambda: server.requests, 90), proc.poll()

        def cli_and_server() -> tuple[int, int] | None:
            clis = [p for p in descendants(proc.pid)
                    if cmdline(p).startswith(cli_path) and "stream-json" in cmdline(p)]  # fmt: skip
            words = [p for c in clis for p in descendants(c) if str(WORDS) in cmdline(p)]
            return (clis[0], words[0]) if len(clis) == 1 and words else None

        found = until(cli_and_server, 30)
        assert found is not None, [cmdline(p) for p in descendants(proc.pid)]
        cli, words = found
        mine = [cli, *descendants(cli)]
        assert all(alive(p) for p in (cli, words))  # alive up to the kill
        asked = len(server.requests)
        assert asked == 1, "the kill must come while the first turn is still under way"

        proc.send_signal(signal.SIGKILL)  # nothing of ours runs in the runner any more
        proc.wait()
        killed = time.monotonic()
        assert until(lambda: not any(alive(p) for p in mine), 5), [
            cmdline(p) for p in mine if alive(p)
        ]
        print(f"{case}: the CLI and its MCP server gone {time.monotonic() - killed:.2f}s after")
        # past the moment the held reply went out: the CLI asked the model nothing more
        time.sleep(max(0.0, killed + HELD + 2 - time.monotonic()))
        assert len(server.requests) == asked, "the CLI went on asking the model after the kill"
        assert lines(log) == (["nap"] if case == "slow tool" else [])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in mine:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        server.stop()
