"""A store holder in its own process, for the hostile-input tests: real HTTP on loopback."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from iterion_nb.store.holder_file import HolderInfo, find_holder

HOLDER = textwrap.dedent(
    """
    import asyncio, os, sys, threading
    from datetime import UTC, datetime
    import iterion_nb as it
    from iterion_nb.runtime.records import Interaction, Option, Run

    async def main():
        db, mode = sys.argv[1], sys.argv[2]
        session = it.Session(db)
        store = session.store
        now = datetime.now(UTC)
        await store.create_run(Run("r1", "w", "h", "paused_waiting_human", now, now))
        for n in range(20):
            options = (Option("a", "A"), Option("b", "B")) if n % 2 else ()
            question = Interaction(f"q{n}", "r1", "ask", "async", (f"Q{n}?",), now, options=options)
            await store.add_interaction(question)
        await store.append_event("r1", "node_started", {"n": 1}, node_id="ask")
        if mode == "slow":  # a read the holder sits on for a while
            real = store.pending_interactions
            async def slow(*args, **kwargs):
                await asyncio.sleep(3)
                return await real(*args, **kwargs)
            store.pending_interactions = slow
        if mode.startswith("faulty"):  # every list of runs fails, as a bug would
            async def broken(**kwargs):
                raise RuntimeError("boom in /home/someone/secret/store.duckdb: SELECT * FROM runs")
            store.list_runs = broken
        if mode == "refusing":  # the database itself refuses what reads events
            await store.flush()
            con = store._con
            await store._call(lambda: con.execute("ALTER TABLE events RENAME TO gone"))
        if mode == "faulty":  # and stderr is a pipe nobody reads: fill it
            blob = b"x" * 4096
            def fill():
                while True:
                    os.write(2, blob)
            threading.Thread(target=fill, daemon=True).start()
        session.serve()
        print("ready", flush=True)
        await asyncio.sleep(600)

    asyncio.run(main())
    """
)


def start_holder(db: Path, mode: str = "plain", **popen: Any) -> subprocess.Popen[str]:
    """Start a holder of ``db``; returns once it serves and publishes itself."""
    popen.setdefault("stderr", subprocess.DEVNULL)
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db), mode], stdout=subprocess.PIPE, text=True, **popen
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def holder_of(db: Path) -> HolderInfo:
    info = find_holder(db)
    assert info is not None
    return info


class Raw:
    """Raw HTTP requests to a holder, one kept-alive connection (reopened when closed)."""

    def __init__(self, info: HolderInfo, timeout: float = 10.0) -> None:
        parts = urlsplit(info.url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.token = info.token
        self.timeout = timeout
        self._conn: http.client.HTTPConnection | None = None

    def send(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        auth: bool = True,
    ) -> tuple[int, bytes]:
        sent = {"Content-Type": "application/json", **(headers or {})}
        if auth:
            sent.setdefault("Authorization", f"Bearer {self.token}")
        for attempt in range(2):
            if self._conn is None:
                self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self._conn.request(method, path, body=body, headers=sent)
                response = self._conn.getresponse()
                data = response.read()
            except (ConnectionError, http.client.HTTPException):
                self._conn.close()
                self._conn = None
                if attempt:
                    raise
                continue
            except BaseException:
                self._conn.close()
                self._conn = None
                raise
            if response.will_close:
                self._conn.close()
                self._conn = None
            return response.status, data
        raise AssertionError("unreachable")

    def json(self, method: str, path: str, payload: Any = None) -> tuple[int, Any]:
        body = json.dumps(payload).encode() if payload is not None else None
        status, data = self.send(method, path, body)
        return status, json.loads(data)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
