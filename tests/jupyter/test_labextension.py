"""The JupyterLab extension in a live JupyterLab, driven by real Chromium.

Installed by ``pip install -e .`` (the hatch hook builds it): the questions
sidebar fed by the server's pushed inbox, its badge (readable whether its tab
is the current one or not), notifications whose action opens the sidebar at
the question, answers by clicking an option's label, questions of a run that
is not running (saying so, and how to resume it), the runs panel, and the
``.iter`` language in the editor (a typo in a ``%%iterion`` cell is underlined
before the cell runs). The text of every panel is measured against its
background in the light and the dark theme.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import shutil
import subprocess
import sys
import time
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import iterion_nb as it
from tests.jupyter.test_browser import (
    ARTIFACTS,
    CHROMIUM,
    CONTRAST,
    notebook_of,
    open_notebook,
    run_cells,
    serve_lab,
)

ROOT = Path(__file__).resolve().parents[2]
CLI = Path(sys.executable).parent / "iterion-nb"
DOCS = ROOT / "docs" / "images"
SOURCE = (ROOT / "examples" / "async_questions.iter").read_text()
TYPO = SOURCE.replace("  model:", "  modle:", 1)
#: Upstream's newer forms, for the editor: a cursor, dotted MCP tool names, a ``|`` block.
SHAPES = """\
cursor depth:
  values:
    deep: "Trace every call site."

mcp_server words:
  command: "python3"
  args: ["words.py"]

tool shout:
  language: sh
  script: |
    echo "{{vars.topic}}" | tr a-z A-Z
    model: not a property

agent writer:
  model: "scripted"
  tools: [mcp.words.shout, mcp.words.*]
  cursors:
    depth: deep
  user: "Write."

workflow shapes:
  vars:
    topic: string = "x"
  entry: shout
  shout -> writer
  writer -> done
"""
INBOX = "#iterion-inbox"
RUNS = "#iterion-runs"
TAB = ".jp-SideBar .lm-TabBar-tab[data-id='iterion-inbox']"
#: CONTRAST of test_browser, over the extension's panels, the badge and the editor's tooltip.
MEASURE = CONTRAST.replace(
    "document.querySelectorAll('.iterion-live *')",
    "document.querySelectorAll('.iterion-sidebar:not(.lm-mod-hidden) *, .cm-iterion-tooltip *,"
    " .jp-SideBar .iterion-badge')",
)
#: The sidebar tab as drawn: the badge's text and box, and JupyterLab's own ``::after``
#: (on the current tab, the border that joins it to its open panel).
TAB_DRAWN = (
    "() => { const tab = document.querySelector(`" + TAB + "`);"
    " const badge = tab.querySelector('.iterion-badge');"
    " const t = tab.getBoundingClientRect(), after = getComputedStyle(tab, '::after');"
    " const b = badge ? badge.getBoundingClientRect() : null;"
    " return {current: tab.classList.contains('lm-mod-current'),"
    "  text: badge && getComputedStyle(badge).display !== 'none' ? badge.textContent : null,"
    "  badge: b && {left: b.left - t.left, top: b.top - t.top, width: b.width, height: b.height},"
    "  tab: {width: t.width, height: t.height},"
    "  after: {content: after.content, width: parseFloat(after.width),"
    "   height: parseFloat(after.height), background: after.backgroundColor}}; }"
)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: apt-get install chromium (as .ci/run does)")
    root = tmp_path_factory.mktemp("lab17")
    shutil.copy(ROOT / "examples" / "async_questions.scenario.yaml", root / "scenario.yaml")
    (root / "release.iter").write_text(SOURCE)
    (root / "typo.iter").write_text(TYPO)
    (root / "shapes.iter").write_text(SHAPES)
    asking = notebook_of(
        [
            "%load_ext iterion_nb",
            "%%iterion release_notes --run --scenario \"'scenario.yaml'\"\n" + SOURCE,
        ]
    )
    (root / "asking.ipynb").write_text(json.dumps(asking))
    typo = notebook_of(["%load_ext iterion_nb", "%%iterion release_notes\n" + TYPO])
    (root / "typo.ipynb").write_text(json.dumps(typo))
    with serve_lab(root) as served:
        yield served


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    tab = browser.new_page(viewport={"width": 1400, "height": 950})
    errors: list[str] = []
    tab.on("pageerror", lambda err: errors.append(err.stack or str(err)))  # says where
    yield tab
    ARTIFACTS.mkdir(exist_ok=True)
    tab.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"))
    tab.close()
    ours = [e for e in errors if not _in_jupyterlab_core_only(e)]
    assert ours == [], errors
    for error in errors:  # JupyterLab's own: said, not failed on (see _in_jupyterlab_core_only)
        warnings.warn(f"JupyterLab raised in the page: {error}", stacklevel=1)


#: A DOM race inside JupyterLab's own bundle, seen once in ~20 runs of the theme test
#: (a node removed twice while the theme changes); no frame of it is this extension's.
_CORE_RACE = "Failed to execute 'removeChild' on 'Node'"


def _in_jupyterlab_core_only(error: str) -> bool:
    """Whether a page error is that race, with every frame in JupyterLab's core bundle."""
    frames = [line for line in error.splitlines()[1:] if line.strip().startswith("at ")]
    return _CORE_RACE in error and bool(frames) and all("jlab_core" in f for f in frames)


def open_lab(page: Any, lab: dict[str, Any], path: str = "") -> None:
    """JupyterLab with a workspace of its own, the sidebar live (connected to the push route)."""
    where = f"/tree/{path}" if path else ""
    page.goto(f"{lab['url']}/lab/workspaces/t{abs(hash(path))}{where}?reset&token={lab['token']}")
    page.wait_for_selector(TAB, timeout=60_000)
    run_command(page, "iterion:open-inbox")
    page.locator(f"{INBOX} .iterion-state[data-state=live]").wait_for(timeout=30_000)


def run_command(page: Any, command: str, args: dict[str, Any] | None = None) -> None:
    page.evaluate(f"window.jupyterapp.commands.execute('{command}', {json.dumps(args or {})})")


def cli_run(lab: dict[str, Any]) -> subprocess.Popen[str]:
    root = lab["root"]
    return subprocess.Popen(
        [str(CLI), "run", str(root / "release.iter"), "--scenario", str(root / "scenario.yaml"),
         "--store", str(root / ".iterion"), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def cli_resume(lab: dict[str, Any], run_id: str, scripted: bool = True) -> subprocess.Popen[str]:
    """``iterion-nb resume RUN``, as the sidebar tells a person to type in a terminal.

    ``scripted``: the run's agents answer from the lab's scenario (a scenario is
    checked against the run's workflow: one naming nodes it lacks is refused).
    """
    root = lab["root"]
    scenario = ["--scenario", str(root / "scenario.yaml")] if scripted else []
    return subprocess.Popen(
        [str(CLI), "resume", run_id, *scenario, "--store", str(root / ".iterion"), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def at_the_gate(lab: dict[str, Any], run_id: str) -> None:
    """Wait until the run waits at its gate (the asking agent done: a resume starts there)."""
    url = f"{lab['url']}/iterion/api/runs/{run_id}/events?token={lab['token']}"
    for _ in range(300):
        with urllib.request.urlopen(url, timeout=10) as response:
            events = json.loads(response.read())["events"]
        if any(e["type"] == "node_started" and e["node_id"] == "gate" for e in events):
            return
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} never reached its gate: {events}")


def resume_hint(run_id: str) -> str:
    return f"%iterion resume {run_id} in a notebook, or iterion-nb resume {run_id} in a terminal"


def kernels(lab: dict[str, Any]) -> list[Any]:
    url = f"{lab['url']}/api/kernels?token={lab['token']}"
    with urllib.request.urlopen(url, timeout=10) as response:
        found: list[Any] = json.loads(response.read())
    return found


def who(page: Any) -> str:
    name: str = page.evaluate(
        "() => { const i = window.jupyterapp.serviceManager.user.identity;"
        " return i.display_name || i.name || i.username; }"
    )
    return name


def answer_in_the_sidebar(page: Any, run_id: str) -> None:
    """Click the option's label for the first question, type the second: both from the sidebar."""
    cards = page.locator(f"{INBOX} .iterion-card.pending")
    formal = cards.filter(has_text="formal or casual").locator("button.iterion-option")
    assert formal.all_inner_texts() == ["Formal", "Casual"]  # the labels, not the ids
    formal.filter(has_text="Formal").click()
    result = page.locator(f"{INBOX} .iterion-result.iterion-ok .iterion-result-text")
    result.wait_for(timeout=30_000)
    assert result.inner_text() == "Sent — the agent reads it at its next turn"
    free = cards.filter(has_text="Which feature should come first?")
    box = free.locator("input.iterion-free-text")
    box.fill("the inbox first")
    # the list updates as the first answer lands: the box keeps its text and the keyboard
    page.locator(f"{INBOX} .iterion-card.pending").nth(1).wait_for(state="detached")
    assert box.input_value() == "the inbox first"
    assert box.evaluate("(input) => document.activeElement === input")
    page.keyboard.press("Enter")
    done = page.locator(f"{INBOX} .iterion-card.answered").filter(has_text=f"run {run_id}")
    answered = done.filter(has_text="the inbox first")  # (an earlier run's answers are listed too)
    answered.wait_for(timeout=30_000)
    assert f"answered by {who(page)}" in answered.inner_text()
    formal_done = done.filter(has_text="formal or casual")
    assert "→ Formal" in formal_done.inner_text()


def pending_run(page: Any, count: int) -> str:
    """Wait until the badge counts ``count`` questions; the id of the run that asked them."""
    page.locator(f"{TAB}[data-iterion-count='{count}']").wait_for(timeout=60_000)
    cards = page.locator(f"{INBOX} .iterion-card.pending")
    assert cards.count() == count
    group = page.locator(f"{INBOX} .iterion-group").first
    head = group.locator(".iterion-group-head").inner_text()
    assert head.startswith("gatherer in release_notes · run ")
    assert group.locator(".iterion-card.pending").count() == 2  # one node's questions together
    # the gatherer has finished and the gate waits for these answers: the cards say so
    meta = cards.first.locator(".iterion-meta")
    waits = meta.filter(has_text="the run waits for this answer")
    waits.wait_for(state="attached", timeout=30_000)  # the sidebar may be closed
    assert meta.inner_text() == "asked just now · the run waits for this answer"
    return head.rsplit(" ", 1)[-1]


def test_the_wheel_installs_the_extension_enabled() -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "jupyter", "labextension", "list"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    text = listed.stdout + listed.stderr
    line = next(x for x in text.splitlines() if "@iterion-nb/labextension" in x)
    plain = line.replace("\x1b[32m", "").replace("\x1b[0m", "").split()
    assert plain == [
        "@iterion-nb/labextension",
        "v0.1.0",
        "enabled",
        "OK",
        "(python,",
        "iterion-nb)",
    ]
    shipped = Path(sys.prefix) / "share" / "jupyter" / "labextensions" / "@iterion-nb"
    assert (shipped / "labextension" / "install.json").is_file()


@pytest.mark.timeout(300)
def test_a_notebooks_question_is_answered_in_the_sidebar(lab: dict[str, Any], page: Any) -> None:
    open_notebook(page, lab, "asking.ipynb")
    run_command(page, "iterion:open-inbox")
    page.locator(f"{INBOX} .iterion-state[data-state=live]").wait_for(timeout=30_000)
    assert page.locator(f"{INBOX} .iterion-empty").inner_text() == (
        "Nothing is waiting for an answer."
    )
    run_command(page, "filebrowser:activate")  # the sidebar closed: the notification brings it
    run_cells(page, 2)
    toast = page.locator(".Toastify__toast", has_text="Should the notes be formal or casual?")
    toast.wait_for(timeout=60_000)
    assert "gatherer in release_notes · run " in toast.inner_text()
    run_id = pending_run(page, 2)
    toast.get_by_role("button", name="Answer").click()
    card = page.locator(f"{INBOX} .iterion-card.pending.iterion-focused")
    card.wait_for(timeout=10_000)
    assert "formal or casual" in card.inner_text()
    assert page.evaluate("() => document.activeElement.textContent") == "Formal"  # keyboard on it
    assert page.locator(INBOX).is_visible()
    answer_in_the_sidebar(page, run_id)
    page.locator(f"{TAB}[data-iterion-count]").wait_for(state="detached", timeout=10_000)
    # its notification goes with the question (after the toast's exit animation)
    page.locator(".Toastify__toast", has_text="formal or casual").wait_for(
        state="detached", timeout=10_000
    )
    run_command(page, "iterion:open-runs")
    row = page.locator(f"{RUNS} .iterion-runs-row[data-run='{run_id}']")
    row.locator(".iterion-status[data-status=finished]").wait_for(timeout=60_000)
    assert row.locator(".iterion-status").inner_text() == "finished"
    # the report opens in a JupyterLab tab, drawn under its own policy (no script)
    row.locator("button.iterion-report").click()
    frame = page.frame_locator(".iterion-report-frame iframe")
    frame.locator("h2", has_text="Summary").wait_for(timeout=30_000)
    assert frame.locator("#questions").inner_text().count("the inbox first") == 1
    page.evaluate("window.jupyterapp.commands.execute('kernelmenu:shutdown')")


@pytest.mark.timeout(300)
def test_a_cli_run_is_answered_with_no_kernel(lab: dict[str, Any], page: Any) -> None:
    open_lab(page, lab)
    for kernel in kernels(lab):  # no kernel at all: the notebook test's one is shut down
        request = urllib.request.Request(
            f"{lab['url']}/api/kernels/{kernel['id']}?token={lab['token']}", method="DELETE"
        )
        urllib.request.urlopen(request, timeout=30).close()
    for _ in range(200):
        if kernels(lab) == []:
            break
        time.sleep(0.1)
    assert kernels(lab) == []
    proc = cli_run(lab)
    try:
        page.locator(".Toastify__toast", has_text="formal or casual").wait_for(timeout=60_000)
        run_id = pending_run(page, 2)
        answer_in_the_sidebar(page, run_id)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert json.loads(out)["status"] == "finished"
    run_command(page, "iterion:open-runs")
    row = page.locator(f"{RUNS} .iterion-runs-row[data-run='{run_id}']")
    row.locator(".iterion-status[data-status=finished]").wait_for(timeout=30_000)
    assert row.locator("button.iterion-cancel").count() == 0  # nothing to cancel when finished


@pytest.mark.timeout(300)
def test_the_badge_reads_on_the_current_tab(lab: dict[str, Any], page: Any) -> None:
    """The count on the sidebar's tab, open or not; JupyterLab's current-tab border intact."""
    open_lab(page, lab)  # the questions sidebar open: its tab is the current one
    proc = cli_run(lab)
    try:
        run_id = pending_run(page, 2)
        drawn = page.evaluate(TAB_DRAWN)
        assert drawn["current"], drawn
        assert drawn["text"] == "2", drawn
        badge, tab = drawn["badge"], drawn["tab"]
        assert 12 <= badge["width"] <= 24 and 12 <= badge["height"] <= 18, drawn  # not a bar
        assert badge["left"] >= 0 and badge["left"] + badge["width"] <= tab["width"], drawn
        assert badge["top"] >= 0 and badge["top"] + badge["height"] <= tab["height"], drawn
        # JupyterLab's ::after of the current tab: its border over the whole tab, nothing filled
        after = drawn["after"]
        assert after["content"] == '""' and after["background"] == "rgba(0, 0, 0, 0)", drawn
        assert after["width"] >= tab["width"] - 4 and after["height"] >= tab["height"] - 4, drawn
        page.locator(TAB).screenshot(path=str(ARTIFACTS / "labextension-badge-current.png"))
        run_command(page, "filebrowser:activate")  # another tab current: the same count
        page.wait_for_function(f"() => !document.querySelector(`{TAB}.lm-mod-current`)")
        drawn = page.evaluate(TAB_DRAWN)
        assert drawn["text"] == "2" and 12 <= drawn["badge"]["width"] <= 24, drawn
        run_command(page, "iterion:open-inbox")
        answer_in_the_sidebar(page, run_id)
        # the last confirmation goes when dismissed
        page.get_by_role("button", name="Dismiss this message").click()
        assert page.locator(f"{INBOX} .iterion-result").count() == 0
        page.locator(f"{TAB} .iterion-badge").wait_for(state="detached", timeout=10_000)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert json.loads(out)["status"] == "finished", err


@pytest.mark.timeout(300)
def test_a_question_of_a_run_not_running_says_how_to_resume_it(
    lab: dict[str, Any], page: Any
) -> None:
    """Interrupted, then cancelled: each question says so; an answer is saved for the resume."""
    open_lab(page, lab)
    proc = cli_run(lab)
    try:
        run_id = pending_run(page, 2)  # live: "the run waits for this answer" (at the gate)
        cards = page.locator(f"{INBOX} .iterion-card.pending")
        assert cards.locator(".iterion-run-state:visible").count() == 0
        at_the_gate(lab, run_id)
    finally:
        proc.kill()  # SIGKILL: nothing executes the run any more
        proc.wait()
    formal = cards.filter(has_text="formal or casual")
    state = formal.locator(".iterion-run-state")
    state.wait_for(timeout=30_000)
    assert state.inner_text() == (
        f"Run {run_id} is interrupted (nothing executes it). An answer given now is saved;"
        f" the agent gets it when the run is resumed: {resume_hint(run_id)}."
    )
    assert "keeps working" not in formal.locator(".iterion-meta").inner_text()
    formal.get_by_role("button", name="Formal").click()
    saved = page.locator(f"{INBOX} .iterion-result.iterion-saved .iterion-result-text")
    saved.wait_for(timeout=30_000)
    assert saved.inner_text() == (
        f"Saved — run {run_id} is interrupted (nothing executes it), so the agent gets your"
        f" answer when the run is resumed ({resume_hint(run_id)})"
    )
    # cancelled from the runs panel: the question left says that
    run_command(page, "iterion:open-runs")
    row = page.locator(f"{RUNS} .iterion-runs-row[data-run='{run_id}']")
    # while the request waits for the run to stop, the button says so and takes no click
    page.evaluate(
        """() => { window.iterionSawCancelling = false;
            new MutationObserver(() => {
                const b = document.querySelector(
                    '.iterion-runs-row button.iterion-cancel[disabled]');
                if (b && b.textContent === 'Cancelling…') window.iterionSawCancelling = true;
            }).observe(document.body, {subtree: true, childList: true, attributes: true}); }"""
    )
    row.locator("button.iterion-cancel").click()
    row.locator(".iterion-status[data-status=cancelled]").wait_for(timeout=30_000)
    assert page.evaluate("() => window.iterionSawCancelling")
    assert row.locator("button.iterion-cancel").count() == 0  # nothing left to cancel
    run_command(page, "iterion:open-inbox")
    left = cards.filter(has_text="Which feature should come first?")
    left.locator(".iterion-run-state", has_text=f"Run {run_id} is cancelled.").wait_for(
        timeout=30_000
    )
    assert saved.is_visible()  # what to do stays while it still holds
    # resumed in a terminal, as the sidebar says: the notes go, the agent is live again
    resumed = cli_resume(lab, run_id)
    try:
        left.locator(".iterion-run-state").wait_for(state="hidden", timeout=60_000)
        meta = left.locator(".iterion-meta").inner_text()
        assert meta.endswith(" · the run waits for this answer"), meta  # at the gate again
        saved.wait_for(state="detached", timeout=10_000)
        box = left.locator("input.iterion-free-text")
        box.fill("the inbox first")
        box.press("Enter")
        sent = page.locator(f"{INBOX} .iterion-result.iterion-ok .iterion-result-text")
        sent.wait_for(timeout=30_000)
        shown = time.monotonic()
        assert sent.inner_text() == "Sent — the agent reads it at its next turn"
        # a confirmation goes by itself, once there was time to read it
        sent.wait_for(state="detached", timeout=20_000)
        assert 6 <= time.monotonic() - shown <= 15
        out, err = resumed.communicate(timeout=60)
    finally:
        if resumed.poll() is None:
            resumed.kill()
            resumed.wait()
    done = json.loads(out)
    assert done["status"] == "finished", err
    answers = {a["question"]: a["answer"] for a in done["outputs"]["gate"]["answers"]}
    assert answers == {  # the answer given while the run was interrupted reached it
        "Should the notes be formal or casual?": "formal",
        "Which feature should come first?": "the inbox first",
    }


def test_an_answer_nothing_will_resume_the_run_for_says_to_resume_it(
    lab: dict[str, Any], page: Any
) -> None:
    """A gate whose `run` exited: answered here (the server runs nothing), it says resume it."""
    root = lab["root"]
    (root / "ship.iter").write_text(
        'human ok:\n  instructions: "Ship it?"\n\nworkflow ship:\n  entry: ok\n  ok -> done\n'
    )
    ran = subprocess.run(
        [str(CLI), "run", str(root / "ship.iter"), "--store", str(root / ".iterion"), "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    run_id = json.loads(ran.stdout)["id"]  # paused at its gate; its process is gone
    open_lab(page, lab)
    card = page.locator(f"{INBOX} .iterion-card.pending", has_text="Ship it?")
    card.wait_for(timeout=60_000)
    box = card.locator("input.iterion-free-text")
    box.fill("ship it")
    box.press("Enter")
    saved = page.locator(f"{INBOX} .iterion-result.iterion-saved .iterion-result-text")
    saved.wait_for(timeout=30_000)
    assert saved.inner_text() == (
        f"Saved — every answer run {run_id} waits for is in, but nothing executes it:"
        f" resume it ({resume_hint(run_id)})"
    )
    time.sleep(3)  # the next pushes (the run still paused) leave it: it asks for something
    assert saved.is_visible()
    resumed = cli_resume(lab, run_id, scripted=False)  # a gate and no agent
    out, err = resumed.communicate(timeout=60)
    assert json.loads(out)["status"] == "finished", err
    saved.wait_for(state="detached", timeout=30_000)  # no longer paused: it no longer holds


CLUSTER_FLOW = """\
agent asker:
  model: "scripted"
  interaction: async
  user: "Ask, then go on."

tool slow:
  command: "echo slow >> ran.txt; while [ ! -f go ]; do sleep 0.05; done"

human gate:
  instructions: "Deploy on the cluster?"

tool after:
  command: "echo deployed >> ran.txt"

workflow deploy:
  entry: asker
  asker -> slow
  slow -> gate
  gate -> after
  after -> done
"""


def _in_a_thread(work: Any) -> Any:
    """Run a coroutine function to its end on a loop of its own (Playwright's sync API owns
    this thread's)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, work()).result(timeout=120)


def _status(served: dict[str, Any], run_id: str) -> str:
    url = f"{served['url']}/iterion/api/runs/{run_id}?token={served['token']}"
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(json.loads(response.read())["status"])


def _until_status(served: dict[str, Any], run_id: str, status: str, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while (now := _status(served, run_id)) != status:
        assert time.monotonic() < end, f"run {run_id} is {now}, not {status}"
        time.sleep(0.1)


@pytest.mark.timeout(400)
def test_a_cluster_run_no_worker_is_up_for_says_the_first_worker_takes_it(
    tmp_path_factory: pytest.TempPathFactory, postgres_url: str, browser: Any
) -> None:
    """A Dask cluster's run, in a JupyterLab serving its PostgreSQL store: its workers take
    it up again by themselves, so the sidebar never says "resume it". Its worker lost
    mid-run, the run is interrupted: the question's card says the first free worker takes
    it up, and so does the answer. Then, parked at its gate with every worker gone, the
    answer is saved, and the sidebar says no worker has taken the run up yet — until one
    comes up, takes it, and it finishes."""
    from iterion_nb.session import Session
    from tests.cluster.procs import CliCluster
    from tests.cluster.test_faults import schema_url

    root = tmp_path_factory.mktemp("labcluster")
    store = schema_url(postgres_url)
    cluster = CliCluster(root, 1, store)
    asks = {"name": "ask_user_async", "input": {"question": "Red or blue?"}}
    scenario = {"nodes": {"asker": [{"tool_calls": [asks]}, {"text": "Asked."}]}}
    page = browser.new_page(viewport={"width": 1400, "height": 950})
    try:

        async def started() -> str:
            session = Session(store, cluster=cluster.address, workdir=root, scenario=scenario)
            try:
                return (await session.start(it.compile(CLUSTER_FLOW))).id
            finally:
                await session.close()

        run_id = _in_a_thread(started)
        with serve_lab(root, {"ITERION_NB_STORE": store}) as served:
            for _ in range(600):  # the slow tool runs on the worker
                if (root / "ran.txt").exists():
                    break
                time.sleep(0.1)
            cluster.kill_workers()  # mid-run: the run is interrupted once its lease lapses
            _until_status(served, run_id, "interrupted")
            open_lab(page, served)
            card = page.locator(f"{INBOX} .iterion-card.pending", has_text="Red or blue?")
            state = card.locator(".iterion-run-state")
            state.wait_for(timeout=60_000)
            assert state.inner_text() == (
                f"Run {run_id} is interrupted; the first worker of its cluster free to take it"
                f" up resumes it (with no worker up: {resume_hint(run_id)}). An answer given"
                " now is saved; the agent gets it then."
            )
            box = card.locator("input.iterion-free-text")
            box.fill("red")
            box.press("Enter")
            saved = page.locator(f"{INBOX} .iterion-result.iterion-saved .iterion-result-text")
            saved.wait_for(timeout=30_000)
            assert saved.inner_text() == (
                f"Saved — run {run_id} is interrupted; the first worker of its cluster free to"
                " take it up resumes it, and the agent gets your answer then (with no worker"
                f" up: {resume_hint(run_id)})"
            )
            (root / "go").touch()
            cluster.add_worker()  # takes the run up, which goes on to its gate ...
            saved.wait_for(state="detached", timeout=90_000)  # (running again: the note goes)
            gate = page.locator(f"{INBOX} .iterion-card.pending", has_text="Deploy on the")
            gate.wait_for(timeout=90_000)
            _until_status(served, run_id, "paused_waiting_human")
            cluster.kill_workers()  # ... where it is parked: nobody is up to take it on
            box = gate.locator("input.iterion-free-text")
            box.fill("go")
            box.press("Enter")
            saved.wait_for(timeout=30_000)
            assert saved.inner_text() == (
                f"Saved — every answer run {run_id} waits for is in; no worker of its cluster"
                " has taken it up yet: the first one free resumes it (with no worker up:"
                f" {resume_hint(run_id)})"
            )
            time.sleep(3)  # the next pushes (the run still paused) leave it
            assert saved.is_visible()
            cluster.add_worker()  # the first worker that comes up takes it ...
            saved.wait_for(state="detached", timeout=60_000)  # ... so the message goes
            _until_status(served, run_id, "finished")
        assert (root / "ran.txt").read_text().split() == ["slow", "slow", "deployed"]
    finally:
        page.close()
        cluster.close()


def wait_for_underline(page: Any, scope: str, text: str) -> Any:
    mark = page.locator(f"{scope} .cm-iterion-error", has_text=text)
    mark.wait_for(timeout=30_000)
    return mark


@pytest.mark.timeout(300)
def test_a_typo_in_an_iterion_cell_is_underlined_before_it_runs(
    lab: dict[str, Any], page: Any
) -> None:
    open_notebook(page, lab, "typo.ipynb")
    cell = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell:nth-child(2)"
    mark = wait_for_underline(page, cell, "modle")
    assert mark.inner_text() == "modle"
    assert page.locator(f"{cell} .jp-InputPrompt").inner_text().strip() in ("[ ]:", "")  # not run
    # the .iter language: keywords highlighted, the magic line as such
    colors = page.evaluate(
        f"""() => {{
        const spans = [...document.querySelectorAll('{cell} .cm-line span')];
        const find = (t) => spans.find((s) => s.textContent === t);
        const line = document.querySelector('{cell} .cm-line');
        return {{agent: getComputedStyle(find('agent')).color,
                 name: getComputedStyle(find('gatherer')).color,
                 magic: !!find('%%iterion release_notes'),
                 plain: getComputedStyle(line).color}};
    }}"""
    )
    assert colors["magic"] and colors["agent"] != colors["plain"], colors
    mark.hover()
    tip = page.locator(".cm-iterion-tooltip")
    tip.wait_for(timeout=10_000)
    assert "modle" in tip.inner_text() and "error" in tip.inner_text()
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)").screenshot(
        path=str(ARTIFACTS / "labextension-editor.png")
    )
    # fixed as you type: the underline goes, still without running the cell
    mark.dblclick()
    page.keyboard.type("model")
    page.locator(f"{cell} .cm-iterion-error").wait_for(state="detached", timeout=30_000)
    page.keyboard.press("End")
    page.keyboard.type(" x")  # "model: "scripted" x": a new problem, underlined
    page.locator(f"{cell} .cm-iterion-error").first.wait_for(timeout=30_000)
    # a .iter file in the file editor: the same language and checks
    run_command(page, "docmanager:open", {"path": "typo.iter"})
    wait_for_underline(page, ".jp-FileEditor:not(.lm-mod-hidden)", "modle")


def test_upstreams_newer_forms_are_highlighted(lab: dict[str, Any], page: Any) -> None:
    """A cursor declaration, dotted tool names as one token, a ``|`` block as text."""
    open_lab(page, lab, "shapes.iter")
    editor = ".jp-FileEditor:not(.lm-mod-hidden)"
    page.locator(f"{editor} .cm-line", has_text="mcp.words.shout").wait_for(timeout=30_000)
    # each line as its pieces: [text, color when highlighted else null]
    lines = page.evaluate(
        f"""() => [...document.querySelectorAll('{editor} .cm-line')].map((line) =>
            [...line.childNodes].filter((n) => n.textContent.trim()).map((n) =>
                [n.textContent.trim(), n.nodeType === 1 ? getComputedStyle(n).color : null]))"""
    )
    pieces = {text: color for line in lines for text, color in line}
    by_start = {line[0][0]: line for line in lines if line}
    assert pieces["cursor"] is not None and pieces["cursor"] == pieces["agent"], lines
    assert by_start["cursor"][1] == ["depth", by_start["agent"][1][1]], lines  # a declared name
    # a dotted name is one piece (a "." is not an invalid character)
    assert [text for text, _ in by_start["tools"]] == [
        "tools", ":", "[", "mcp.words.shout", ",", "mcp.words.*", "]"
    ], lines  # fmt: skip
    # the | block is text: a line that looks like a property is not one, a reference stands out
    assert ["model: not a property", None] in [piece for line in lines for piece in line], lines
    assert pieces["model"] is not None, lines  # outside the block, model: is a property
    assert pieces["{{vars.topic}}"] is not None, lines


@pytest.mark.timeout(300)
@pytest.mark.parametrize("theme", ["JupyterLab Light", "JupyterLab Dark"])
def test_the_panels_read_in_the_light_and_dark_themes(
    lab: dict[str, Any], page: Any, theme: str
) -> None:
    """Every text of the sidebar, the runs panel, the badge and the tooltip: 4.5:1 or more."""
    open_lab(page, lab, "typo.iter")
    run_command(page, "apputils:change-theme", {"theme": theme})
    light = "true" if theme.endswith("Light") else "false"
    page.wait_for_function(f"() => document.body.dataset.jpThemeLight === '{light}'")
    proc = cli_run(lab)
    try:
        pending_run(page, 2)
        page.locator(f"{INBOX} .iterion-card.answered").first.wait_for(timeout=10_000)
        name = theme.split()[-1].lower()
        page.locator(".Toastify__toast").first.wait_for(timeout=30_000)
        measured = page.evaluate(MEASURE)
        assert page.evaluate(TAB_DRAWN)["text"] == "2"  # the badge, measured with the rest
        page.locator(INBOX).screenshot(path=str(ARTIFACTS / f"labextension-sidebar-{name}.png"))
        run_command(page, "iterion:open-runs")
        page.locator(f"{RUNS} .iterion-status[data-status=running]").first.wait_for()
        measured += page.evaluate(MEASURE)
        page.locator(RUNS).screenshot(path=str(ARTIFACTS / f"labextension-runs-{name}.png"))
        page.locator(".cm-iterion-error").first.hover()
        page.locator(".cm-iterion-tooltip").wait_for(timeout=10_000)
        measured += page.evaluate(MEASURE)
    finally:
        proc.kill()
        proc.wait()
    # the run interrupted: its question says so, and an answer says it is saved
    run_command(page, "iterion:open-inbox")
    cards = page.locator(f"{INBOX} .iterion-card.pending")
    cards.locator(".iterion-run-state").first.wait_for(timeout=30_000)
    cards.filter(has_text="formal or casual").get_by_role("button", name="Formal").click()
    page.locator(f"{INBOX} .iterion-result.iterion-saved").wait_for(timeout=30_000)
    measured += page.evaluate(MEASURE)
    page.locator(INBOX).screenshot(path=str(ARTIFACTS / f"labextension-interrupted-{name}.png"))
    box = cards.filter(has_text="Which feature").locator("input.iterion-free-text")
    box.fill("the runs panel")
    box.press("Enter")  # nothing left pending for what comes next
    page.locator(f"{TAB}[data-iterion-count]").wait_for(state="detached", timeout=30_000)
    texts = {m["text"] for m in measured}
    assert {"Questions", "Runs", "Formal", "Answer", "Which feature should come first?"} <= texts
    assert any(m["cls"].startswith("iterion-status") for m in measured)
    assert any("modle" in m["text"] for m in measured)  # the tooltip
    classes = {m["cls"] for m in measured}
    assert {"iterion-badge", "iterion-run-state", "iterion-result-text"} <= classes
    worst = min(measured, key=lambda m: m["ratio"])
    (ARTIFACTS / f"labextension-contrast-{name}.json").write_text(
        json.dumps(sorted(measured, key=lambda m: m["ratio"])[:15], indent=1)
    )
    assert worst["ratio"] >= 4.5, worst
    run_command(page, "apputils:change-theme", {"theme": "JupyterLab Light"})
