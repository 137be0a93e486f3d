"""Upstream iterion's workflow shapes compile and run here with its semantics (issue 20).

Each fixture in tests/fixtures/upstream/ is a ``.bot`` file with the ``dsl: 2``
header, as upstream writes them; it compiles without a diagnostic, runs with
the scripted model, and behaves as upstream documents.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import iterion_nb as it
from iterion_nb.errors import VarsError
from iterion_nb.ir import analyze
from iterion_nb.session import RunHandle, Session
from iterion_nb.store import MemoryStore

UPSTREAM = Path(__file__).resolve().parents[1] / "fixtures" / "upstream"
CLI = Path(sys.executable).parent / "iterion-nb"


@pytest.mark.parametrize("path", sorted(UPSTREAM.glob("*.bot")), ids=lambda p: p.stem)
def test_each_shape_compiles_cleanly(path: Path) -> None:
    result = analyze(path.read_text(), path.name)
    # no diagnostic, but the warning that says an upstream property is ignored
    assert [d.message for d in result.diagnostics if d.code != "C363"] == []
    assert result.workflow is not None and result.workflow.name == path.stem
    done = subprocess.run([str(CLI), "validate", str(path)], capture_output=True, text=True)
    assert done.returncode == 0 and f"{path}: ok" in done.stdout, done.stdout


async def run(
    name: str, scenario: dict[str, Any], folder: Path = UPSTREAM
) -> tuple[RunHandle, list[Any]]:
    session = Session(MemoryStore(), scenario=scenario)
    try:
        run = await session.start(it.compile_file(folder / f"{name}.bot"))
        await run.wait(10)
        return run, await run.events()
    finally:
        await session.close()


def visits(events: list[Any], node: str) -> int:
    return sum(1 for e in events if e.type == "node_started" and e.node_id == node)


async def test_a_compute_node_publishes() -> None:
    handle, events = await run("publish_on_compute", {"nodes": {"use": [{"text": "ok"}]}})
    assert handle.status == "finished"
    written = [e.data for e in events if e.type == "artifact_written"]
    assert written == [{"name": "gathered", "version": 1}]
    asked = next(e for e in events if e.type == "llm_request" and e.node_id == "use")
    assert "The number is 42." in repr(asked.data["messages"])


@pytest.mark.parametrize("fallback_first", [False, True])
async def test_a_loop_with_a_fallback_loops_then_falls_through(
    fallback_first: bool, tmp_path: Path
) -> None:
    scenario = {"nodes": {"check": [{"output": {"ok": False}}] * 4, "fixer": [{"text": "x"}] * 4}}
    name = "graceful_exhaustion"
    if fallback_first:  # the order of the two edges does not matter
        source = (UPSTREAM / f"{name}.bot").read_text()
        swapped = source.replace(
            "  fixer -> check as retry(3)\n  fixer -> fail\n",
            "  fixer -> fail\n  fixer -> check as retry(3)\n",
        )
        assert swapped != source
        (tmp_path / f"{name}.bot").write_text(swapped)
    handle, events = await run(name, scenario, tmp_path if fallback_first else UPSTREAM)
    assert handle.status == "failed"  # the fallback is 'fail': reached once the loop is spent
    assert handle.error == "the workflow reached 'fail'"
    assert (visits(events, "check"), visits(events, "fixer")) == (4, 4)
    # and when a check passes, the loop is left by its condition
    ok = {"nodes": {"check": {"visits": [[{"output": {"ok": False}}], [{"output": {"ok": True}}]]},
                    "fixer": [{"text": "x"}]}}  # fmt: skip
    handle, events = await run("graceful_exhaustion", ok)
    assert handle.status == "finished" and visits(events, "fixer") == 1


@pytest.mark.parametrize(("retryable", "status"), [(True, "finished"), (False, "failed")])
async def test_a_router_tests_what_the_with_mapping_built(retryable: bool, status: str) -> None:
    scenario = {"nodes": {"recheck": [{"output": {"good": False, "retryable": retryable}}],
                          "refiner": [{"text": "refined"}]}}  # fmt: skip
    handle, events = await run("router_field_from_with", scenario)
    assert handle.status == status
    routed = next(e for e in events if e.type == "node_started" and e.node_id == "fix_dispatch")
    assert routed.data["input"] == {"fixable": retryable}  # a bool, not the text "false"
    assert visits(events, "refiner") == (1 if retryable else 0)


async def test_the_workflows_vars_win_and_the_rest_merge() -> None:
    wf = it.compile_file(UPSTREAM / "workflow_vars_win.bot")
    assert {k: v.default for k, v in wf.vars.items()} == {"topic": "coffee", "cups": 2}
    handle, events = await run("workflow_vars_win", {"nodes": {"writer": [{"text": "ok"}]}})
    asked = next(e for e in events if e.type == "llm_request")
    assert "Write about coffee, 2 cups." in repr(asked.data["messages"])
    assert handle.status == "finished"


def test_a_variable_declared_twice_at_one_level_is_still_an_error() -> None:
    source = (UPSTREAM / "workflow_vars_win.bot").read_text()
    twice = source.replace("  cups: int = 2\n", '  cups: int = 2\n  topic: string = "tea"\n')
    found = [(d.code, d.message) for d in analyze(twice, "w.bot").diagnostics]
    assert found == [("C358", "variable 'topic' is declared twice")]


def test_dsl_versions_it_does_not_read_are_named() -> None:
    source = (UPSTREAM / "reasoning_effort_max.bot").read_text()
    found = [
        (d.code, d.message) for d in analyze(source.replace("dsl: 2", "dsl: 3"), "x").diagnostics
    ]
    assert found == [("S009", "dsl 3 is not a version this build reads (it reads 1 and 2)")]
    assert analyze(source.replace("dsl: 2", "dsl: 1"), "x").diagnostics == ()


async def test_an_expression_reads_a_loop_nodes_history() -> None:
    visits3 = [[{"output": {"ok": False}}], [{"output": {"ok": False}}], [{"output": {"ok": True}}]]
    handle, _ = await run("history_in_expressions", {"nodes": {"check": {"visits": visits3}}})
    assert handle.status == "finished", handle.error
    assert handle.outputs["tally"] == {"n": 3}  # it compiled, so it runs


@pytest.mark.parametrize(("word", "status"), [("hello", "finished"), ("", "failed")])
async def test_an_else_edge_is_taken_when_no_other_is(word: str, status: str) -> None:
    session = Session(MemoryStore(), scenario={"nodes": {"report": [{"text": "ok"}]}})
    try:
        handle = await session.start(
            it.compile_file(UPSTREAM / "else_edge.bot"), vars={"word": word}
        )
        assert await handle.wait(10) == status
    finally:
        await session.close()
    drawn = subprocess.run(
        [str(CLI), "graph", str(UPSTREAM / "else_edge.bot")], capture_output=True, text=True
    )
    assert '-->|"else"| n_fail' in drawn.stdout


async def test_a_loop_shows_its_previous_output() -> None:
    visits = [[{"output": {"text": f"v{n}", "good": n == 2}}] for n in range(3)]
    handle, events = await run("loop_previous_output", {"nodes": {"writer": {"visits": visits}}})
    assert handle.status == "finished", handle.error
    asked = [repr(e.data["messages"]) for e in events if e.type == "llm_request"]
    assert "Improve:  (pass 0)" in asked[0]  # nothing before the first pass
    assert "Improve: v0 (pass 1)" in asked[1] and "Improve: v1 (pass 2)" in asked[2]


async def test_run_values_are_what_the_run_consumed() -> None:
    scenario = {"nodes": {"worker": [{"text": "done", "tokens": {"in": 30, "out": 12}}],
                          "reporter": [{"text": "reported"}]}}  # fmt: skip
    handle, events = await run("run_values", scenario)
    assert handle.status == "finished", handle.error
    assert handle.outputs["tally"] == {"tokens": 42, "cheap": True}
    asked = next(e for e in events if e.type == "llm_request" and e.node_id == "reporter")
    assert f"Run {handle.id} used 42 tokens." in repr(asked.data["messages"])


async def test_backtick_strings_keep_their_backslashes() -> None:
    handle, events = await run("raw_strings", {"nodes": {"pick": [{"text": "ok"}]}})
    assert handle.status == "finished", handle.error
    asked = next(e for e in events if e.type == "llm_request")
    said = asked.data["messages"][0]["content"][0]["text"]
    assert said == 'Search with grep -E "a\\.b" and report.'  # one backslash, as written


async def test_a_human_node_s_system_prompt_and_an_llm_router_s_backend() -> None:
    scenario = {"nodes": {"gate": [{"text": '{"approved": true}'}], "pick": [{"text": "ship"}],
                          "ship": [{"text": "shipped"}]}}  # fmt: skip
    handle, events = await run("human_system_router_backend", scenario)
    assert handle.status == "finished", handle.error
    assert handle.outputs["gate"] == {"approved": True}
    asked = next(e for e in events if e.type == "llm_request" and e.node_id == "gate")
    assert "You answer for the release manager." in asked.data["system"]
    assert "ship" in handle.outputs and "hold" not in handle.outputs
    wf = it.compile_file(UPSTREAM / "human_system_router_backend.bot")
    assert wf.nodes["pick"].backend == "claw"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("output", "status", "error"),
    [
        ({"ok": False, "flaky": False, "reason": "link error"}, "failed",
         "[BUILD_BROKEN] the build is broken: link error"),
        ({"ok": False, "flaky": True, "reason": ""}, "failed_resumable",
         "[FLAKY] a flaky check; resume to try again"),
        ({"ok": True, "flaky": False, "reason": ""}, "finished", None),
    ],
)  # fmt: skip
async def test_a_typed_fail_ends_the_run_with_its_code_and_message(
    output: dict[str, Any], status: str, error: str | None
) -> None:
    handle, events = await run("typed_fail", {"nodes": {"check": [{"output": output}]}})
    assert (handle.status, handle.error) == (status, error)
    if error:
        assert [e.data["error"] for e in events if e.type == "run_failed"] == [error]


def test_nothing_leaves_a_typed_fail() -> None:
    source = (
        (UPSTREAM / "typed_fail.bot")
        .read_text()
        .replace("  check -> broken else\n", "  check -> broken else\n  broken -> done\n")
    )
    found = [(d.code, d.message) for d in analyze(source, "x.bot").diagnostics]
    assert ("C001", "'broken' is a terminal and cannot have outgoing edges") in found
    drawn = subprocess.run(
        [str(CLI), "graph", str(UPSTREAM / "typed_fail.bot")], capture_output=True, text=True
    )
    assert 'n_broken(("broken"))' in drawn.stdout


async def test_resuming_a_resumable_typed_fail_runs_its_source_again() -> None:
    visits = [[{"output": {"ok": False, "flaky": True, "reason": ""}}],
              [{"output": {"ok": True, "flaky": False, "reason": ""}}]]  # fmt: skip
    session = Session(MemoryStore(), scenario={"nodes": {"check": {"visits": visits}}})
    try:
        handle = await session.start(it.compile_file(UPSTREAM / "typed_fail.bot"))
        assert await handle.wait(10) == "failed_resumable"
        again = await session.resume(handle.id)
        assert await again.wait(10) == "finished", again.error
        assert again.outputs["check"]["ok"] is True  # the check ran again, and passed
        started = [e for e in await again.events() if e.type == "node_started"]
        assert [e.node_id for e in started] == ["check", "check"]
    finally:
        await session.close()


async def test_a_run_starts_from_a_preset_and_given_vars_win() -> None:
    wf = it.compile_file(UPSTREAM / "presets.bot")
    assert wf.presets == {"quick": {"rounds": 1}, "friendly": {"rounds": 2, "tone": "casual"}}
    session = Session(MemoryStore(), scenario={"nodes": {"writer": [{"text": "ok"}]}})
    try:
        plain = await session.start(wf)
        friendly = await session.start(wf, preset="friendly")
        mixed = await session.start(wf, preset="friendly", vars={"rounds": 9})
        got = [(await r.refresh()).vars for r in (plain, friendly, mixed)]
        assert got == [{"rounds": 3, "tone": "formal"}, {"rounds": 2, "tone": "casual"},
                       {"rounds": 9, "tone": "casual"}]  # fmt: skip
        assert (await friendly.refresh()).launch["preset"] == "friendly"
        with pytest.raises(VarsError, match=r"no preset 'nope' .* \(presets: quick, friendly\)"):
            await session.start(wf, preset="nope")
    finally:
        await session.close()


def test_the_cli_takes_a_preset(tmp_path: Path) -> None:
    (tmp_path / "sc.yaml").write_text("nodes:\n  writer: [{text: ok}]\n")
    base = [str(CLI), "run", str(UPSTREAM / "presets.bot"), "--scenario", "sc.yaml", "--json"]
    done = subprocess.run([*base, "--preset", "quick"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["vars"] == {"rounds": 1, "tone": "formal"}
    bad = subprocess.run([*base, "--preset", "nope"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert "no preset 'nope' in workflow 'presets' (presets: quick, friendly)" in bad.stderr


async def test_a_run_reads_the_files_it_was_given(tmp_path: Path) -> None:
    spec = tmp_path / "spec.txt"
    spec.write_text("the spec\n")
    wf = it.compile_file(UPSTREAM / "attachments.bot")
    assert (wf.attachments["spec"].required, wf.attachments["logo"].kind) == (True, "image")
    session = Session(MemoryStore(), scenario={"nodes": {"reviewer": [{"text": "ok"}]}},
                      workdir=tmp_path)  # fmt: skip
    try:
        handle = await session.start(wf, attachments={"spec": spec})
        assert await handle.wait(20) == "finished", handle.error
        events = await handle.events()
        asked = next(e for e in events if e.type == "llm_request")
        assert f"Review {spec} (text/plain, 9 bytes)." in repr(asked.data["messages"])
        digest = hashlib.sha256(b"the spec\n").hexdigest()
        assert handle.outputs["checksum"]["stdout"].startswith(digest)
        recorded = (await handle.refresh()).launch["attachments"]["spec"]
        assert recorded["sha256"] == digest and recorded["url"] == spec.as_uri()
        with pytest.raises(VarsError, match="attachment 'spec' is required"):
            await session.start(wf)
        (tmp_path / "spec.png").write_bytes(b"\x89PNG")
        refused = r"spec.png is image/png; it takes text/\*, application/pdf"
        with pytest.raises(VarsError, match=refused):
            await session.start(wf, attachments={"spec": tmp_path / "spec.png"})
        with pytest.raises(VarsError, match="cannot read"):
            await session.start(wf, attachments={"spec": tmp_path / "missing.txt"})
        with pytest.raises(VarsError, match=r"unknown attachment 'pdf' \(declared: spec, logo\)"):
            await session.start(wf, attachments={"spec": spec, "pdf": spec})
        assert len(await session.runs()) == 1  # nothing recorded for the refused ones
    finally:
        await session.close()


def test_the_cli_attaches_files(tmp_path: Path) -> None:
    (tmp_path / "sc.yaml").write_text("nodes:\n  reviewer: [{text: ok}]\n")
    (tmp_path / "s.txt").write_text("hi\n")
    base = [str(CLI), "run", str(UPSTREAM / "attachments.bot"), "--scenario", "sc.yaml"]
    done = subprocess.run([*base, "--attach", "spec=s.txt", "--json"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "finished"
    for args, said in (
        (["--attach", "spec"], "--attach expects KEY=VALUE, got 'spec'"),
        ([], "attachment 'spec' is required: give the file at launch"),
    ):
        bad = subprocess.run([*base, *args], cwd=tmp_path, capture_output=True, text=True,
                             timeout=60)  # fmt: skip
        assert bad.returncode != 0 and said in bad.stderr and "Traceback" not in bad.stderr


async def test_a_backtick_string_spans_lines_and_mcp_takes_upstream_block_form() -> None:
    wf = it.compile_file(UPSTREAM / "multiline_raw_and_mcp_block.bot")
    assert wf.nodes["writer"].mcp == ("words",)  # type: ignore[union-attr]
    found = analyze((UPSTREAM / "multiline_raw_and_mcp_block.bot").read_text(), "x").diagnostics
    assert [(d.code, d.severity) for d in found] == [("C363", "warning")]  # worktree: ignored
    no_agent = wf.source.replace("  script -> writer\n  writer -> done\n", "  script -> done\n")
    session = Session(MemoryStore())
    try:
        handle = await session.start(it.compile(no_agent))
        assert await handle.wait(20) == "finished", handle.error
        assert handle.outputs["script"]["stdout"] == "first line\nSECOND\n"
    finally:
        await session.close()
    unclosed = "tool t:\n  command: `echo\n\nworkflow w:\n  entry: t\n  t -> done\n"
    (problem,) = [d for d in analyze(unclosed, "u.iter").diagnostics if d.code == "S003"]
    assert (problem.line, problem.column) == (2, 12)
    assert "the '`' opened here is never closed" in problem.message


async def test_a_fan_out_router_where_branches_meet_waits_for_all_of_them() -> None:
    wf = it.compile_file(UPSTREAM / "router_join.bot")
    assert wf.nodes["verdicts"].await_mode == "wait_all"  # implicit, as upstream
    scenario = {"nodes": {n: [{"text": n.upper()}] for n in
                          ("review", "scan", "claude_verdict", "gpt_verdict")}}  # fmt: skip
    handle, events = await run("router_join", scenario)
    assert handle.status == "finished", handle.error
    started = [e.node_id for e in events if e.type == "node_started"]
    assert started.count("verdicts") == 1  # once, after both branches arrived
    assert started.index("verdicts") > max(started.index("review"), started.index("scan"))
    asked = next(e for e in events if e.type == "llm_request" and e.node_id == "claude_verdict")
    assert "Verdict: REVIEW / SCAN" in repr(asked.data["messages"])


def test_agents_read_upstreams_tool_names_capabilities_memory_and_late_loops() -> None:
    source = (UPSTREAM / "board_agents.bot").read_text()
    wf = it.compile(source)
    drafter, reviewer = wf.nodes["drafter"], wf.nodes["reviewer"]
    assert getattr(drafter, "mcp", None) == ("words",)  # the workflow's server
    assert getattr(drafter, "tools", None) == ("read_file", "mcp.words.shout")
    assert getattr(reviewer, "mcp", None) == ()  # inherit: false
    (loop,) = [e.loop for e in wf.edges if e.loop is not None]
    assert loop == "redraft" and wf.loops[loop].max_iterations == 2
    (warned,) = [d.message for d in analyze(source, "b.bot").diagnostics]
    assert "'capabilities:' on agent 'drafter'" in warned
    assert "iterion_nb does not do it and ignores it" in warned
    memory = getattr(drafter, "memory", None)
    assert memory is not None
    assert (memory.scope, memory.read, memory.write) == ("drafts", True, True)


async def test_tool_scripts_run_in_their_language_with_values_as_literals() -> None:
    handle, events = await run("tool_scripts", {"nodes": {}})
    assert handle.status == "finished", handle.error
    # JavaScript: an array and a string literal; its own `${...}` untouched
    assert handle.outputs["select"] == {"first": "a b", "count": 2, "label": "2 from our team"}
    # Python: a list literal; {{!ref}} as it is inside the script's own string
    assert handle.outputs["tally"]["stdout"] == "our team: x y, z\n"
    # a command: one quoted word per list item; {{!ref}} unquoted, so split by the shell
    assert handle.outputs["args"]["stdout"] == "[x y][z][our][teams]"
    called = [e.data for e in events if e.type == "tool_called" and e.node_id == "select"]
    assert called[0]["language"] == "js" and 'const scope = "our team";' in called[0]["script"]


async def test_a_script_whose_interpreter_is_missing_fails_clearly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no node, no sh: nothing on PATH
    source = 'tool t:\n  language: js\n  script: "console.log(1)"\n\nworkflow w:\n  entry: t\n'
    session = Session(MemoryStore())
    try:
        handle = await session.start(it.compile(source + "  t -> done\n"))
        assert await handle.wait(20) == "failed_resumable"
        assert handle.error == "node 't': a 'js' script needs 'node' on PATH, and there is none"
    finally:
        await session.close()


@pytest.mark.parametrize(
    ("source", "where", "message"),
    [
        ("tool t:\n  command: |\n\nworkflow w:\n  entry: t\n  t -> done\n", (2, 12),
         "empty block: the lines after '|' must be indented deeper than the key"),
        ('tool t:\n  command: "a" | "b"\n\nworkflow w:\n  entry: t\n  t -> done\n', (2, 16),
         "unexpected character '|': a block of text is written 'key: |'"),
        ('tool t:\n  command: "a"\n  script: "b"\n\nworkflow w:\n  entry: t\n  t -> done\n',
         (3, 3), "tool 't' has both 'command:' and 'script:'; keep one"),
        ('tool t:\n  language: js\n  command: "a"\n\nworkflow w:\n  entry: t\n  t -> done\n',
         (2, 3), "'language:' only applies to a tool with 'script:'"),
        ('tool t:\n  language: ruby\n  script: "a"\n\nworkflow w:\n  entry: t\n  t -> done\n',
         (2, 13), "'language' must be one of sh, bash, js, node, py, python, python3;"
                  " found 'ruby'"),
        ("tool t:\n  script: |\n    echo {{inptu.x}}\n\nworkflow w:\n  entry: t\n  t -> done\n",
         (3, 10), "inptu"),
    ],
)  # fmt: skip
def test_script_and_block_mistakes_are_named(
    source: str, where: tuple[int, int], message: str
) -> None:
    found = [d for d in analyze(source, "t.bot").diagnostics if d.severity == "error"]
    named = [d for d in found if message in d.message]
    assert named, found
    assert (named[0].line, named[0].column) == where


@pytest.mark.parametrize(("env", "autonomy"), [(None, "Ask before any irreversible step."),
                                               ("free", "Decide and document.")])  # fmt: skip
async def test_cursors_append_a_calibration_section_in_name_order(
    monkeypatch: pytest.MonkeyPatch, env: str | None, autonomy: str
) -> None:
    if env is None:
        monkeypatch.delenv("REVIEW_AUTONOMY", raising=False)
    else:
        monkeypatch.setenv("REVIEW_AUTONOMY", env)
    scenario = {"nodes": {"reviewer": [{"text": "ok"}], "plain": [{"text": "ok"}]}}
    handle, events = await run("cursors", scenario)
    assert handle.status == "finished", handle.error
    asked = {e.node_id: e.data["system"] for e in events if e.type == "llm_request"}
    assert asked["reviewer"].startswith(
        "You review changes.\n\n## Calibration\n\n"
        "**Ambition:** Propose 2-3 adjacent improvements, ranked by leverage.\n"
        f"**Autonomy:** {autonomy}\n"
        "**Depth:** Trace all call sites and edge cases."
    )
    assert "Calibration" not in asked["plain"]  # enabled: false


@pytest.mark.parametrize(
    ("change", "code", "message"),
    [
        (("    depth: 0.7\n", "    dept: 0.7\n"), "C083",
         "'reviewer' sets cursor 'dept', which is not declared; did you mean 'depth'?"),
        (("    depth: 0.7\n", "    depth: 1.5\n"), "C084",
         "cursor 'depth' value '1.5': numeric cursor values must lie in [0.0, 1.0]"),
        (("    ambition: ambitious\n", "    ambition: bold\n"), "C084",
         "cursor 'ambition' value 'bold': not one of cautious, ambitious"),
        (('"0.34..0.66"', '"0.30..0.66"'), "C085",
         "cursor 'depth': bands overlap: 0..0.33 and 0.3..0.66 (bounds are inclusive)"),
        (("cursor autonomy:\n", "cursor ambition:\n"), "C086",
         "cursor 'ambition' is declared twice"),
    ],
)  # fmt: skip
def test_cursor_mistakes_are_named(change: tuple[str, str], code: str, message: str) -> None:
    source = (UPSTREAM / "cursors.bot").read_text()
    changed = source.replace(*change)
    assert changed != source
    found = [(d.code, d.message) for d in analyze(changed, "c.bot").diagnostics]
    assert any(c == code and message in m for c, m in found), found


async def test_the_workflows_interaction_is_the_mode_of_nodes_that_set_none() -> None:
    wf = it.compile_file(UPSTREAM / "workflow_interaction.bot")
    modes = {n: getattr(wf.nodes[n], "interaction", None) for n in ("drafter", "gate", "quiet")}
    assert modes == {"drafter": "llm_or_human", "gate": "llm_or_human", "quiet": "none"}
    scenario = {"nodes": {"drafter": [{"text": "notes"}], "gate": [{"text": "yes, ship"}],
                          "quiet": [{"text": "done"}]}}  # fmt: skip
    handle, _ = await run("workflow_interaction", scenario)
    assert handle.status == "finished", handle.error
    assert handle.outputs["gate"] == {"text": "yes, ship"}  # answered by the model, no pause


def _checks(*oks: bool) -> dict[str, Any]:
    return {"visits": [[{"output": {"ok": ok}}] for ok in oks]}


@pytest.mark.parametrize(
    ("cap", "checks", "status", "fixes"),
    [
        (2, (False, True), "finished", 2),  # fixed on the second pass, within the bound
        (2, (False, False, False), "failed", 3),  # bound 2: the third "not ok" falls to fail
        ("3", (False, False, False, True), "finished", 4),  # a number as text counts too
    ],
)  # fmt: skip
async def test_a_loop_bound_is_read_from_the_run(
    cap: Any, checks: tuple[bool, ...], status: str, fixes: int
) -> None:
    scenario = {"nodes": {
        "fixer": [{"text": "patched"}], "checker": _checks(*checks),
        "reviewer": [{"text": "looks right"}],
    }}  # fmt: skip
    session = Session(MemoryStore(), scenario=scenario)
    try:
        handle = await session.start(
            it.compile_file(UPSTREAM / "templated_loop.bot"), vars={"cap": cap}
        )
        assert await handle.wait(20) == status, handle.error
        events = await handle.events()
    finally:
        await session.close()
    assert visits(events, "fixer") == fixes
    asked = [e.data["messages"][-1] for e in events
             if e.type == "llm_request" and e.node_id == "fixer"]  # fmt: skip
    assert f"(pass 1 of {int(cap)})" in json.dumps(asked[1])  # loop.fix.max: the run's bound
    if status == "finished":  # the fork names its parent's backend, as upstream passes it
        review = next(e for e in events if e.type == "llm_request" and e.node_id == "reviewer")
        assert "Review the fix (claw)." in json.dumps(review.data["messages"])


async def test_a_loop_bound_that_is_not_a_number_fails_the_node_naming_it() -> None:
    scenario = {"nodes": {"fixer": [{"text": "patched"}], "checker": _checks(False)}}
    session = Session(MemoryStore(), scenario=scenario)
    try:
        handle = await session.start(
            it.compile_file(UPSTREAM / "templated_loop.bot"), vars={"cap": 2.5}
        )
        assert await handle.wait(20) == "failed_resumable"
    finally:
        await session.close()
    assert handle.error == (
        "node 'checker': loop 'fix': its bound '{{outputs.planner.cap}}': gave 2.5, not a"
        " whole number of iterations"
    )


async def test_a_value_in_a_script_is_a_literal_of_its_language_never_shell(
    tmp_path: Path,
) -> None:
    planted = tmp_path / "planted"
    source = f"""
vars:
  note: string = "$(touch {planted}) `touch {planted}` $HOME"
  flags: json = {{"ok": true, "none": null, "n": 2}}

tool shell:
  script: |
    printf '%s' {{{{vars.note}}}}

tool python:
  language: py
  script: |
    flags = {{{{vars.flags}}}}
    print(flags["ok"] is True, flags["none"] is None, {{{{vars.note}}}}.startswith("$("))

workflow w:
  entry: shell
  shell -> python
  python -> done
"""
    session = Session(MemoryStore(), workdir=tmp_path)
    try:
        handle = await session.start(it.compile(source))
        assert await handle.wait(20) == "finished", handle.error
    finally:
        await session.close()
    assert not planted.exists()  # nothing the value held was run
    assert handle.outputs["shell"]["stdout"] == f"$(touch {planted}) `touch {planted}` $HOME"
    assert handle.outputs["python"]["stdout"] == "True True True\n"
