"""The quickstart in a live JupyterLab, driven by real Chromium: click an option, see it finish.

JupyterLab runs on loopback with a token; Playwright drives Debian's Chromium
(``.ci/run`` installs it; no browser is downloaded).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("ITERION_NB_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = ROOT / "tests" / "artifacts"

EVIL = "<script>window.__pwned = 1</script><img src=x onerror='window.__pwned = 2'>"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: apt-get install chromium (as .ci/run does)")
    root = tmp_path_factory.mktemp("lab")
    quickstart = json.loads((ROOT / "notebooks" / "01_quickstart.ipynb").read_text())
    for cell in quickstart["cells"]:  # as a person gets it: no outputs yet
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    (root / "01_quickstart.ipynb").write_text(json.dumps(quickstart))
    write_evil_notebook(root / "evil.ipynb")
    port, token = free_port(), secrets.token_hex(16)
    settings = root / ".settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)  # no "get notified about news?" toast over the page
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(root / ".jupyter"), "HOME": str(root),
           "JUPYTERLAB_SETTINGS_DIR": str(root / ".settings")}  # fmt: skip
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
        for _ in range(600):
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                time.sleep(0.1)
        else:
            raise AssertionError("JupyterLab did not start: " + (root / "lab.log").read_text())
        yield {"url": url, "token": token, "root": root}
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def write_evil_notebook(path: Path) -> None:
    scenario = {"nodes": {"asker": [
        {"tool_calls": [{"name": "ask_user_async", "input": {
            "question": EVIL, "options": [{"id": "ok", "label": EVIL}]}}]},
        {"output": {"text": "done"}},
    ]}}  # fmt: skip
    flow = (
        "%%iterion evil --run --scenario scenario --store $store\n"
        "schema out:\n  text: string\n\n"
        'agent asker:\n  model: "scripted"\n  interaction: async\n  user: "Ask."\n'
        "  output: out\n\n"
        'await_answers gate:\n  from: asker\n  timeout: "5m"\n\n'
        "workflow evil:\n  entry: asker\n  asker -> gate\n  gate -> done\n"
    )
    cells = [
        "%load_ext iterion_nb\nimport tempfile\n"
        f"store = tempfile.mkdtemp()\nscenario = {json.dumps(scenario)}",
        flow,
        "run = _\nawait run.next_question(timeout=30)\nNone",
        "%iterion inbox {run.id}",
        "question = await run.next_question(timeout=5)\nawait run.answer(question.id, 'ok')",
        "%iterion wait {run.id}",
        "%iterion report {run.id}",
    ]
    notebook = {
        "cells": [
            {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
             "source": source}
            for source in cells
        ],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                    "language": "python"}},
        "nbformat": 4, "nbformat_minor": 5,
    }  # fmt: skip
    path.write_text(json.dumps(notebook))


#: The notebook on screen (a workspace may hold others, hidden).
NOTEBOOK = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook"


def open_notebook(page: Any, lab: dict[str, Any], name: str) -> None:
    workspace = name.replace(".", "-")  # its own workspace: only this notebook is open
    page.goto(f"{lab['url']}/lab/workspaces/{workspace}/tree/{name}?reset&token={lab['token']}")
    page.wait_for_selector(f"{NOTEBOOK} .jp-Cell", timeout=60_000)
    # before running anything, the page's kernel connection must be up and idle
    # (an execution sent while it is still connecting is silently dropped)
    page.wait_for_function(
        """() => {
            const panel = window.jupyterapp && window.jupyterapp.shell.currentWidget;
            const kernel = panel && panel.sessionContext && panel.sessionContext.session
                && panel.sessionContext.session.kernel;
            return !!kernel && kernel.connectionStatus === "connected" && kernel.status === "idle";
        }""",
        timeout=60_000,
    )


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


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.mark.timeout(300)
def test_quickstart_click_an_option_and_the_run_finishes(lab: dict[str, Any], browser: Any) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        open_notebook(page, lab, "01_quickstart.ipynb")
        cells = json.loads((lab["root"] / "01_quickstart.ipynb").read_text())["cells"]
        inbox_cell = next(
            k for k, c in enumerate(cells) if "%iterion inbox" in "".join(c["source"])
        )
        run_cells(page, inbox_cell + 1)  # everything up to the inbox; no code answers
        option = page.locator(".iterion-inbox button.option[data-option=formal]")
        option.wait_for(timeout=60_000)
        assert page.locator(".iterion-inbox .question").first.inner_text() == (
            "Should the notes be formal or casual?"
        )
        page.locator(".iterion-run .status").first.wait_for(timeout=30_000)
        option.click()
        page.locator(".iterion-inbox .result.ok").wait_for(timeout=30_000)
        assert "queued true, resumed false" in page.locator(".iterion-inbox .result").inner_text()
        page.locator(".iterion-run .status[data-status=finished]").wait_for(timeout=60_000)
        assert page.locator(".iterion-run g.node[data-state=done]").count() == 3
        page.locator(".iterion-inbox .history .answered").wait_for(timeout=10_000)
    finally:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "quickstart.png"), full_page=True)
        page.close()


@pytest.mark.timeout(300)
def test_a_script_in_a_question_is_shown_as_text(lab: dict[str, Any], browser: Any) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        open_notebook(page, lab, "evil.ipynb")
        run_cells(page, 4)
        question = page.locator(".iterion-inbox .question").first
        question.wait_for(timeout=60_000)
        assert question.inner_text() == EVIL
        assert page.locator(".iterion-inbox button.option").first.inner_text() == EVIL
        assert page.locator(".iterion-inbox script").count() == 0
        assert page.locator(".iterion-inbox img").count() == 0
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
    finally:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "script_as_text.png"), full_page=True)
        page.close()


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
            for answer in (EVIL, "the inbox"):
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
        assert page.locator("#graph svg g.node[data-state=done]").count() == 3
        assert page.locator("#timeline tbody tr").count() == 3
        assert page.locator("#outputs pre.output").count() == 3
        answers = page.locator("#questions tr.question td:nth-child(5)").all_inner_texts()
        assert answers == [EVIL, "the inbox"]  # the script is text on the page
        assert page.locator("script").count() == 0 and page.locator("#questions img").count() == 0
        assert page.evaluate("window.__pwned === undefined")
        assert requests == [report.as_uri()]  # self-contained: nothing else was fetched
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "report.png"), full_page=True)
    finally:
        page.close()
