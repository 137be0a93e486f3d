"""The CLI on questions of a run that ended: shown as withdrawn, listed nowhere, refused."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.cli.test_cli import run
from tests.runtime.test_answers_after_the_end import ASKS_THEN_ENDS, SCENARIO


def test_a_finished_runs_question_is_shown_withdrawn_and_its_answer_refused(
    tmp_path: Path,
) -> None:
    (tmp_path / "w.iter").write_text(ASKS_THEN_ENDS.format(after="done"))
    (tmp_path / "w.yaml").write_text(yaml.safe_dump(SCENARIO))
    store = str(tmp_path / "s.duckdb")
    done = run("run", "w.iter", "--scenario", "w.yaml", "--store", store, "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout)["id"]
    shown = run("runs", "show", run_id, "--store", store)
    asked = f"{run_id}-toolu_a_0_0_0"
    reason = f"its run {run_id} finished before it was answered, and nothing would read an answer"
    assert f"  asked: {asked} [async] Formal or casual? (withdrawn: {reason})" in (
        shown.stdout.splitlines()
    ), shown.stdout
    listed = run("runs", "questions", "--store", store)
    assert listed.stdout.strip() == "no pending questions", listed.stdout
    answered = run("runs", "answer", run_id, asked, "formal", "--store", store)
    assert answered.returncode == 1
    assert answered.stderr == (
        f"iterion-nb: question '{asked}' was withdrawn: {reason}; it takes no answer\n"
    )
    report = run("report", run_id, "--store", store)
    assert f"withdrawn: {reason}" in report.stdout and "by its agent" not in report.stdout
