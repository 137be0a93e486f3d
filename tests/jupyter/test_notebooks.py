"""The committed notebooks are clean: what a newcomer opens, and GitHub shows, is only outputs.

No widget state (it goes stale, and JupyterLab would show it instead of the
run), no object reprs (``<… object at 0x…>``), no absolute paths of the
machine that ran them, no execution timings; and every widget output comes
with its saved snapshot, so the run shows wherever the notebook is opened.
Regenerate with ``python scripts/run_notebook.py --save notebooks/NAME.ipynb``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
WIDGET = "application/vnd.jupyter.widget-view+json"
#: An absolute path: the checkout, a home, a temporary directory, macOS or Windows ones.
ABSOLUTE = re.compile(
    rf"{re.escape(str(ROOT))}|(?<![\w.~])/(?:tmp|home|root|Users|private|var/folders|work)/"
    r"|\b[A-Z]:\\\\"
)


def texts(output: dict[str, Any]) -> list[str]:
    found = [output.get("text", "")] if "text" in output else []
    for mime, value in output.get("data", {}).items():
        if mime != WIDGET:
            found.append(value if isinstance(value, str) else json.dumps(value))
    return ["".join(t) if isinstance(t, list) else t for t in found]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_a_committed_notebook_holds_only_clean_outputs(path: Path) -> None:
    notebook = json.loads(path.read_text())
    assert "widgets" not in notebook["metadata"], "widget state: save with run_notebook.py --save"
    for number, cell in enumerate(notebook["cells"], 1):
        if cell["cell_type"] != "code":
            continue
        assert "execution" not in cell["metadata"], f"cell {number}: execution timings"
        outputs = cell.get("outputs", [])
        for output in outputs:
            for text in texts(output):
                assert not re.search(r"object at 0x[0-9a-f]+", text), f"cell {number}: {text}"
                found = ABSOLUTE.search(text)
                assert found is None, f"cell {number}: an absolute path: {found.group()!r}"
        widgets = [o for o in outputs if WIDGET in o.get("data", {})]
        snapshots = [o for o in outputs if "iterion-snapshot" in str(o.get("data", {}))]
        assert len(snapshots) >= len(widgets), f"cell {number}: a widget without its snapshot"


def test_the_check_finds_what_it_looks_for(tmp_path: Path) -> None:
    """Each rule of the check trips on a notebook that breaks it."""
    base = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    widget = {"output_type": "display_data", "metadata": {},
              "data": {WIDGET: {"model_id": "x"}, "text/plain": "Run x"}}  # fmt: skip
    bad = [
        {**base, "metadata": {"widgets": {}}},
        {**base, "cells": [{"cell_type": "code", "metadata": {}, "source": "", "outputs": [
            {"output_type": "stream", "name": "stdout", "text": "<W object at 0x7f00>"}]}]},
        {**base, "cells": [{"cell_type": "code", "metadata": {}, "source": "", "outputs": [
            {"output_type": "stream", "name": "stdout", "text": "1 run in /tmp/x/i.duckdb"}]}]},
        {**base, "cells": [{"cell_type": "code", "metadata": {}, "source": "",
                            "outputs": [widget]}]},
    ]  # fmt: skip
    for number, notebook in enumerate(bad):
        path = tmp_path / f"bad{number}.ipynb"
        path.write_text(json.dumps(notebook))
        with pytest.raises(AssertionError):
            test_a_committed_notebook_holds_only_clean_outputs(path)
