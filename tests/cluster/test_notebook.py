"""A notebook's cell that runs on a Dask cluster: its widget follows the run from the store.

A real IPython shell with the extension loaded, a real PostgreSQL server, a
``dask scheduler`` and two ``dask worker`` processes with the watcher
preloaded. The cell's run executes on a worker, parks at a human gate (no
process holds it), is answered with ``%iterion answer`` from the notebook,
resumes on a worker and finishes — and the cell's run widget shows each step.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from iterion_nb.session.cluster import CLUSTER_ENV

from .procs import CliCluster
from .test_faults import schema_url

GATE = """\
human gate:
  instructions: "Ship it?"

tool after:
  command: "echo $PPID >> ran.txt"

workflow w:
  entry: gate
  gate -> after
  after -> done
"""


def ok(ip: InteractiveShell, code: str) -> Any:
    result = ip.run_cell(code)
    assert result.success, result.error_in_exec or result.error_before_exec
    return result.result


@pytest.fixture
def shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InteractiveShell]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(CLUSTER_ENV, raising=False)  # set back afterwards
    ip = InteractiveShell.instance()
    ok(ip, "%load_ext iterion_nb")
    yield ip
    ok(ip, "%unload_ext iterion_nb")


def widget_shows(ip: InteractiveShell, status: str, timeout: float = 30) -> dict[str, Any]:
    """Let the kernel's loop turn until the run widget reads ``status``; its state then."""
    ok(ip, "import asyncio, time")
    shown = ok(
        ip,
        f"end = time.monotonic() + {timeout}\n"
        f"while r.widget.status != {status!r} and time.monotonic() < end:\n"
        "    await asyncio.sleep(0.1)\n"
        "dict(status=r.widget.status, states=dict(r.widget.states),"
        " questions=list(r.widget.questions))",
    )
    assert shown["status"] == status, shown
    return dict(shown)


def test_a_cell_run_on_the_cluster_is_followed_by_its_widget_through_an_answer(
    shell: InteractiveShell, tmp_path: Path, postgres_url: str
) -> None:
    store = schema_url(postgres_url)
    cluster = CliCluster(tmp_path, 2, store)
    shell.user_ns.update(pg=store, addr=cluster.address)
    try:
        ok(shell, "%env ITERION_NB_CLUSTER=$addr")  # as docs/jupyter.md says
        handle = ok(shell, "%%iterion --run --store $pg\n" + GATE)
        shell.user_ns["r"] = handle
        assert ok(shell, "%iterion wait {r.id}") == "paused_waiting_human"
        paused = widget_shows(shell, "paused_waiting_human")
        (question,) = paused["questions"]
        assert question["question"] == "Ship it?" and question["answered_at"] is None
        assert question["run_cluster"] is True  # its card never says "resume it" (workers do)
        assert ok(shell, "r.widget.cluster") is True  # (nor its header, once interrupted)
        assert paused["states"].get("after", "pending") == "pending"
        # parked: nothing holds it, not this kernel and no worker
        record = ok(shell, "await r.refresh()")
        assert record.lease is None and record.launch["executor"] == "dask"

        shell.user_ns["qid"] = question["id"]
        answered = ok(shell, "%iterion answer {r.id} {qid} yes")
        assert (answered["queued"], answered["resumed"]) == (False, True), answered
        assert repr(answered).startswith("Answered — the run goes on"), repr(answered)
        assert ok(shell, "%iterion wait {r.id}") == "finished"
        done = widget_shows(shell, "finished")
        assert done["states"]["gate"] == "finished" and done["states"]["after"] == "finished"
        (asked,) = done["questions"]
        assert asked["answers"] is not None and asked["answered_at"] is not None
    finally:
        ok(shell, "%env ITERION_NB_CLUSTER=")
        cluster.close()
    # the tool ran once, on a worker: its parent process is not this kernel
    (ran_by,) = (tmp_path / "ran.txt").read_text().split()
    assert int(ran_by) != os.getpid()
