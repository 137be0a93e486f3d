"""``iterion-nb store copy``: whole runs between stores, idempotent, live runs left alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from iterion_nb.runtime.ports import Store
from iterion_nb.runtime.records import Interaction, Option, Run

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


DIVERGED = (
    "diverged: both stores recorded different things since the last copy; copy the other way,"
    " or pass --force to replace the destination's copy"
)
NEWER = (
    "newer in the destination: it recorded more since the last copy, and the source has"
    " nothing it lacks; copy the other way, or pass --force to replace the destination's copy"
)


def answers_in(run_id: str, store: str, cwd: Path) -> list[object]:
    shown = json.loads(cli("runs", "show", run_id, "--json", "--store", store, cwd=cwd).stdout)
    return [i["answers"] for i in shown["interactions"]]


def test_a_run_answered_differently_in_each_store_is_kept_in_both(
    tmp_path: Path, postgres_url: str
) -> None:
    """Bug 13: the destination's answer was overwritten, silently, with `1 updated`."""
    url = postgres_url + ("&" if "?" in postgres_url else "?") + "schema=cli_diverged"
    (tmp_path / "gate.iter").write_text(GATE)
    paused = json.loads(cli("run", "gate.iter", "--store", "a", "--json", cwd=tmp_path).stdout)
    run_id, (question,) = paused["id"], paused["questions"]
    assert cli("store", "copy", "a", url, cwd=tmp_path).returncode == 0
    for store, answer in (("a", "formal"), (url, "casual")):
        answered = cli("runs", "answer", run_id, question["id"], answer, "--store", store,
                       cwd=tmp_path)  # fmt: skip
        assert answered.returncode == 0, answered.stderr
    # neither way replaces the other's answer; each says why, and exits 1
    for src, dst in (("a", url), (url, "a")):
        kept = cli("store", "copy", src, dst, cwd=tmp_path)
        assert (kept.returncode, kept.stderr) == (1, "")
        assert kept.stdout == (
            f"0 created, 0 updated, 0 unchanged, 1 skipped\n  skipped {run_id}: {DIVERGED}\n"
        )
    assert answers_in(run_id, "a", tmp_path) == ["formal"]
    assert answers_in(run_id, url, tmp_path) == ["casual"]
    as_json = cli("store", "copy", "a", url, "--run", run_id, "--json", cwd=tmp_path)
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout) == {
        "created": 0, "updated": 0, "unchanged": 0,
        "skipped": [{"id": run_id, "why": DIVERGED, "reason": "diverged"}],
    }  # fmt: skip
    # --force replaces, as asked; then the stores agree and a copy changes nothing
    forced = cli("store", "copy", "a", url, "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert forced.stdout == "0 created, 1 updated, 0 unchanged, 0 skipped\n"
    assert answers_in(run_id, url, tmp_path) == ["formal"]
    for src, dst in (("a", url), (url, "a")):
        again = cli("store", "copy", src, dst, cwd=tmp_path)
        assert (again.returncode, again.stdout) == (
            0, "0 created, 0 updated, 1 unchanged, 0 skipped\n"
        )  # fmt: skip


def test_a_destination_that_went_on_is_kept_and_copied_back(tmp_path: Path) -> None:
    """Newer in the destination: skipped (exit 1) while other runs copy; the other way updates."""
    (tmp_path / "gate.iter").write_text(GATE)
    paused = json.loads(cli("run", "gate.iter", "--store", "a", "--json", cwd=tmp_path).stdout)
    run_id, (question,) = paused["id"], paused["questions"]
    assert cli("store", "copy", "a", "b", cwd=tmp_path).returncode == 0
    answered = cli("runs", "answer", run_id, question["id"], "yes", "--store", "b", cwd=tmp_path)
    assert answered.stdout == "answer recorded; the run resumed; it is now finished\n"
    later = json.loads(cli("run", "gate.iter", "--store", "a", "--json", cwd=tmp_path).stdout)
    kept = cli("store", "copy", "a", "b", "--json", cwd=tmp_path)
    assert (kept.returncode, kept.stderr) == (1, "")
    assert json.loads(kept.stdout) == {
        "created": 1, "updated": 0, "unchanged": 0,
        "skipped": [{"id": run_id, "why": NEWER, "reason": "newer"}],
    }  # fmt: skip
    assert answers_in(run_id, "b", tmp_path) == ["yes"]
    assert answers_in(later["id"], "b", tmp_path) == [None]
    # the source is a prefix of the destination: copying that way updates it
    back = cli("store", "copy", "b", "a", cwd=tmp_path)
    assert (back.returncode, back.stdout) == (0, "0 created, 1 updated, 1 unchanged, 0 skipped\n")
    assert answers_in(run_id, "a", tmp_path) == ["yes"]
    for src, dst in (("a", "b"), ("b", "a")):  # idempotent, both ways
        again = cli("store", "copy", src, dst, cwd=tmp_path)
        assert (again.returncode, again.stdout) == (
            0, "0 created, 0 updated, 2 unchanged, 0 skipped\n"
        )  # fmt: skip


@pytest.fixture(params=["duckdb", "postgres", "remote"])
async def destination(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A store to copy into: a DuckDB file, PostgreSQL, or a DuckDB file through its holder."""
    from iterion_nb.session import Session
    from iterion_nb.store import open_duckdb_store
    from iterion_nb.store.holder_file import HolderInfo
    from iterion_nb.store.postgres_store import open_postgres_store
    from iterion_nb.store.remote import RemoteStore

    if request.param == "postgres":
        base = request.getfixturevalue("postgres_url")
        pg = open_postgres_store(f"{base}?schema=t_{uuid.uuid4().hex}")
        yield pg
        await pg.close()
        return
    local = open_duckdb_store(tmp_path / "dst.duckdb")
    if request.param == "duckdb":
        yield local
        await local.close()
        return
    session = Session(local)
    holder = session.serve()
    assert holder is not None
    remote = RemoteStore(local.path, HolderInfo(os.getpid(), holder.url, holder.token))
    yield remote
    await remote.close()
    await session.close()
    await local.close()


async def test_what_only_the_destination_recorded_is_kept_events_or_not(
    tmp_path: Path, destination: Store
) -> None:
    """A question asked, a message queued: no event records them, yet they are history."""
    from iterion_nb.store import open_duckdb_store

    at = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    src, dst = open_duckdb_store(tmp_path / "src.duckdb"), destination

    def question(iid: str, minute: int) -> Interaction:
        return Interaction(iid, "r1", "n", "async", ("Formal or casual?",),
                           datetime(2026, 12, 1, 8, minute, tzinfo=UTC),
                           options=(Option("f", "Formal"), Option("c", "Casual")))  # fmt: skip

    async def copy(force: bool = False) -> str:
        return await dst.import_run(await src.export_run("r1"), force=force)

    try:
        await src.create_run(Run("r1", "w", "h", "paused_waiting_human", at, at))
        await src.add_interaction(question("q1", 0))
        assert (await copy(), await copy()) == ("created", "unchanged")
        # the source goes on: a pending question answered, its message delivered, an artifact
        await src.answer("q1", "formal", answered_by="ana")
        assert await copy() == "updated"
        await src.drain_messages("r1", "n")
        await src.put_artifact("r1", "n", "plan", {"steps": 1})
        assert await copy() == "updated"
        # a question asked only in the destination: newer there; the source then amends
        # one of its own and each has what the other lacks
        await src.add_interaction(question("q2", 1))
        assert await copy() == "updated"
        await dst.add_interaction(question("q3", 2))
        assert await copy() == "newer"
        await src.amend("q2", questions=("Formal, or casual?",))
        assert await copy() == "diverged"
        assert [i.id for i in await dst.pending_interactions("r1")] == ["q2", "q3"]
        assert await copy(force=True) == "updated"
        assert await dst.export_run("r1") == await src.export_run("r1")
        # a message queued only in the destination
        await dst.queue_message("r1", "n", "hello")
        assert (await copy(), await copy()) == ("newer", "newer")
        assert [m.text for m in await dst.drain_messages("r1", "n")] == ["hello"]
    finally:
        await src.close()
