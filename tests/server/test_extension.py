"""The Jupyter server extension, in a real Jupyter server (pytest-jupyter's fixtures).

A run lives in another process (``iterion-nb run``, which holds the store);
answers posted through the extension, with Jupyter's token, reach it.
Unauthenticated requests are refused. The tests are synchronous and drive
the server's loop themselves, so pytest-jupyter's fixtures stay in this module.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_jupyter.jupyter_core import *  # noqa: F403 - fixtures for this module only
from pytest_jupyter.jupyter_server import *  # noqa: F403
from pytest_jupyter.pytest_tornasync import *  # noqa: F403
from tornado.httpclient import HTTPClientError

from iterion_nb.store.holder_file import find_holder, holder_file

ROOT = Path(__file__).resolve().parents[2]
CLI = Path(sys.executable).parent / "iterion-nb"


@pytest.fixture
def store_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "runs" / "iterion.duckdb"
    monkeypatch.setenv("ITERION_NB_STORE", str(path))
    return path


@pytest.fixture
def jp_server_config(store_path: Path) -> dict[str, Any]:
    return {"ServerApp": {"jpserver_extensions": {"iterion_nb.server": True}}}


@pytest.fixture
def live_run(store_path: Path) -> Iterator[subprocess.Popen[str]]:
    """``iterion-nb run`` in another process: it holds the store and waits for answers."""
    proc = subprocess.Popen(
        [str(CLI), "run", str(ROOT / "examples" / "async_questions.iter"),
         "--scenario", str(ROOT / "examples" / "async_questions.scenario.yaml"),
         "--store", str(store_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    for _ in range(300):
        if find_holder(store_path) is not None:
            break
        time.sleep(0.05)
    else:
        proc.kill()
        raise AssertionError("the run's process never published its holder file")
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def fetch(loop: Any, jp_fetch: Any, *parts: str, **kwargs: Any) -> Any:
    response = loop.run_until_complete(jp_fetch("iterion", "api", *parts, **kwargs))
    return json.loads(response.body)


def pending(loop: Any, jp_fetch: Any, run_id: str, count: int) -> list[dict[str, Any]]:
    for _ in range(200):
        found = fetch(loop, jp_fetch, "runs", run_id, "interactions", "pending")["interactions"]
        if len(found) >= count:
            return list(found)
        time.sleep(0.05)
    raise AssertionError(f"{count} questions were not asked")


def test_an_authenticated_answer_reaches_a_run_live_in_another_process(
    jp_asyncio_loop: Any, jp_fetch: Any, live_run: subprocess.Popen[str]
) -> None:
    loop = jp_asyncio_loop
    for _ in range(200):
        runs = fetch(loop, jp_fetch, "runs")["runs"]
        if runs:
            break
        time.sleep(0.05)
    (run,) = runs
    assert run["status"] == "running" and run["workflow"] == "release_notes"
    questions = pending(loop, jp_fetch, run["id"], 2)
    for question, answer in zip(questions, ("formal", "the inbox first"), strict=True):
        body = json.dumps({"answer": answer, "answered_by": "jupyter"})
        outcome = fetch(loop, jp_fetch, "runs", run["id"], "interactions", question["id"],
                        "answer", method="POST", body=body)  # fmt: skip
        assert outcome == {
            "queued": True,
            "resumed": False,
            "run_status": "running",
            "resume_needed": False,
            "awaiting_worker": False,
        }
    # the agent in the other process received the answers and finished
    out, err = live_run.communicate(timeout=60)
    assert live_run.returncode == 0, err
    assert f"run {run['id']} (release_notes): finished" in out
    # a second answer through the extension is the holder's 409, as JSON
    with pytest.raises(HTTPClientError) as info:
        fetch(loop, jp_fetch, "runs", run["id"], "interactions", questions[0]["id"], "answer",
              method="POST", body=json.dumps({"answer": "casual"}))  # fmt: skip
    assert info.value.code == 409
    # the holder is gone now: the extension reads the file itself
    events = fetch(loop, jp_fetch, "runs", run["id"], "events")["events"]
    answered = [e for e in events if e["type"] == "interaction_answered"]
    assert [e["data"]["answered_by"] for e in answered] == ["jupyter", "jupyter"]


def test_unknown_run_is_a_json_404(jp_asyncio_loop: Any, jp_fetch: Any, store_path: Path) -> None:
    with pytest.raises(HTTPClientError) as info:
        fetch(jp_asyncio_loop, jp_fetch, "runs", "nosuchrun")
    assert info.value.code == 404
    body = json.loads(info.value.response.body)
    assert body["code"] == "not_found" and "nosuchrun" in body["message"]


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_unauthenticated_requests_are_refused(
    jp_asyncio_loop: Any, jp_fetch: Any, jp_base_url: str, jp_http_port: int, method: str,
    store_path: Path,
) -> None:  # fmt: skip
    fetch(jp_asyncio_loop, jp_fetch, "runs")  # the server is up, and authenticated calls work
    url = f"http://127.0.0.1:{jp_http_port}{jp_base_url}iterion/api/runs"
    if method == "POST":
        url += "/r1/cancel"
    request = urllib.request.Request(url, method=method, data=b"{}" if method == "POST" else None)

    def call() -> urllib.error.HTTPError:
        try:
            urllib.request.urlopen(request, timeout=10)
        except urllib.error.HTTPError as err:
            return err
        raise AssertionError("an unauthenticated request was served")

    err = jp_asyncio_loop.run_until_complete(jp_asyncio_loop.run_in_executor(None, call))
    assert err.code == 403
    body = json.loads(err.read())
    assert body["code"] == "forbidden"
    assert body["message"] == (
        "not authenticated: use Jupyter's token or log in"
        if method == "GET"
        else "'_xsrf' argument missing from POST"  # no token, no cookie: XSRF refuses first
    )


def test_the_wheel_enables_the_extension() -> None:
    config = json.loads(
        (ROOT / "jupyter-config" / "jupyter_server_config.d" / "iterion_nb.json").read_text()
    )
    assert config == {"ServerApp": {"jpserver_extensions": {"iterion_nb.server": True}}}
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert (
        '"jupyter-config/jupyter_server_config.d/iterion_nb.json" = '
        '"etc/jupyter/jupyter_server_config.d/iterion_nb.json"'
    ) in pyproject
    installed = Path(sys.prefix) / "etc" / "jupyter" / "jupyter_server_config.d" / "iterion_nb.json"
    assert installed.is_file(), "pip install did not place the enable file"


def test_browser_posts_need_the_xsrf_token(
    jp_asyncio_loop: Any, jp_fetch: Any, jp_base_url: str, jp_http_port: int, jp_serverapp: Any,
    store_path: Path,
) -> None:  # fmt: skip
    """Logged in with a cookie (as a browser is), a POST without Jupyter's XSRF token is refused."""
    import http.cookiejar

    fetch(jp_asyncio_loop, jp_fetch, "runs")
    base = f"http://127.0.0.1:{jp_http_port}{jp_base_url}"
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))

    def session() -> tuple[int, int, dict[str, Any]]:
        token = jp_serverapp.identity_provider.token
        opener.open(f"{base}login", timeout=10).read()  # the login form sets the _xsrf cookie
        xsrf = next(c.value for c in jar if c.name == "_xsrf")
        form = urllib.parse.urlencode({"password": token, "_xsrf": xsrf}).encode()
        opener.open(f"{base}login", data=form, timeout=10).read()  # logged in: a user cookie
        assert any(c.name.startswith("username-") for c in jar)
        url = f"{base}iterion/api/runs/nosuchrun/cancel"
        try:
            opener.open(urllib.request.Request(url, data=b"{}", method="POST"), timeout=10)
        except urllib.error.HTTPError as err:
            without = err.code
        request = urllib.request.Request(
            url, data=b"{}", method="POST", headers={"X-XSRFToken": xsrf}
        )
        try:
            opener.open(request, timeout=10)
        except urllib.error.HTTPError as err:
            return without, err.code, json.loads(err.read())
        raise AssertionError("cancelling an unknown run succeeded")

    without, with_xsrf, body = jp_asyncio_loop.run_until_complete(
        jp_asyncio_loop.run_in_executor(None, session)
    )
    assert without == 403  # cookie alone: refused
    assert with_xsrf == 404 and body["code"] == "not_found"  # with the XSRF token: served


def test_the_cli_runs_a_workflow_while_the_jupyter_server_holds_the_store(
    jp_asyncio_loop: Any, jp_fetch: Any, store_path: Path
) -> None:
    """With JupyterLab open the server holds the file, yet ``iterion-nb run`` works as usual."""
    import os

    loop = jp_asyncio_loop
    assert fetch(loop, jp_fetch, "runs") == {"runs": []}  # the server opened the store...
    published = holder_file(store_path).read_text()
    assert json.loads(published)["pid"] == os.getpid()  # ...and holds it (this process)
    proc = subprocess.Popen(
        [str(CLI), "run", str(ROOT / "examples" / "async_questions.iter"),
         "--scenario", str(ROOT / "examples" / "async_questions.scenario.yaml"),
         "--store", str(store_path), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        for _ in range(400):
            runs = fetch(loop, jp_fetch, "runs")["runs"]
            if runs:
                break
            time.sleep(0.05)
        (run,) = runs
        assert run["status"] == "running" and run["owner"]["pid"] == proc.pid
        questions = pending(loop, jp_fetch, run["id"], 2)
        for question, answer in zip(questions, ("formal", "the inbox first"), strict=True):
            body = json.dumps({"answer": answer, "answered_by": "jupyter"})
            outcome = fetch(loop, jp_fetch, "runs", run["id"], "interactions", question["id"],
                            "answer", method="POST", body=body)  # fmt: skip
            assert outcome == {
                "queued": True,
                "resumed": False,
                "run_status": "running",
                "resume_needed": False,
                "awaiting_worker": False,
            }
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, f"stdout: {out}\nstderr: {err}"
    assert json.loads(out)["status"] == "finished"
    assert holder_file(store_path).read_text() == published  # the server held it all along
    done = fetch(loop, jp_fetch, "runs", run["id"])
    assert done["status"] == "finished" and done["owner"] is None
    # resuming is not the server's job: it says so, in JSON
    with pytest.raises(HTTPClientError) as info:
        fetch(loop, jp_fetch, "runs", run["id"], "resume", method="POST", body="{}")
    assert info.value.code == 409
    assert json.loads(info.value.response.body)["code"] == "not_resumable"


def test_the_server_serves_a_postgresql_store_named_by_url(postgres_url: str) -> None:
    """ITERION_NB_STORE may be a URL: the server opens it as such (no local file, no holder)."""
    import asyncio as aio
    from datetime import UTC, datetime

    from iterion_nb.runtime.records import Run
    from iterion_nb.server.extension import HolderOrFileService
    from iterion_nb.store.remote import open_store

    url = postgres_url + ("&" if "?" in postgres_url else "?") + "schema=server_pg"

    async def check() -> list[str]:
        writer = open_store(url)
        now = datetime.now(UTC)
        await writer.create_run(Run("pg1", "w", "h", "paused_waiting_human", now, now))
        await writer.close()
        service = HolderOrFileService(url)
        assert service.path == url
        runs = await service.list_runs(None, 10)
        await (await service.opened()).close()
        return [r.id for r in runs]

    assert aio.run(check()) == ["pg1"]


@pytest.mark.parametrize(
    ("method", "parts", "status", "code", "message"),
    [
        ("GET", ("nope",), 404, "not_found", "no such route"),
        ("GET", (), 404, "not_found", "no such route"),  # the prefix itself
        ("GET", ("runs", "r1", "answers", "x"), 404, "not_found", "no such route"),
        ("POST", ("runs", "r1", "restart"), 404, "not_found", "no such route"),
        ("DELETE", ("runs",), 405, "http_error", "Method Not Allowed"),
        ("GET", ("runs", "r1", "cancel"), 405, "http_error", "Method Not Allowed"),
    ],
)
def test_every_path_under_the_api_answers_json(
    jp_asyncio_loop: Any, jp_fetch: Any, store_path: Path,
    method: str, parts: tuple[str, ...], status: int, code: str, message: str,
) -> None:  # fmt: skip
    """An unknown route or a wrong method is the API's JSON, not Jupyter's HTML page."""
    body = "{}" if method == "POST" else None
    with pytest.raises(HTTPClientError) as info:
        fetch(jp_asyncio_loop, jp_fetch, *parts, method=method, body=body)
    assert info.value.code == status
    response = info.value.response
    assert response.headers["Content-Type"].startswith("application/json")
    assert json.loads(response.body) == {"code": code, "message": message}


def test_an_unknown_route_is_refused_without_jupyters_token_first(
    jp_asyncio_loop: Any, jp_fetch: Any, jp_base_url: str, jp_http_port: int, store_path: Path
) -> None:
    fetch(jp_asyncio_loop, jp_fetch, "runs")
    url = f"http://127.0.0.1:{jp_http_port}{jp_base_url}iterion/api/nope"

    def call() -> urllib.error.HTTPError:
        try:
            urllib.request.urlopen(url, timeout=10)
        except urllib.error.HTTPError as err:
            return err
        raise AssertionError("an unauthenticated request was served")

    err = jp_asyncio_loop.run_until_complete(jp_asyncio_loop.run_in_executor(None, call))
    assert (err.code, json.loads(err.read())["code"]) == (403, "forbidden")


def test_resuming_a_run_another_process_executes_names_that_process(
    jp_asyncio_loop: Any, jp_fetch: Any, live_run: subprocess.Popen[str]
) -> None:
    """As ``iterion-nb resume`` says: 409 ``run_owned`` naming the owner, not ``not_resumable``."""
    loop = jp_asyncio_loop
    for _ in range(200):
        runs = fetch(loop, jp_fetch, "runs")["runs"]
        if runs:
            break
        time.sleep(0.05)
    (run,) = runs
    with pytest.raises(HTTPClientError) as info:
        fetch(loop, jp_fetch, "runs", run["id"], "resume", method="POST", body="{}")
    assert info.value.code == 409
    body = json.loads(info.value.response.body)
    assert body["code"] == "run_owned" and body["run_id"] == run["id"]
    assert body["owner"]["pid"] == live_run.pid
    assert body["message"].startswith(f"run '{run['id']}' is owned by process {live_run.pid}")
    assert "answer its questions, or stop that process" in body["message"]


def test_once_the_extension_stopped_requests_are_told_the_server_is_stopping(
    jp_asyncio_loop: Any, jp_fetch: Any, jp_serverapp: Any, store_path: Path
) -> None:
    """The server stopping: the store is let go (no holder file), and nothing reopens it."""
    loop = jp_asyncio_loop
    assert fetch(loop, jp_fetch, "runs") == {"runs": []}
    assert holder_file(store_path).exists()
    loop.run_until_complete(jp_serverapp.extension_manager.stop_all_extensions())
    assert not holder_file(store_path).exists()
    with pytest.raises(HTTPClientError) as info:
        fetch(loop, jp_fetch, "runs")
    assert info.value.code == 503
    assert json.loads(info.value.response.body) == {
        "code": "stopping", "message": "the Jupyter server is stopping"
    }  # fmt: skip
    assert not holder_file(store_path).exists()


def test_a_read_only_store_is_read_and_an_answer_to_it_is_a_json_403(
    jp_asyncio_loop: Any, jp_fetch: Any, store_path: Path, tmp_path: Path
) -> None:
    from tests.cli.test_read_only_store import GATE, unwritable

    (tmp_path / "gate.iter").write_text(GATE)
    paused = subprocess.run([str(CLI), "run", "gate.iter", "--store", str(store_path), "--json"],
                            capture_output=True, text=True, cwd=tmp_path, check=True)  # fmt: skip
    run_id = json.loads(paused.stdout)["id"]
    with unwritable(store_path):  # before the server's first request opens it
        (run,) = fetch(jp_asyncio_loop, jp_fetch, "runs")["runs"]
        assert (run["id"], run["status"]) == (run_id, "paused_waiting_human")
        (question,) = pending(jp_asyncio_loop, jp_fetch, run_id, 1)
        with pytest.raises(HTTPClientError) as info:
            fetch(jp_asyncio_loop, jp_fetch, "runs", run_id, "interactions", question["id"],
                  "answer", method="POST", body=json.dumps({"answer": "yes"}))  # fmt: skip
        assert info.value.code == 403
        body = json.loads(info.value.response.body)
        assert body["code"] == "store_read_only", body
        assert "<path> can only be read here" in body["message"], body
        assert str(store_path) not in body["message"]
        (still,) = pending(jp_asyncio_loop, jp_fetch, run_id, 1)  # nothing was recorded
        assert still["id"] == question["id"]
        assert not find_holder(store_path)  # a read-only store is not served to others
