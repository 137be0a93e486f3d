"""The installed ``iterion-nb`` command, run as a real subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
FIXTURES = ROOT / "tests" / "fixtures" / "diagnostics"
SCRIPT = Path(sys.executable).parent / ("iterion-nb.exe" if os.name == "nt" else "iterion-nb")


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    assert SCRIPT.exists(), "install the package (pip install -e .) to get the iterion-nb script"
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, cwd=cwd, check=False, timeout=60
    )


def test_validate_ok_example() -> None:
    proc = run("validate", "examples/async_questions.iter")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (
        "examples/async_questions.iter: ok — workflow 'release_notes', 3 nodes, 3 edges\n"
    )


def test_validate_and_graph_read_stdin_for_a_dash() -> None:
    source = (ROOT / "examples" / "minimal.iter").read_text()
    for command, said in (("validate", "<stdin>: ok — workflow 'haiku'"), ("graph", "flowchart")):
        proc = subprocess.run(
            [str(SCRIPT), command, "-"], input=source, capture_output=True, text=True,
            check=False, timeout=60,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert said in proc.stdout
    broken = subprocess.run(
        [str(SCRIPT), "validate", "-"], input="workflow w:\n  entry: x\n",
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert broken.returncode == 1
    assert broken.stdout.startswith("<stdin>:2:10: error[C008]: entry 'x' is not a declared node")


def test_validate_reports_every_error_with_caret() -> None:
    proc = run("validate", "tests/fixtures/diagnostics/C001.iter")
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        "tests/fixtures/diagnostics/C001.iter:7:3: error[C001]: unknown node 'nowhere' in edge",
        "    7 |   a -> nowhere",
        "      |   ^^^^^^^^^^^^",
        "",
        "tests/fixtures/diagnostics/C001.iter: 1 error",
    ]


def test_warnings_alone_exit_zero() -> None:
    proc = run("validate", "tests/fixtures/diagnostics/C242.iter")
    assert proc.returncode == 0
    assert "warning[C242]" in proc.stdout
    assert proc.stdout.rstrip().endswith("2 edges, 1 warning")


def test_validate_json_shape() -> None:
    proc = run("validate", "--json", "tests/fixtures/diagnostics/C241.iter")
    assert proc.returncode == 1
    payload = json.loads(proc.stdout)
    assert payload == {
        "ok": False,
        "diagnostics": [
            {
                "code": "C241",
                "severity": "error",
                "message": "await_answers 'gate' needs a positive 'timeout:' such as \"30m\";"
                " it must never block forever",
                "line": 6,
                "column": 15,
            }
        ],
        "truncated": False,
    }
    ok = json.loads(run("validate", "examples/minimal.iter", "--json").stdout)
    assert ok == {"ok": True, "diagnostics": [], "truncated": False}


def test_more_problems_than_are_listed_are_said_to_be_more(tmp_path: Path) -> None:
    """300 unknown nodes: the first 200 are listed, and the summary says there are more
    (once it read '200 errors', as if fixing those were enough)."""
    import iterion_nb as it

    flow = tmp_path / "many.iter"
    flow.write_text("workflow w:\n  entry: a0\n" + "".join(f"  a{i} -> b{i}\n" for i in range(300)))
    proc = run("validate", str(flow))
    assert proc.returncode == 1
    assert proc.stdout.count(": error[C") == 200
    assert proc.stdout.rstrip().endswith(
        "many.iter: 200 errors (only the first 200 problems are shown: fix them and check"
        " again for the rest)"
    )
    payload = json.loads(run("validate", str(flow), "--json").stdout)
    assert (len(payload["diagnostics"]), payload["truncated"]) == (200, True)
    with pytest.raises(it.CompileError) as raised:
        it.compile(flow.read_text(), "many.iter")
    assert str(raised.value).startswith("many.iter: 200 errors (only the first 200 problems")
    # 250 warnings (unreachable tools), then an error: once dropped past the cap, so the
    # workflow read "ok" and its run failed later
    warned = tmp_path / "warned.iter"
    tools = "".join(f'tool t{i}:\n  command: "echo"\n\n' for i in range(250))
    warned.write_text(
        tools + 'agent a:\n  user: "{{vars.nope}}"\n\nworkflow w:\n  entry: a\n  a -> done\n'
    )
    proc = run("validate", str(warned))
    assert proc.returncode == 1, proc.stdout[-300:]
    assert "error[C0" in proc.stdout and "vars.nope" in proc.stdout
    assert proc.stdout.rstrip().endswith(
        "warned.iter: 1 error, 199 warnings (only the first 200 problems are shown: fix them"
        " and check again for the rest)"
    )


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.iter")), ids=lambda p: p.name)
def test_graph_prints_mermaid_for_every_example(path: Path) -> None:
    proc = run("graph", str(path))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "flowchart TD"
    assert any(line.strip().startswith("start((start)) -->") for line in lines)
    assert "  n_done((done))" in lines


def test_graph_draws_conditions_loops_and_joins() -> None:
    out = run("graph", "examples/fanout_retry.iter").stdout
    assert '  n_decide -->|"approved"| n_summary' in out
    assert '  n_decide -.->|"not approved · loop revise ≤3"| n_writer' in out
    assert "await wait_all" in out
    assert '  n_reviews{{"reviews<br/><small>router: fan_out_all</small>"}}' in out


def test_graph_of_invalid_workflow_fails_with_diagnostics_on_stderr() -> None:
    proc = run("graph", "tests/fixtures/diagnostics/C019.iter")
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert "error[C019]" in proc.stderr


def test_missing_file_is_a_message_not_a_traceback(tmp_path: Path) -> None:
    proc = run("validate", str(tmp_path / "nope.iter"))
    assert proc.returncode == 2
    assert proc.stderr == f"iterion-nb: {tmp_path / 'nope.iter'}: no such file\n"
    directory = run("graph", str(tmp_path))
    assert directory.returncode == 2
    assert "is a directory" in directory.stderr


def test_usage_errors_exit_two() -> None:
    proc = run("frobnicate")
    assert proc.returncode == 2
    assert "invalid choice" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("verb", [["runs", "list"], ["runs", "answer", "r1", "q1", "yes"]])
def test_an_empty_store_is_refused_not_created(tmp_path: Path, verb: list[str]) -> None:
    """``--store "$VAR"`` with VAR unset: no store appears where you stand, no "no run"."""
    proc = run(*verb, "--store", "", cwd=tmp_path)
    assert proc.returncode == 2
    assert "argument --store: is empty: name a store" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_reader_that_stops_early_gets_no_error_message(tmp_path: Path) -> None:
    """``iterion-nb validate FILE | head``: the rest is not wanted, and that is not an error."""
    (tmp_path / "w.iter").write_text("workflow w:\n  entry: a\n  a -> b\n")
    proc = subprocess.Popen(
        [str(SCRIPT), "validate", str(tmp_path / "w.iter")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before anything is written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=30) == 141
    assert err == ""


def test_an_answer_that_needs_json_says_so(tmp_path: Path) -> None:
    """A form's answer typed as text: refused with the way to give JSON, then accepted."""
    flow = tmp_path / "form.iter"
    flow.write_text(
        'schema verdict:\n  ship: bool\n  tone: string [enum: "formal", "casual"]\n\n'
        'human gate:\n  instructions: "Ship it?"\n  output: verdict\n\n'
        "workflow w:\n  entry: gate\n  gate -> done\n"
    )
    store = str(tmp_path / "store")
    started = run("run", str(flow), "--store", store, cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.split()[1]
    form = "(form: ship: bool, tone: one of formal|casual; answer with --json-value)"
    assert f"[human] Ship it? {form}" in started.stdout  # the form is shown where it is asked
    listed = run("runs", "questions", run_id, "--store", store, cwd=tmp_path)
    assert listed.stdout.rstrip().endswith(f"gate: Ship it?  {form}"), listed.stdout
    asked = run("runs", "questions", run_id, "--store", store, "--json", cwd=tmp_path)
    (question,) = json.loads(asked.stdout)["interactions"]
    as_text = run("runs", "answer", run_id, question["id"], '{"ship": true}', "--store", store)
    assert as_text.returncode == 1
    assert "the answer must be an object with the fields ship, tone" in as_text.stderr
    assert "give JSON data — a form's fields, a number, true or false — with --json-value" in (
        as_text.stderr
    )
    as_json = run(
        "runs", "answer", run_id, question["id"], '{"ship": true, "tone": "formal"}',
        "--json-value", "--store", store,
    )  # fmt: skip
    assert as_json.returncode == 0, as_json.stderr
    assert "the run resumed; it is now finished" in as_json.stdout


def test_a_run_that_asks_nobody_says_no_word_on_answering(tmp_path: Path) -> None:
    flow = tmp_path / "sum.iter"
    flow.write_text('compute c:\n  expr:\n    v: "1 + 1"\n\nworkflow w:\n  entry: c\n  c -> done\n')
    done = run("run", str(flow), "--store", str(tmp_path / "store"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"run {done.stdout.split()[1]} running"


def test_an_answer_that_resumes_the_run_here_reports_where_it_ended(tmp_path: Path) -> None:
    """--json's run_status is the status the command leaves the run in; a failed end exits 1."""
    flow = tmp_path / "gate.iter"
    flow.write_text(
        'schema verdict:\n  ship: bool\n\nhuman gate:\n  instructions: "Ship it?"\n'
        "  output: verdict\n\nworkflow w:\n  entry: gate\n  gate -> done when ship\n"
        "  gate -> fail when not ship\n"
    )
    store = str(tmp_path / "store")
    outcomes = {}
    for ship in ("true", "false"):
        started = run("run", str(flow), "--store", store, "--json", cwd=tmp_path)
        run_id = json.loads(started.stdout)["id"]
        (question,) = json.loads(started.stdout)["questions"]
        outcomes[ship] = run(
            "runs", "answer", run_id, question["id"], f'{{"ship": {ship}}}', "--json-value",
            *(["--json"] if ship == "true" else []), "--store", store,
        )  # fmt: skip
    shipped, stopped = outcomes["true"], outcomes["false"]
    assert shipped.returncode == 0, shipped.stderr
    assert json.loads(shipped.stdout) == {
        "queued": False, "resumed": True, "run_status": "finished", "resume_needed": False,
        "awaiting_worker": False, "waited": True,
    }  # fmt: skip
    assert stopped.returncode == 1, stopped.stderr
    assert stopped.stdout == "answer recorded; the run resumed; it is now failed\n"


SLOW_TOOL = """\
tool first:
  command: "test -e started.txt || { echo started > started.txt; sleep 30; }"

tool second:
  command: "echo second >> ran.txt"

workflow w:
  entry: first
  first -> second
  second -> done
"""


def _as_in_a_terminal() -> None:
    """Signals as a terminal's foreground command gets them, whatever runs the tests.

    A test run under ``nohup`` (or in a background job, where the shell ignores
    SIGINT) would hand its children ignored SIGHUP (SIGINT), which they keep.
    """
    for signum in (signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, signal.SIG_DFL)


def _start_slow_run(tmp_path: Path, **popen: Any) -> tuple[subprocess.Popen[str], str]:
    """``iterion-nb run`` of SLOW_TOOL, once its first tool has started; and its store."""
    import time

    (tmp_path / "w.iter").write_text(SLOW_TOOL)
    store = str(tmp_path / "store")
    popen.setdefault("preexec_fn", _as_in_a_terminal)
    proc = subprocess.Popen(
        [str(SCRIPT), "run", "w.iter", "--store", store], cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not (tmp_path / "started.txt").exists():
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr
        time.sleep(0.05)
    return proc, store


@pytest.mark.parametrize(
    ("signum", "code", "cause"),
    [(signal.SIGINT, 130, "Ctrl-C"), (signal.SIGTERM, 143, "SIGTERM"),
     (signal.SIGHUP, 129, "SIGHUP (the terminal closed)")],
)  # fmt: skip
def test_ctrl_c_or_a_kill_during_run_cancels_it_says_how_to_go_on_and_no_traceback(
    tmp_path: Path, signum: int, code: int, cause: str
) -> None:
    proc, store = _start_slow_run(tmp_path)
    proc.send_signal(signum)  # Ctrl-C in a terminal; `kill`, a supervisor; a closed terminal
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert "Traceback" not in err
    run_id = out.split()[1]  # "run ID running (…)"
    assert f"run {run_id} cancelled ({cause}); `iterion-nb resume {run_id}" in err
    shown = json.loads(run("runs", "show", run_id, "--json", "--store", store).stdout)
    assert shown["status"] == "cancelled"  # not left "running" until its lease lapses
    assert not (tmp_path / "ran.txt").exists()
    resumed = run("resume", run_id, "--store", store, "--json", cwd=tmp_path)
    assert json.loads(resumed.stdout)["status"] == "finished", resumed.stderr


def test_under_nohup_a_hangup_is_still_ignored(tmp_path: Path) -> None:
    """`nohup iterion-nb run …` asked for the run to outlive its terminal: it does."""
    import time

    def ignore_hangups() -> None:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    proc, _ = _start_slow_run(tmp_path, preexec_fn=ignore_hangups)
    proc.send_signal(signal.SIGHUP)
    time.sleep(1.0)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "cancelled (SIGTERM)" in err
    assert "stopped by SIGTERM" not in err  # said once


@pytest.mark.parametrize(
    "verb",
    [["runs", "list"], ["runs", "show", "r1"], ["cancel", "r1"], ["report", "r1"],
     ["resume", "r1"]],
)  # fmt: skip
def test_a_store_path_with_a_typo_is_refused_and_nothing_is_created(
    tmp_path: Path, verb: list[str]
) -> None:
    """A command about runs already made does not make an empty store where a typo points."""
    typo = tmp_path / "nosuch" / "store"
    proc = run(*verb, "--store", str(typo), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert f"no run store at {typo / 'iterion.duckdb'}" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_copying_from_a_store_that_is_not_there_is_refused(tmp_path: Path) -> None:
    proc = run("store", "copy", "nosuchdir", str(tmp_path / "dst"), cwd=tmp_path)
    assert proc.returncode == 1
    assert "no run store at" in proc.stderr and "nosuchdir" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_answering_in_an_unknown_run_names_the_run_and_a_bad_status_is_usage(
    tmp_path: Path,
) -> None:
    import asyncio

    from iterion_nb.store import open_duckdb_store
    from tests.conformance.conftest import make_question, make_run

    async def seed() -> None:
        store = open_duckdb_store(tmp_path / "s")
        await store.create_run(make_run("r1"))
        await store.create_run(make_run("r2"))
        await store.add_interaction(make_question("q1", "r1"))
        await store.close()

    asyncio.run(seed())
    store = str(tmp_path / "s")
    unknown = run("runs", "answer", "nosuchrun", "q1", "formal", "--store", store)
    assert unknown.returncode == 1 and unknown.stderr == "iterion-nb: no run 'nosuchrun'\n"
    elsewhere = run("runs", "answer", "r2", "q1", "formal", "--store", store)
    assert elsewhere.returncode == 1
    assert elsewhere.stderr == "iterion-nb: no question 'q1' in run 'r2'\n"
    bogus = run("runs", "list", "--status", "bogus", "--store", store)
    assert bogus.returncode == 2 and "invalid choice: 'bogus'" in bogus.stderr


@pytest.mark.parametrize("name", ["minimal", "fanout_retry"])
def test_an_example_runs_offline_with_its_scenario_and_without_one_says_what_to_do(
    tmp_path: Path, name: str
) -> None:
    flow, scenario = EXAMPLES / f"{name}.iter", EXAMPLES / f"{name}.scenario.yaml"
    done = run("run", str(flow), "--scenario", str(scenario), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "finished"
    before = sorted(p.name for p in tmp_path.iterdir())
    # refused before a run is recorded: once it failed at its first agent, and `resume`,
    # as its hint said, failed the same way again
    bare = run("run", str(flow), "--store", "fresh", cwd=tmp_path)
    assert bare.returncode == 2 and bare.stdout == "", bare.stdout
    assert "the scripted model, and no scenario says what" in bare.stderr
    assert "give one with --scenario FILE" in bare.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no store was made


def test_resuming_a_scripted_run_without_a_scenario_says_to_give_one(tmp_path: Path) -> None:
    """A run that failed for want of a scenario is not resumed into the same failure."""
    import asyncio

    import iterion_nb as it

    async def failed() -> str:
        session = it.Session(str(tmp_path / "store"), workdir=tmp_path)
        try:
            handle = await session.start(it.compile((EXAMPLES / "minimal.iter").read_text()))
            assert await handle.wait(timeout=30) == "failed_resumable"
            return handle.id
        finally:
            await session.close()

    run_id = asyncio.run(failed())
    again = run("resume", run_id, "--store", str(tmp_path / "store"), cwd=tmp_path)
    assert again.returncode == 2, again.stderr
    assert again.stderr == (
        f"iterion-nb: run {run_id} failed for want of a scenario (its agents answer from one,"
        " and it recorded none): resume it with --scenario FILE (examples/*.scenario.yaml are"
        " samples)\n"
    )
    done = run("resume", run_id, "--store", str(tmp_path / "store"), "--scenario",
               str(EXAMPLES / "minimal.scenario.yaml"), cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    # the run's recorded workflow asks nobody: no hint about answering its questions
    assert done.stdout.splitlines()[0] == f"run {run_id} running", done.stdout


def _run_async_questions(store: str, cwd: Path) -> subprocess.Popen[str]:
    """``iterion-nb run`` of the async_questions example in the foreground, its output piped."""
    return subprocess.Popen(
        [str(SCRIPT), "run", str(EXAMPLES / "async_questions.iter"), "--scenario",
         str(EXAMPLES / "async_questions.scenario.yaml"), "--store", store],
        cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_run_shows_each_question_as_asked_and_another_terminal_answers_it(
    tmp_path: Path,
) -> None:
    """The README's terminal tour: the ids to answer with are printed by ``run`` itself."""
    store = str(tmp_path / "store")
    proc = _run_async_questions(store, cwd=tmp_path)
    assert proc.stdout is not None
    try:
        first = proc.stdout.readline()
        run_id = first.split()[1]
        assert first == (
            f"run {run_id} running (answer its questions with `iterion-nb runs answer {run_id}"
            f" ID TEXT --store {store}` from another terminal)\n"
        )
        asked = [proc.stdout.readline() for _ in range(2)]
        assert all(line.startswith("  asked: ") for line in asked), asked
        assert "(options: formal|casual)" in asked[0]
        for line in asked:
            iid = line.split()[1]
            answer = "formal" if "formal" in line else "asking while working"
            given = run("runs", "answer", run_id, iid, answer, "--store", store, cwd=tmp_path)
            assert given.returncode == 0, given.stderr
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert f"run {run_id} (release_notes): finished" in out


GATE = 'human gate:\n  instructions: "Ship it?"\n\nworkflow w:\n  entry: gate\n  gate -> done\n'


def test_runs_questions_without_a_run_lists_every_runs(tmp_path: Path) -> None:
    """With many parked runs, a person once had to loop over `runs list` to find what to answer.

    On the file, then through the process that holds it (a run in the foreground).
    """
    store = str(tmp_path / "store")
    (tmp_path / "gate.iter").write_text(GATE)
    paused = [json.loads(run("run", "gate.iter", "--store", store, "--json",
                             cwd=tmp_path).stdout)["id"] for _ in range(2)]  # fmt: skip
    listed = run("runs", "questions", "--store", store, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert [line.split()[0] for line in lines] == paused  # oldest first, led by the run's id
    assert all("[human] gate: Ship it?" in line for line in lines), lines
    as_json = json.loads(run("runs", "questions", "--store", store, "--json", cwd=tmp_path).stdout)
    assert [q["run_id"] for q in as_json["interactions"]] == paused and len(as_json) == 1
    first_run, first_question = lines[0].split()[:2]
    given = run("runs", "answer", first_run, first_question, "yes", "--store", store, cwd=tmp_path)
    assert given.returncode == 0, given.stderr
    proc = _run_async_questions(store, cwd=tmp_path)
    assert proc.stdout is not None
    try:
        live = proc.stdout.readline().split()[1]
        asked = [proc.stdout.readline().split()[1] for _ in range(2)]
        through = run("runs", "questions", "--store", store, cwd=tmp_path)  # via the holder
        assert through.returncode == 0, through.stderr
        shown = [line.split()[:2] for line in through.stdout.splitlines()]
        assert shown == [[paused[1], lines[1].split()[1]], *([live, q] for q in asked)]
        # a cluster named to `runs answer` is not this command's to use: the holder decides
        sent = run("runs", "answer", live, asked[1], "later", "--store", store,
                   "--cluster", "tcp://127.0.0.1:1", cwd=tmp_path)  # fmt: skip
        assert sent.returncode == 0, sent.stderr
        assert sent.stderr == (f"iterion-nb: note: --cluster is not used: process {proc.pid},"
                               " which holds the store, records the answer and decides where"
                               " the run goes on\n")  # fmt: skip
    finally:
        proc.kill()
        proc.wait()


CALLS_ITS_OWN_CLI = """
import asyncio, subprocess, sys, time
import iterion_nb as it

async def main():
    session = it.Session(sys.argv[1])
    await session.runs()  # the store is open: this process holds it and serves it
    began = time.monotonic()
    # as `!iterion-nb runs list` in a notebook does: this process's loop waits meanwhile
    done = subprocess.run([sys.argv[2], "runs", "list", "--store", sys.argv[1]],
                          capture_output=True, text=True, timeout=100)
    print(done.returncode, round(time.monotonic() - began), done.stderr, end="")
    await session.close()

asyncio.run(main())
"""


def test_the_cli_run_by_the_process_that_holds_the_store_says_so_at_once(
    tmp_path: Path,
) -> None:
    """It once waited 120 s for the holder — its own parent, waiting for it in turn."""
    store = str(tmp_path / "store")
    done = subprocess.run(
        [sys.executable, "-c", CALLS_ITS_OWN_CLI, store, str(SCRIPT)],
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
    )  # fmt: skip
    code, seconds, message = done.stdout.split(" ", 2)
    assert (code, done.returncode) == ("1", 0), done.stdout + done.stderr
    assert int(seconds) < 15  # the busy holder's 3 s, then at once
    assert message.startswith("iterion-nb: process ") and message.endswith(
        "it cannot answer until the command ends. In a notebook use the %iterion line magics"
        " (%iterion runs, %iterion questions RUN, %iterion answer …); or run the command in"
        " a terminal\n"
    ), message


def test_a_long_output_is_cut_with_an_ellipsis_and_shown_whole_in_json(tmp_path: Path) -> None:
    (tmp_path / "w.iter").write_text(
        "tool long:\n  command: \"python3 -c 'print(300 * chr(97))'\"\n\n"
        "workflow w:\n  entry: long\n  long -> done\n"
    )
    shown = run("run", "w.iter", "--store", str(tmp_path / "s"), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    (line,) = [x for x in shown.stdout.splitlines() if x.startswith("  long: ")]
    assert line.endswith("…") and len(line) == len("  long: ") + 200
    whole = run("run", "w.iter", "--json", "--store", str(tmp_path / "s"), cwd=tmp_path)
    assert json.loads(whole.stdout)["outputs"]["long"]["stdout"] == 300 * "a" + "\n"


THREE_QUESTIONS = """\
nodes:
  gatherer:
    - text: "Three things to ask."
      tool_calls:
        - name: ask_user_async
          input:
            question: "Should the notes be formal or casual?"
            options: [{id: formal, label: Formal}, {id: casual, label: Casual}]
        - name: ask_user_async
          input: {question: "Which feature should come first?"}
        - name: ask_user_async
          input: {question: "Who is the audience?"}
    - output: {draft: "d", open_points: []}
    - output: {draft: "d", open_points: []}
    - output: {draft: "d", open_points: []}
    - output: {draft: "d", open_points: []}
  finalizer:
    - output: {title: "t", body: "b"}
"""


def test_a_second_answer_says_who_answered_what_and_a_stopped_run_says_how_to_go_on(
    tmp_path: Path,
) -> None:
    """Answering again names the first answer and who gave it, through a holder and on the file;
    an answer to a run nothing executes says it waits for ``iterion-nb resume``."""
    (tmp_path / "scenario.yaml").write_text(THREE_QUESTIONS)
    store = str(tmp_path / "store")
    proc = subprocess.Popen(
        [str(SCRIPT), "run", str(EXAMPLES / "async_questions.iter"), "--scenario",
         "scenario.yaml", "--store", store],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        run_id = proc.stdout.readline().split()[1]
        first, second, third = (proc.stdout.readline().split()[1] for _ in range(3))
        given = run("runs", "answer", run_id, first, "Formal", "--as", "ada", "--store", store)
        assert (given.returncode, given.stdout) == (0, "answer queued for the agent\n")
        refused = f"iterion-nb: question '{first}' is already answered by ada: 'formal' ('Formal')"
        refused += " — nothing sent\n"
        again = run("runs", "answer", run_id, first, "casual", "--store", store)  # the holder
        assert (again.returncode, again.stdout, again.stderr) == (1, "", refused)
        proc.send_signal(signal.SIGINT)  # the run is cancelled: nothing executes it now
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130
    # one line says what became of the run; no second, vaguer one
    assert err.splitlines()[-1].startswith(f"iterion-nb: run {run_id} cancelled (Ctrl-C);"), err
    assert "iterion-nb: interrupted" not in err
    again = run("runs", "answer", run_id, first, "casual", "--store", store)  # on the file
    assert (again.returncode, again.stdout, again.stderr) == (1, "", refused)
    stored = run("runs", "answer", run_id, second, "the inbox", "--store", store)
    assert (stored.returncode, stored.stderr) == (0, "")
    assert stored.stdout == (
        f"answer stored; run {run_id} is cancelled, so it reaches the agent when the run is"
        f" resumed: `iterion-nb resume {run_id} --store {store}`\n"
    )
    as_json = run("runs", "answer", run_id, third, "engineers", "--json", "--store", store)
    assert json.loads(as_json.stdout) == {
        "queued": True, "resumed": False, "run_status": "cancelled", "resume_needed": False,
        "awaiting_worker": False,
    }  # fmt: skip
    resumed = run("resume", run_id, "--store", store, "--json", cwd=tmp_path)
    assert json.loads(resumed.stdout)["status"] == "finished", resumed.stderr
    answers = json.loads(resumed.stdout)["outputs"]["gate"]["answers"]
    assert [a["answer"] for a in answers] == ["formal", "the inbox", "engineers"]


def _before_the_command(err: str) -> bool:
    """Whether a Ctrl-C came while Python imported the ``iterion_nb`` package for the
    generated script, before ``iterion_nb.cli.entry`` — whose first act is to catch it —
    existed: no code can catch that one (a loaded machine reaches it at 0.03 s)."""
    lines = err.splitlines()
    return (
        bool(lines) and lines[-1] == "KeyboardInterrupt"
        and "from iterion_nb.cli.entry import main" in err
        and 'iterion_nb/cli/entry.py"' not in err
    )  # fmt: skip


@pytest.mark.parametrize("delay", [0.03, 0.08, 0.15, 0.25])
def test_ctrl_c_as_the_command_starts_is_one_line_not_a_traceback(
    tmp_path: Path, delay: float
) -> None:
    """Loading the command takes a few tenths of a second: Ctrl-C then is a message too."""
    import time

    proc = subprocess.Popen(
        [str(SCRIPT), "runs", "list", "--store", str(tmp_path / "none")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    if _before_the_command(err):
        return  # Python was still importing the package for the script: nothing of ours ran
    assert "Traceback" not in err, err
    if proc.returncode == 130:  # stopped (else it was done already: no store there)
        assert err.endswith("iterion-nb: interrupted\n"), err
    else:
        assert proc.returncode in (1, -signal.SIGINT), (proc.returncode, err)


HOLDS_ONLY = """\
import asyncio, sys
from iterion_nb.session import Session

async def main():
    session = Session(sys.argv[1])  # opens the file; starts no run
    await session.store.list_runs()
    print("open", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await session.close()

asyncio.run(main())
"""


def test_a_session_that_merely_holds_the_store_lets_the_cli_use_it(tmp_path: Path) -> None:
    """A notebook that only listed runs holds the DuckDB file: a terminal's commands go
    through it at once (it serves the file), not after 15 s of waiting for a holder."""
    store = tmp_path / "store"
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDS_ONLY, str(store)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "open\n"
        listed = subprocess.run(
            [str(SCRIPT), "runs", "list", "--store", str(store), "--json"],
            capture_output=True, text=True, check=False, timeout=10, cwd=tmp_path,
        )  # fmt: skip
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout) == {"runs": []}
    finally:
        proc.communicate("", timeout=30)


BLOCKS_ITS_LOOP = """\
import asyncio, sys, time
from iterion_nb.session import Session

async def main():
    session = Session(sys.argv[1])
    await session.store.list_runs()
    print("open", flush=True)
    read = asyncio.get_running_loop().run_in_executor
    await read(None, sys.stdin.readline)
    time.sleep(float(sys.argv[2]))  # a notebook cell computing: the loop runs nothing else
    print("free", flush=True)
    await read(None, sys.stdin.read)
    await session.close()

asyncio.run(main())
"""


def test_a_holder_busy_with_a_long_cell_is_waited_for_and_said(tmp_path: Path) -> None:
    """The CLI's request is not taken up while the holder's loop is blocked: the command
    says the holder is busy (one line), waits, and gets its answer once the loop is free."""
    store = tmp_path / "store"
    proc = subprocess.Popen(
        [sys.executable, "-c", BLOCKS_ITS_LOOP, str(store), "7"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline() == "open\n"
        proc.stdin.write("block\n")
        proc.stdin.flush()
        listed = subprocess.run(
            [str(SCRIPT), "runs", "list", "--store", str(store)],
            capture_output=True, text=True, check=False, timeout=60, cwd=tmp_path,
        )  # fmt: skip
        assert proc.stdout.readline() == "free\n"
    finally:
        proc.communicate("", timeout=30)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == "no runs\n"
    pid = proc.pid
    assert listed.stderr == (
        f"iterion-nb: process {pid} holds the run store, but it is busy: it has not taken a"
        " request up for 3 s (a notebook cell still running?); waiting for it (up to 120 s,"
        " Ctrl-C to stop)\n"
    )


def test_an_agent_a_variable_may_turn_away_from_needs_no_scenario(tmp_path: Path) -> None:
    """Only agents every run reaches make `run` ask for a scenario up front."""
    (tmp_path / "w.iter").write_text(
        "vars:\n  dry: bool = false\n\n"
        'compute check:\n  expr:\n    ok: "true"\n\n'
        'agent fake:\n  model: "scripted"\n\n'
        "workflow w:\n  entry: check\n"
        '  check -> fake when "vars.dry"\n  check -> done else\n  fake -> done\n'
    )
    done = run("run", "w.iter", "--var", "dry=false", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "finished"
    wet = run("run", "w.iter", "--var", "dry=true", cwd=tmp_path)  # it fails where it runs
    assert wet.returncode == 1 and "node 'fake' uses the scripted model" in wet.stdout


@pytest.mark.parametrize(
    "given",
    [("--var", "topc=1"), ("--var", "topc"), ("--preset", "nosuch"), ("--attach", "a=nosuch")],
    ids=["unknown-var", "no-equals", "unknown-preset", "unknown-attachment"],
)
def test_a_run_refused_for_its_inputs_leaves_no_store_behind(
    tmp_path: Path, given: tuple[str, str]
) -> None:
    store = tmp_path / "typo.duckdb"
    proc = run("run", "examples/minimal.iter", "--scenario", "examples/minimal.scenario.yaml",
               *given, "--store", str(store))  # fmt: skip
    assert proc.returncode in (1, 2) and proc.stderr.startswith("iterion-nb: "), proc.stderr
    assert "Traceback" not in proc.stderr
    assert not store.exists() and list(tmp_path.iterdir()) == []


def test_graph_json_is_the_workflow_as_data() -> None:
    proc = run("graph", "examples/fanout_retry.iter", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    drawn = run("graph", "examples/fanout_retry.iter").stdout
    assert data["ok"] is True and data["mermaid"] == drawn
    assert data["entry"] in {n["name"] for n in data["nodes"]}
    back = [e for e in data["edges"] if e.get("loop") == "revise"]
    assert back and back[0]["label"] == "not approved · loop revise ≤3", back
    refused = run("graph", "tests/fixtures/diagnostics/C001.iter", "--json")
    assert refused.returncode == 1 and refused.stderr == ""
    assert json.loads(refused.stdout)["diagnostics"][0]["code"] == "C001"
    assert json.loads(refused.stdout) == json.loads(
        run("validate", "tests/fixtures/diagnostics/C001.iter", "--json").stdout
    )  # as validate --json says it
