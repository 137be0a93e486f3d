"""Every workflow this repository ships compiles: examples, upstream-shaped fixtures, and
every ``%%iterion`` cell of every notebook (what a person copies first must work)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from iterion_nb.dsl.diagnostics import Severity
from iterion_nb.ir import analyze

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted(
    [*(ROOT / "examples").glob("*.iter"), *(ROOT / "tests" / "fixtures" / "upstream").glob("*.bot")]
)


def notebook_cells() -> list[tuple[str, str]]:
    found = []
    for book in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for n, cell in enumerate(json.loads(book.read_text())["cells"]):
            source = "".join(cell["source"])
            if cell["cell_type"] == "code" and source.startswith("%%iterion"):
                found.append((f"{book.name}:cell{n}", source.split("\n", 1)[1]))
    return found


CELLS = notebook_cells()


def test_there_is_something_to_check() -> None:
    assert len(FILES) >= 10 and len(CELLS) >= 5


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_each_workflow_file_compiles(path: Path) -> None:
    errors = [d for d in analyze(path.read_text(), path.name).diagnostics
              if d.severity is Severity.ERROR]  # fmt: skip
    assert errors == []


@pytest.mark.parametrize(("where", "source"), CELLS, ids=[w for w, _ in CELLS])
def test_each_notebook_cell_compiles(where: str, source: str) -> None:
    errors = [d for d in analyze(source, where).diagnostics if d.severity is Severity.ERROR]
    assert errors == []
