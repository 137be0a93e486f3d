"""A store this process may read but not write (a read-only mount, an archived or
another user's file): its runs are listed, shown, followed, reported and copied
elsewhere; whatever would write is refused with one clear line, and the file is
left exactly as it was."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from iterion_nb.errors import StoreReadOnlyError
from iterion_nb.session import Session
from iterion_nb.store.duckdb_schema import LATEST
from tests.cli.test_cli import EXAMPLES, run

GATE = 'human gate:\n  instructions: "Ship it?"\n\nworkflow w:\n  entry: gate\n  gate -> done\n'
READ_ONLY = "can only be read here"


@contextlib.contextmanager
def unwritable(path: Path) -> Iterator[None]:
    """``path`` may be read, not written, by this user (root too: immutable)."""
    if os.geteuid() == 0:  # root writes through any mode: make the file immutable
        subprocess.run(["chattr", "+i", str(path)], check=True)
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(path)], check=True)
    else:
        path.chmod(0o444)
        try:
            yield
        finally:
            path.chmod(0o600)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def archived(tmp_path: Path) -> tuple[Path, str, str]:
    """A store holding a finished run and a run paused at a human gate."""
    store = tmp_path / "archive.duckdb"
    scenario = str(EXAMPLES / "minimal.scenario.yaml")
    minimal = (str(EXAMPLES / "minimal.iter"), "--scenario", scenario)
    done = run("run", *minimal, "--store", str(store), "--json")
    assert done.returncode == 0, done.stderr
    (tmp_path / "gate.iter").write_text(GATE)
    paused = run("run", "gate.iter", "--store", str(store), "--json", cwd=tmp_path)
    assert paused.returncode == 0, paused.stderr
    return store, json.loads(done.stdout)["id"], json.loads(paused.stdout)["id"]


def test_its_runs_are_read_and_every_write_says_why_not(
    archived: tuple[Path, str, str], tmp_path: Path
) -> None:
    store, done, paused = archived
    fresh = tmp_path / "fresh.duckdb"  # a run the archive does not hold, to copy into it
    made = run("run", str(EXAMPLES / "minimal.iter"), "--scenario",
               str(EXAMPLES / "minimal.scenario.yaml"), "--store", str(fresh))  # fmt: skip
    assert made.returncode == 0, made.stderr
    before = digest(store)
    with unwritable(store):
        listed = run("runs", "list", "--store", str(store))
        assert listed.returncode == 0, listed.stderr
        assert {line.split()[0] for line in listed.stdout.splitlines()} == {done, paused}
        shown = run("runs", "show", done, "--store", str(store))
        assert shown.returncode == 0 and "finished" in shown.stdout, shown.stderr
        asked = run("runs", "questions", paused, "--store", str(store))
        assert asked.returncode == 0 and "Ship it?" in asked.stdout, asked.stderr
        followed = run("runs", "follow", done, "--store", str(store))
        assert followed.returncode == 0 and "run_finished" in followed.stdout, followed.stderr
        report = run("report", done, "--store", str(store))
        assert report.returncode == 0 and report.stdout.startswith(f"# Run {done}"), report.stderr
        copied = run("store", "copy", str(store), str(tmp_path / "copy.duckdb"))
        assert copied.returncode == 0 and copied.stdout.startswith("2 created"), copied.stderr

        question = json.loads(run("runs", "questions", paused, "--store", str(store),
                                  "--json").stdout)["interactions"][0]["id"]  # fmt: skip
        writes = {
            "run": ("run", str(tmp_path / "gate.iter"), "--store", str(store)),
            "answer": ("runs", "answer", paused, question, "yes", "--store", str(store)),
            "resume": ("resume", paused, "--store", str(store)),
            "cancel": ("cancel", paused, "--store", str(store)),
            "copy into": ("store", "copy", str(fresh), str(store)),
        }
        for what, args in writes.items():
            refused = run(*args)
            assert refused.returncode == 1, (what, refused.stdout, refused.stderr)
            line = refused.stderr.strip()
            assert line.startswith(f"iterion-nb: the run store {store} {READ_ONLY}"), (what, line)
            assert "Traceback" not in refused.stderr and "\n" not in line, (what, line)
        # a copy of runs it already holds has nothing to write: it says so, as on any store
        again = run("store", "copy", str(tmp_path / "copy.duckdb"), str(store))
        assert again.returncode == 0, again.stderr
        assert again.stdout.startswith("0 created, 0 updated, 2 unchanged"), again.stdout
        assert digest(store) == before
    # writable again: the paused run was never touched, and goes on
    answered = run("runs", "answer", paused, question, "yes", "--store", str(store))
    assert answered.returncode == 0, answered.stderr
    assert "finished" in run("runs", "show", paused, "--store", str(store)).stdout


async def test_the_python_api_reads_it_and_refuses_to_start_a_run(
    archived: tuple[Path, str, str],
) -> None:
    store, done, _ = archived
    with unwritable(store):
        session = Session(str(store))
        try:
            assert (await session.store.get_run(done)).status == "finished"
            with pytest.raises(StoreReadOnlyError, match=READ_ONLY):
                await session.start(GATE)
        finally:
            await session.close()


def test_an_older_store_that_cannot_be_updated_says_so(archived: tuple[Path, str, str]) -> None:
    store, _, _ = archived
    con = duckdb.connect(str(store))  # as a store of the version before the latest
    con.execute("DELETE FROM schema_migrations WHERE version = ?", [LATEST])
    con.close()
    before = digest(store)
    why = "the file may not be written" if os.geteuid() == 0 else "no permission to write the file"
    with unwritable(store):
        proc = run("runs", "list", "--store", str(store))
        assert proc.returncode == 1
        assert proc.stderr == (
            f"iterion-nb: the run store {store} {READ_ONLY} ({why}), and it was written by an"
            " older iterion_nb: open it once where it can be written (to update it), or with"
            " the version that wrote it\n"
        )
        assert digest(store) == before
