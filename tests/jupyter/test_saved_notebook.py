"""What ``jupyter nbconvert --to notebook --execute`` saves: each output as first displayed.

nbclient (under nbconvert, papermill, nbval) drops the display updates a
cell's output gets once a later cell runs, and what comes after a cell is
over; so the first display of a run widget's snapshot, and of a magic's
result, must already be true.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = "iterion-snapshot"


def executed(tmp_path: Path, name: str, cells: list[str]) -> list[list[dict[str, Any]]]:
    """Execute a notebook of ``cells`` with nbconvert in ``tmp_path``; each cell's saved outputs."""
    path = tmp_path / f"{name}.ipynb"
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nbformat.write(notebook, path)
    env = {**os.environ, "ITERION_NB_STORE": str(tmp_path / "store")}
    env.pop("ITERION_NB_CLUSTER", None)
    done = subprocess.run(
        [sys.executable, "-m", "nbconvert", "--to", "notebook", "--execute", "--output",
         f"{name}.out.ipynb", "--ExecutePreprocessor.timeout=60", str(path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    saved = json.loads((tmp_path / f"{name}.out.ipynb").read_text())
    return [cell["outputs"] for cell in saved["cells"]]


def text(output: dict[str, Any], mime: str = "text/plain") -> str:
    value = output.get("data", {}).get(mime, output.get("text", ""))
    return "".join(value) if isinstance(value, list) else str(value)


def snapshot(outputs: list[dict[str, Any]]) -> dict[str, Any]:
    (found,) = [o for o in outputs if SNAPSHOT in text(o, "text/html")]
    return found


def test_an_executed_notebook_saves_true_snapshots_and_the_runs_list(tmp_path: Path) -> None:
    for name in ("minimal.iter", "minimal.scenario.yaml"):
        shutil.copy(ROOT / "examples" / name, tmp_path / name)
    source = (tmp_path / "minimal.iter").read_text()
    cells = executed(
        tmp_path,
        "run",
        [
            "%load_ext iterion_nb",
            "%%iterion --run --scenario minimal.scenario.yaml\n" + source,
            "run = _",
            "%iterion wait {run.id}",
            "%iterion show {run.id}",
            "%iterion runs",
        ],
    )
    assert text(cells[3][0]) == "'finished'"
    # the run just started: its workflow and its nodes are known (not "0/0 nodes")
    started = text(snapshot(cells[1]))
    head = started.splitlines()[1]
    assert head.startswith("Run ") and " · haiku · " in head, started
    assert head.endswith("/1 nodes finished") and "0/0" not in head, started
    assert "Nodes: poet " in started and "(not started)" not in started, started
    run_id = head.split()[1]
    # a settled run is shown in its final state from its first display
    final = snapshot(cells[4])
    said = text(final)
    assert said.splitlines()[1] == f"Run {run_id} · haiku · finished · 1/1 nodes finished", said
    assert said.splitlines()[2] == "Nodes: poet finished", said
    html = text(final, "text/html")
    assert f"Run {run_id} · haiku · finished · 1/1 nodes finished" in html
    assert '<img alt="workflow graph: poet finished"' in html
    widget = [o for o in cells[4] if "application/vnd.jupyter.widget-view+json" in o["data"]]
    assert text(widget[0]).startswith(f"Run {run_id}: the live run widget")

    assert text(cells[5][0]).splitlines()[2].startswith(f"{run_id}  haiku     finished  ")

    # the cell that loads the extension: its %iterion runs is the list, not a placeholder
    (listed,) = executed(tmp_path, "runs", ["%load_ext iterion_nb\n%iterion runs"])
    assert len(listed) == 1, listed
    table = text(listed[0])
    assert table.splitlines()[0] == "1 run(s)", table
    assert table.splitlines()[2].startswith(f"{run_id}  haiku     finished  "), table
    assert f"<td style='text-align:left'>{run_id}</td>" in text(listed[0], "text/html")
