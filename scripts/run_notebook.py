"""Execute a notebook headless (a real kernel, no browser) and print its last result.

Used by ``scripts/quickstart.sh --headless`` and CI. Exits 1 with the failing
cell's error when a cell fails. The runs go to a fresh temporary store
unless ``ITERION_NB_STORE`` names one.

``--save`` writes the executed notebook back, as committed notebooks must
be: outputs only (no widget state, no execution timings), each widget's
saved snapshot brought up to its last state.

Run: python scripts/run_notebook.py [--save] notebooks/01_quickstart.ipynb
"""

from __future__ import annotations

import asyncio
import os
import queue
import sys
import tempfile
from pathlib import Path
from typing import Any

import nbformat
from jupyter_core.utils import ensure_async
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionComplete, CellExecutionError

STORE_ENV = "ITERION_NB_STORE"


class Client(NotebookClient):
    """nbclient, also applying display updates that arrive for earlier cells.

    A widget's snapshot is updated from the cell that displayed it while
    later cells run; nbclient would drop those messages (they are not of the
    cell it is running), JupyterLab does not.
    """

    async def _async_poll_output_msg(self, parent_msg_id: str, cell: Any, cell_index: int) -> None:
        assert self.kc is not None
        while True:
            msg = await ensure_async(self.kc.iopub_channel.get_msg(timeout=None))
            if msg["parent_header"].get("msg_id") == parent_msg_id:
                try:
                    self.process_message(msg, cell, cell_index)
                except CellExecutionComplete:
                    return
            else:
                self.apply_update(msg)

    def apply_update(self, msg: dict[str, Any]) -> None:
        """Apply an ``update_display_data`` to the output that shows its display id."""
        if msg["header"]["msg_type"] != "update_display_data":
            return
        display_id = msg["content"].get("transient", {}).get("display_id")
        if display_id:
            self._update_display_id(display_id, msg)

    async def drain(self, seconds: float) -> None:
        """Apply the updates still on their way after the last cell."""
        assert self.kc is not None
        end = asyncio.get_running_loop().time() + seconds
        while (left := end - asyncio.get_running_loop().time()) > 0:
            try:
                msg = await ensure_async(self.kc.iopub_channel.get_msg(timeout=left))
            except (queue.Empty, TimeoutError):
                return
            self.apply_update(msg)


async def execute(client: Client) -> None:
    """Run every cell (as ``NotebookClient.execute``), then apply the last display updates."""
    client.reset_execution_trackers()
    async with client.async_setup_kernel():
        assert client.kc is not None
        info = await client.async_wait_for_reply(await ensure_async(client.kc.kernel_info()))
        if info is not None:
            client.nb.metadata["language_info"] = info["content"]["language_info"]
        for index, cell in enumerate(client.nb.cells):
            count = client.code_cells_executed + 1
            await client.async_execute_cell(cell, index, execution_count=count)
        await client.drain(1.5)


def clean(notebook: Any) -> None:
    """As a committed notebook must be: no widget state, no timings."""
    notebook.metadata.pop("widgets", None)
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)


def main(argv: list[str]) -> int:
    """Execute the notebook in its own directory; print the last cells' text results."""
    save = "--save" in argv
    paths = [a for a in argv if a != "--save"]
    if len(paths) != 1:
        print("usage: run_notebook.py [--save] NOTEBOOK", file=sys.stderr)
        return 2
    path = Path(paths[0])
    notebook = nbformat.read(path, as_version=4)
    if not os.environ.get(STORE_ENV):
        os.environ[STORE_ENV] = tempfile.mkdtemp(prefix="iterion-notebook-")
    client = Client(
        notebook, timeout=300, resources={"metadata": {"path": path.parent}},
        store_widget_state=False, record_timing=False,
    )  # fmt: skip
    try:
        asyncio.run(execute(client))
    except CellExecutionError as err:
        print(f"{path}: a cell failed:\n{err}", file=sys.stderr)
        return 1
    cells = [c for c in notebook.cells if c.cell_type == "code"]
    for output in cells[-2].get("outputs", []) + cells[-1].get("outputs", []):
        text = output.get("text") or output.get("data", {}).get("text/plain")
        if text:
            print(text.rstrip())
    if save:
        clean(notebook)
        nbformat.write(notebook, path)
        print(f"{path}: saved")
    print(f"{path}: all {len(cells)} code cells ran")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
