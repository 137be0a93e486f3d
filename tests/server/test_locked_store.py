"""A store file held by a process that does not serve it: the Jupyter server stays usable.

The server opens its store at the first request that needs it. When another
process holds the DuckDB file without serving it (a ``duckdb`` shell, a
process that never published itself as its holder), that open waits up to
15 s for a holder to appear. It waits off the server's loop: notebooks,
kernels and Jupyter's own API go on meanwhile, and the request gets a JSON
503 ``store_locked`` naming the problem, not a frozen server and a 400.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from tests.server.test_shutdown import TOKEN, Server, server  # noqa: F401 - the fixture

#: Holds the DuckDB file as a process that is not iterion-nb would: no holder file, no server.
SQUATTER = """
import sys, time, duckdb
conn = duckdb.connect(sys.argv[1])
print("held", flush=True)
time.sleep(120)
"""


def get(srv: Server, path: str, timeout: float) -> tuple[int, Any]:
    request = urllib.request.Request(srv.url(path), headers={"Authorization": f"token {TOKEN}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_a_store_held_without_a_holder_leaves_the_server_serving(
    server: Server,  # noqa: F811 - the fixture
) -> None:
    squatter = subprocess.Popen(
        [sys.executable, "-c", SQUATTER, str(server.store)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert squatter.stdout is not None and squatter.stdout.readline().strip() == "held"
        answers: dict[str, tuple[int, Any]] = {}

        def ask(path: str) -> None:
            answers[path] = get(server, path, 60)

        paths = ("/iterion/api/runs", "/iterion/api/inbox")
        ours = [threading.Thread(target=ask, args=(path,)) for path in paths]
        for thread in ours:
            thread.start()
        time.sleep(1.0)  # both wait for the file now
        # the server's loop is free: Jupyter's own API answers while ours wait
        status, body = get(server, "/api/status", 5)
        assert status == 200 and "started" in body
        assert all(thread.is_alive() for thread in ours), answers
        for thread in ours:
            thread.join(60)
        for path in paths:
            status, body = answers[path]
            assert (status, body["code"]) == (503, "store_locked"), body
            assert "held by" in body["message"] and str(server.store) not in body["message"]
    finally:
        squatter.kill()
        squatter.wait()
    # the file is free: the next request opens it (the seeded runs are there)
    status, body = get(server, "/iterion/api/runs?limit=1000", 30)
    assert (status, len(body["runs"])) == (200, 300), body
    log = server.log.read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]
