"""Execute a notebook headless (a real kernel, no browser) and print its last result.

Used by ``scripts/quickstart.sh --headless`` and CI. Exits 1 with the failing
cell's error when a cell fails.
Run: python scripts/run_notebook.py notebooks/01_quickstart.ipynb
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError


def main(argv: list[str]) -> int:
    """Execute ``argv[0]`` in its own directory; print the last cell's text result."""
    if len(argv) != 1:
        print("usage: run_notebook.py NOTEBOOK", file=sys.stderr)
        return 2
    path = Path(argv[0])
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, timeout=300, resources={"metadata": {"path": path.parent}})
    try:
        client.execute()
    except CellExecutionError as err:
        print(f"{path}: a cell failed:\n{err}", file=sys.stderr)
        return 1
    cells = [c for c in notebook.cells if c.cell_type == "code"]
    for output in cells[-2].get("outputs", []) + cells[-1].get("outputs", []):
        text = output.get("text") or output.get("data", {}).get("text/plain")
        if text:
            print(text.rstrip())
    print(f"{path}: all {len(cells)} code cells ran")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
