"""A store this user may not read, or whose directory it may not write (EACCES), and
what stands where the store's holder file goes.

The tests run as root, which reads and writes through any file mode: the
command under test then runs without the capabilities that let root do so
(``setpriv``, util-linux), on files that belong to another user — what any
other user meets. As another user, the files' modes alone do it.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import subprocess
from pathlib import Path

import pytest

from tests.cli.test_cli import EXAMPLES, SCRIPT, run

ROOT_USER = os.geteuid() == 0
MINIMAL = (str(EXAMPLES / "minimal.iter"), "--scenario", str(EXAMPLES / "minimal.scenario.yaml"))


def as_a_user(*args: str) -> subprocess.CompletedProcess[str]:
    """``iterion-nb ARGS`` as a user whom file modes bind (root without its override)."""
    command = [str(SCRIPT), *args]
    if ROOT_USER:
        command = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--", *command]
    return subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)


def not_ours(path: Path, mode: int) -> None:
    """``path`` with ``mode``, belonging to another user when the tests run as root."""
    path.chmod(mode)
    if ROOT_USER:
        os.chown(path, pwd.getpwnam("nobody").pw_uid, -1)


def one_line(proc: subprocess.CompletedProcess[str], said: str) -> None:
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert proc.stderr == f"iterion-nb: {said}\n", proc.stderr


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A store holding one finished run, in a directory of its own."""
    folder = tmp_path / "shared"
    folder.mkdir()
    path = folder / "runs.duckdb"
    made = run("run", *MINIMAL, "--store", str(path), "--json")
    assert made.returncode == 0, made.stderr
    return path


def test_a_store_this_user_may_not_read_is_named_with_the_reason(store: Path) -> None:
    before = digest(store)
    not_ours(store, 0o600)
    for command in (("runs", "list"), ("run", *MINIMAL)):
        one_line(
            as_a_user(*command, "--store", str(store)),
            f"cannot read the run store {store}: Permission denied",
        )
    assert digest(store) == before


def test_a_store_in_a_directory_this_user_may_not_write_is_not_created(tmp_path: Path) -> None:
    folder = tmp_path / "theirs"
    folder.mkdir()
    not_ours(folder, 0o555)
    target = folder / "runs.duckdb"
    one_line(
        as_a_user("run", *MINIMAL, "--store", str(target)),
        f"cannot create the run store {target}: Permission denied",
    )
    assert list(folder.iterdir()) == []


def test_a_store_whose_directory_this_user_may_not_write_is_read_only(store: Path) -> None:
    """Once ``[Errno 13] Permission denied: '…/runs.duckdb.holder.json.….tmp'`` for a run,
    after the store had opened for writing: DuckDB's write-ahead log and the holder file
    live beside the store, so a writable file in such a directory can only be read."""
    (done,) = json.loads(run("runs", "list", "--store", str(store), "--json").stdout)["runs"]
    before = digest(store)
    not_ours(store.parent, 0o755)  # the file itself stays this user's, and writable
    listed = as_a_user("runs", "list", "--store", str(store), "--json")
    assert listed.returncode == 0, listed.stderr
    assert [r["id"] for r in json.loads(listed.stdout)["runs"]] == [done["id"]]
    shown = as_a_user("report", done["id"], "--store", str(store))
    assert shown.returncode == 0 and "finished" in shown.stdout, shown.stderr
    refused = as_a_user("run", *MINIMAL, "--store", str(store))
    assert refused.returncode == 1, refused.stderr
    assert refused.stderr.startswith(
        f"iterion-nb: the run store {store} can only be read here (its directory"
        f" {store.parent} may not be written): listing, showing and reporting its runs"
    ), refused.stderr
    assert digest(store) == before
    assert sorted(p.name for p in store.parent.iterdir()) == ["runs.duckdb"]


def test_something_where_the_holder_file_goes_is_named(store: Path) -> None:
    """Once ``[Errno 21] Is a directory: '….holder.json.….tmp' -> '….holder.json'``."""
    in_the_way = store.with_name(store.name + ".holder.json")
    in_the_way.mkdir()
    one_line(
        run("run", *MINIMAL, "--store", str(store)),
        f"cannot write the holder file {in_the_way}, through which other processes reach"
        " the run store: Is a directory; move what is there away",
    )
    in_the_way.rmdir()  # moved away: the store serves again
    assert run("run", *MINIMAL, "--store", str(store)).returncode == 0
