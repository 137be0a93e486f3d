"""``runs answers --export``, ``run --answers FILE`` and ``run --answers-from RUN`` (issue 19).

The real ``iterion-nb`` command in subprocesses, on a DuckDB store in a
temporary directory: a run answered from another terminal, its answers
exported, then two runs that nobody answers.
"""

from __future__ import annotations

import getpass
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "async_questions.iter"
SCENARIO = ROOT / "examples" / "async_questions.scenario.yaml"
CLI = Path(sys.executable).parent / "iterion-nb"


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CLI), *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def answered_run(tmp_path: Path) -> str:
    """The example run in the foreground, its two questions answered from another process."""
    proc = subprocess.Popen(
        [str(CLI), "run", str(EXAMPLE), "--scenario", str(SCENARIO)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        run_id = proc.stdout.readline().split()[1]
        pending: list[dict[str, str]] = []
        for _ in range(300):
            listed = cli("runs", "questions", run_id, "--json", cwd=tmp_path)
            pending = json.loads(listed.stdout)["interactions"]
            if len(pending) == 2:
                break
        for q, text in zip(pending, ["casual", "the inbox"], strict=True):
            assert cli("runs", "answer", run_id, q["id"], text, cwd=tmp_path).returncode == 0
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        return run_id
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_export_then_replay_from_the_file_and_from_the_run(tmp_path: Path) -> None:
    recorded = answered_run(tmp_path)
    listed = cli("runs", "answers", recorded, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines() == [
        "gatherer: Should the notes be formal or casual? [formal, casual]",
        '  -> "casual"',
        "gatherer: Which feature should come first?",
        '  -> "the inbox"',
    ]
    done = cli("runs", "answers", recorded, "--export", "answers.yaml", cwd=tmp_path)
    assert done.stdout == f"wrote 2 answers of run {recorded} to answers.yaml\n"
    document = yaml.safe_load((tmp_path / "answers.yaml").read_text())
    assert document["run"] == recorded and len(document["answers"]) == 2
    # the directories on the way are made, as for a report (once: No such file or directory)
    nested = cli("runs", "answers", recorded, "--export", "pins/v1/a.yaml", cwd=tmp_path)
    assert nested.returncode == 0, nested.stderr
    assert yaml.safe_load((tmp_path / "pins/v1/a.yaml").read_text()) == document
    into_a_folder = cli("runs", "answers", recorded, "--export", "pins", cwd=tmp_path)
    assert (into_a_folder.returncode, into_a_folder.stderr) == (
        1, "iterion-nb: cannot write pins: it is a directory\n"
    )  # fmt: skip
    outputs = json.loads(cli("runs", "show", recorded, "--json", cwd=tmp_path).stdout)["outputs"]

    for how in (["--answers", "answers.yaml"], ["--answers-from", recorded]):
        replayed = cli(
            "run", str(EXAMPLE), "--scenario", str(SCENARIO), "--json", *how, cwd=tmp_path
        )  # nobody answers: the command returns on its own
        assert replayed.returncode == 0, replayed.stderr
        shown = json.loads(replayed.stdout)
        assert shown["status"] == "finished"
        answers = [a["answer"] for a in shown["outputs"]["gate"]["answers"]]
        assert answers == [a["answer"] for a in outputs["gate"]["answers"]]
        assert shown["outputs"]["finalizer"] == outputs["finalizer"]
        asked = json.loads(cli("runs", "show", shown["id"], "--json", cwd=tmp_path).stdout)
        assert [q["answered_by"] for q in asked["interactions"]] == ["replay", "replay"]


def test_bad_answers_are_a_message_not_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("answers:\n  - node: gatherer\n    answer: x\n")
    bad = cli("run", str(EXAMPLE), "--scenario", str(SCENARIO), "--answers", "bad.yaml",
              cwd=tmp_path)  # fmt: skip
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    assert "bad.yaml: answer 1: 'question' must be a non-empty string" in bad.stderr
    missing = cli("run", str(EXAMPLE), "--scenario", str(SCENARIO), "--answers-from", "nope",
                  cwd=tmp_path)  # fmt: skip
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    assert "nope" in missing.stderr
    assert json.loads(cli("runs", "list", "--json", cwd=tmp_path).stdout)["runs"] == []
    gone = cli("runs", "answers", "nope", cwd=tmp_path)
    assert gone.returncode != 0 and "nope" in gone.stderr and "Traceback" not in gone.stderr


PIN = "answers:\n  - node: gatherer\n    question: Formal or casual?\n"
BAD_ANSWERS = {
    "a node the workflow lacks": (
        "answers:\n  - node: gatherer\n    question: q\n    answer: x\n"
        "  - node: gatherrer\n    question: q\n    answer: x\n",
        "iterion-nb: bad.yaml: answer 2: node 'gatherrer' is not in workflow 'release_notes';"
        " did you mean 'gatherer'? (its nodes: gatherer, gate, finalizer)",
    ),
    "no node close to it": (
        "answers:\n  - node: nosuchnode\n    question: q\n    answer: x\n",
        "iterion-nb: bad.yaml: answer 1: node 'nosuchnode' is not in workflow 'release_notes'"
        " (its nodes: gatherer, gate, finalizer)",
    ),
    "a field misspelt": (
        "answers:\n  - node: gatherer\n    questoin: q\n    answer: x\n",
        "iterion-nb: bad.yaml: answer 1: unknown field 'questoin'; did you mean 'question'?"
        " (an answer may hold: node, question, options, answer)",
    ),
    "the top-level key misspelt": (
        "answrs: []\n",
        "iterion-nb: bad.yaml: unknown key 'answrs'; did you mean 'answers'? (expected"
        " 'answers', the list of answers; 'run' and 'workflow' may say whose)",
    ),
    "an answer given twice": (
        PIN + "    answer: casual\n    answer: formal\n",
        "iterion-nb: bad.yaml:5:5: the key 'answer' is given twice in one mapping (first at"
        " line 4, column 5); a mapping holds each key once",
    ),
}


@pytest.mark.parametrize("case", list(BAD_ANSWERS))
def test_a_bad_answers_file_is_refused_before_a_run_is_recorded(case: str, tmp_path: Path) -> None:
    text, said = BAD_ANSWERS[case]
    (tmp_path / "bad.yaml").write_text(text)
    store = str(tmp_path / "s.duckdb")
    bad = cli("run", str(EXAMPLE), "--scenario", str(SCENARIO), "--answers", "bad.yaml",
              "--store", store, cwd=tmp_path)  # fmt: skip
    assert (bad.returncode, bad.stderr) == (2, said + "\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]  # no store, no run


def test_run_shows_a_replayed_question_with_its_answer_and_asks_the_others(
    tmp_path: Path,
) -> None:
    """Once a replayed question read `asked:` as if somebody had to answer it."""
    pinned = {"node": "gatherer", "question": "Should the notes be formal or casual?",
              "options": ["formal", "casual"], "answer": "casual"}  # fmt: skip
    # a pin whose options no longer fit: its question is asked after all
    stale = {"node": "gatherer", "question": "Which feature should come first?",
             "options": ["a", "b"], "answer": "a"}  # fmt: skip
    (tmp_path / "answers.yaml").write_text(yaml.safe_dump({"answers": [pinned, stale]}))
    proc = subprocess.Popen(
        [str(CLI), "run", str(EXAMPLE), "--scenario", str(SCENARIO), "--answers", "answers.yaml"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        run_id = proc.stdout.readline().split()[1]
        lines = [proc.stdout.readline().rstrip("\n") for _ in range(2)]
        replayed = [line for line in lines if "replayed:" in line]
        asked = [line for line in lines if "asked:" in line]
        assert replayed == [
            f"  replayed: {run_id}-toolu_gatherer_0_0_0 [async] Should the notes"
            ' be formal or casual? (options: formal|casual) -> "casual"'
        ], lines
        assert len(asked) == 1 and "Which feature should come first?" in asked[0], lines
        question = asked[0].split()[1]
        assert cli("runs", "answer", run_id, question, "the inbox", cwd=tmp_path).returncode == 0
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert f"run {run_id} (release_notes): finished" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    shown = json.loads(cli("runs", "show", run_id, "--json", cwd=tmp_path).stdout)
    # a person at a terminal is named by their account, as a notebook's click is
    assert [q["answered_by"] for q in shown["interactions"]] == ["replay", getpass.getuser()]
