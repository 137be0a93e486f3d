"""A client checks a holder before it trusts it; stale holder files lock nobody out.

Real processes, real HTTP on loopback, real files: holder files that name
another host, a rogue on a port, a forged proof, a dead or reused pid, a
link, a file of another user; holders that lie, hang up or die mid-request;
the modes of the files the store creates.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from iterion_nb.runtime.records import Interaction, Run
from iterion_nb.store import open_duckdb_store
from iterion_nb.store.holder_file import (
    HolderChannel,
    HolderInfo,
    UntrustedHolderError,
    find_holder,
    holder_file,
    probe_holder,
    publish_holder_file,
    read_holder_file,
)
from iterion_nb.store.remote import open_store

from .holders import Raw, holder_of, start_holder, stop

CLI = Path(sys.executable).parent / "iterion-nb"
FAKE = Path(__file__).with_name("fake_holder.py")
GATE = 'human ok:\n  instructions: "Ship it?"\n\nworkflow w:\n  entry: ok\n  ok -> done\n'


def cli(*args: str, cwd: Path, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CLI), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def no_traceback(done: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in done.stdout + done.stderr, done.stderr


async def seed(db: Path) -> None:
    """A store with one paused run that waits on one question."""
    from datetime import UTC, datetime

    store = open_duckdb_store(db)
    now = datetime.now(UTC)
    await store.create_run(Run("r1", "w", "h", "paused_waiting_human", now, now))
    await store.add_interaction(Interaction("q1", "r1", "ask", "async", ("Formal?",), now))
    await store.close()


@pytest.fixture
def sleeper() -> Iterator[int]:
    """A live process that is no holder (a reused pid)."""
    proc = subprocess.Popen(["sleep", "120"])
    yield proc.pid
    stop(proc)


def fake(db: Path, mode: str, log: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, str(FAKE), str(db), mode, str(log)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def received(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def write_holder_file(db: Path, **content: Any) -> Path:
    path = holder_file(db)
    path.write_text(json.dumps(content))
    path.chmod(0o600)
    return path


# -- the file itself --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://10.1.2.3:8080", "not a loopback address"),
        ("http://example.com:80", "is not http://ADDRESS:PORT"),
        ("http://localhost:80", "is not http://ADDRESS:PORT"),
        ("https://127.0.0.1:80", "is not http://ADDRESS:PORT"),
        ("http://user:pw@127.0.0.1:80", "is not http://ADDRESS:PORT"),
        ("http://127.0.0.1:80/elsewhere", "is not http://ADDRESS:PORT"),
        ("http://[::ffff:127.0.0.1]:80", "not a loopback address"),
        ("http://127.0.0.1", "no valid port"),
        ("http://127.0.0.1:99999", "is not http://ADDRESS:PORT"),
    ],
)
def test_only_loopback_urls_are_believed(tmp_path: Path, url: str, why: str) -> None:
    db = tmp_path / "s.duckdb"
    write_holder_file(db, pid=os.getppid(), url=url, token="t" * 32)
    with pytest.raises(UntrustedHolderError, match=why):
        read_holder_file(db)
    info, reason = probe_holder(db)
    assert info is None and reason is not None and why in reason


@pytest.mark.parametrize("url", ["http://127.0.0.1:1", "http://127.9.9.9:65000", "http://[::1]:5"])
def test_loopback_urls_pass_the_file_check(tmp_path: Path, url: str) -> None:
    db = tmp_path / "s.duckdb"
    write_holder_file(db, pid=1234, url=url, token="t" * 32)
    assert read_holder_file(db) == HolderInfo(1234, url, "t" * 32)


def test_a_holder_file_that_is_a_link_or_not_private_is_not_believed(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    real = tmp_path / "elsewhere.json"
    real.write_text(json.dumps({"pid": 1, "url": "http://127.0.0.1:5", "token": "t" * 32}))
    real.chmod(0o600)
    holder_file(db).symlink_to(real)
    with pytest.raises(UntrustedHolderError, match="symbolic link"):
        read_holder_file(db)
    holder_file(db).unlink()
    write_holder_file(db, pid=1, url="http://127.0.0.1:5", token="t" * 32).chmod(0o644)
    with pytest.raises(UntrustedHolderError, match="not private"):
        read_holder_file(db)
    holder_file(db).write_text("[" * 50_000)
    holder_file(db).chmod(0o600)
    with pytest.raises(UntrustedHolderError, match="not a holder's"):
        read_holder_file(db)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_holder_file_of_another_user_is_not_believed(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    path = write_holder_file(db, pid=1, url="http://127.0.0.1:5", token="t" * 32)
    os.chown(path, 65534, 65534)
    with pytest.raises(UntrustedHolderError, match="belongs to uid 65534"):
        read_holder_file(db)


def test_publishing_never_follows_a_planted_link(tmp_path: Path, monkeypatch: Any) -> None:
    db = tmp_path / "s.duckdb"
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    # a link where the holder file goes, and links at the temporary names it would use
    holder_file(db).symlink_to(victim)
    names = iter(["aaaa", "bbbb"])
    monkeypatch.setattr("secrets.token_hex", lambda n=None: next(names))
    planted = holder_file(db).with_name(holder_file(db).name + ".aaaa.tmp")
    planted.symlink_to(victim)
    publish_holder_file(db, HolderInfo(os.getpid(), "http://127.0.0.1:5", "t" * 32))
    assert victim.read_text() == "precious"
    assert planted.is_symlink()  # its name was taken: another was used, not this one followed
    path = holder_file(db)
    assert not path.is_symlink() and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text())["pid"] == os.getpid()


# -- what answers on the port ---------------------------------------------------------------
@pytest.mark.parametrize("mode", ["rogue", "forger"])
def test_no_secret_goes_to_a_process_that_cannot_prove_it_holds_the_store(
    tmp_path: Path, mode: str
) -> None:
    db = tmp_path / ".iterion" / "iterion.duckdb"
    db.parent.mkdir()
    asyncio.run(seed(db))
    log = tmp_path / "received.jsonl"
    rogue = fake(db, mode, log)
    try:
        assert find_holder(db) is None
        _, why = probe_holder(db)
        assert why is not None and ("not a store holder" in why or "cannot prove" in why)
        listed = cli("runs", "list", cwd=tmp_path)
        answered = cli("runs", "answer", "r1", "q1", "my secret answer", cwd=tmp_path)
        (tmp_path / "gate.iter").write_text(GATE)
        ran = cli("run", "gate.iter", cwd=tmp_path)
        report = cli("report", "r1", cwd=tmp_path)
    finally:
        stop(rogue)
    for done in (listed, answered, ran, report):
        no_traceback(done)
        assert done.returncode == 0, done.stderr
    assert "r1  paused_waiting_human" in listed.stdout
    assert answered.stdout.startswith("answer ")
    # all the rogue ever saw: hellos, without a token or a body
    seen = received(log)
    assert seen and all(r["path"].startswith("/api/store/hello?nonce=") for r in seen)
    assert all(r["authorization"] is None and r["body"] == "" for r in seen)
    assert "my secret answer" not in log.read_text()


def test_a_stale_holder_file_with_a_reused_pid_locks_nobody_out(
    tmp_path: Path, sleeper: int
) -> None:
    db = tmp_path / ".iterion" / "iterion.duckdb"
    db.parent.mkdir()
    asyncio.run(seed(db))
    # a holder that died; its pid now runs something else, its port is closed
    write_holder_file(db, pid=sleeper, url="http://127.0.0.1:9", token="t" * 32)
    assert probe_holder(db)[1] is not None
    (tmp_path / "gate.iter").write_text(GATE)
    started = time.monotonic()
    ran = cli("run", "gate.iter", "--json", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    gate = json.loads(ran.stdout)["id"]
    write_holder_file(db, pid=sleeper, url="http://127.0.0.1:9", token="t" * 32)
    commands = [
        ("runs", "list"), ("runs", "questions", "r1"), ("resume", gate),
        ("runs", "answer", "r1", "q1", "x"), ("cancel", "r1"), ("report", "r1"),
    ]  # fmt: skip
    for args in commands:
        done = cli(*args, cwd=tmp_path)
        no_traceback(done)
        assert done.returncode == 0, (args, done.stderr)
    assert time.monotonic() - started < 30
    # whoever held the file since removed the stale holder file
    assert not holder_file(db).exists()


def test_a_dead_pid_is_stale_too(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    asyncio.run(seed(db))
    gone = subprocess.Popen(["true"])
    gone.wait()
    write_holder_file(db, pid=gone.pid, url="http://127.0.0.1:9", token="t" * 32)
    assert probe_holder(db) == (None, f"the holder file names process {gone.pid}, which is gone")
    store = open_store(db)
    try:
        assert type(store).__name__ == "DuckDBStore"
        assert not holder_file(db).exists()
    finally:
        asyncio.run(store.close())


# -- a real holder proves itself -----------------------------------------------------------------
def test_a_real_holder_proves_itself_and_its_hello_needs_no_token(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    proc = start_holder(db)
    try:
        info = holder_of(db)
        channel = HolderChannel(info, db)
        status, body = channel.request("GET", "/api/runs/r1")
        assert status == 200 and json.loads(body)["id"] == "r1"
        raw = Raw(info)
        status, data = raw.send("GET", "/api/store/hello?nonce=" + "ab" * 16, auth=False)
        hello = json.loads(data)
        assert status == 200 and hello["pid"] == proc.pid and len(hello["proof"]) == 64
        assert info.token not in data.decode()
        status, data = raw.send("GET", "/api/store/hello?nonce=nothex", auth=False)
        assert (status, json.loads(data)["code"]) == (400, "bad_request")
        # the same holder file beside a copy of the store proves nothing for the copy
        copy = tmp_path / "copy" / "s.duckdb"
        copy.parent.mkdir()
        copy.write_bytes(b"")
        with pytest.raises(UntrustedHolderError, match="cannot prove"):
            HolderChannel(info, copy).connect()
        # a token that is not the holder's: its proof does not match
        with pytest.raises(UntrustedHolderError, match="cannot prove"):
            HolderChannel(HolderInfo(info.pid, info.url, "x" * 43), db).connect()
        raw.close()
        channel.close()
    finally:
        stop(proc)


# -- holders that lie, hang up or die -------------------------------------------------------------
def test_a_holder_that_answers_garbage_is_left_for_the_file(tmp_path: Path) -> None:
    db = tmp_path / ".iterion" / "iterion.duckdb"
    db.parent.mkdir()
    asyncio.run(seed(db))
    liar = fake(db, "garbage", tmp_path / "log.jsonl")
    try:
        assert find_holder(db) is not None  # it proves itself: it knows its token
        listed = cli("runs", "list", cwd=tmp_path)
        shown = cli("runs", "show", "r1", cwd=tmp_path)
        answered = cli("runs", "answer", "r1", "q1", "yes", cwd=tmp_path)
        report = cli("report", "r1", cwd=tmp_path)
        copied = cli("store", "copy", ".iterion", "copy.duckdb", cwd=tmp_path)
    finally:
        stop(liar)
    for done in (listed, shown, answered, report, copied):
        no_traceback(done)
        assert done.returncode == 0, done.stderr
    assert "r1  paused_waiting_human" in listed.stdout
    assert "1 created" in copied.stdout


def test_a_holder_that_answers_the_wrong_shape_is_an_error_not_a_traceback(
    tmp_path: Path,
) -> None:
    db = tmp_path / ".iterion" / "iterion.duckdb"
    db.parent.mkdir()
    asyncio.run(seed(db))
    liar = fake(db, "shapeless", tmp_path / "log.jsonl")
    try:
        results = [cli("runs", *args, cwd=tmp_path) for args in
                   (["list"], ["questions", "r1"], ["show", "r1"])]  # fmt: skip
    finally:
        stop(liar)
    for done in results:
        no_traceback(done)
        assert done.returncode == 1
        assert "iterion-nb: the store holder sent a reply this command does not understand" in (
            done.stderr
        )


def test_an_answer_the_holder_recorded_before_it_hung_up_counts_once(tmp_path: Path) -> None:
    db = tmp_path / ".iterion" / "iterion.duckdb"
    db.parent.mkdir()
    asyncio.run(seed(db))

    async def landed() -> None:  # what the holder wrote before the connection dropped
        store = open_duckdb_store(db)
        # by this account: who `runs answer` records without --as
        await store.answer("q1", "yes", answered_by=getpass.getuser())
        await store.close()

    asyncio.run(landed())
    liar = fake(db, "hangup", tmp_path / "log.jsonl")
    try:
        same = cli("runs", "answer", "r1", "q1", "yes", cwd=tmp_path)
        other = cli("runs", "answer", "r1", "q1", "no", cwd=tmp_path)
    finally:
        stop(liar)
    no_traceback(same)
    no_traceback(other)
    # recognised as ours (same answer, same person) wherever the retry lands
    assert same.returncode == 0 and same.stdout.startswith("answer recorded"), same.stderr
    assert other.returncode == 1 and "already answered" in other.stderr


def test_a_holder_killed_mid_request_is_taken_over(tmp_path: Path) -> None:
    db = tmp_path / ".iterion" / "iterion.duckdb"
    proc = start_holder(db, mode="slow")
    try:
        reader = subprocess.Popen(
            [str(CLI), "runs", "questions", "r1", "--json"], cwd=tmp_path,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        time.sleep(1.0)  # the holder sits on the request (a slow read)
        proc.send_signal(signal.SIGKILL)
        out, err = reader.communicate(timeout=60)
    finally:
        stop(proc)
    assert "Traceback" not in err
    assert reader.returncode == 0, err
    assert len(json.loads(out)["interactions"]) == 20


@pytest.mark.timeout(120)
def test_a_hung_holder_is_named_not_waited_on_forever(tmp_path: Path) -> None:
    db = tmp_path / ".iterion" / "iterion.duckdb"
    proc = start_holder(db)
    try:
        proc.send_signal(signal.SIGSTOP)
        started = time.monotonic()
        done = cli("runs", "list", cwd=tmp_path)
        took = time.monotonic() - started
    finally:
        proc.send_signal(signal.SIGCONT)
        stop(proc)
    no_traceback(done)
    assert done.returncode == 1
    assert f"is held by process {proc.pid}" in done.stderr
    assert "which does not answer" in done.stderr
    assert took < 40


# -- files ---------------------------------------------------------------------------------
def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_a_new_store_is_private(tmp_path: Path) -> None:
    (tmp_path / "gate.iter").write_text(GATE)
    done = cli("run", "gate.iter", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    folder = tmp_path / ".iterion"
    assert mode(folder) == 0o700
    assert mode(folder / "iterion.duckdb") == 0o600
    assert [p.name for p in folder.iterdir()] == ["iterion.duckdb"]
    nested = tmp_path / "a" / "b" / "runs.duckdb"
    asyncio.run(seed(nested))
    assert (mode(tmp_path / "a"), mode(nested.parent), mode(nested)) == (0o700, 0o700, 0o600)


def test_an_old_store_directory_is_tightened_a_shared_folder_is_not(tmp_path: Path) -> None:
    old = tmp_path / ".iterion"
    asyncio.run(seed(old / "iterion.duckdb"))
    old.chmod(0o755)
    (old / "iterion.duckdb").chmod(0o644)
    asyncio.run(seed_again(old))
    assert (mode(old), mode(old / "iterion.duckdb")) == (0o700, 0o600)
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    (shared / "notes.txt").write_text("mine")
    asyncio.run(seed(shared / "runs.duckdb"))
    asyncio.run(seed_again(shared))  # named as a directory: iterion.duckdb inside it
    assert mode(shared) == 0o755  # a folder with other things in it is not ours to change
    assert mode(shared / "runs.duckdb") == 0o600 and mode(shared / "iterion.duckdb") == 0o600


async def seed_again(folder: Path) -> None:
    store = open_duckdb_store(folder)
    await store.close()


def test_a_link_to_nothing_at_the_store_path_is_refused(tmp_path: Path) -> None:
    from iterion_nb.errors import StoreFileError

    target = tmp_path / "elsewhere.duckdb"
    (tmp_path / "s.duckdb").symlink_to(target)
    with pytest.raises(StoreFileError, match="link to nothing"):
        open_duckdb_store(tmp_path / "s.duckdb")
    assert not target.exists()


# -- what a run records goes through a holder as it goes into a file -------------------------
BIG_OUTPUTS = """\
agent writer:
  model: "scripted"

workflow w:
  entry: writer
  writer -> done
"""


def _deep(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels - 1):
        value = {"k": value}
    return value


@pytest.mark.parametrize(
    "output",
    [
        {"text": "x" * 300_000},  # a long answer: the checkpoint holds it, over 256 KiB
        {"id": 2**64, "n": -(10**30)},  # ids a model or a tool may give
        {"tree": _deep(100)},  # deeper than typed input may nest (64)
        {"counts": {"1": 2}, "text": "a\x00b"},  # U+0000 in a value (escaped in JSON)
    ],
    ids=["300 KB", "big integers", "100 deep", "U+0000 in a value"],
)
async def test_a_run_through_a_holder_records_what_it_would_into_the_file(
    tmp_path: Path, output: dict[str, Any]
) -> None:
    """Once refused by the holder's reader (256 KiB, 64 bits, 64 levels): the run wedged."""
    import iterion_nb as it
    from iterion_nb.backends import FunctionBackend
    from iterion_nb.session import Session

    db = tmp_path / "s.duckdb"
    proc = start_holder(db)
    store = open_store(db)
    try:
        assert type(store).__name__ == "RemoteStore"
        session = Session(store, backend=FunctionBackend({"writer": lambda r: output}),
                          workdir=tmp_path)  # fmt: skip
        try:
            run = await session.start(it.compile(BIG_OUTPUTS))
            assert await run.wait(timeout=60) == "finished", (await run.refresh()).error
        finally:
            await session.close()
        record = await store.get_run(run.id)
        assert record.status == "finished"
        assert record.checkpoint is not None and record.checkpoint["outputs"]["writer"] == output
    finally:
        await store.close()
        stop(proc)
