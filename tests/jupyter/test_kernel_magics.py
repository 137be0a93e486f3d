"""The magics in a real IPython kernel (its loop runs while a cell runs, unlike a bare shell)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .test_kernel_crash import Kernel

FLOW = """\
%%iterion --run --scenario scenario --store {store}
schema out:
  text: string

agent a:
  model: "scripted"
  interaction: async
  output: out

await_answers gate:
  from: a
  timeout: "5m"

workflow w:
  entry: a
  a -> gate
  gate -> done
"""

SCENARIO = """\
scenario = {"nodes": {"a": [
    {"tool_calls": [{"name": "ask_user_async", "input": {"question": "Tone?"}}]},
    {"output": {"text": "ok"}},
]}}
"""


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    made = Kernel(tmp_path)
    yield made
    made.close()
    from jupyter_core.utils import ensure_event_loop

    ensure_event_loop().close()


def made_store(path: Path) -> Path:
    """An empty store at ``path``, as a first run makes one (line magics make none)."""
    import asyncio

    from iterion_nb.store import open_duckdb_store

    asyncio.run(open_duckdb_store(path).close())
    return path


def shown(outputs: list[dict[str, Any]]) -> str:
    """Everything the cell showed, as text (display updates included)."""
    texts = []
    for msg in outputs:
        content = msg["content"]
        if msg["msg_type"] == "stream":
            texts.append(content["text"])
        elif msg["msg_type"] in ("execute_result", "display_data", "update_display_data"):
            texts.append(content["data"].get("text/plain", ""))
        elif msg["msg_type"] == "error":
            texts.append(f"{content['ename']}: {content['evalue']}")
    return "\n".join(texts)


def test_load_ext_and_a_magic_in_one_cell(kernel: Kernel, tmp_path: Path) -> None:
    """The cell that loads the extension was read before it existed; its magic still runs."""
    store = made_store(tmp_path / "store")
    outputs = everything(kernel, f"%load_ext iterion_nb\n%iterion runs --store {store}", 1.0)
    text = shown(outputs)
    assert "coroutine" not in text
    assert "0 run(s)" in text and "id  workflow  status" in text, text
    # a store that is not there is said to be so, not made
    missing = tmp_path / "typo"
    text = shown(everything(kernel, f"%iterion runs --store {missing}", 0.5))
    assert f"UsageError: %iterion: no run store at {missing / 'iterion.duckdb'}" in text, text
    assert not missing.exists()


HOLDER = """
import asyncio, sys
from iterion_nb.session import Session

async def main():
    session = Session(sys.argv[1])
    session.serve()
    print("serving", flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


def test_a_read_in_the_loading_cell_on_a_store_held_elsewhere_runs_as_a_task(
    kernel: Kernel, tmp_path: Path
) -> None:
    """The kernel is then the holder's client, whose calls go through the kernel's loop: the
    read runs as a task (its table comes after the cell), never blocking that loop."""
    import subprocess
    import sys

    held = made_store(tmp_path / "held")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(held)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "serving\n"
        text = shown(everything(kernel, f"%load_ext iterion_nb\n%iterion runs --store {held}", 2.0))
        # first the task's placeholder, then (after the cell) its table
        assert text.startswith("%iterion runs …\n0 run(s)\nid  workflow  status"), text
        assert shown(everything(kernel, "print(6 * 7)", 0.5)).strip() == "42"  # still answers
    finally:
        holder.kill()
        holder.wait()


def test_a_magic_s_mistake_in_the_loading_cell_is_still_one_line(
    kernel: Kernel, tmp_path: Path
) -> None:
    store = made_store(tmp_path / "store")
    outputs = everything(
        kernel, f"%load_ext iterion_nb\n%iterion wait nosuchrun --store {store}", 1.0
    )
    text = shown(outputs)
    assert "UsageError: %iterion wait: no run 'nosuchrun'" in text, text
    assert "Traceback" not in text


def test_a_run_in_a_kernel_shows_its_widget_and_snapshot(kernel: Kernel, tmp_path: Path) -> None:
    kernel.run("%load_ext iterion_nb\n" + SCENARIO)
    outputs = kernel.run(FLOW.format(store=tmp_path / "store"))
    kinds = [(m["msg_type"], sorted(m["content"].get("data", {}))) for m in outputs]
    assert ("display_data", ["text/html", "text/plain"]) in kinds  # the snapshot
    assert (
        "execute_result",
        ["application/vnd.jupyter.widget-view+json", "text/plain"],
    ) in kinds  # the live widget
    snapshot = next(m for m in outputs if m["msg_type"] == "display_data")
    display_id = snapshot["content"]["transient"]["display_id"]
    kernel.run("run = _\nq = await run.next_question(timeout=10)")
    later = everything(kernel, "await run.answer(q.id, 'formal')\nawait run.wait(10)", 2.0)
    # the snapshot of the first cell was brought up to date, as an output of that cell
    updates = [m for m in later if m["msg_type"] == "update_display_data"]
    assert updates, later
    last = updates[-1]
    assert last["content"]["transient"]["display_id"] == display_id
    assert last["parent_header"]["msg_id"] == snapshot["parent_header"]["msg_id"]
    assert "· finished ·" in last["content"]["data"]["text/plain"]


def everything(kernel: Kernel, code: str, linger: float) -> list[dict[str, Any]]:
    """Run ``code``; every IOPub message until ``linger`` s after it ends, of whatever cell."""
    import time

    msg_id = kernel.client.execute(code)
    seen: list[dict[str, Any]] = []
    done_at = None
    while done_at is None or time.monotonic() < done_at + linger:
        try:
            msg = kernel.client.get_iopub_msg(timeout=0.2)
        except Exception:  # queue.Empty: nothing for a moment
            continue
        seen.append(msg)
        parent = msg["parent_header"].get("msg_id")
        state = msg["content"].get("execution_state")
        if (parent, msg["msg_type"], state) == (msg_id, "status", "idle"):
            done_at = time.monotonic()
    return seen


def test_a_failed_store_and_a_silent_cluster_are_one_line_in_a_kernel(
    kernel: Kernel, tmp_path: Path
) -> None:
    import socket

    with socket.socket() as sock:  # a port the system just gave out: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    store = tmp_path / "store"
    kernel.run(f"%load_ext iterion_nb\n%env ITERION_NB_CLUSTER=tcp://127.0.0.1:{port}")
    kernel.run(SCENARIO)
    kernel.run(f"%iterion runs --store {made_store(store)}")  # the store: no scheduler needed
    text = shown(everything(kernel, "%iterion runs --store postgresql://u:pw@127.0.0.1:1/db", 0))
    assert "UsageError: %iterion: cannot connect to the run store" in text, text
    assert "u:***@" in text and "Traceback" not in text
    # the store that failed to open is not remembered: the one before stays
    assert "0 run(s)" in shown(kernel.run("%iterion runs --limit 1"))
    outputs = everything(kernel, FLOW.format(store=store), 0)
    text = shown(outputs)
    head = f"UsageError: %%iterion --run: no Dask scheduler at tcp://127.0.0.1:{port}: nothing"
    assert text.startswith(head), text
    assert "the address is ITERION_NB_CLUSTER's" in text and text.count("\n") == 1, text
    assert "Traceback" not in text and "IterionError" not in text
