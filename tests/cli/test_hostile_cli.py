"""Hostile input to the ``iterion-nb`` command: a message and an exit code, never a traceback.

Each case runs the installed command as a real subprocess, with a time bound
(a file that would hang the command or read without end must be refused
quickly), and checks what a person sees: the exit code, the message naming
the file and the problem, nothing left behind.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from iterion_nb.cli import runs as cli_runs
from iterion_nb.cli.inputs import plain
from iterion_nb.errors import StoreError
from iterion_nb.ir import compile_file
from iterion_nb.runtime.records import Interaction, Run
from iterion_nb.safe_input import MAX_DEPTH, InputFileError, load_json, load_yaml
from iterion_nb.session import Session
from iterion_nb.store.duckdb_store import open_duckdb_store
from iterion_nb.store.location import mask_secrets, mask_url, url_password

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
MINIMAL = EXAMPLES / "minimal.iter"
SCENARIO = EXAMPLES / "minimal.scenario.yaml"
CLI = Path(sys.executable).parent / ("iterion-nb.exe" if os.name == "nt" else "iterion-nb")
#: What a refused input may take at most (the command starts in well under a second).
QUICK = 15

BOMB = "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]\n"
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
)
BOMB = 'a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n' + BOMB
DEEP = "nodes: " + "[" * 5000 + "]" * 5000 + "\n"
#: The poet's turn of examples/minimal.scenario.yaml, to which a case adds a bad field.
POET_TURN = b'nodes:\n  poet:\n    - output:\n        title: "Kernel leaves"\n        lines: []\n'


def cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The command, run to its end within :data:`QUICK` seconds (a hang fails the test)."""
    environ = {k: v for k, v in os.environ.items() if k != "ITERION_NB_STORE"} | (env or {})
    return subprocess.run(
        [str(CLI), *args], cwd=cwd, capture_output=True, text=True, timeout=QUICK, env=environ,
        check=False,
    )  # fmt: skip


def refused(proc: subprocess.CompletedProcess[str], *said: str, code: int = 2) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    for text in said:
        assert text in proc.stderr, proc.stderr


def nothing_but(directory: Path, *names: str) -> None:
    """Nothing was created in ``directory`` besides ``names`` (no store, no stray folder)."""
    assert sorted(os.listdir(os.fsencode(directory))) == sorted(n.encode() for n in names)


# -- 1. --scenario -----------------------------------------------------------------
SCENARIOS: dict[str, tuple[bytes | None, str]] = {
    "not UTF-8": (b"nodes:\n  poet: \xff\xfe\n", "bad.yaml:2:9: not UTF-8 text (byte 0xff"),
    "malformed YAML": (b"nodes: [\n", "bad.yaml:2:1: expected the node content"),
    "not a mapping": (b"- 1\n- 2\n", "bad.yaml: a scenario needs a top-level 'nodes:' mapping"),
    "no nodes:": (
        b"poet:\n  - output: {title: t, lines: []}\n",
        "bad.yaml: a scenario needs a top-level 'nodes:' mapping (node name -> its turns);"
        " it has 'poet' at its top level (do node names go under 'nodes:'?)",
    ),
    "a turn key misspelt": (
        b"nodes:\n  poet:\n    - outptu: {title: t, lines: []}\n",
        "bad.yaml: node 'poet', turn 0: unknown key 'outptu'; did you mean 'output'?",
    ),
    "a node the workflow lacks": (
        b"nodes:\n  poett:\n    - output: {title: t, lines: []}\n",
        "bad.yaml: node 'poett' is not in workflow 'haiku'; did you mean 'poet'? (its nodes: poet)",
    ),
    "tokens not numbers": (
        POET_TURN + b"      tokens: {in: -5, out: a}\n",
        "bad.yaml: node 'poet', turn 0: 'tokens.in' must be a whole number from 0 to"
        " 1,000,000,000; got -5",
    ),
    "tokens not a mapping": (
        POET_TURN + b"      tokens: 5\n",
        "bad.yaml: node 'poet', turn 0: 'tokens' must be a mapping such as {in: 120, out: 40};"
        " got 5",
    ),
    "negative tokens": (
        POET_TURN + b"      tokens: {in: -5, out: 3}\n",
        "bad.yaml: node 'poet', turn 0: 'tokens.in' must be a whole number from 0 to"
        " 1,000,000,000; got -5",
    ),
    "cost_usd not a number": (
        POET_TURN + b'      cost_usd: "abc"\n',
        "bad.yaml: node 'poet', turn 0: 'cost_usd' must be a number of dollars from 0 to"
        " 1,000,000; got 'abc' (a string)",
    ),
    "delay not a number": (
        POET_TURN + b'      delay: "x"\n',
        "bad.yaml: node 'poet', turn 0: 'delay' must be a number of seconds from 0 to 86,400;"
        " got 'x' (a string)",
    ),
    "fail_first not a number": (
        POET_TURN + b'      fail_first: "x"\n',
        "bad.yaml: node 'poet', turn 0: 'fail_first' must be a whole number, 0 or more;"
        " got 'x' (a string)",
    ),
    "a node given twice": (
        b"nodes:\n  poet:\n    - output: {title: a, lines: []}\n"
        b"  poet:\n    - output: {title: b, lines: []}\n",
        "bad.yaml:4:3: the key 'poet' is given twice in one mapping (first at line 2, column 3);"
        " a mapping holds each key once",
    ),
    "a turn key given twice": (
        POET_TURN + b"      output: {title: b, lines: []}\n",
        "bad.yaml:6:7: the key 'output' is given twice in one mapping (first at line 3, column 7)",
    ),
    "deeply nested": (DEEP.encode(), "bad.yaml:1:107: nested more than 100 levels deep"),
    "alias bomb": (BOMB.encode(), "bad.yaml: its aliases expand it past"),
    "a directory": (None, "bad.yaml: is a directory, not a file"),
}


@pytest.mark.parametrize("case", list(SCENARIOS))
def test_a_bad_scenario_is_a_message_and_nothing_is_created(case: str, tmp_path: Path) -> None:
    data, said = SCENARIOS[case]
    if data is None:
        (tmp_path / "bad.yaml").mkdir()
    else:
        (tmp_path / "bad.yaml").write_bytes(data)
    began = time.monotonic()
    proc = cli("run", str(MINIMAL), "--scenario", "bad.yaml", cwd=tmp_path)
    assert time.monotonic() - began < 10
    refused(proc, f"iterion-nb: scenario: {said}")
    nothing_but(tmp_path, "bad.yaml")  # no .iterion store made for a run that never started


def test_a_bad_json_scenario_too(tmp_path: Path) -> None:
    (tmp_path / "s.json").write_text("[" * 5000 + "]" * 5000)
    refused(cli("run", str(MINIMAL), "--scenario", "s.json", cwd=tmp_path),
            "scenario: s.json: nested more than 100 levels deep")  # fmt: skip
    (tmp_path / "s.json").write_text('{"nodes": [}')
    refused(cli("run", str(MINIMAL), "--scenario", "s.json", cwd=tmp_path),
            "scenario: s.json:1:12: Expecting value")  # fmt: skip
    (tmp_path / "s.json").write_text('{"nodes": {"poet": [],\n  "poet": []}}')
    refused(cli("run", str(MINIMAL), "--scenario", "s.json", cwd=tmp_path),
            "scenario: s.json:2:3: the key 'poet' is given twice in one mapping (first at line 1,"
            " column 12)")  # fmt: skip
    nothing_but(tmp_path, "s.json")


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A store holding one finished run of the minimal example: (its directory, the run id)."""
    where = tmp_path_factory.mktemp("store")
    done = cli("run", str(MINIMAL), "--scenario", str(SCENARIO), "--json", cwd=where)
    assert done.returncode == 0, done.stderr
    return where, json.loads(done.stdout)["id"]


def test_resume_refuses_a_bad_scenario_too(finished: tuple[Path, str], tmp_path: Path) -> None:
    where, run_id = finished
    (tmp_path / "bad.yaml").write_bytes(BOMB.encode())
    refused(cli("resume", run_id, "--scenario", str(tmp_path / "bad.yaml"), cwd=where),
            "bad.yaml: its aliases expand it past")  # fmt: skip
    (tmp_path / "dir.yaml").mkdir()
    refused(cli("resume", run_id, "--scenario", str(tmp_path / "dir.yaml"), cwd=where),
            "dir.yaml: is a directory, not a file")  # fmt: skip
    refused(cli("resume", run_id, "--scenario", str(tmp_path / "nope.yaml"), cwd=where),
            "nope.yaml: no such file")  # fmt: skip


# -- 2. --answers ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("answers: " + "[" * 5000 + "]" * 5000, "a.yaml:1:109: nested more than 100 levels deep"),
        (BOMB, "a.yaml: its aliases expand it past"),
        ("answers: [\n", "a.yaml:2:1: expected the node content"),
    ],
    ids=["deep", "alias bomb", "malformed"],
)
def test_a_bad_answers_file_is_a_message(text: str, said: str, tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(text)
    proc = cli("run", str(MINIMAL), "--scenario", str(SCENARIO), "--answers", "a.yaml",
               cwd=tmp_path)  # fmt: skip
    refused(proc, f"iterion-nb: {said}")
    nothing_but(tmp_path, "a.yaml")


# -- 3. malformed store URLs ---------------------------------------------------------
URLS = {
    "postgresql://[::1": "Invalid IPv6 URL",
    "postgresql://u:s3cret@[zz]/db": "'zz' does not appear to be an IPv4 or IPv6 address",
    "postgresql://u:s3cret@host:99999/db": "its port is not a number from 0 to 65535",
    "postgresql://u:s3cr/et@host/db": "an '@' after the host",
}


@pytest.mark.parametrize("url", list(URLS))
def test_a_malformed_store_url_is_named_with_its_password_masked(url: str, tmp_path: Path) -> None:
    for args, env in (
        (["runs", "list", "--store", url], None),
        (["run", str(MINIMAL), "--scenario", str(SCENARIO), "--store", url], None),
        (["runs", "list"], {"ITERION_NB_STORE": url}),
        (["report", "r1"], {"ITERION_NB_STORE": url}),
        (["store", "copy", url, "x.duckdb"], None),
    ):
        proc = cli(*args, cwd=tmp_path, env=env)
        refused(proc, "is malformed", URLS[url])
        assert "s3cr" not in proc.stderr
        if env is not None:
            assert "iterion-nb: ITERION_NB_STORE: the store URL " in proc.stderr
    nothing_but(tmp_path)


def test_a_misspelt_url_parameter_is_named_with_the_one_meant(tmp_path: Path) -> None:
    url = "postgresql://u:s3cret@127.0.0.1:1/db?password=s3cret&schem=team_a"
    for args, env in (
        (["runs", "list", "--store", url], None),
        (["run", str(MINIMAL), "--scenario", str(SCENARIO), "--store", url], None),
        (["runs", "list"], {"ITERION_NB_STORE": url}),
    ):
        proc = cli(*args, cwd=tmp_path, env=env)
        refused(proc, "unknown parameter 'schem' in the store URL", "(did you mean schema=?)")
        assert "s3cret" not in proc.stderr
    with pytest.raises(StoreError, match=r"unknown parameter 'sslmod'.*did you mean sslmode="):
        Session("postgresql://u@127.0.0.1:1/db?sslmod=require", workdir=tmp_path)
    nothing_but(tmp_path)


BAD_PARAMETERS = {
    "?schema=": "schema='' in the store URL",
    "?schema": "a schema name cannot be empty",
    "?schema=My-Schema": "schema='My-Schema' in the store URL",
    "?schema=pg_runs": "names starting with 'pg_' are PostgreSQL's own",
    "?schema=iterion_nb&schema=team_b": "the parameter schema= is given more than once",
    "?sslmode=require&sslmode=disable": "the parameter sslmode= is given more than once",
    "?password=s3cret&password=s3cret": "the parameter password= is given more than once",
}


@pytest.mark.parametrize("query", list(BAD_PARAMETERS))
def test_a_bad_schema_or_a_parameter_given_twice_is_a_usage_error(
    query: str, tmp_path: Path
) -> None:
    """Refused before anything is opened (exit 2, as an unknown parameter is), never at opening."""
    url = f"postgresql://u:s3cret@127.0.0.1:1/db{query}"
    for args, env in (
        (["runs", "list", "--store", url], None),
        (["run", str(MINIMAL), "--scenario", str(SCENARIO), "--store", url], None),
        (["runs", "list"], {"ITERION_NB_STORE": url}),
    ):
        proc = cli(*args, cwd=tmp_path, env=env)
        refused(proc, BAD_PARAMETERS[query])
        assert BAD_PARAMETERS[query] in proc.stderr.splitlines()[-1]  # one line, after the usage
        assert "s3cret" not in proc.stderr
    nothing_but(tmp_path)


def test_a_schema_name_is_checked_where_a_store_name_is() -> None:
    from iterion_nb.store.location import check_schema_name, check_store_spec

    check_store_spec("postgresql://u@h/db?schema=Team_7&sslmode=require")  # no refusal
    assert check_schema_name("_x" * 31 + "y") == "_x" * 31 + "y"  # 63 characters
    for bad in ("", "7up", "a-b", "x" * 64, "pg_catalog", "no;drop"):
        with pytest.raises(StoreError, match=f"schema={bad!r}"):
            check_schema_name(bad)
        with pytest.raises(StoreError, match="in the store URL postgresql://u@h/db"):
            check_store_spec(f"postgresql://u@h/db?schema={bad}")


def test_a_password_parameter_in_an_error_keeps_what_follows_it(tmp_path: Path) -> None:
    """The refused connection's message reads ``…?password=***: connection failed``."""
    from tests.pgserver import free_port

    url = f"postgresql://iterion@127.0.0.1:{free_port()}/agents?password=zzz"
    proc = cli("runs", "list", "--store", url, cwd=tmp_path)
    refused(proc, "/agents?password=***: connection failed: ", code=1)
    assert "zzz" not in proc.stderr


def test_a_url_naming_several_hosts_is_taken_as_libpq_takes_it() -> None:
    from iterion_nb.store.location import check_store_spec

    check_store_spec("postgresql://u:s3cret@db1:5432,db2:5433/agents")  # no refusal
    check_store_spec("postgresql://u@[::1]:5432,db2/agents?target_session_attrs=read-write")
    with pytest.raises(StoreError, match="its port is not a number"):
        check_store_spec("postgresql://u@db1:5432,db2:99999/agents")


# -- 4. a store path that is not UTF-8 -------------------------------------------------
@pytest.mark.skipif(sys.platform != "linux", reason="paths of arbitrary bytes")
def test_a_store_path_that_is_not_utf8_is_refused_before_anything_is_made(tmp_path: Path) -> None:
    store = os.fsdecode(os.fsencode(tmp_path) + b"/x\xff/s.duckdb")
    expected = "is not valid UTF-8 text: DuckDB cannot open it"
    refused(cli("run", str(MINIMAL), "--scenario", str(SCENARIO), "--store", store,
                cwd=tmp_path), expected, "/x\\xff/s.duckdb")  # fmt: skip
    refused(cli("run", str(MINIMAL), "--scenario", str(SCENARIO), cwd=tmp_path,
                env={"ITERION_NB_STORE": store}), "ITERION_NB_STORE: the store path")  # fmt: skip
    refused(cli("runs", "list", "--store", store, cwd=tmp_path), expected)
    refused(cli("store", "copy", store, "y.duckdb", cwd=tmp_path), expected)
    nothing_but(tmp_path)


# -- 5. devices, FIFOs, files too large ---------------------------------------------------
@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
@pytest.mark.parametrize(
    "args",
    [
        ["validate", "/dev/zero"],
        ["validate", "/dev/urandom"],
        ["graph", "/dev/zero"],
        ["run", "/dev/zero", "--scenario", str(SCENARIO)],
        ["run", str(MINIMAL), "--scenario", "/dev/zero"],
        ["run", str(MINIMAL), "--scenario", str(SCENARIO), "--answers", "/dev/urandom"],
    ],
    ids=lambda a: " ".join(Path(x).name for x in a),
)
def test_a_device_is_refused_at_once(args: list[str], tmp_path: Path) -> None:
    refused(cli(*args, cwd=tmp_path), "is a character device, not a file")
    nothing_but(tmp_path)


def test_a_pipe_is_read_as_a_file_is(tmp_path: Path) -> None:
    """``gen | iterion-nb validate /dev/stdin`` and ``--scenario <(gen)`` work."""
    for args, fed in (
        (["validate", "/dev/stdin"], MINIMAL),
        (["run", str(MINIMAL), "--scenario", "/dev/stdin", "--store", "s"], SCENARIO),
    ):
        with fed.open("rb") as source:
            writer = subprocess.Popen(["cat"], stdin=source, stdout=subprocess.PIPE)
            assert writer.stdout is not None
            done = subprocess.run(
                [str(CLI), *args], cwd=tmp_path, stdin=writer.stdout, capture_output=True,
                text=True, timeout=QUICK, check=False,
            )  # fmt: skip
            writer.wait()
        assert done.returncode == 0, (args, done.stderr)
    assert "finished" in done.stdout, done.stdout


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_nobody_writes_to_is_given_up_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bounded wait (30 s in the CLI; shortened here), then a message: never a hang."""
    from iterion_nb import safe_input

    os.mkfifo(tmp_path / "pipe")
    monkeypatch.setattr(safe_input, "PIPE_IDLE_SECONDS", 0.3)
    with pytest.raises(safe_input.InputFileError, match="nothing came through it within 0 s"):
        safe_input.read_bytes(tmp_path / "pipe")

    def stalls() -> None:  # writes a line, then holds the pipe open and says no more
        with open(tmp_path / "pipe", "w") as pipe:
            pipe.write("workflow w:\n")
            pipe.flush()
            time.sleep(1.5)

    writer = threading.Thread(target=stalls)
    writer.start()
    stalled = "is a pipe that stalled: 12 bytes came, then nothing more for 0 s and it was not"
    with pytest.raises(safe_input.InputFileError, match=stalled):
        safe_input.read_bytes(tmp_path / "pipe")
    writer.join()
    with pytest.raises(safe_input.InputFileError, match=r"is a named pipe \(FIFO\), not a file"):
        safe_input.file_digest(tmp_path / "pipe")  # an attachment is kept: a file only


def test_an_attachment_must_be_a_regular_file(tmp_path: Path) -> None:
    workflow = ROOT / "tests" / "fixtures" / "upstream" / "attachments.bot"
    (tmp_path / "sc.yaml").write_text("nodes:\n  reviewer: [{text: ok}]\n")
    (tmp_path / "folder").mkdir()
    proc = cli("run", str(workflow), "--scenario", "sc.yaml", "--attach", "spec=folder",
               cwd=tmp_path)  # fmt: skip
    refused(proc, "attachment 'spec': folder: is a directory, not a file")
    nothing_but(tmp_path, "sc.yaml", "folder")


def test_a_file_over_the_limit_is_refused_unread(tmp_path: Path) -> None:
    big = tmp_path / "big.iter"
    with big.open("wb") as handle:
        handle.truncate(64 * 1024 * 1024)  # sparse: nothing to read, had the size not been checked
    began = time.monotonic()
    proc = cli("validate", "big.iter", cwd=tmp_path)
    refused(proc, "big.iter: too large: the limit is 4,194,304 bytes and the file is 67,108,864")
    assert time.monotonic() - began < 10
    (tmp_path / "s.yaml").write_bytes(b"# " + b"x" * (5 * 1024 * 1024) + b"\n")
    refused(cli("run", str(MINIMAL), "--scenario", "s.yaml", cwd=tmp_path), "s.yaml: too large")


# -- 6. report -o into a new directory ---------------------------------------------------
def test_report_creates_the_directories_on_the_way(finished: tuple[Path, str]) -> None:
    where, run_id = finished
    target = where / "reports" / "2026" / "run.md"
    done = cli("report", run_id, "-o", str(target), cwd=where)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"wrote the md report of run {run_id} to {target}\n"
    assert target.read_text().startswith(f"# Run {run_id}")
    (where / "a-file").write_text("")
    refused(cli("report", run_id, "-o", str(where / "a-file" / "run.md"), cwd=where),
            "cannot write the report to", "a part of its directory is a file", code=1)  # fmt: skip


def test_a_report_file_whose_name_says_another_format_is_refused(
    finished: tuple[Path, str],
) -> None:
    """`-o r.pdf` once wrote Markdown into r.pdf, exit 0."""
    where, run_id = finished
    refused(cli("report", run_id, "-o", "r.pdf", cwd=where),
            "a report is HTML, Markdown or JSON, and 'r.pdf' says none of them: name the file"
            " .html, .md or .json, or give --format html|md|json")  # fmt: skip
    assert not (where / "r.pdf").exists()
    done = cli("report", run_id, "-o", "r.pdf", "--format", "md", cwd=where)  # as asked
    assert done.returncode == 0 and (where / "r.pdf").read_text().startswith("# Run")


# -- 7. passwords masked where they stand, not everywhere -----------------------------------
def test_a_password_is_masked_where_it_stands_and_nowhere_else() -> None:
    url = "postgresql://u:p@db.example/postgres?sslmode=require"
    text = f"the run store {url} failed: connection to postgresql server failed"
    masked = mask_secrets(text, url_password(url))
    assert masked == (
        "the run store postgresql://u:***@db.example/postgres?sslmode=require failed:"
        " connection to postgresql server failed"
    )
    assert mask_url(url) == "postgresql://u:***@db.example/postgres?sslmode=require"
    conninfo = "host=h password='a b\\'c' user=u dbname=postgres sslpassword=zz"
    assert mask_secrets(conninfo) == "host=h password=*** user=u dbname=postgres sslpassword=***"
    assert mask_secrets("postgresql://h/db?user=u&password=hunter2&x=1") == (
        "postgresql://h/db?user=u&password=***&x=1"
    )
    # the store's own password, as a whole word anywhere (never inside another word)
    assert mask_secrets('bad token "hunter2" in hunter22', "hunter2") == (
        'bad token "***" in hunter22'
    )
    assert mask_url("postgresql://u:s3/cr@et@[zz]/db") == "postgresql://***@[zz]/db"
    assert mask_url("postgresql://u:s3?cr@et@h/db") == "postgresql://***@h/db"


@pytest.mark.parametrize(
    "password", ["zzz", "a:b", "p@ss/w:rd?", "s3cret:", "a b", "***", "x&y=z", "é:é"]
)
def test_a_known_password_parameter_is_masked_exactly(password: str) -> None:
    """The store's own password is replaced as it stands: the text after it is kept."""
    from urllib.parse import urlencode

    url = f"postgresql://u@h/db?{urlencode({'password': password, 'sslmode': 'require'})}"
    assert url_password(url) == password
    for shown in (url, mask_url(url)):
        text = f"cannot connect to {shown}: connection failed: refused (see {shown}), at h"
        masked = mask_secrets(text, password)
        assert masked == (
            "cannot connect to postgresql://u@h/db?password=***&sslmode=require: connection"
            " failed: refused (see postgresql://u@h/db?password=***&sslmode=require), at h"
        )
    raw = f"password={password}: refused"  # not encoded, as in a libpq message
    if " " not in password and "&" not in password:
        assert mask_secrets(raw, password) == "password=***: refused"


def test_an_unknown_password_parameter_is_masked_up_to_the_next_space() -> None:
    assert mask_secrets("postgresql://h/db?password=a:b: failed") == (
        "postgresql://h/db?password=*** failed"
    )
    # another password than the store's, even one it begins: masked whole
    assert mask_secrets("?password=zzz:y failed", "zzz") == "?password=*** failed"
    assert mask_secrets("?password=zzzq: failed", "zzz") == "?password=*** failed"
    assert mask_secrets("password='zzz' x", "zzz") == "password=*** x"


def test_the_postgres_store_scrubs_only_the_password() -> None:
    pytest.importorskip("psycopg")
    from iterion_nb.store.postgres_base import PgBase

    store = PgBase.__new__(PgBase)  # no server: only the scrubbing is tested
    store._password = url_password("postgresql://u:p@h/db")
    assert store._scrub("postgresql://u:p@h/db: p is wrong for postgresql") == (
        "postgresql://u:***@h/db: *** is wrong for postgresql"
    )


# -- 8. runs list --limit ----------------------------------------------------------------
@pytest.mark.parametrize("limit", ["-5", "0", "99999999999", "ten"])
def test_a_limit_out_of_range_is_a_usage_error(limit: str, finished: tuple[Path, str]) -> None:
    where, _ = finished
    refused(cli("runs", "list", "--limit", limit, cwd=where),
            "argument --limit: must be a whole number from 1 to 10,000")  # fmt: skip


def test_a_limit_in_range_lists(finished: tuple[Path, str]) -> None:
    where, run_id = finished
    done = cli("runs", "list", "--limit", "1", cwd=where)
    assert done.returncode == 0 and done.stdout.startswith(run_id), done.stderr


# -- 9. control characters from the store are shown escaped ----------------------------------
EVIL = "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202e"


async def test_runs_show_escapes_what_the_store_holds(tmp_path: Path) -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    store = open_duckdb_store(tmp_path / "s.duckdb")
    try:
        await store.create_run(Run(
            id="r1", workflow=f"w{EVIL}", source_hash="h", status="paused_waiting_human",
            created_at=at, updated_at=at, source="workflow w:\n", vars={},
        ))  # fmt: skip
        await store.add_interaction(Interaction(
            id="q1", run_id="r1", node_id="gatherer", kind="async", requested_at=at,
            questions=(f"Tone?{EVIL}\nforged: line",),
        ))  # fmt: skip
        await store.answer("q1", f"formal{EVIL}", answered_by=f"ada{EVIL}\nanswered x by root")
    finally:
        await store.close()
    for args in (["runs", "show", "r1"], ["runs", "answers", "r1"], ["runs", "list"]):
        proc = await asyncio.to_thread(cli, *args, "--store", "s.duckdb", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        shown = proc.stdout
        for char in "\x1b\x07\x9b\u202e":
            assert char not in shown, (args, shown)
        assert "\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m\\u202e" in shown
    lines = proc.stdout.splitlines()
    show = await asyncio.to_thread(cli, "runs", "show", "r1", "--store", "s.duckdb", cwd=tmp_path)
    assert not [
        line for line in show.stdout.splitlines() if line.startswith(("forged", "answered"))
    ]
    assert "by ada\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m\\u202e\\nanswered x by root at" in show.stdout
    assert len(lines) == 1  # runs list: one run, one line
    data = await asyncio.to_thread(cli, "runs", "show", "r1", "--store", "s.duckdb", "--json",
                                   cwd=tmp_path)  # fmt: skip
    assert json.loads(data.stdout)["interactions"][0]["answered_by"].startswith(f"ada{EVIL}")


def test_plain_escapes_controls_and_keeps_the_rest() -> None:
    assert plain("café 🙂 ok") == "café 🙂 ok"
    assert plain("a\tb\nc\rd\x00\x7f\x85\u2066") == "a\\tb\\nc\\rd\\x00\\x7f\\x85\\u2066"


# -- 10. Ctrl-C as the run is being recorded ----------------------------------------------
def test_the_stop_message_names_the_run_and_the_resume() -> None:
    cli_runs._Stopped.clear()
    begun = cli_runs._interrupted("abc123", None, cluster=False)
    assert begun == (
        "iterion-nb: run abc123 cancelled (Ctrl-C); `iterion-nb resume abc123` goes on from"
        " its checkpoint\n"
    )
    early = cli_runs._interrupted("abc123", "postgresql://u:pw@h/db", cluster=False, begun=False)
    assert early == (
        "iterion-nb: run abc123 stopped (Ctrl-C) as it started; `iterion-nb resume abc123"
        " --store postgresql://u:***@h/db` goes on from its checkpoint\n"
    )


async def test_ctrl_c_right_after_the_run_is_recorded_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    session = Session(tmp_path / "s.duckdb", serve=False, scenario=str(SCENARIO))
    recorded: list[str] = []
    create_run = session.store.create_run

    async def recorded_then_stopped(run: Any, **kwargs: Any) -> Any:
        await create_run(run, **kwargs)  # committed: then Ctrl-C lands, before the run executes
        recorded.append(run.id)
        raise asyncio.CancelledError

    session.store.create_run = recorded_then_stopped  # type: ignore[method-assign]
    args = argparse.Namespace(
        command="run", var=[], attach=[], answers_from=None, preset=None, store=None
    )
    inputs = cli_runs.RunInputs(workflow=compile_file(MINIMAL))
    try:
        with pytest.raises(asyncio.CancelledError):
            await cli_runs._begin(session, args, inputs)
        (run_id,) = recorded
        said = capsys.readouterr().err
        assert said == (
            f"iterion-nb: run {run_id} stopped (Ctrl-C) as it started; `iterion-nb resume"
            f" {run_id}` goes on from its checkpoint\n"
        )
        run = await session.store.get_run(run_id)
        assert run.lease is None  # let go at once: resumable now, not once a lease lapses
        assert [r.status for r in await session.store.list_runs()] == ["interrupted"]
    finally:
        await session.close()


# -- the safe reader's bounds ---------------------------------------------------------------
def test_yaml_and_json_within_the_bounds_load_and_past_them_are_refused() -> None:
    for load in (load_yaml, load_json):
        assert load("[" * MAX_DEPTH + "1" + "]" * MAX_DEPTH, "x") is not None
        with pytest.raises(InputFileError, match="nested more than 100 levels deep"):
            load("[" * (MAX_DEPTH + 1) + "1" + "]" * (MAX_DEPTH + 1), "x")
    merged = load_yaml("a: &a {x: 1}\nb: {<<: *a, y: 2}\nc: [*a, *a]\n", "m")
    assert merged == {"a": {"x": 1}, "b": {"x": 1, "y": 2}, "c": [{"x": 1}, {"x": 1}]}
    with pytest.raises(InputFileError, match=r"^loop:1: an alias that contains itself$"):
        load_yaml("a: &a [1, *a]\n", "loop")
    wide = 'a: &a "' + "x" * 1_000_000 + '"\nb: [' + ", ".join(["*a"] * 100) + "]\n"
    with pytest.raises(InputFileError, match="its aliases expand it past"):
        load_yaml(wide, "wide")  # few values, but each a megabyte
    second = r"^multi:2:1: a second YAML document \(`---`\): the file must hold one$"
    with pytest.raises(InputFileError, match=second):
        load_yaml("a: 1\n---\nb: 2\n", "multi")


def test_a_key_given_twice_is_refused_with_the_lines_of_both() -> None:
    twice = "the key 'a' is given twice in one mapping (first at line 1, column {})"
    for text, where, column in [("a: 1\na: 2\n", "f:2:1", 1), ("a: 1\n'a': 2\n", "f:2:1", 1),
                                ('{"a": 1,\n "a": 2}', "f:2:2", 2)]:  # fmt: skip
        with pytest.raises(InputFileError) as caught:
            load_yaml(text, "f")
        said = twice.format(column)
        assert str(caught.value) == f"{where}: {said}; a mapping holds each key once"
    with pytest.raises(InputFileError, match=r"^f:1:12: the key 'b' is given twice .*column 6\)"):
        load_yaml("x: [{b: 1, b: 2}]", "f")  # in a flow mapping, inside a list
    with pytest.raises(InputFileError, match=r"^f:2:1: the key 1 is given twice"):
        load_yaml("1: a\n0x1: b\n", "f")  # one key, as loaded, however written
    with pytest.raises(InputFileError) as caught:
        load_json('{"n": {"a": 1,\n "a": 2}}', "j")
    assert str(caught.value) == (
        "j:2:2: the key 'a' is given twice in one mapping (first at line 1, column 8);"
        " a mapping holds each key once"
    )
    # a merge is not a key: what it brings may be given again (that is what it is for)
    merged = load_yaml("a: &a {x: 1, y: 1}\nb: {<<: *a, x: 2}\nc: {<<: [*a], z: 3}\n", "m")
    assert merged["b"] == {"x": 2, "y": 1} and merged["c"] == {"x": 1, "y": 1, "z": 3}
    assert load_json('{"a": {"k": 1}, "b": {"k": 2}}', "j") == {"a": {"k": 1}, "b": {"k": 2}}


# -- 10. data no store keeps: refused with a message, before a run or an answer is made ----
VARS = """\
vars:
  n: int = 1
  f: float = 1.0
  j: json = {}
  s: string = "x"

human gate:
  instructions: "Ship it?"

workflow w:
  entry: gate
  gate -> done
"""

BAD_VARS = {
    "an int of 5,000 digits": (
        "n=" + "9" * 5000,
        "a number in variable 'n' is out of range (64 bits)",
    ),
    "an int beyond 64 bits": ("n=99999999999999999999999", "variable 'n' is out of range (64"),
    "a float that is infinite": ("f=1e400", "a number in variable 'f' is out of range"),
    "NaN": ("j=NaN", "variable 'j' should be json, got the text 'NaN'"),
    "JSON nested 5,000 deep": ("j=" + "[" * 5000 + "]" * 5000, "variable 'j' nests deeper than 64"),
    "a key twice": ('j={"a": 1, "a": 2}', "variable 'j' repeats the key \"a\" in one object"),
    "text that is not UTF-8": ("s=a\udcffb", "variable 's' holds a lone surrogate (not UTF-8)"),
    # once "should be int, got the text '\\udcff'": Python's stand-in for the byte, not the byte
    "a number that is not UTF-8": ("n=\udcff", "variable 'n' holds a lone surrogate (not UTF-8)"),
}


@pytest.mark.parametrize("case", list(BAD_VARS))
def test_a_var_no_store_keeps_is_refused_before_a_run(case: str, tmp_path: Path) -> None:
    """Each once a traceback (ValueError, RecursionError) or a run stuck on its first write."""
    given, said = BAD_VARS[case]
    (tmp_path / "vars.iter").write_text(VARS)
    refused(cli("run", "vars.iter", "--var", given, "--store", "s", cwd=tmp_path), said, code=1)
    nothing_but(tmp_path, "vars.iter")  # no run, and no store made for none


def test_an_answer_no_store_keeps_is_refused_and_the_question_stays_open(tmp_path: Path) -> None:
    (tmp_path / "vars.iter").write_text(VARS)
    started = cli("run", "vars.iter", "--store", "s", "--json", cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout)["id"]
    asked = cli("runs", "questions", run_id, "--store", "s", "--json", cwd=tmp_path)
    (question,) = json.loads(asked.stdout)["interactions"]
    answer = ["runs", "answer", run_id, question["id"]]
    refused(cli(*answer, "a\udcffb", "--store", "s", cwd=tmp_path),
            "the answer holds a lone surrogate (not UTF-8)", code=1)  # fmt: skip
    refused(cli(*answer, "[" * 5000 + "]" * 5000, "--json-value", "--store", "s", cwd=tmp_path),
            "--json-value: the answer nests deeper than 64")  # fmt: skip
    refused(cli(*answer, "9" * 5000, "--json-value", "--store", "s", cwd=tmp_path),
            "a number in --json-value: the answer is out of range (64 bits)")  # fmt: skip
    refused(cli(*answer, "yes", "--as", "a\udcffb", "--store", "s", cwd=tmp_path),
            "argument --as: is not UTF-8 text: 'a\\xffb'")  # fmt: skip
    refused(cli(*answer, "yes", "--as", "bo\tb", "--store", "s", cwd=tmp_path),
            "argument --as: holds a control character: 'bo\\tb'")  # fmt: skip
    # none of them was taken: the question is still open, and a good answer goes in
    done = cli(*answer, "yes", "--store", "s", cwd=tmp_path)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["runs", "show", "\udcff"], "argument run_id: is not UTF-8 text: '\\xff'"),
        (["cancel", "a\x1bb"], "argument run_id: holds a control character: 'a\\x1bb'"),
        (["runs", "answer", "r1", "q\udcfe", "yes"],
         "argument interaction_id: is not UTF-8 text: 'q\\xfe'"),
        (["runs", "follow", ""], "argument run_id: must not be empty"),
    ],
)  # fmt: skip
def test_an_id_that_is_not_text_is_a_usage_error(
    args: list[str], said: str, tmp_path: Path
) -> None:
    """Once the store's own text: 'Python Conversion Failure: cannot encode str as UTF-8'."""
    refused(cli(*args, "--store", "s", cwd=tmp_path), said)
    nothing_but(tmp_path)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["store", "copy", "a", "b", "--run", "\udcff"],
         "argument --run: is not UTF-8 text: '\\xff'"),
        (["store", "copy", "a", "b", "--run", "r\x1b[31m"],
         "argument --run: holds a control character: 'r\\x1b[31m'"),
        (["run", "flow.iter", "--preset", "p\x1b[31m"],
         "argument --preset: holds a control character: 'p\\x1b[31m'"),
    ],
)  # fmt: skip
def test_a_run_or_preset_name_that_is_not_text_is_a_usage_error(
    args: list[str], said: str, tmp_path: Path
) -> None:
    """Once DuckDB's 'Python Conversion Failure', or the escape sequence sent to the terminal."""
    refused(cli(*args, cwd=tmp_path), said)
    nothing_but(tmp_path)


def test_a_closed_standard_output_is_said_on_standard_error(tmp_path: Path) -> None:
    """`iterion-nb validate flow.iter >&-`: once an AttributeError traceback."""
    (tmp_path / "vars.iter").write_text(VARS)
    proc = subprocess.run(
        [str(CLI), "validate", "vars.iter"], cwd=tmp_path, stderr=subprocess.PIPE, text=True,
        timeout=QUICK, check=False, preexec_fn=lambda: os.close(1),
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == "iterion-nb: standard output is closed: nothing could be written\n"


def test_an_answer_the_shell_split_says_to_quote_it(finished: tuple[Path, str]) -> None:
    """Once argparse's top-level usage: `error: unrecognized arguments: two three`."""
    where, run_id = finished
    refused(cli("runs", "answer", run_id, "q1", "one", "two", "three", cwd=where),
            f"iterion-nb: the answer is one argument, and 3 were given: quote it"
            f" (`iterion-nb runs answer {run_id} q1 'one two three'`)")  # fmt: skip


@pytest.mark.parametrize("verb", [["run", "w.iter"], ["runs", "list"]])
def test_a_file_given_as_the_store_is_named_as_such(verb: list[str], tmp_path: Path) -> None:
    """`run` once said `cannot create the run store …/w.iter/iterion.duckdb: Not a directory`."""
    (tmp_path / "w.iter").write_text(VARS)
    refused(cli(*verb, "--store", "w.iter", cwd=tmp_path),
            f"iterion-nb: {tmp_path / 'w.iter'} is a file, not a run store (a store is a"
            " directory holding iterion.duckdb, or a .duckdb file)", code=1)  # fmt: skip
    assert (tmp_path / "w.iter").read_text() == VARS
    nothing_but(tmp_path, "w.iter")


# -- misspelt store URLs: refused as URLs, never made a local store --------------------
MISSPELT_URLS = {
    "postgresql:/iterion:SECRET@127.0.0.1:{port}/agents": "'postgresql:' is not followed by '//'",
    "postgresql//iterion:SECRET@127.0.0.1:{port}/agents": "the ':' after 'postgresql' is missing",
    "postgresql:iterion:SECRET@127.0.0.1:{port}/agents": "'postgresql:' is not followed by '//'",
    "postgresql://iterion:SE@CRET@127.0.0.1:{port}/agents": (
        "an '@' in the user or password that is not percent-encoded"
    ),
}


@pytest.mark.parametrize("spelt", list(MISSPELT_URLS))
def test_a_misspelt_store_url_is_refused_with_its_password_masked(
    spelt: str, postgres_url: str, tmp_path: Path
) -> None:
    """Once: a local store in ./postgresql/iterion:SECRET@…, or SECRET in the message.

    The port is the session's real server's: a URL that got through would connect.
    """
    url = spelt.format(port=postgres_url.rsplit(":", 1)[1].split("/")[0])
    for args, env in (
        (["runs", "list", "--store", url], None),
        (["run", str(MINIMAL), "--scenario", str(SCENARIO), "--store", url], None),
        (["runs", "list"], {"ITERION_NB_STORE": url}),
        (["store", "copy", url, "x.duckdb"], None),
    ):
        proc = cli(*args, cwd=tmp_path, env=env)
        refused(proc, "is malformed", MISSPELT_URLS[spelt],
                "(expected postgresql://USER:PASSWORD@HOST:PORT/DB,", "@ as %40")  # fmt: skip
        assert "CRET" not in proc.stderr + proc.stdout, proc.stderr
    nothing_but(tmp_path)
