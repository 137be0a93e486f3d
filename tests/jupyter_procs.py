"""A Jupyter server (or JupyterLab) process the tests start: wait for it, stop it."""

from __future__ import annotations

import subprocess
import time
import urllib.request
from collections.abc import Callable


def wait_serving(
    url: str, token: str, server: subprocess.Popen[bytes], seconds: float,
    said: Callable[[], str] = lambda: "",
) -> None:  # fmt: skip
    """Until the server at ``url`` answers ``/api/status``; fails with ``said()`` if it exits."""
    deadline = time.monotonic() + seconds
    while True:
        assert server.poll() is None, f"the Jupyter server did not start:\n{said()}"
        assert time.monotonic() < deadline, f"no Jupyter server in time:\n{said()}"
        try:
            with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2):
                return
        except OSError:
            time.sleep(0.1)


def stop(server: subprocess.Popen[bytes], seconds: float = 20) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ``seconds``."""
    server.terminate()
    try:
        server.wait(seconds)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
