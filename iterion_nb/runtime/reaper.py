"""Tool commands die with the process that runs them.

A tool command runs in a process group of its own, so that a timeout kills
all of it. Nothing would stop it if the process running it were killed
(kill -9, the OOM killer, a Dask nanny): the run goes on elsewhere from its
checkpoint and runs that node again while the orphan still runs — two
executions of one node at once. So each process that runs tools starts one
small *reaper* with its first tool: it is told each command's group as the
command starts and ends, and when the pipe from its parent closes (the
parent is gone, however it died) it kills the groups still running. A tool
command waits for a line on its stdin that is sent only once the reaper was
told of its group, so no kill lands between its start and the reaper's watch.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

#: The reaper: reads "+PGID" / "-PGID" lines until the parent is gone, then kills.
REAPER = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the parent is not for us
live = set()
for line in sys.stdin:
    sign, pgid = line[:1], int(line[1:])
    (live.add if sign == "+" else live.discard)(pgid)
for pgid in live:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
"""

_lock = threading.Lock()
_reaper: subprocess.Popen[bytes] | None = None
_owner_pid = 0


def _tell(line: str) -> None:
    global _reaper, _owner_pid
    with _lock:
        for _ in range(2):  # a reaper that died (killed on its own) is replaced once
            if _reaper is None or _owner_pid != os.getpid() or _reaper.poll() is not None:
                # in a session of its own: a signal to this process's group spares it
                _reaper = subprocess.Popen(
                    [sys.executable, "-c", REAPER], stdin=subprocess.PIPE,
                    start_new_session=True,
                )  # fmt: skip
                _owner_pid = os.getpid()
            assert _reaper.stdin is not None
            try:
                _reaper.stdin.write(line.encode())
                _reaper.stdin.flush()
                return
            except OSError:
                _reaper = None


def watch(pgid: int) -> None:
    """Kill the process group ``pgid`` if this process dies before :func:`unwatch`."""
    _tell(f"+{pgid}\n")


def unwatch(pgid: int) -> None:
    """The group ended (or was killed) here: forget it."""
    _tell(f"-{pgid}\n")


def reaper_pid() -> int | None:
    """This process's reaper, if it started one (for tests and diagnostics)."""
    with _lock:
        return _reaper.pid if _reaper is not None and _owner_pid == os.getpid() else None
