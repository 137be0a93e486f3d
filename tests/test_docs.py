"""The code in the docs runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def python_blocks(doc: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", doc.read_text(), flags=re.S)


def test_python_api_example_runs(tmp_path: Path) -> None:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    code = python_blocks(ROOT / "docs" / "python-api.md")[0]
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("finished {'mean_score': 8.5")
    assert (tmp_path / ".iterion" / "iterion.duckdb").is_file()


def test_quickstart_example_run(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "run_async.py"), "--store", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-3].endswith(": finished")
    assert "'title': 'iterion_nb 0.1'" in lines[-2]
    assert lines[-1].endswith("2 answers recorded")


def test_claude_code_example_runs_offline(tmp_path: Path) -> None:
    """The documented Claude Code example: the real CLI, against the loopback scenario server."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "run_claude_code.py"), "--store", str(tmp_path)],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].endswith("started on claude_code")
    assert sum("-> answering" in line for line in lines) == 2
    assert lines[-3].endswith(": finished"), proc.stdout
    assert "'title': 'iterion_nb 0.1'" in lines[-2]
    assert "'gatherer'" in lines[-1] and "'finalizer'" in lines[-1]
