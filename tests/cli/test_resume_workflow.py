"""``iterion-nb resume RUN --workflow FILE [--force]``: resuming on an edited file, as a subprocess.

A run records its workflow's source; ``resume`` goes on with that source
unless ``--workflow FILE`` names another, which is refused when it changed
unless ``--force`` (and always when it is another workflow's).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

import iterion_nb as it
from tests.cli.test_cli import run

FAILING = 'tool t:\n  command: "exit 3"\n\nworkflow w:\n  entry: t\n  t -> done\n'
FIXED = FAILING.replace("exit 3", "echo fixed")
OTHER = FIXED.replace("workflow w:", "workflow other:")
BROKEN = FIXED.replace("t -> done", "t -> nowhere")


def iterion(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``iterion-nb ARGS --store s.duckdb``, in ``tmp_path``."""
    return run(*args, "--store", "s.duckdb", cwd=tmp_path)


def shown(tmp_path: Path, run_id: str) -> dict[str, Any]:
    """``runs show RUN --json``, with the run's checkpoint and source read from the store."""
    proc = iterion(tmp_path, "runs", "show", run_id, "--json")
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)

    async def read() -> None:
        session = it.Session(tmp_path / "s.duckdb", serve=False)
        try:
            record = await session.store.get_run(run_id)
        finally:
            await session.close()
        data["checkpoint"], data["source"] = record.checkpoint, record.source

    asyncio.run(read())
    return data


@pytest.fixture
def failed(tmp_path: Path) -> str:
    """A run of ``r.iter`` that failed resumably at its tool; the file then fixed."""
    (tmp_path / "r.iter").write_text(FAILING)
    proc = iterion(tmp_path, "run", "r.iter", "--json")
    assert proc.returncode == 1, proc.stderr
    run_id: str = json.loads(proc.stdout)["id"]
    assert shown(tmp_path, run_id)["status"] == "failed_resumable"
    (tmp_path / "r.iter").write_text(FIXED)
    return run_id


def test_the_fixed_file_resumes_with_force(tmp_path: Path, failed: str) -> None:
    proc = iterion(tmp_path, "resume", failed, "--workflow", "r.iter", "--force")
    assert proc.returncode == 0, proc.stderr
    assert f"run {failed} (w): finished" in proc.stdout
    after = shown(tmp_path, failed)
    assert after["status"] == "finished"
    assert after["outputs"]["t"]["stdout"] == "fixed\n"
    assert after["source"] == FIXED
    # the run now records the source it finished with: a resume without --workflow uses it
    again = iterion(tmp_path, "resume", failed)
    assert again.returncode == 1 and "is finished and cannot be resumed" in again.stderr


def test_without_workflow_the_recorded_source_runs_again(tmp_path: Path, failed: str) -> None:
    proc = iterion(tmp_path, "resume", failed)
    assert proc.returncode == 1
    assert "command exited with 3" in proc.stdout  # the edited file is not read
    assert shown(tmp_path, failed)["status"] == "failed_resumable"


def test_a_changed_file_without_force_is_refused_and_the_run_untouched(
    tmp_path: Path, failed: str
) -> None:
    before = shown(tmp_path, failed)
    proc = iterion(tmp_path, "resume", failed, "--workflow", "r.iter")
    assert proc.returncode == 1
    assert proc.stdout == ""
    said = proc.stderr
    assert said.startswith(f"iterion-nb: the workflow of run '{failed}' changed since it started")
    assert f"`iterion-nb resume {failed} --workflow r.iter --force --store s.duckdb`" in said
    assert f"recorded workflow 'w' with source sha256 {before['source_hash'][:12]}" in said
    assert "r.iter has sha256" in said and said.rstrip().endswith("nothing changed")
    assert before["checkpoint"] is not None
    assert shown(tmp_path, failed) == before  # status, checkpoint, source: as they were


def test_the_unchanged_file_resumes_without_force(tmp_path: Path, failed: str) -> None:
    (tmp_path / "same.iter").write_text(FAILING)
    proc = iterion(tmp_path, "resume", failed, "--workflow", "same.iter")
    assert proc.returncode == 1, proc.stderr  # it ran again, and failed again
    assert "command exited with 3" in proc.stdout


def test_force_alone_is_a_usage_error(tmp_path: Path, failed: str) -> None:
    before = shown(tmp_path, failed)
    proc = iterion(tmp_path, "resume", failed, "--force")
    assert proc.returncode == 2
    assert proc.stderr == (
        "iterion-nb: --force needs --workflow FILE: without it the run resumes its recorded"
        " source (give the edited workflow file with --workflow FILE --force)\n"
    )
    assert shown(tmp_path, failed) == before


def test_another_workflow_is_refused_even_with_force(tmp_path: Path, failed: str) -> None:
    before = shown(tmp_path, failed)
    (tmp_path / "other.iter").write_text(OTHER)
    proc = iterion(tmp_path, "resume", failed, "--workflow", "other.iter", "--force")
    assert proc.returncode == 1
    assert f"run '{failed}' is a run of workflow 'w', not 'other'" in proc.stderr
    assert shown(tmp_path, failed) == before


def test_a_file_with_errors_is_reported_as_file_line_col(tmp_path: Path, failed: str) -> None:
    before = shown(tmp_path, failed)
    (tmp_path / "broken.iter").write_text(BROKEN)
    proc = iterion(tmp_path, "resume", failed, "--workflow", "broken.iter", "--force")
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[:2] == [
        "iterion-nb: broken.iter: 1 error",
        "broken.iter:6:3: error[C001]: unknown node 'nowhere' in edge",
    ]
    missing = iterion(tmp_path, "resume", failed, "--workflow", "nope.iter", "--force")
    assert missing.returncode == 2
    assert missing.stderr == "iterion-nb: nope.iter: no such file\n"
    assert shown(tmp_path, failed) == before


LOOPS = """\
schema verdict:
  ok: bool

agent judge:
  model: "scripted"
  output: verdict

workflow w:
  entry: judge
  judge -> done when ok
  judge -> judge when not ok as again({bound})
"""
FOUR_NOES = (  # one visit a loop round: no four times, then yes
    "nodes:\n  judge:\n    visits:\n"
    + "      - [{output: {ok: false}}]\n" * 4
    + "      - [{output: {ok: true}}]\n"
)


def test_a_run_stopped_by_its_loop_bound_says_how_to_raise_it_and_goes_on(
    tmp_path: Path,
) -> None:
    (tmp_path / "l.iter").write_text(LOOPS.format(bound=2))
    (tmp_path / "l.yaml").write_text(FOUR_NOES)
    done = iterion(tmp_path, "run", "l.iter", "--scenario", "l.yaml")
    assert done.returncode == 1
    run_id = done.stdout.split()[1]
    assert "loop 'again' is exhausted (2 iterations)" in done.stdout
    assert done.stdout.rstrip().endswith(
        "it stopped at a limit its workflow sets: raise it in the file, then"
        f" `iterion-nb resume {run_id} --workflow FILE --force --store s.duckdb`"
    ), done.stdout
    (tmp_path / "l.iter").write_text(LOOPS.format(bound=5))
    resumed = iterion(tmp_path, "resume", run_id, "--workflow", "l.iter", "--force")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"run {run_id} (w): finished" in resumed.stdout


def test_a_resume_scenario_naming_a_node_the_run_lacks_is_refused(
    tmp_path: Path, failed: str
) -> None:
    before = shown(tmp_path, failed)
    (tmp_path / "typo.yaml").write_text("nodes:\n  tt:\n    - output: {x: 1}\n")
    proc = iterion(tmp_path, "resume", failed, "--scenario", "typo.yaml")
    assert (proc.returncode, proc.stderr) == (
        2, "iterion-nb: scenario: typo.yaml: node 'tt' is not in workflow 'w' (its nodes: t)\n",
    )  # fmt: skip
    assert shown(tmp_path, failed) == before

    async def from_python() -> None:  # the Python API checks it too, before anything changes
        session = it.Session(tmp_path / "s.duckdb", serve=False)
        try:
            with pytest.raises(it.IterionError, match="node 'tt' is not in workflow 'w'"):
                await session.resume(failed, scenario={"nodes": {"tt": [{"output": {}}]}})
        finally:
            await session.close()

    asyncio.run(from_python())
    assert shown(tmp_path, failed) == before


def test_a_workflow_without_the_node_the_run_stands_at_is_refused(
    tmp_path: Path, failed: str
) -> None:
    """It was taken, recorded, and the run broke for good (its error: node 't': 't')."""
    before = shown(tmp_path, failed)
    (tmp_path / "r.iter").write_text(FIXED.replace("tool t:", "tool u:").replace("t ->", "u ->")
                                     .replace("entry: t", "entry: u"))  # fmt: skip
    proc = iterion(tmp_path, "resume", failed, "--workflow", "r.iter", "--force")
    assert (proc.returncode, proc.stderr) == (
        1, f"iterion-nb: run '{failed}' stands at 't', which the workflow given does not have:"
        " it can go on only where it stopped (keep that node, or resume with the recorded"
        " source); nothing changed\n",
    )  # fmt: skip
    assert shown(tmp_path, failed) == before


def test_a_finished_run_says_so_before_any_word_on_its_source(tmp_path: Path) -> None:
    (tmp_path / "r.iter").write_text(FIXED)
    done = iterion(tmp_path, "run", "r.iter", "--json")
    run_id = json.loads(done.stdout)["id"]
    (tmp_path / "r.iter").write_text(FIXED.replace("echo fixed", "echo changed"))
    for extra in ((), ("--force",)):  # it once said "add --force", then that it cannot
        proc = iterion(tmp_path, "resume", run_id, "--workflow", "r.iter", *extra)
        assert (proc.returncode, proc.stderr) == (
            1, f"iterion-nb: run '{run_id}' is finished and cannot be resumed\n"
        ), extra  # fmt: skip
