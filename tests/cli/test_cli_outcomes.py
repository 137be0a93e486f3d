"""What a command says when it did not do what was asked: cancel, run, answers, store names."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from tests.api.test_ownership import HOLDER
from tests.cli.test_cli import SCRIPT, run
from tests.cli.test_follow import GATE, WAITING, _start_waiting_run

ONE_TOOL = 'tool hello:\n  command: "echo hi"\n\nworkflow w:\n  entry: hello\n  hello -> done\n'


def _started(tmp_path: Path, source: str, store: str) -> dict[str, object]:
    (tmp_path / "w.iter").write_text(source)
    started = run("run", "w.iter", "--store", store, "--json", cwd=tmp_path)
    assert started.stdout, started.stderr
    return dict(json.loads(started.stdout))


def test_cancelling_a_run_that_ended_says_nothing_was_cancelled(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    done = _started(tmp_path, ONE_TOOL, store)
    assert done["status"] == "finished"
    refused = run("cancel", str(done["id"]), "--store", store)
    assert (refused.returncode, refused.stderr) == (
        1, f"iterion-nb: run {done['id']} already finished; nothing to cancel\n"
    )  # fmt: skip
    paused = _started(tmp_path, GATE, store)
    for _ in range(2):  # a paused run is cancelled; cancelling it again changes nothing
        cancelled = run("cancel", str(paused["id"]), "--store", store)
        assert (cancelled.returncode, cancelled.stdout) == (0, "cancelled\n"), cancelled.stderr


#: What a JupyterLab server does with the store: hold and serve it, execute nothing.
BARE_HOLDER = """
import asyncio, sys
from iterion_nb.api.holder import open_served_store

async def main():
    store = open_served_store(sys.argv[1])
    await store.list_runs(limit=1)
    print("ready", flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


def test_a_cancel_through_a_holder_that_runs_nothing_waits_for_the_run_to_stop(
    tmp_path: Path,
) -> None:
    """Once it returned at once with `running — cancel requested: … queued for a cluster …`."""
    store = str(tmp_path / "store")
    holder = subprocess.Popen(
        [sys.executable, "-c", BARE_HOLDER, store], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        (tmp_path / "w.iter").write_text(WAITING)
        runner = subprocess.Popen(
            [str(SCRIPT), "run", "w.iter", "--store", store], cwd=tmp_path,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert runner.stdout is not None
        run_id = runner.stdout.readline().split()[1]
        began = time.monotonic()
        cancelled = run("cancel", run_id, "--store", store)
        assert (cancelled.returncode, cancelled.stdout) == (0, "cancelled\n"), cancelled.stderr
        assert time.monotonic() - began < 25  # its owner stopped it at a heartbeat
        out, err = runner.communicate(timeout=60)
        assert runner.returncode == 1 and f"run {run_id} (w): cancelled" in out, (out, err)
    finally:
        for proc in (holder, locals().get("runner")):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


def test_a_run_cancelled_from_another_terminal_exits_1_and_says_how_to_go_on(
    tmp_path: Path,
) -> None:
    runner, store, run_id = _start_waiting_run(tmp_path)
    try:
        cancelled = run("cancel", run_id, "--store", store)  # through the running command
        assert cancelled.returncode == 0, cancelled.stderr
        out, err = runner.communicate(timeout=60)
    finally:
        runner.kill() if runner.poll() is None else None
    assert runner.returncode == 1, (out, err)
    assert f"run {run_id} (w): cancelled" in out
    assert out.rstrip().endswith(
        f"`iterion-nb resume {run_id} --store {store}` goes on from its checkpoint"
    )
    (tmp_path / "go.txt").write_text("go")
    resumed = run("resume", run_id, "--store", store, cwd=tmp_path)
    assert resumed.returncode == 0 and f"run {run_id} (w): finished" in resumed.stdout


def test_the_json_hint_comes_only_where_json_would_help(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    paused = _started(tmp_path, GATE, store)
    asked = run("runs", "questions", str(paused["id"]), "--store", store, "--json")
    (question,) = json.loads(asked.stdout)["interactions"]
    huge = run("runs", "answer", str(paused["id"]), question["id"], "x" * 70_000, "--store", store)
    assert huge.returncode == 1
    assert "answers are limited to 65,536 bytes" in huge.stderr
    assert "--json-value" not in huge.stderr  # JSON would be as long


def test_a_misspelt_postgresql_schema_is_no_store_and_is_not_created(
    tmp_path: Path, postgres_url: str
) -> None:
    url = postgres_url + ("&" if "?" in postgres_url else "?") + "schema=cli_typo_here"
    for argv in (["runs", "list"], ["runs", "show", "r1"], ["runs", "follow", "r1"]):
        refused = run(*argv, "--store", url)
        assert refused.returncode == 1, (argv, refused.stdout)
        assert refused.stderr.startswith(
            "iterion-nb: no run store in schema 'cli_typo_here' of postgresql://"
        ), refused.stderr
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = 'cli_typo_here'")
        assert found.fetchone() is None
        # a schema that is there but holds no store (another application's, say) is none either
        conn.execute("CREATE SCHEMA IF NOT EXISTS cli_not_ours")
        other = postgres_url + ("&" if "?" in postgres_url else "?") + "schema=cli_not_ours"
        refused = run("runs", "list", "--store", other)
        assert refused.returncode == 1 and "no run store in schema 'cli_not_ours'" in (
            refused.stderr
        )
        tables = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'cli_not_ours'"
        ).fetchone()
        assert tables == (0,)
    made = _started(tmp_path, ONE_TOOL, url)  # `run` makes it
    listed = run("runs", "list", "--store", url)
    assert listed.returncode == 0 and str(made["id"]) in listed.stdout


def test_a_file_named_as_the_store_is_said_to_be_a_file(tmp_path: Path) -> None:
    (tmp_path / "w.iter").write_text(ONE_TOOL)
    refused = run("runs", "list", "--store", str(tmp_path / "w.iter"))
    assert (refused.returncode, refused.stderr) == (
        1, f"iterion-nb: {tmp_path / 'w.iter'} is a file, not a run store (a store is a"
        " directory holding iterion.duckdb, or a .duckdb file)\n",
    )  # fmt: skip


def test_validate_counts_in_the_singular(tmp_path: Path) -> None:
    (tmp_path / "w.iter").write_text(ONE_TOOL)
    said = run("validate", "w.iter", cwd=tmp_path)
    assert said.stdout == "w.iter: ok — workflow 'w', 1 node, 1 edge\n"


EXPIRING = """\
human gate:
  instructions: "Ship it?"
  expires_in: "3s"
  on_expire: default("no")

workflow w:
  entry: gate
  gate -> done
"""


def test_a_late_answer_to_a_gate_nothing_keeps_says_resume_applies_its_default(
    tmp_path: Path,
) -> None:
    store = str(tmp_path / "store")
    paused = _started(tmp_path, EXPIRING, store)  # `run` exits: nothing keeps the run
    run_id = str(paused["id"])
    questions = paused["questions"]  # asked as it paused
    assert isinstance(questions, list)
    (question,) = questions
    expires = datetime.fromisoformat(question["expires_at"])
    time.sleep(max(0.0, (expires - datetime.now(UTC)).total_seconds()) + 0.2)
    late = run("runs", "answer", run_id, question["id"], "yes", "--store", store)
    assert late.returncode == 1
    assert late.stderr == (
        f"iterion-nb: question '{question['id']}' expired unanswered; it takes no answer;"
        f" run {run_id} stays paused until it is resumed, which applies the gate's on_expire:"
        f" `iterion-nb resume {run_id} --store {store}`\n"
    )
    resumed = run("resume", run_id, "--store", store, "--json", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    done = json.loads(resumed.stdout)
    assert (done["status"], done["outputs"]["gate"]) == ("finished", {"text": "no"})


def test_a_postgresql_server_that_is_not_there_is_said_once(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"postgresql://someone:secret@127.0.0.1:{port}/db"
    refused = run("runs", "list", "--store", url)
    assert refused.returncode == 1
    assert refused.stderr.startswith(
        f"iterion-nb: cannot connect to the run store postgresql://someone:***@127.0.0.1:{port}/db:"
    ), refused.stderr
    assert refused.stderr.count("cannot connect") == 1 and "secret" not in refused.stderr
    # libpq's hint, on a line of its own there, joins the message's one line
    assert refused.stderr.count("\n") == 1 and "\t" not in refused.stderr
    assert "Connection refused — Is the server running on that host" in refused.stderr


def test_a_run_taken_over_while_its_command_was_frozen_says_who_has_it(tmp_path: Path) -> None:
    """The command that lost its run points to where it goes on, not to a resume."""
    store = tmp_path / "store" / "runs.duckdb"
    store.parent.mkdir()
    holder = subprocess.Popen(  # holds the file, as the Jupyter server would
        [sys.executable, "-c", HOLDER, str(store)], stdout=subprocess.PIPE, text=True
    )
    runner = resumer = None
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        (tmp_path / "w.iter").write_text(WAITING)
        runner = subprocess.Popen(
            [str(SCRIPT), "run", "w.iter", "--store", str(store)], cwd=tmp_path,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert runner.stdout is not None
        run_id = runner.stdout.readline().split()[1]
        runner.send_signal(signal.SIGSTOP)  # alive, but renews nothing: its lease lapses
        deadline = time.monotonic() + 40
        while _status(store, run_id) != "interrupted":
            assert time.monotonic() < deadline
            time.sleep(0.2)
        resumer = subprocess.Popen(
            [str(SCRIPT), "resume", run_id, "--store", str(store)], cwd=tmp_path,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        while _status(store, run_id) != "running":
            assert time.monotonic() < deadline
            time.sleep(0.2)
        runner.send_signal(signal.SIGCONT)  # it finds its lease gone
        out, err = runner.communicate(timeout=60)
        assert runner.returncode == 1, (out, err)
        assert (
            f"run {run_id} is executed by another process now (pid {resumer.pid} on " in out
            and f"`iterion-nb runs follow {run_id} --store {store}`" in out
        ), out
        assert "iterion-nb resume" not in out
        (tmp_path / "go.txt").write_text("go")
        assert resumer.wait(timeout=60) == 0
    finally:
        for proc in (runner, resumer, holder):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait(timeout=30)


def _status(store: Path, run_id: str) -> str:
    shown = run("runs", "show", run_id, "--store", str(store), "--json")
    assert shown.returncode == 0, shown.stderr
    return str(json.loads(shown.stdout)["status"])
