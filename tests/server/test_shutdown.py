"""A real ``jupyter server`` with the extension stops cleanly, whatever uses its store.

The server holds the store and serves it; a browser-like client holds the
pushed inbox open and another process reads the store through the server's
holder as fast as it can. On SIGTERM, or ``POST /api/shutdown``, the server
must end the stream, hand the store over (the other process takes the file
and goes on) and exit at once with status 0 — not crash in its exit (the
threads that serve and write the store cut off mid-call) nor hang.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from iterion_nb.runtime.records import Run
from iterion_nb.store import open_duckdb_store
from iterion_nb.store.holder_file import holder_file

JUPYTER = Path(sys.executable).parent / "jupyter"
TOKEN = "shutdown-test-token"
#: Reads the store through its holder in a loop (as a kernel's widgets and runs do), and
#: says how it went: the calls it made and whether it ended up holding the file.
READER = """
import asyncio, sys, time
from iterion_nb.store.remote import open_store

async def main():
    store = open_store(sys.argv[1])
    calls, until = 0, time.monotonic() + float(sys.argv[2])
    while time.monotonic() < until:
        await store.list_runs(limit=1000)
        calls += 1
    print(calls, type(store).__name__, store.took_over, flush=True)
    await store.close()

asyncio.run(main())
"""


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int
    store: Path
    log: Path

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def call(self, method: str, path: str) -> bytes:
        request = urllib.request.Request(
            self.url(path), method=method, data=b"" if method == "POST" else None,
            headers={"Authorization": f"token {TOKEN}"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=10) as response:
            return bytes(response.read())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    store = tmp_path / ".iterion" / "iterion.duckdb"

    async def seed() -> None:  # enough runs that each read keeps the database busy a while
        now = datetime.now(UTC)
        local = open_duckdb_store(store)
        for i in range(300):
            await local.create_run(Run(f"r{i:03d}", "w", "h", "finished", now, now))
        await local.close()

    asyncio.run(seed())
    env = dict(os.environ, ITERION_NB_STORE=str(store), JUPYTER_RUNTIME_DIR=str(tmp_path / "rt"),
               JUPYTER_CONFIG_DIR=str(tmp_path / "cfg"))  # fmt: skip
    port, log = free_port(), tmp_path / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(JUPYTER), "server", "--no-browser", "--allow-root", f"--port={port}",
             "--ServerApp.ip=127.0.0.1", "--ServerApp.port_retries=0",
             f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={tmp_path}"],
            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    started = Server(proc, port, store, log)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                started.call("GET", "/api/status")
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
        yield started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def open_stream(server: Server) -> socket.socket:
    """``GET /iterion/api/inbox/events``, held open as a browser does, its first event read."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=20)
    sock.sendall(
        f"GET /iterion/api/inbox/events HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
        f"Authorization: token {TOKEN}\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    seen = b""
    while b"event: inbox" not in seen:
        chunk = sock.recv(65536)
        assert chunk, seen
        seen += chunk
    return sock


def rest_of(sock: socket.socket) -> bytes:
    """What the stream sends until its connection closes."""
    rest = b""
    with sock:
        while chunk := sock.recv(65536):
            rest += chunk
    return rest


@pytest.mark.parametrize("how", ["SIGTERM", "POST /api/shutdown"])
def test_the_server_stops_cleanly_with_a_stream_open_and_a_process_using_its_store(
    server: Server, how: str
) -> None:
    runs = json.loads(server.call("GET", "/iterion/api/runs?limit=1"))["runs"]
    assert len(runs) == 1  # the server opened the store: it holds the file
    assert json.loads(holder_file(server.store).read_text())["pid"] == server.proc.pid
    stream = open_stream(server)
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(server.store), "6"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        time.sleep(2.5)  # the reader is busy on the server's store
        assert reader.poll() is None, reader.communicate()
        if how == "SIGTERM":
            server.proc.send_signal(signal.SIGTERM)
        else:
            server.call("POST", "/api/shutdown")
        started = time.monotonic()
        code = server.proc.wait(timeout=20)
        took = time.monotonic() - started
        ended = rest_of(stream)
        out, err = reader.communicate(timeout=60)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
    log = server.log.read_text(errors="replace")
    assert (code, took < 5) == (0, True), f"exit {code} after {took:.1f} s\n{log[-3000:]}"
    assert "terminate called" not in log and "Traceback" not in log
    assert ended.endswith(b"0\r\n\r\n"), ended[-200:]  # the stream's response ended, not cut
    assert "iterion_nb: stopped serving the store" in log
    # the other process went on: it took the file over once the server let it go
    assert reader.returncode == 0, err
    calls, kind, took_over = out.split()
    assert int(calls) > 0 and (kind, took_over) == ("RemoteStore", "True")
    if holder_file(server.store).exists():  # the reader's own, until it closed: not the server's
        assert json.loads(holder_file(server.store).read_text())["pid"] != server.proc.pid
