"""``iterion-nb store copy``: whole runs between stores, idempotent, live runs left alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CLI = str(Path(sys.executable).parent / "iterion-nb")
GATE = 'human gate:\n  instructions: "Go?"\n\nworkflow w:\n  entry: gate\n  gate -> done\n'


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def test_copy_moves_whole_runs_and_copying_again_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / "gate.iter").write_text(GATE)
    paused = json.loads(cli("run", "gate.iter", "--store", "a", "--json", cwd=tmp_path).stdout)
    (question,) = paused["questions"]
    done = json.loads(cli("run", "gate.iter", "--store", "a", "--json", cwd=tmp_path).stdout)
    answered = cli("runs", "answer", done["id"], done["questions"][0]["id"], "yes",
                   "--store", "a", cwd=tmp_path)  # fmt: skip
    assert answered.returncode == 0, answered.stderr
    first = cli("store", "copy", "a", "b", "--json", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout) == {"created": 2, "updated": 0, "unchanged": 0, "skipped": []}
    again = cli("store", "copy", "a", "b", cwd=tmp_path)
    assert again.stdout == "0 created, 0 updated, 2 unchanged, 0 skipped\n"
    # the copy is the run: status, answers and who gave them, events with their seqs
    shown = {
        s: json.loads(cli("runs", "show", done["id"], "--json", "--store", s, cwd=tmp_path).stdout)
        for s in ("a", "b")
    }
    assert shown["a"]["status"] == shown["b"]["status"] == "finished"
    assert shown["a"]["interactions"] == shown["b"]["interactions"]
    assert shown["a"]["events"] == shown["b"]["events"]
    # the paused run resumes from the copy, in the other store
    resumed = cli("runs", "answer", paused["id"], question["id"], "yes", "--store", "b",
                  cwd=tmp_path)  # fmt: skip
    assert resumed.stdout == "answer recorded; the run resumed; it is now finished\n"
    # the destination went on: copying from it back updates the source
    back = cli("store", "copy", "b", "a", "--json", cwd=tmp_path)
    assert json.loads(back.stdout)["updated"] == 1
    same = cli("store", "copy", "./a", "a", cwd=tmp_path)
    assert (same.returncode, same.stderr) == (1, "iterion-nb: SRC and DST are the same store\n")


def test_the_cli_on_a_postgresql_store_and_copying_to_it(tmp_path: Path, postgres_url: str) -> None:
    """Every run command takes a postgresql:// URL; no holder, no local file."""
    url = postgres_url + ("&" if "?" in postgres_url else "?") + "schema=cli_copy"
    (tmp_path / "gate.iter").write_text(GATE)
    paused = json.loads(cli("run", "gate.iter", "--store", url, "--json", cwd=tmp_path).stdout)
    assert paused["status"] == "paused_waiting_human"
    listed = cli("runs", "list", "--store", url, cwd=tmp_path)
    assert f"{paused['id']}  paused_waiting_human" in listed.stdout, listed.stderr
    (question,) = json.loads(
        cli("runs", "questions", paused["id"], "--store", url, "--json", cwd=tmp_path).stdout
    )["interactions"]
    answered = cli("runs", "answer", paused["id"], question["id"], "yes", "--store", url,
                   cwd=tmp_path)  # fmt: skip
    assert answered.stdout == "answer recorded; the run resumed; it is now finished\n"
    assert not any(p.suffix == ".duckdb" for p in tmp_path.rglob("*"))  # nothing local
    # a local store moves up to PostgreSQL, idempotently
    local = json.loads(cli("run", "gate.iter", "--store", "a", "--json", cwd=tmp_path).stdout)
    up = json.loads(cli("store", "copy", "a", url, "--json", cwd=tmp_path).stdout)
    assert up == {"created": 1, "updated": 0, "unchanged": 0, "skipped": []}
    again = json.loads(cli("store", "copy", "a", url, "--json", cwd=tmp_path).stdout)
    assert again["unchanged"] == 1
    moved = json.loads(cli("runs", "show", local["id"], "--store", url, "--json",
                           cwd=tmp_path).stdout)  # fmt: skip
    assert moved["status"] == "paused_waiting_human"


def test_a_source_that_is_no_store_is_named_and_nothing_is_made(tmp_path: Path) -> None:
    """The hint once pointed at `--store`, an option `store copy` has not."""
    done = cli("store", "copy", "nosrc", "dst", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        f"iterion-nb: no run store at {tmp_path / 'nosrc' / 'iterion.duckdb'} (nothing was"
        " created: `iterion-nb run` makes one; SRC names another)\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_named_run_the_source_lacks_makes_no_destination(tmp_path: Path) -> None:
    (tmp_path / "gate.iter").write_text(GATE)
    assert cli("run", "gate.iter", "--store", "src.duckdb", cwd=tmp_path).returncode == 0
    done = cli("store", "copy", "src.duckdb", "dst.duckdb", "--run", "nosuch", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr == "iterion-nb: the source has no run 'nosuch'; nothing was copied\n"
    assert not (tmp_path / "dst.duckdb").exists()


def test_a_run_waiting_in_a_clusters_queue_is_skipped_as_queued(tmp_path: Path) -> None:
    """Once named as `owned by process N` — the process that queued it, long gone."""
    import asyncio
    from datetime import UTC, datetime

    from iterion_nb.runtime.ownership import Claimant
    from iterion_nb.runtime.records import Run
    from iterion_nb.store import open_duckdb_store

    async def queue_one() -> None:
        store = open_duckdb_store(tmp_path / "a")
        now = datetime.now(UTC)
        await store.create_run(Run("q1", "w", "h", "running", now, now),
                               owner=Claimant.queue(600))  # fmt: skip
        await store.close()

    asyncio.run(queue_one())
    copied = cli("store", "copy", "a", "b", "--json", cwd=tmp_path)
    assert copied.returncode == 0, copied.stderr
    (skipped,) = json.loads(copied.stdout)["skipped"]
    assert skipped["id"] == "q1"
    assert skipped["why"].startswith("running in the source (waits in a cluster's queue (queued by")
