"""The notebooks in a live JupyterLab, driven by real Chromium, as a person uses them.

One JupyterLab for the module, on loopback with a token; Playwright drives
Debian's Chromium (``.ci/run`` installs it; no browser is downloaded). The
notebooks sit in ``notebooks/`` below the server's root, as in the checkout:
their kernels start there, and still use the server's store.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.jupyter_procs import stop, wait_serving

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("ITERION_NB_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = ROOT / "tests" / "artifacts"
TOUR = ("01_quickstart.ipynb", "02_async_questions.ipynb", "03_pause_and_resume.ipynb")

EVIL = "<script>window.__pwned = 1</script><img src=x onerror='window.__pwned = 2'>"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def without_outputs(path: Path) -> dict[str, Any]:
    notebook: dict[str, Any] = json.loads(path.read_text())
    for cell in notebook["cells"]:  # as a person gets it: no outputs yet
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    return notebook


def notebook_of(cells: list[str]) -> dict[str, Any]:
    return {
        "cells": [
            {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
             "source": source}
            for source in cells
        ],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                    "language": "python"}},
        "nbformat": 4, "nbformat_minor": 5,
    }  # fmt: skip


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: apt-get install chromium (as .ci/run does)")
    root = tmp_path_factory.mktemp("lab")
    books = root / "notebooks"
    books.mkdir()
    for name in TOUR:
        (books / name).write_text(json.dumps(without_outputs(ROOT / "notebooks" / name)))
    for beside in [*(ROOT / "notebooks").glob("*.yaml"), *(ROOT / "notebooks").glob("*.py")]:
        if beside.name != "conftest.py":  # the tour's pinned answers and its MCP server
            (books / beside.name).write_text(beside.read_text())
    saved = root / "saved"  # as committed: with their outputs, never run in this browser
    saved.mkdir()
    (saved / TOUR[0]).write_text((ROOT / "notebooks" / TOUR[0]).read_text())
    (books / "evil.ipynb").write_text(json.dumps(evil_notebook()))
    (books / "states.ipynb").write_text(json.dumps(states_notebook()))
    with serve_lab(root) as served:
        yield served


@contextlib.contextmanager
def serve_lab(root: Path, env_extra: dict[str, str] | None = None) -> Iterator[dict[str, Any]]:
    """JupyterLab on loopback with a token, serving ``root`` (its store: ``root/.iterion``,
    unless ``env_extra`` names one as ``ITERION_NB_STORE``)."""
    port, token = free_port(), secrets.token_hex(16)
    settings = root / ".settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True, exist_ok=True)  # no "get notified about news?" toast
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(root / ".jupyter"), "HOME": str(root),
           "JUPYTERLAB_SETTINGS_DIR": str(root / ".settings")}  # fmt: skip
    env.pop("ITERION_NB_STORE", None)  # the server's default: .iterion in its root
    env.update(env_extra or {})
    log = (root / "lab.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}",
         "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={root}", "--LabApp.news_url=", "--ServerApp.port_retries=0",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", "--allow-root",
         "--LabApp.expose_app_in_browser=True"],
        cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=log,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_serving(url, token, server, 60, said=(root / "lab.log").read_text)
        yield {"url": url, "token": token, "root": root}
    finally:
        stop(server)
        log.close()


def evil_notebook() -> dict[str, Any]:
    scenario = {"nodes": {"asker": [
        {"tool_calls": [{"name": "ask_user_async", "input": {
            "question": EVIL, "options": [{"id": "ok", "label": EVIL}]}}]},
        {"output": {"text": "done"}},
    ]}}  # fmt: skip
    flow = (
        "%%iterion evil --run --scenario scenario\n"
        "schema out:\n  text: string\n\n"
        'agent asker:\n  model: "scripted"\n  interaction: async\n  user: "Ask."\n'
        "  output: out\n\n"
        'await_answers gate:\n  from: asker\n  timeout: "5m"\n\n'
        "workflow evil:\n  entry: asker\n  asker -> gate\n  gate -> done\n"
    )
    return notebook_of(
        [
            f"%load_ext iterion_nb\nscenario = {json.dumps(scenario)}",
            flow,
            "run = _\nawait run.next_question(timeout=30)\nNone",
            "%iterion inbox {run.id}",
            "question = await run.next_question(timeout=5)\nawait run.answer(question.id, 'ok')",
            "%iterion wait {run.id}",
            "%iterion report {run.id}",
        ]
    )


#: Runs in every state at once: waiting, running, finished, pending; failed; skipped;
#: and one whose process died (interrupted). For the theme and contrast checks.
STATES = [
    """%load_ext iterion_nb
import asyncio, subprocess, sys, textwrap
scenario = {"nodes": {"asker": [
    {"tool_calls": [{"name": "ask_user_async", "input": {"question": "Go on?",
        "options": [{"id": "yes", "label": "Yes"}, {"id": "no", "label": "No"}]}},
        {"name": "ask_user_async", "input": {"question": "Anything else?"}}]},
    {"output": {"text": "asked"}}]}}""",
    """%%iterion live --run --scenario scenario
schema out:
  text: string

router split:
  mode: fan_out_all

agent asker:
  model: "scripted"
  interaction: async
  output: out

await_answers gate:
  from: asker
  timeout: "10m"

tool slow:
  command: "sleep 120"

compute joined:
  await: wait_all
  expr:
    ok: "true"

workflow live:
  entry: split
  split -> asker
  split -> slow
  asker -> gate
  gate -> joined
  slow -> joined
  joined -> done""",
    """%%iterion broken --run
tool broken:
  command: "echo boom >&2; exit 3"

tool after:
  command: "true"

workflow broken:
  entry: broken
  broken -> after
  after -> done""",
    """%%iterion skipping --run
compute check:
  expr:
    ok: "true"

tool taken:
  command: "true"

tool not_taken:
  command: "true"

workflow skipping:
  entry: check
  check -> taken when ok
  check -> not_taken when not ok
  taken -> done
  not_taken -> done""",
    "%iterion inbox",
    """other = textwrap.dedent(f'''
    import asyncio, os, signal, iterion_nb as it
    async def main():
        s = it.Session(scenario={scenario!r})
        run = await s.start(it.compile({live.source!r}))
        await run.next_question(timeout=30)
        print(run.id, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    asyncio.run(main())
''')
done = subprocess.run([sys.executable, "-c", other], capture_output=True, text=True)
dead = done.stdout.split()[0]""",
    "%iterion show {dead}",
]


def states_notebook() -> dict[str, Any]:
    return notebook_of(STATES)


#: The notebook on screen (a workspace may hold others, hidden).
NOTEBOOK = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook"
#: What a cell shows when it fails: an error, or a UsageError line.
ERRORS = f"{NOTEBOOK} .jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"


KERNEL_READY = """() => {
    const panel = window.jupyterapp && window.jupyterapp.shell.currentWidget;
    const kernel = panel && panel.sessionContext && panel.sessionContext.session
        && panel.sessionContext.session.kernel;
    return !!kernel && kernel.connectionStatus === "connected" && kernel.status === "idle";
}"""

KERNEL_ROUND_TRIP = """async () => {
    const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
    const reply = kernel.requestExecute({code: "", silent: true, store_history: false}).done;
    const late = new Promise((resolve) => setTimeout(() => resolve(null), 10000));
    const msg = await Promise.race([reply, late]);
    return !!msg && msg.content.status === "ok";
}"""

KERNEL_STATE = """() => {
    const panel = window.jupyterapp && window.jupyterapp.shell.currentWidget;
    const context = panel && panel.sessionContext;
    const kernel = context && context.session && context.session.kernel;
    return JSON.stringify({panel: !!panel, session: !!(context && context.session),
        connection: kernel && kernel.connectionStatus, status: kernel && kernel.status,
        dialogs: [...document.querySelectorAll('.jp-Dialog')].map((d) => d.innerText)});
}"""


def open_notebook(page: Any, lab: dict[str, Any], path: str) -> None:
    """Open ``path`` alone in its workspace and wait until its kernel is connected and idle.

    Before running anything the page's kernel connection must be up (an execution
    sent while it is still connecting is silently dropped), and a silent execution
    must come back: CI once saw a Run All whose every cell stayed queued on an idle
    kernel, its first request lost after the page had reported it connected. A loaded machine can
    leave a first page load waiting for its kernel (seen once in CI under a second
    ipykernel): after 45 s a dialog in the way is accepted and the page reloaded,
    three times at most; the failure then says what the page's kernel was doing.
    """
    workspace = path.replace(".", "-").replace("/", "-")  # only this notebook is open
    page.goto(f"{lab['url']}/lab/workspaces/{workspace}/tree/{path}?reset&token={lab['token']}")
    for attempt in range(3):
        page.wait_for_selector(f"{NOTEBOOK} .jp-Cell", timeout=60_000)
        try:
            page.wait_for_function(KERNEL_READY, timeout=45_000)
            if any(page.evaluate(KERNEL_ROUND_TRIP) for _ in range(3)):
                return
        except Exception:  # playwright's TimeoutError: retried below, reported at the end
            pass
        try:  # the page itself may be gone (a crashed renderer): say so, not a traceback
            state = page.evaluate(KERNEL_STATE)
        except Exception as err:
            state = f"the page does not answer ({type(err).__name__}: {err})"
        if attempt == 2:
            raise AssertionError(f"the notebook's kernel never became ready: {state}")
        accept = page.locator(".jp-Dialog .jp-mod-accept")
        if accept.count():
            accept.first.click()
            continue
        page.reload()


def run_cells(page: Any, count: int, start: int = 0) -> None:
    """Run cells ``start`` to ``count - 1`` in order, as a person would: select, Shift+Enter, watch.

    A code cell counts as run when its prompt shows an execution count. The
    first execution can be dropped while the page is still connecting to the
    kernel, so a cell still showing ``[ ]`` after a few seconds is run again.
    """
    cells = page.locator(f"{NOTEBOOK} .jp-Cell")
    for k in range(start, count):
        cell = cells.nth(k)
        if "jp-CodeCell" not in (cell.get_attribute("class") or ""):
            continue
        prompt = cell.locator(".jp-InputPrompt")
        for _attempt in range(5):
            prompt.click()
            page.keyboard.press("Shift+Enter")
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and prompt.inner_text().strip() in ("[ ]:", ""):
                page.wait_for_timeout(100)
            if prompt.inner_text().strip() not in ("[ ]:", ""):
                break
        else:
            raise AssertionError(f"cell {k} never started")
        page.wait_for_function(
            "(el) => /\\[\\d+\\]/.test(el.textContent)", arg=prompt.element_handle(), timeout=60_000
        )


def run_all(page: Any) -> None:
    """*Run All*, then wait until every code cell ran and the kernel is idle.

    The command's promise settles only once every cell ran: not awaited here,
    so a cell that hangs fails the wait below, which says where each cell stands.
    """
    page.evaluate("() => { void window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    try:
        page.wait_for_function(
            f"""() => {{
                const prompts = [...document.querySelectorAll(
                    '{NOTEBOOK} .jp-CodeCell .jp-InputPrompt')];
                const panel = window.jupyterapp.shell.currentWidget;
                const kernel = panel.sessionContext.session.kernel;
                return prompts.length && prompts.every((p) => /\\[\\d+\\]/.test(p.textContent))
                    && kernel.status === "idle";
            }}""",
            timeout=120_000,
        )
    except Exception as err:

        def look(script: str) -> Any:  # a diagnostic that fails must not hide the failure
            try:
                return page.evaluate(script)
            except Exception as why:
                return f"<unknown: {type(why).__name__}>"

        cells = look(
            f"""() => [...document.querySelectorAll('{NOTEBOOK} .jp-CodeCell')].map((c) => [
                c.querySelector('.jp-InputPrompt').textContent.trim(),
                c.querySelector('.jp-InputArea-editor').textContent.slice(0, 60),
                (c.querySelector('.jp-OutputArea') || {{textContent: ''}}).textContent.slice(-200),
            ])"""
        )
        kernel = look(
            "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status"
        )
        answers = look(KERNEL_ROUND_TRIP)  # is the kernel's shell channel still served?
        raise AssertionError(
            f"Run All did not finish (kernel {kernel}, answers a silent execution: {answers}):"
            f" {cells}"
        ) from err


def cell_index(lab: dict[str, Any], path: str, text: str) -> int:
    cells = json.loads((lab["root"] / path).read_text())["cells"]
    return next(
        k for k, c in enumerate(cells) if c["cell_type"] == "code" and text in "".join(c["source"])
    )


def output_of(page: Any, index: int) -> str:
    """The text a cell output (from the notebook's model: JupyterLab does not keep
    cells far out of view in the page)."""
    text: str = page.evaluate(
        """(i) => window.jupyterapp.shell.currentWidget.content.widgets[i].model.outputs
            .toJSON().map((o) => [].concat(o.text || (o.data || {})['text/plain'] || [])
            .join('')).join('\\n')""",
        index,
    )
    return text


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    tab = browser.new_page(viewport={"width": 1400, "height": 1000})
    yield tab
    ARTIFACTS.mkdir(exist_ok=True)
    tab.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True)
    tab.close()


def served_runs(lab: dict[str, Any]) -> list[str]:
    url = f"{lab['url']}/iterion/api/runs?token={lab['token']}"
    with urllib.request.urlopen(url, timeout=30) as response:
        return [r["id"] for r in json.loads(response.read())["runs"]]


@pytest.mark.timeout(300)
def test_quickstart_click_an_option_then_run_the_rest(lab: dict[str, Any], page: Any) -> None:
    """The person clicks first; the cell that answers in code then leaves it, and says so."""
    path = "notebooks/01_quickstart.ipynb"
    open_notebook(page, lab, path)
    inbox_cell = cell_index(lab, path, "%iterion inbox")
    run_cells(page, inbox_cell + 1)  # everything up to the inbox; no code answers
    option = page.locator(".iterion-inbox button.option[data-option=formal]")
    option.wait_for(timeout=60_000)
    assert page.locator(".iterion-inbox .question").first.inner_text() == (
        "Should the notes be formal or casual?"
    )
    assert option.inner_text() == "Formal"  # the option's label, not its id
    meta = page.locator(".iterion-inbox .card.pending .meta").first
    assert meta.inner_text().startswith("writer in release_notes · asked just now")
    # the writer has finished and the gate waits for this answer: the card says so (in place)
    meta.locator(".waits", has_text="the run waits for this answer").wait_for(timeout=30_000)
    assert page.locator(".iterion-inbox .card.pending time").first.get_attribute("title")
    option.click()
    page.locator(".iterion-inbox .result.ok").wait_for(timeout=30_000)
    assert page.locator(".iterion-inbox .result").inner_text() in (
        "Sent — the agent reads it at its next turn",
        "Answered — the run has since finished",  # the run may be over already
    )
    # who answered: the person as JupyterLab knows them (as its questions sidebar records)
    me = page.evaluate("() => window.jupyterapp.serviceManager.user.identity.display_name")
    assert me and me != getpass.getuser()
    answered = page.locator(".iterion-inbox .history .answered").first
    answered.wait_for(timeout=10_000)
    assert f"answered by {me}" in answered.inner_text()
    assert "→ Formal" in answered.inner_text()
    cells = len(json.loads((lab["root"] / path).read_text())["cells"])
    run_cells(page, cells, start=inbox_cell + 1)
    answer_cell = cell_index(lab, path, "%iterion answer")
    assert f"Already answered by {me}: 'Formal' — nothing sent" in output_of(page, answer_cell)
    assert page.locator(ERRORS).count() == 0
    page.locator(".iterion-run .status[data-status=finished]").wait_for(timeout=60_000)
    # the run is over: the banner no longer says the agent will read the answer
    page.wait_for_function(
        "() => document.querySelector('.iterion-inbox .result').textContent"
        " === 'Answered — the run has since finished'",
        timeout=10_000,
    )
    assert page.locator(".iterion-run g.node[data-state=finished]").count() == 3
    # the kernel (in notebooks/) and the server use one store: the server lists the run
    run_id = page.locator(".iterion-run .title code").first.inner_text()
    assert run_id in served_runs(lab)
    # the notebook saved, its kernel gone: reopened, it shows the run as it ended
    page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")
    page.wait_for_timeout(1000)
    page.evaluate("window.jupyterapp.commands.execute('kernelmenu:shutdown')")
    page.wait_for_timeout(1000)
    open_notebook(page, lab, path)
    snapshot = page.locator(f"{NOTEBOOK} .iterion-snapshot").first
    snapshot.wait_for(state="visible", timeout=30_000)
    text = snapshot.inner_text()
    assert "finished · 3/3 nodes finished" in text
    assert "answered 'Formal' by" in text
    picture = snapshot.locator("img")
    assert picture.is_visible() and picture.evaluate("(img) => img.naturalWidth > 0")
    page.wait_for_timeout(3000)  # long enough for the widget manager to give up on the model
    visible = page.evaluate(
        "() => [...document.querySelectorAll('.jp-OutputArea-output')]"
        ".filter((e) => e.offsetParent !== null).map((e) => e.textContent).join('\\n')"
    )
    assert "model not found" not in visible and "Loading widget" not in visible


@pytest.mark.timeout(300)
def test_a_notebook_opened_as_committed_shows_its_runs(lab: dict[str, Any], page: Any) -> None:
    """Never run in this browser (untrusted, as from a clone): the saved snapshots show."""
    open_notebook(page, lab, "saved/01_quickstart.ipynb")
    snapshots = page.locator(f"{NOTEBOOK} .iterion-snapshot")
    snapshots.first.wait_for(state="visible", timeout=30_000)
    text = snapshots.first.inner_text()
    assert "release_notes · finished · 3/3 nodes finished" in text
    assert snapshots.first.locator("img").evaluate("(img) => img.naturalWidth > 0")
    assert "object at 0x" not in page.locator(NOTEBOOK).inner_text()


@pytest.mark.timeout(300)
def test_run_all_with_two_run_widgets_on_one_page(lab: dict[str, Any], page: Any) -> None:
    """*Run All* never conflicts; each widget's arrowheads are its own."""
    open_notebook(page, lab, "notebooks/02_async_questions.ipynb")
    run_all(page)
    assert page.locator(ERRORS).count() == 0
    widgets = page.locator(".iterion-run")
    assert widgets.count() == 2
    page.locator(".iterion-run .status[data-status=finished]").nth(1).wait_for(timeout=60_000)
    markers = page.evaluate(
        """() => [...document.querySelectorAll('.iterion-run svg.graph')].map((svg) => {
            const used = [...svg.querySelectorAll('path.edge')].map(
                (p) => p.getAttribute('marker-end').slice(5, -1));
            const found = used.map((id) => document.getElementById(id));
            return {ids: [...new Set(used)], own: found.every((m) => m && svg.contains(m))};
        })"""
    )
    assert [m["own"] for m in markers] == [True, True]
    assert len({i for m in markers for i in m["ids"]}) == 2  # one marker per widget, unique
    # node texts stay inside their boxes
    overflow = page.evaluate(
        """() => [...document.querySelectorAll('.iterion-run g.node')].filter((g) => {
            const box = g.querySelector('rect').getBBox();
            return [...g.querySelectorAll('text')].some((t) => {
                const b = t.getBBox();
                return b.x + b.width > box.x + box.width - 2 || b.x < box.x;
            });
        }).map((g) => g.dataset.node)"""
    )
    assert overflow == []


@pytest.mark.timeout(300)
def test_answer_from_the_run_widget_then_click_through(lab: dict[str, Any], page: Any) -> None:
    """03, cell by cell: a click under the graph resumes the paused run; the rest goes on."""
    path = "notebooks/03_pause_and_resume.ipynb"
    open_notebook(page, lab, path)
    flow = cell_index(lab, path, "%%iterion signoff")
    run_cells(page, flow + 1)
    form = page.locator(".iterion-run .forms .card.pending")
    form.wait_for(timeout=60_000)
    assert form.locator(".question").inner_text() == "Ship on Friday?"
    assert "the run waits for this answer" in form.locator(".meta").inner_text()
    form.locator("button.option[data-option=yes]").click()
    page.locator(".iterion-run .result.ok").wait_for(timeout=30_000)
    assert page.locator(".iterion-run .result").inner_text() in (
        "Answered — the run goes on",
        "Answered — the run has since finished",  # the run may be over already
    )
    page.locator(".iterion-run .status[data-status=finished]").wait_for(timeout=60_000)
    assert page.locator(".iterion-run .result").first.inner_text() == (
        "Answered — the run has since finished"
    )
    cells = len(json.loads((lab["root"] / path).read_text())["cells"])
    run_cells(page, cells, start=flow + 1)
    assert page.locator(ERRORS).count() == 0
    answer_cell = cell_index(lab, path, "%iterion answer {run.id}")
    me = page.evaluate("() => window.jupyterapp.serviceManager.user.identity.display_name")
    assert f"Already answered by {me}: 'Yes' — nothing sent" in output_of(page, answer_cell)
    resumed = cell_index(lab, path, "%iterion resume")
    assert "with the scenario it recorded when it started" in output_of(page, resumed)


CONTRAST = """() => {
    const parse = (c) => {
        let m = c.match(/rgba?\\(([^)]+)\\)/);
        if (m) { const p = m[1].split(/[\\s,\\/]+/).filter(Boolean).map(Number);
                 return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1]; }
        m = c.match(/color\\(srgb ([^)]+)\\)/);
        if (m) { const p = m[1].split(/[\\s\\/]+/).filter(Boolean).map(Number);
                 return [p[0] * 255, p[1] * 255, p[2] * 255, p.length > 3 ? p[3] : 1]; }
        return [0, 0, 0, 0];
    };
    const over = (top, bottom) => {
        const a = top[3] + bottom[3] * (1 - top[3]);
        return [0, 1, 2].map((i) => (top[i] * top[3] + bottom[i] * bottom[3] * (1 - top[3])) / a)
            .concat([a]);
    };
    const backdrop = (el) => {
        const chain = [];
        for (let n = el; n && n.nodeType === 1; n = n.parentElement) chain.push(n);
        let bg = [255, 255, 255, 1];
        for (const n of chain.reverse()) {
            const c = parse(getComputedStyle(n).backgroundColor);
            if (c[3] > 0) bg = over(c, bg);
        }
        return bg;
    };
    const lum = (c) => {
        const [r, g, b] = c.slice(0, 3).map((v) => { v /= 255;
            return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
        return 0.2126 * r + 0.7152 * g + 0.0722 * b;
    };
    const ratio = (a, b) => { const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p);
                              return (x + 0.05) / (y + 0.05); };
    const found = [];
    for (const el of document.querySelectorAll('.iterion-live *')) {
        const text = [...el.childNodes].filter((n) => n.nodeType === 3)
            .map((n) => n.textContent.trim()).join('');
        if (!text || el.closest('style, title, details:not([open]) > :not(summary)')) continue;
        if (!el.getClientRects().length) continue;
        let fg, bg;
        if (el instanceof SVGElement) {
            const base = backdrop(el.closest('svg').parentElement);
            const rect = el.closest('g') && el.closest('g').querySelector('rect, circle');
            bg = rect ? over(parse(getComputedStyle(rect).fill), base) : base;
            fg = over(parse(getComputedStyle(el).fill), bg);
        } else {
            bg = backdrop(el);
            fg = over(parse(getComputedStyle(el).color), bg);
        }
        found.push({text: text.slice(0, 40), ratio: ratio(fg, bg), tag: el.tagName,
                    cls: String(el.getAttribute('class') || '')});
    }
    return found;
}"""


@pytest.mark.timeout(300)
@pytest.mark.parametrize("theme", ["JupyterLab Light", "JupyterLab Dark"])
def test_every_state_reads_in_the_light_and_dark_themes(
    lab: dict[str, Any], page: Any, theme: str
) -> None:
    """Each state has its own look and words; all widget text is 4.5:1 or more (WCAG AA)."""
    path = "notebooks/states.ipynb"
    open_notebook(page, lab, path)
    page.evaluate(
        f"window.jupyterapp.commands.execute('apputils:change-theme', {{theme: '{theme}'}})"
    )
    light = "true" if theme.endswith("Light") else "false"
    page.wait_for_function(f"() => document.body.dataset.jpThemeLight === '{light}'")
    run_cells(page, len(STATES))
    for state in ("waiting", "running", "finished", "pending", "failed", "skipped"):
        page.locator(f".iterion-run g.node[data-state={state}]").first.wait_for(timeout=60_000)
    page.locator(".iterion-run .status[data-status=interrupted]").wait_for(timeout=60_000)
    page.locator(".iterion-inbox button.option").first.wait_for(timeout=30_000)
    page.locator(".iterion-inbox button.submit.primary").first.wait_for(timeout=30_000)
    note = page.locator(".iterion-run .note").first
    assert "%iterion resume" in note.inner_text()
    # the inbox of every run: the interrupted run's questions say so, and how to resume it
    stopped = page.locator(".iterion-inbox .card.pending .run-state").first
    stopped.wait_for(timeout=60_000)
    dead = stopped.evaluate("(e) => e.closest('.card').querySelector('.meta').textContent")
    assert "nothing executes the run now" in dead and "keeps working" not in dead
    assert re.match(
        r"Run \w+ is interrupted \(nothing executes it\)\. An answer given now is saved; the agent"
        r" gets it when the run is resumed: %iterion resume \w+\.",
        stopped.inner_text(),
    )
    looks = page.evaluate(
        """() => Object.fromEntries(['waiting', 'running', 'finished', 'pending', 'failed',
            'skipped'].map((s) => { const g = document.querySelector(
                `.iterion-run g.node[data-state=${s}]`);
            const r = getComputedStyle(g.querySelector('rect'));
            return [s, [r.fill, r.stroke, g.querySelector('.state').textContent]]; }))"""
    )
    assert len({fill for fill, _, _ in looks.values()}) == 6, looks  # a colour of its own
    assert all(text.startswith(state) for state, (_, _, text) in looks.items()), looks
    interrupted = page.locator(".iterion-run .status[data-status=interrupted]").first
    assert interrupted.evaluate("(e) => getComputedStyle(e).borderTopStyle") == "dashed"
    page.locator(".iterion-run g.node[data-node=asker]").first.click()  # a details panel too
    page.locator(".iterion-run .details").first.wait_for(timeout=30_000)
    measured = page.evaluate(CONTRAST)
    assert len(measured) > 50
    worst = min(measured, key=lambda m: m["ratio"])
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / f"contrast-{theme.split()[-1].lower()}.json").write_text(
        json.dumps(sorted(measured, key=lambda m: m["ratio"])[:20], indent=1)
    )
    assert worst["ratio"] >= 4.5, worst
    name = theme.split()[-1].lower()
    page.locator(".iterion-run").first.screenshot(path=str(ARTIFACTS / f"run-{name}.png"))
    page.locator(".iterion-inbox").first.screenshot(path=str(ARTIFACTS / f"inbox-{name}.png"))
    # the check itself catches grey on grey (the old widgets' #666 text, say); added and
    # measured in one go: the live widget re-renders its header (dropping the probe) when
    # the run's state changes
    measured = page.evaluate(
        "() => { document.querySelector('.iterion-run .header').append(Object.assign("
        "document.createElement('span'), {className: 'probe', textContent: 'probe',"
        " style: 'color: #666; background: #444'})); return (" + CONTRAST + ")(); }"
    )
    probe = [m for m in measured if m["cls"] == "probe"]
    assert len(probe) == 1 and probe[0]["ratio"] < 2
    page.evaluate("window.jupyterapp.commands.execute('apputils:change-theme', "
                  "{theme: 'JupyterLab Light'})")  # fmt: skip
    page.evaluate("window.jupyterapp.commands.execute('kernelmenu:shutdown')")


#: A time of day as the page's locale writes it (Chromium here: en-US, 08:16 AM).
CLOCK = r"\d\d:\d\d(\s?[AP]M)?"


def disconnect_notebook() -> dict[str, Any]:
    scenario = {"nodes": {"asker": [
        {"tool_calls": [{"name": "ask_user_async", "input": {
            "question": "Go on?", "options": [{"id": "yes", "label": "Yes"}]}}]},
        {"output": {"text": "asked"}},
    ]}}  # fmt: skip
    flow = (
        "%%iterion --run --scenario scenario\n"
        "schema out:\n  text: string\n\n"
        'agent asker:\n  model: "scripted"\n  interaction: async\n  output: out\n\n'
        'await_answers gate:\n  from: asker\n  timeout: "10m"\n\n'
        "workflow waits:\n  entry: asker\n  asker -> gate\n  gate -> done\n"
    )
    return notebook_of(
        [
            f"%load_ext iterion_nb\nscenario = {json.dumps(scenario)}",
            flow,
            "run = _\nawait run.next_question(timeout=30)\nimport os\nos.getpid()",
            "%iterion inbox {run.id}",
        ]
    )


@pytest.mark.timeout(300)
@pytest.mark.parametrize("how", ["restart", "kill"])
def test_widgets_whose_kernel_is_gone_say_so_and_switch_off(
    lab: dict[str, Any], page: Any, how: str
) -> None:
    """A restarted (or killed, hence restarted) kernel: no live-looking widget is left behind."""
    path = f"notebooks/disconnect-{how}.ipynb"
    (lab["root"] / path).write_text(json.dumps(disconnect_notebook()))
    open_notebook(page, lab, path)
    run_cells(page, 4)
    run_option = page.locator(".iterion-run .forms button.option[data-option=yes]")
    inbox_option = page.locator(".iterion-inbox button.option[data-option=yes]")
    for option in (run_option, inbox_option):
        option.wait_for(timeout=60_000)
        assert option.is_enabled()
    page.locator(".iterion-run .status[data-status=running]").wait_for(timeout=30_000)
    assert page.locator(".iterion .stale").count() == 0
    clock = page.locator(".iterion-run .meter[data-meter=time]")
    page.wait_for_timeout(5000)  # the run waits quietly at its gate: its clock ticks, no event
    ticked = _shown_seconds(clock.inner_text())
    assert ticked >= 4.5, ticked
    if how == "restart":  # as a person does: Kernel > Restart Kernel…, then confirm
        page.evaluate("() => { void window.jupyterapp.commands.execute('kernelmenu:restart'); }")
        page.locator(".jp-Dialog .jp-mod-accept").click()
    else:  # the kernel dies; Jupyter's server starts a new one
        pid = int(output_of(page, 2).strip().splitlines()[-1])
        os.kill(pid, signal.SIGKILL)
    for widget in (".iterion-run", ".iterion-inbox"):
        stale = page.locator(f"{widget} .stale")
        stale.wait_for(timeout=60_000)
        assert re.match(rf"Kernel disconnected — state as of {CLOCK}\.", stale.inner_text())
    assert not run_option.is_enabled() and not inbox_option.is_enabled()
    status = page.locator(".iterion-run .status").inner_text()
    assert re.fullmatch(rf"running \(as of {CLOCK}\)", status), status
    assert "%iterion show" in page.locator(".iterion-run .stale").inner_text()
    before = clock.inner_text()
    # it stops where the kernel was last seen alive (checked each second); it once fell back
    # to the time of the run's last event, 5 s and more before
    assert _shown_seconds(before) >= ticked - 1.5, (before, ticked)
    page.wait_for_timeout(2500)
    assert clock.inner_text() == before  # the time no longer ticks: nothing says it still runs
    page.evaluate("window.jupyterapp.commands.execute('kernelmenu:shutdown')")


def _shown_seconds(meter: str) -> float:
    """The seconds a run widget's time meter shows ("time 3.07 s", "time 1 min 02 s")."""
    found = re.fullmatch(r"time (?:(\d+) min )?([\d.]+) s", meter.strip())
    assert found is not None, meter
    return 60 * int(found.group(1) or 0) + float(found.group(2))


@pytest.mark.timeout(300)
def test_a_script_in_a_question_is_shown_as_text(lab: dict[str, Any], page: Any) -> None:
    open_notebook(page, lab, "notebooks/evil.ipynb")
    run_cells(page, 4)
    question = page.locator(".iterion-inbox .question").first
    question.wait_for(timeout=60_000)
    assert question.inner_text() == EVIL
    assert page.locator(".iterion-inbox button.option").first.inner_text() == EVIL
    assert page.locator(".iterion-inbox script").count() == 0
    assert page.locator(".iterion-inbox img").count() == 0
    assert page.locator(".iterion-run .forms button.option").first.inner_text() == EVIL
    assert page.locator(".iterion-run script").count() == 0
    assert page.evaluate("window.__pwned === undefined")
    # the Markdown report renders in JupyterLab, the question still as text
    run_cells(page, 7, start=4)
    report = page.locator(".jp-RenderedMarkdown").filter(has_text="Summary").first
    report.wait_for(timeout=60_000)
    assert report.locator("h1").inner_text().startswith("Run ")
    assert report.locator("h1").inner_text().endswith("· evil · finished")
    headings = report.locator("h2").all_inner_texts()
    assert headings[:5] == ["Summary", "Workflow", "Timeline", "Outputs", "Questions"]
    assert report.locator("table").count() >= 4
    assert EVIL in report.locator("table").nth(3).inner_text()
    # the only image is the Mermaid graph, which JupyterLab renders as an SVG picture
    assert report.locator("img").count() == 1
    assert report.locator("img[src^='data:image/svg+xml']").count() == 1
    assert report.locator("script").count() == 0 and report.locator("img[onerror]").count() == 0
    assert page.evaluate("window.__pwned === undefined")
    # the snapshots of this notebook's widgets hold the question as text too
    assert page.locator(".iterion-snapshot script").count() == 0


@pytest.mark.timeout(300)
def test_html_report_renders_its_sections_in_chromium(browser: Any, tmp_path: Path) -> None:
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    import iterion_nb as it

    async def make() -> Path:
        session = it.Session(
            tmp_path / "store", scenario=ROOT / "examples" / "async_questions.scenario.yaml"
        )
        try:
            source = (ROOT / "examples" / "async_questions.iter").read_text()
            run = await session.start(it.compile(source))
            for answer in ("formal", EVIL):  # the first takes only its options
                question = await run.next_question(timeout=10)
                assert question is not None
                await run.answer(question.id, answer, answered_by="ada")
            assert await run.wait(10) == "finished"
            await run.report(path=tmp_path / "report.html")
        finally:
            await session.close()
        return tmp_path / "report.html"

    with ThreadPoolExecutor(1) as pool:  # Playwright's sync API owns this thread's loop
        report = pool.submit(asyncio.run, make()).result()
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    try:
        page.goto(report.as_uri())
        headings = page.locator("section h2").all_inner_texts()
        assert headings[:5] == ["Summary", "Workflow", "Timeline", "Outputs", "Questions"]
        assert headings[5].startswith("Events (")
        assert page.locator("#graph svg g.node[data-state=finished]").count() == 3
        assert page.locator("#timeline tbody tr").count() == 3
        assert page.locator("#outputs pre.output").count() == 3
        answers = page.locator("#questions tr.question td:nth-child(5)").all_inner_texts()
        assert answers == ["Formal (formal)", EVIL]  # the script is text on the page
        assert page.locator("script").count() == 0 and page.locator("#questions img").count() == 0
        assert page.evaluate("window.__pwned === undefined")
        assert requests == [report.as_uri()]  # self-contained: nothing else was fetched
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "report.png"), full_page=True)
    finally:
        page.close()
