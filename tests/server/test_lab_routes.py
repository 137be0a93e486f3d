"""The server routes JupyterLab's extension uses: the pushed inbox, validate, the report.

In a real Jupyter server (pytest-jupyter's fixtures), with runs started by
``iterion-nb run`` in another process and no kernel at all. The stream is
read over a raw socket, as a browser holds it open, and closed by the test.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_jupyter.jupyter_core import *  # noqa: F403 - fixtures for this module only
from pytest_jupyter.jupyter_server import *  # noqa: F403
from pytest_jupyter.pytest_tornasync import *  # noqa: F403
from tornado.httpclient import HTTPClientError

from iterion_nb.store.holder_file import find_holder

ROOT = Path(__file__).resolve().parents[2]
CLI = Path(sys.executable).parent / "iterion-nb"
Event = tuple[str, Any]


@pytest.fixture
def store_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "runs" / "iterion.duckdb"
    monkeypatch.setenv("ITERION_NB_STORE", str(path))
    return path


@pytest.fixture
def jp_server_config(store_path: Path) -> dict[str, Any]:
    return {"ServerApp": {"jpserver_extensions": {"iterion_nb.server": True}}}


def fetch(loop: Any, jp_fetch: Any, *parts: str, **kwargs: Any) -> Any:
    response = loop.run_until_complete(jp_fetch("iterion", "api", *parts, **kwargs))
    if response.headers.get("Content-Type", "").startswith("application/json"):
        return json.loads(response.body)
    return response


def start_cli_run(store_path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(CLI), "run", str(ROOT / "examples" / "async_questions.iter"),
         "--scenario", str(ROOT / "examples" / "async_questions.scenario.yaml"),
         "--store", str(store_path), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@pytest.fixture
def cli_run(store_path: Path) -> Iterator[Callable[[], subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []

    def start() -> subprocess.Popen[str]:
        procs.append(start_cli_run(store_path))
        return procs[-1]

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


class Stream:
    """``GET /iterion/api/inbox/events`` over a socket of its own, parsed as server-sent events."""

    def __init__(self, port: int, path: str, token: str) -> None:
        self.port, self.path, self.token = port, path, token
        self.events: list[Event] = []
        self.headers = ""
        self._buffer = b""

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.writer.write(
            f"GET {self.path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
            f"Authorization: token {self.token}\r\nAccept: text/event-stream\r\n\r\n".encode()
        )
        await self.writer.drain()
        head = await self.reader.readuntil(b"\r\n\r\n")
        self.headers = head.decode()

    async def until(self, wanted: Callable[[Any], bool], timeout: float = 30) -> Any:
        """The first ``inbox`` snapshot (from now on) for which ``wanted`` holds."""
        deadline = time.monotonic() + timeout
        while True:
            while b"\n\n" in self._buffer:
                block, self._buffer = self._buffer.split(b"\n\n", 1)
                event = self._parse(block.decode())
                if event is not None:
                    self.events.append(event)
                    if event[0] == "inbox" and wanted(event[1]):
                        return event[1]
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no such snapshot; last: {self.events[-1:]}")
            chunk = await asyncio.wait_for(self.reader.read(65536), left)
            if not chunk:
                raise AssertionError("the stream ended")
            self._buffer += self._dechunk(chunk)

    @staticmethod
    def _dechunk(chunk: bytes) -> bytes:
        # chunked transfer encoding: drop the size lines, keep the data
        lines = chunk.split(b"\r\n")
        return b"".join(line for line in lines if not _is_size(line))

    @staticmethod
    def _parse(block: str) -> Event | None:
        name, data = "message", []
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])
        return (name, json.loads("\n".join(data))) if data else None

    def close(self) -> None:
        self.writer.close()


def _is_size(line: bytes) -> bool:
    try:
        int(line, 16)
    except ValueError:
        return False
    return True


def _pending(count: int) -> Callable[[Any], bool]:
    return lambda snap: len(snap["pending"]) == count


@pytest.mark.parametrize("holder", ["the cli", "the server"])
def test_the_inbox_is_pushed_with_no_kernel(
    jp_asyncio_loop: Any, jp_fetch: Any, jp_http_port: int, jp_base_url: str,
    jp_serverapp: Any, store_path: Path, cli_run: Callable[[], subprocess.Popen[str]],
    holder: str,
) -> None:  # fmt: skip
    """Questions of a CLI run appear on the stream; an answer moves one to the answered list."""
    loop = jp_asyncio_loop
    if holder == "the server":
        assert fetch(loop, jp_fetch, "inbox") == {"pending": [], "answered": [], "runs": []}
    proc = cli_run()
    if holder == "the cli":
        for _ in range(300):
            if find_holder(store_path) is not None:
                break
            time.sleep(0.05)
    token = jp_serverapp.identity_provider.token
    stream = Stream(jp_http_port, f"{jp_base_url}iterion/api/inbox/events", token)
    try:
        loop.run_until_complete(stream.open())
        assert " 200 " in stream.headers.split("\r\n")[0]
        assert "text/event-stream" in stream.headers
        snap = loop.run_until_complete(stream.until(_pending(2)))
        first, second = snap["pending"]
        assert first["question"] == "Should the notes be formal or casual?"
        assert [o["label"] for o in first["options"]] == ["Formal", "Casual"]
        assert first["workflow"] == "release_notes" and first["kind"] == "async"
        assert first["node_id"] == "gatherer" and first["requested_at"]
        (run,) = snap["runs"]
        assert run["status"] == "running" and run["id"] == first["run_id"]
        body = json.dumps({"answer": "formal", "answered_by": "ada"})
        fetch(loop, jp_fetch, "runs", run["id"], "interactions", first["id"], "answer",
              method="POST", body=body)  # fmt: skip
        started = time.monotonic()
        snap = loop.run_until_complete(stream.until(_pending(1), timeout=10))
        assert time.monotonic() - started < 1.5  # pushed by the doorbell, not the recheck
        (answered,) = snap["answered"]
        assert answered["id"] == first["id"] and answered["answered_by"] == "ada"
        assert answered["answers"] == "formal" and answered["answered_at"]
        fetch(loop, jp_fetch, "runs", run["id"], "interactions", second["id"], "answer",
              method="POST", body=json.dumps({"answer": "the inbox first"}))  # fmt: skip
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        snap = loop.run_until_complete(
            stream.until(lambda s: s["runs"][0]["status"] == "finished", timeout=20)
        )
        assert snap["pending"] == [] and len(snap["answered"]) == 2
    finally:
        stream.close()


def test_the_stream_needs_jupyters_auth(
    jp_asyncio_loop: Any, jp_fetch: Any, jp_http_port: int, jp_base_url: str, store_path: Path
) -> None:
    fetch(jp_asyncio_loop, jp_fetch, "runs")  # the server is up
    stream = Stream(jp_http_port, f"{jp_base_url}iterion/api/inbox/events", "wrong")
    try:
        jp_asyncio_loop.run_until_complete(stream.open())
        assert " 403 " in stream.headers.split("\r\n")[0]
    finally:
        stream.close()


def validate(loop: Any, jp_fetch: Any, source: str) -> dict[str, Any]:
    body = json.dumps({"source": source, "name": "cell"})
    result: dict[str, Any] = fetch(loop, jp_fetch, "validate", method="POST", body=body)
    return result


def test_validate_returns_the_compilers_diagnostics_with_editor_offsets(
    jp_asyncio_loop: Any, jp_fetch: Any, store_path: Path
) -> None:
    good = (ROOT / "examples" / "minimal.iter").read_text()
    assert validate(jp_asyncio_loop, jp_fetch, good) == {"ok": True, "diagnostics": []}
    # a typo in a node's property, after a non-BMP character (two UTF-16 units)
    source = good.replace("agent ", "## 🙂 ok\nagent ", 1)
    typo = source.index("model:")
    source = source[:typo] + "modle:" + source[typo + len("model:") :]
    found = validate(jp_asyncio_loop, jp_fetch, source)
    assert found["ok"] is False
    diag = next(d for d in found["diagnostics"] if "modle" in d["message"])
    assert diag["severity"] == "error" and diag["code"].startswith("C")
    utf16 = source.encode("utf-16-le")
    shown = utf16[2 * diag["from"] : 2 * diag["to"]].decode("utf-16-le")
    assert shown.startswith("modle")
    assert diag["line"] == source[:typo].count("\n") + 1


def test_validate_refuses_what_is_not_a_source(
    jp_asyncio_loop: Any, jp_fetch: Any, store_path: Path
) -> None:
    with pytest.raises(HTTPClientError) as info:
        fetch(jp_asyncio_loop, jp_fetch, "validate", method="POST", body='{"source": 3}')
    assert info.value.code == 400
    assert json.loads(info.value.response.body)["code"] == "bad_request"
    garbage = validate(jp_asyncio_loop, jp_fetch, "\x00 ::: ->")
    assert garbage["ok"] is False and garbage["diagnostics"]


def test_the_report_route_serves_html_that_cannot_run_scripts(
    jp_asyncio_loop: Any, jp_fetch: Any, store_path: Path,
    cli_run: Callable[[], subprocess.Popen[str]],
) -> None:  # fmt: skip
    loop = jp_asyncio_loop
    proc = cli_run()
    for _ in range(400):
        runs = fetch(loop, jp_fetch, "runs")["runs"]
        if runs:
            break
        time.sleep(0.05)
    (run,) = runs
    response = fetch(loop, jp_fetch, "runs", run["id"], "report")
    assert response.headers["Content-Type"] == "text/html; charset=UTF-8"
    policy = response.headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "sandbox" in policy and "script" not in policy
    html = response.body.decode()
    assert "<h2>Summary</h2>" in html and "release_notes" in html
    markdown = fetch(loop, jp_fetch, "runs", run["id"], "report", params={"format": "md"})
    assert markdown.headers["Content-Type"].startswith("text/markdown")
    assert markdown.body.decode().startswith("# Run ")
    for run_id, params, status, code in (
        ("nosuchrun", {}, 404, "not_found"),
        (run["id"], {"format": "pdf"}, 400, "bad_request"),
    ):
        with pytest.raises(HTTPClientError) as info:
            fetch(loop, jp_fetch, "runs", run_id, "report", params=params)
        assert info.value.code == status
        assert json.loads(info.value.response.body)["code"] == code
    proc.kill()
    proc.wait()


async def test_the_sidebar_snapshot_lists_questions_that_ended_unanswered() -> None:
    """Withdrawn and expired questions leave "pending" for the closed list, with how (issue 19)."""
    from datetime import UTC, datetime, timedelta

    from iterion_nb.runtime.records import Interaction, Run
    from iterion_nb.server.inbox import snapshot
    from iterion_nb.store import MemoryStore

    store = MemoryStore()
    t0 = datetime.now(UTC)
    await store.create_run(Run("r1", "w", "h", "running", t0, t0))
    soon = t0 + timedelta(hours=1)
    for iid, expires in (("q1", None), ("q2", soon), ("q3", t0)):
        await store.add_interaction(
            Interaction(iid, "r1", "a", "async", (iid,), t0, expires_at=expires)
        )
    await store.retract("q1", "found it")
    await store.amend("q2", questions=("q2, reworded",))
    shown = await snapshot(store)
    (pending,) = shown["pending"]
    assert (pending["id"], pending["revision"]) == ("q2", 1)
    assert pending["expires_at"] == soon.isoformat()
    closed = {q["id"]: (q["ended"], q["end_reason"]) for q in shown["answered"]}
    assert closed == {"q1": ("retracted", "found it"), "q3": ("expired", None)}
    await store.close()


async def test_each_sidebar_question_carries_its_runs_status() -> None:
    """A question of a run nothing executes reads so: the sidebar says to resume it first."""
    from datetime import UTC, datetime

    from iterion_nb.runtime.records import Interaction, Run
    from iterion_nb.server.inbox import snapshot
    from iterion_nb.store import MemoryStore

    store = MemoryStore()
    t0 = datetime.now(UTC)
    await store.create_run(Run("live", "w", "h", "paused_waiting_human", t0, t0))
    await store.create_run(Run("orphan", "w", "h", "running", t0, t0))  # no owner: interrupted
    await store.create_run(Run("stopped", "w", "h", "cancelled", t0, t0))
    for run_id in ("live", "orphan", "stopped"):
        await store.add_interaction(Interaction(f"q-{run_id}", run_id, "a", "async", ("?",), t0))
    shown = {q["run_id"]: q["run_status"] for q in (await snapshot(store))["pending"]}
    assert shown == {
        "live": "paused_waiting_human",
        "orphan": "interrupted",
        "stopped": "cancelled",
    }
    await store.close()


async def test_a_sidebar_question_says_whether_its_agent_or_its_run_waits_for_it() -> None:
    """An async question stopped reading "the agent keeps working" when that was no longer so.

    ``asker_finished``: the node visit that asked it has finished (read from the run's
    events, then only the new ones on the next snapshot); ``waited_on``: an open
    ``await_answers`` step waits on its node's questions, or a paused run's ``await``
    record lists it.
    """
    from datetime import UTC, datetime

    from iterion_nb.runtime.records import Interaction, Run
    from iterion_nb.server.inbox import snapshot
    from iterion_nb.store import MemoryStore
    from iterion_nb.view.askers import Askers

    store = MemoryStore()
    t0 = datetime.now(UTC)
    await store.create_run(Run("r1", "w", "h", "running", t0, t0))
    await store.append_event("r1", "node_started", node_id="writer", branch_id="b0")
    await store.append_event("r1", "node_started", node_id="critic", branch_id="b1")
    for iid, node, branch in (("q1", "writer", "b0"), ("q2", "critic", "b1")):
        await store.add_interaction(
            Interaction(iid, "r1", node, "async", (iid,), datetime.now(UTC), branch_id=branch)
        )
    askers = Askers()

    async def flags() -> dict[str, tuple[bool, bool]]:
        shown = (await snapshot(store, askers))["pending"]
        return {q["id"]: (q["asker_finished"], q["waited_on"]) for q in shown}

    assert await flags() == {"q1": (False, False), "q2": (False, False)}
    await store.append_event("r1", "node_finished", node_id="writer", branch_id="b0")
    await store.append_event("r1", "node_started", node_id="writer", branch_id="b0")  # again
    assert await flags() == {"q1": (True, False), "q2": (False, False)}
    assert (await snapshot(store))["pending"][0]["asker_finished"]  # read whole: the same
    # an await_answers step on the writer's questions starts: the run waits for q1
    gate = {"kind": "await_answers", "input": {}, "from": "writer"}
    await store.append_event("r1", "node_started", gate, node_id="gate", branch_id="b0")
    assert await flags() == {"q1": (True, True), "q2": (False, False)}
    # the critic's agent pauses the run on q2 (its await_answers tool): an await record
    await store.add_interaction(Interaction("r1-critic-await", "r1", "critic", "await", ("…",),
                                            datetime.now(UTC), waits_on=("q2",)))  # fmt: skip
    assert await flags() == {"q1": (True, True), "q2": (False, True)}
    # the critic's visit stops (the run paused, or its process died), is run again, and
    # finishes: the visit that asked q2 has finished, read anew or incrementally
    await store.answer("r1-critic-await", {"answered": True}, answered_by="iterion")
    await store.append_event("r1", "node_started", node_id="critic", branch_id="b1")
    assert await flags() == {"q1": (True, True), "q2": (False, False)}
    await store.append_event("r1", "node_finished", node_id="critic", branch_id="b1")
    assert await flags() == {"q1": (True, True), "q2": (True, False)}
    assert (await snapshot(store))["pending"][1]["asker_finished"]
    await store.close()


def test_the_inbox_route_reads_each_asking_runs_log_once_then_only_what_is_new(
    jp_asyncio_loop: Any, jp_fetch: Any, jp_serverapp: Any, store_path: Path,
    cli_run: Callable[[], subprocess.Popen[str]],
) -> None:  # fmt: skip
    """A sidebar polls GET /inbox; each call once read every event of every asking run."""
    loop = jp_asyncio_loop
    proc = cli_run()
    for _ in range(600):
        snap = fetch(loop, jp_fetch, "inbox")
        if len(snap["pending"]) == 2 and all(q["waited_on"] for q in snap["pending"]):
            break  # both asked, and the gate waits on them
        time.sleep(0.05)
    else:
        raise AssertionError(f"the run never waited on its two questions: {snap}")
    service = jp_serverapp.web_app.settings["iterion_nb_service"]
    store = loop.run_until_complete(service.opened())
    reads: list[int] = []
    real = store.events

    async def counted(run_id: str, *, after: int = 0, limit: int | None = None) -> Any:
        reads.append(after)
        return await real(run_id, after=after, limit=limit)

    store.events = counted  # a spy on the real store: every read still goes to it
    try:
        again = fetch(loop, jp_fetch, "inbox")
        assert [q["waited_on"] for q in again["pending"]] == [True, True]  # the same cards
        assert reads and all(after > 0 for after in reads), reads  # only what is new
    finally:
        del store.events
        proc.kill()
        proc.wait()
