"""What a command says when it did not do what was asked: cancel, run, answers, store names."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from tests.cli.test_cli import run
from tests.cli.test_follow import GATE, _start_waiting_run

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
    with psycopg.connect(postgres_url) as conn:
        found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = 'cli_typo_here'")
        assert found.fetchone() is None
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
        f" run {run_id} stays paused until it is resumed (`iterion-nb resume {run_id}`,"
        f" `%iterion resume {run_id}`), which applies the gate's on_expire\n"
    )
    resumed = run("resume", run_id, "--store", store, "--json", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    done = json.loads(resumed.stdout)
    assert (done["status"], done["outputs"]["gate"]) == ("finished", {"text": "no"})
