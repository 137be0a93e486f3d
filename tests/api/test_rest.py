"""The store holder's REST API over real HTTP on loopback, and the CLI in real processes."""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import signal
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import iterion_nb as it
from iterion_nb.session import Session
from iterion_nb.store.holder_file import find_holder, holder_file

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "async_questions.iter"
SCENARIO = ROOT / "examples" / "async_questions.scenario.yaml"
CLI = Path(sys.executable).parent / "iterion-nb"

GATE = 'human ok:\n  instructions: "Ship it?"\n\nworkflow w:\n  entry: ok\n  ok -> done\n'


def call(
    url: str,
    method: str = "GET",
    body: Any = None,
    token: str | None = None,
    raw: bytes | None = None,
) -> tuple[int, Any]:
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Session, str, str]]:
    session = Session(tmp_path / "s.duckdb", scenario=SCENARIO, workdir=tmp_path, poll_interval=60)
    session.serve()
    assert session.holder is not None
    yield session, session.holder.url, session.holder.token
    await session.close()


async def test_holder_file_is_private_and_names_a_loopback_server(
    served: tuple[Session, str, str], tmp_path: Path
) -> None:
    session, url, token = served
    path = holder_file(tmp_path / "s.duckdb")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    published = json.loads(path.read_text())
    assert published == {"pid": os.getpid(), "url": url, "token": token}
    assert url.startswith("http://127.0.0.1:")
    port = int(url.rsplit(":", 1)[1])
    # bound to 127.0.0.1 itself, not to every address: another loopback address is refused
    with pytest.raises(urllib.error.URLError, match="refused"):
        await asyncio.to_thread(
            urllib.request.urlopen, f"http://127.0.0.2:{port}/api/runs", timeout=3
        )
    await session.close()
    assert not path.exists()


async def test_missing_or_wrong_token_is_401(served: tuple[Session, str, str]) -> None:
    _, url, token = served
    assert await asyncio.to_thread(call, url + "/api/runs") == (
        401, {"code": "unauthorized", "message": "missing or wrong bearer token"}
    )  # fmt: skip
    status, _ = await asyncio.to_thread(call, url + "/api/runs", token="wrong")
    assert status == 401
    status, body = await asyncio.to_thread(call, url + "/api/runs", token=token)
    assert (status, body) == (200, {"runs": []})


async def test_questions_answered_over_rest_reach_the_agent(
    served: tuple[Session, str, str],
) -> None:
    session, url, token = served
    run = await session.start(it.compile_file(EXAMPLE))
    await run.next_question(timeout=5)
    while len(await run.pending_questions()) < 2:
        await asyncio.sleep(0.01)
    base = f"{url}/api/runs/{run.id}"
    status, pending = await asyncio.to_thread(call, base + "/interactions/pending", token=token)
    assert status == 200
    ids = [q["id"] for q in pending["interactions"]]
    assert pending["interactions"][0]["options"][0] == {
        "id": "formal",
        "label": "Formal",
    }
    # free text for a question that only takes its options: refused, and it stays open
    status, refused = await asyncio.to_thread(
        call, f"{base}/interactions/{ids[0]}/answer", "POST", {"answer": "via rest"}, token
    )
    assert status == 422 and refused["code"] == "invalid_answer"
    assert "formal" in refused["message"] and "casual" in refused["message"]
    status, still = await asyncio.to_thread(call, base + "/interactions/pending", token=token)
    assert [q["id"] for q in still["interactions"]] == ids
    for iid, answer in zip(ids, ["casual", "via rest"], strict=True):
        status, body = await asyncio.to_thread(
            call, f"{base}/interactions/{iid}/answer", "POST", {"answer": answer}, token
        )
        assert (status, body) == (
            200,
            {
                "queued": True,
                "resumed": False,
                "run_status": "running",
                "resume_needed": False,
                "awaiting_worker": False,
            },
        )
    status, again = await asyncio.to_thread(
        call, f"{base}/interactions/{ids[1]}/answer", "POST", {"answer": "twice"}, token
    )
    assert status == 409 and again["code"] == "already_answered" and again["existing"] == "via rest"
    assert await run.wait(10) == "finished"
    assert [a["answer"] for a in run.outputs["gate"]["answers"]] == ["casual", "via rest"]
    status, shown = await asyncio.to_thread(call, base, token=token)
    assert status == 200 and shown["status"] == "finished"
    status, events = await asyncio.to_thread(call, base + "/events?after=0", token=token)
    answered = [e for e in events["events"] if e["type"] == "interaction_answered"]
    assert [e["data"]["answered_by"] for e in answered] == ["rest", "rest"]


async def test_answer_human_resumes_a_paused_run(served: tuple[Session, str, str]) -> None:
    session, url, token = served
    run = await session.start(it.compile(GATE))
    assert await run.wait(10) == "paused_waiting_human"
    base = f"{url}/api/runs/{run.id}"
    status, body = await asyncio.to_thread(
        call, base + "/answer-human", "POST", {"answer": "yes"}, token
    )
    assert status == 200 and body.items() >= {"queued": False, "resumed": True}.items()
    assert await run.wait(10) == "finished"
    assert run.outputs["ok"] == {"text": "yes"}
    status, body = await asyncio.to_thread(
        call, base + "/answer-human", "POST", {"answer": "x"}, token
    )
    assert status == 409 and "not paused" in body["message"]


@pytest.mark.parametrize(
    ("path", "method", "raw", "status", "code"),
    [
        ("/api/runs/nope", "GET", None, 404, "not_found"),
        ("/api/runs/nope/events", "GET", None, 404, "not_found"),
        ("/api/runs/nope/interactions/pending", "GET", None, 404, "not_found"),
        ("/api/runs/nope/interactions/q/answer", "POST", b'{"answer": "x"}', 404, "not_found"),
        ("/api/runs/RUN/interactions/q/answer", "POST", b"{not json", 400, "bad_json"),
        ("/api/runs/RUN/interactions/q/answer", "POST", b"[1, 2]", 400, "bad_request"),
        ("/api/runs/RUN/interactions/q/answer", "POST", b"{}", 400, "bad_request"),
        (
            "/api/runs/RUN/interactions/..%2F..%2Fetc/answer",
            "POST",
            b'{"answer": 1}',
            400,
            "bad_id",
        ),
        ("/api/runs/RUN/events?after=x", "GET", None, 400, "bad_request"),
        ("/api/runs?status=weird", "GET", None, 400, "bad_request"),
        ("/api/runs/RUN/answer-human", "POST", b'{"answers": "no"}', 400, "bad_request"),
    ],
)
async def test_bad_requests_get_clear_4xx(
    served: tuple[Session, str, str],
    path: str,
    method: str,
    raw: bytes | None,
    status: int,
    code: str,
) -> None:
    session, url, token = served
    run = await session.start(it.compile(GATE))
    await run.wait(10)
    got, body = await asyncio.to_thread(
        call, url + path.replace("RUN", run.id), method, None, token, raw
    )
    assert (got, body["code"]) == (status, code)
    assert body["message"]
    assert (await run.refresh()).status == "paused_waiting_human"  # nothing was written


async def test_oversize_and_too_large_answers(served: tuple[Session, str, str]) -> None:
    session, url, token = served
    run = await session.start(it.compile(GATE))
    await run.wait(10)
    (question,) = await run.pending_questions()
    target = f"{url}/api/runs/{run.id}/interactions/{question.id}/answer"
    got, body = await asyncio.to_thread(call, target, "POST", {"answer": "x" * 70_000}, token)
    assert (got, body["code"]) == (422, "invalid_answer")
    oversize = b'{"answer": "' + b"x" * 400_000 + b'"}'
    got, body = await asyncio.to_thread(call, target, "POST", None, token, oversize)
    assert (got, body["code"]) == (413, "too_large")
    assert (await run.pending_questions())[0].pending


#: Who a CLI answer is by, unless --as says: this account's user name.
ME = getpass.getuser()


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CLI), *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_cli_answers_a_run_live_in_another_process(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [str(CLI), "run", str(EXAMPLE), "--scenario", str(SCENARIO)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        first = holder.stdout.readline()
        run_id = first.split()[1]
        db = tmp_path / ".iterion" / "iterion.duckdb"
        assert find_holder(db) is not None
        pending: list[dict[str, Any]] = []
        for _ in range(200):
            listed = cli("runs", "questions", run_id, "--json", cwd=tmp_path)
            assert listed.returncode == 0, listed.stderr
            pending = json.loads(listed.stdout)["interactions"]
            if len(pending) == 2:
                break
        assert len(pending) == 2
        # free text for the question that only takes its options: a message, not a traceback
        refused = cli("runs", "answer", run_id, pending[0]["id"], "anything", cwd=tmp_path)
        assert refused.returncode != 0 and "Traceback" not in refused.stderr
        assert "formal" in refused.stderr and "casual" in refused.stderr
        # an option may be given by its label
        for q, answer in zip(pending, ["Formal", "from another process"], strict=True):
            done = cli("runs", "answer", run_id, q["id"], answer, cwd=tmp_path)
            assert (done.returncode, done.stdout) == (0, "answer queued for the agent\n")
        out, err = holder.communicate(timeout=30)
        assert holder.returncode == 0, err
        assert f"run {run_id} (release_notes): finished" in out
        shown = cli("runs", "show", run_id, "--json", cwd=tmp_path)
        answers = json.loads(shown.stdout)["outputs"]["gate"]["answers"]
        assert [a["answer"] for a in answers] == ["formal", "from another process"]
        # who answered what, and when
        asked = json.loads(shown.stdout)["interactions"]
        assert [(q["kind"], q["answers"], q["answered_by"]) for q in asked] == [
            ("async", "formal", ME), ("async", "from another process", ME)
        ]  # fmt: skip
        assert all(q["answered_at"] for q in asked)
        text = cli("runs", "show", run_id, cwd=tmp_path).stdout
        assert text.count(f'answered "from another process" by {ME} at ') == 1
        assert not holder_file(db).exists()  # removed on a clean exit
    finally:
        if holder.poll() is None:
            holder.send_signal(signal.SIGKILL)
            holder.wait()


def test_cli_without_a_holder_works_on_the_file(tmp_path: Path) -> None:
    (tmp_path / "gate.iter").write_text(GATE)
    ran = cli("run", "gate.iter", "--json", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    assert result["status"] == "paused_waiting_human"
    (question,) = result["questions"]
    answered = cli("runs", "answer", result["id"], question["id"], "yes", cwd=tmp_path)
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout == "answer recorded; the run resumed; it is now finished\n"
    listed = cli("runs", "list", cwd=tmp_path)
    assert f"{result['id']}  finished" in listed.stdout
    shown = json.loads(cli("runs", "show", result["id"], "--json", cwd=tmp_path).stdout)
    (asked,) = shown["interactions"]
    # the person at the terminal, by their account's name (as a notebook's click is named)
    assert (asked["kind"], asked["answers"], asked["answered_by"]) == ("human", "yes", ME)
    missing = cli("runs", "show", "nope", cwd=tmp_path)
    assert (missing.returncode, missing.stderr) == (1, "iterion-nb: no run 'nope'\n")
    bad_var = cli("run", "gate.iter", "--var", "oops", cwd=tmp_path)
    assert bad_var.returncode == 2 and "--var expects KEY=VALUE" in bad_var.stderr


def test_openapi_document_lists_every_route() -> None:
    import re

    import yaml

    from iterion_nb.api.handlers import routes

    spec = yaml.safe_load((ROOT / "docs" / "openapi.yaml").read_text())
    documented = {re.sub(r"\{[^}]+\}", "X", path) for path in spec["paths"]}
    served = {path.replace("([^/]+)", "X") for path, _, _ in routes(None, None)}  # type: ignore[arg-type]
    assert documented == served | {"/api/store/hello"}


async def test_resume_of_a_run_another_process_executes_names_that_process(
    tmp_path: Path,
) -> None:
    """A holder that runs nothing (as the Jupyter server): 409 ``run_owned``, as the CLI says."""
    from iterion_nb.api.holder import open_served_store

    db = tmp_path / "s.duckdb"
    store = open_served_store(db)  # this process holds the file and serves it, runs nothing
    proc = await asyncio.create_subprocess_exec(
        str(CLI), "run", str(EXAMPLE), "--scenario", str(SCENARIO), "--store", str(db),
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        run_id = (await proc.stdout.readline()).decode().split()[1]
        holder = json.loads(holder_file(db).read_text())
        assert holder["pid"] == os.getpid()
        status, body = await asyncio.to_thread(
            call, f"{holder['url']}/api/runs/{run_id}/resume", "POST", {}, holder["token"]
        )
        assert status == 409 and body["code"] == "run_owned", body
        assert body["owner"]["pid"] == proc.pid
        cli_said = await asyncio.to_thread(cli, "resume", run_id, "--store", str(db), cwd=tmp_path)
        assert cli_said.returncode == 3
        assert cli_said.stderr == f"iterion-nb: {body['message']}\n"
        assert f"is owned by process {proc.pid} on host" in body["message"]
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await store.close()
    # once nothing owns it, the refusal is that this process runs no workflows
    store = open_served_store(db)
    try:
        holder = json.loads(holder_file(db).read_text())
        status, body = await asyncio.to_thread(
            call, f"{holder['url']}/api/runs/{run_id}/resume", "POST", {}, holder["token"]
        )
        assert (status, body["code"]) == (409, "not_resumable")
        assert f"`iterion-nb resume {run_id}`" in body["message"]
    finally:
        await store.close()


async def test_an_answer_nothing_will_resume_the_run_for_says_to_resume_it(
    tmp_path: Path,
) -> None:
    """Paused, its process gone, answered through a process that runs nothing: resume it."""
    from iterion_nb.api.holder import open_served_store

    db = tmp_path / "s.duckdb"
    (tmp_path / "gate.iter").write_text(GATE)
    paused = []
    for _ in range(2):  # each `run` stops at the gate and exits: nothing executes the run
        ran = await asyncio.to_thread(
            cli, "run", "gate.iter", "--store", str(db), "--json", cwd=tmp_path
        )
        assert ran.returncode == 0, ran.stderr
        paused.append(json.loads(ran.stdout))
    store = open_served_store(db)  # this process holds the file and serves it, runs nothing
    try:
        holder = json.loads(holder_file(db).read_text())
        run, (question,) = paused[0]["id"], paused[0]["questions"]
        status, body = await asyncio.to_thread(
            call, f"{holder['url']}/api/runs/{run}/interactions/{question['id']}/answer",
            "POST", {"answer": "yes"}, holder["token"],
        )  # fmt: skip
        assert status == 200, body
        assert body == {
            "queued": False, "resumed": False, "run_status": "paused_waiting_human",
            "resume_needed": True,
            "awaiting_worker": False,
        }  # fmt: skip
        run, (question,) = paused[1]["id"], paused[1]["questions"]
        said = await asyncio.to_thread(
            cli, "runs", "answer", run, question["id"], "yes", "--store", str(db), cwd=tmp_path
        )
        assert said.returncode == 0, said.stderr
        assert said.stdout == (
            f"answer recorded; every answer run {run} waits for is in, but nothing executes it:"
            f" resume it with `iterion-nb resume {run} --store {db}`\n"
        )
    finally:
        await store.close()
    resumed = await asyncio.to_thread(cli, "resume", run, "--store", str(db), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr  # and so it goes on, with its answer
    shown = json.loads(cli("runs", "show", run, "--store", str(db), "--json", cwd=tmp_path).stdout)
    assert shown["status"] == "finished"
