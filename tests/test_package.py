"""Package-level promises: a cheap import, documented diagnostics, honest docs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from iterion_nb.dsl.codes import CODES

ROOT = Path(__file__).resolve().parent.parent


def test_import_is_cheap_and_loads_no_jupyter_or_io_library() -> None:
    code = "import sys, json, iterion_nb;print(json.dumps(sorted(m for m in sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    loaded = set(json.loads(out))
    heavy = {"IPython", "ipywidgets", "anywidget", "traitlets", "tornado", "duckdb", "asyncio"}
    assert loaded & heavy == set()


def test_every_diagnostic_code_is_documented() -> None:
    doc = (ROOT / "docs" / "diagnostics.md").read_text()
    missing = [code for code in CODES if f"`{code}`" not in doc]
    assert missing == []


def test_readme_commands_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    for script in ("scripts/quickstart.sh", "scripts/test.sh"):
        assert f"bash {script}" in readme
        assert (ROOT / script).exists()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash scripts/test.sh\n" in ci  # CI runs the README's test command
    assert "bash scripts/quickstart.sh --headless" in ci  # and the main job, headless
