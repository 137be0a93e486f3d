"""A real kernel killed mid-run: the run reads interrupted, a new kernel resumes it.

Agents record their executions through a Python tool defined in the kernel
(``mark``), tool nodes through a file, so ``ran.txt`` counts every node that
ran, in whichever kernel.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

CLI = str(Path(sys.executable).parent / "iterion-nb")

SETUP = """\
%load_ext iterion_nb
import iterion_nb as it

@it.tool
def mark(name: str) -> str:
    \"\"\"Record that an agent ran.\"\"\"
    with open("ran.txt", "a") as f:
        f.write(name + "\\n")
    return "marked"

def says(name):
    return [{"tool_calls": [{"name": "mark", "input": {"name": name}}]},
            {"output": {"text": name + " done"}}]

scenario = {"nodes": {"a": says("a"), "b": says("b"), "c": says("c")}}
"""

CELL = """\
%%iterion --run --scenario scenario --store {store}
agent a:
  model: "scripted"
  tools: [mark]

tool t1:
  command: "echo t1 >> ran.txt"

agent b:
  model: "scripted"
  tools: [mark]

tool slow:
  command: "echo slow >> ran.txt; while [ ! -f go ]; do sleep 0.05; done"

agent c:
  model: "scripted"
  tools: [mark]

workflow crash:
  entry: a
  a -> t1
  t1 -> b
  b -> slow
  slow -> c
  c -> done
"""


class Kernel:
    """A real IPython kernel in ``cwd``."""

    def __init__(self, cwd: Path) -> None:
        self.manager = KernelManager(kernel_name="python3")
        self.manager.start_kernel(cwd=str(cwd))
        self.client: BlockingKernelClient = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=60)

    @property
    def pid(self) -> int:
        return int(self.manager.provisioner.pid)  # type: ignore[union-attr]

    def run(self, code: str) -> list[dict[str, Any]]:
        """Execute ``code``; the output messages, raising if the cell failed."""
        outputs: list[dict[str, Any]] = []
        reply = self.client.execute_interactive(
            code, timeout=60, output_hook=lambda msg: outputs.append(msg)
        )
        if reply["content"]["status"] != "ok":
            raise AssertionError(f"cell failed: {reply['content']}; {outputs}")
        return outputs

    def close(self) -> None:
        self.client.stop_channels()
        if self.manager.is_alive():
            self.manager.shutdown_kernel(now=True)


@pytest.fixture
def kernels(tmp_path: Path) -> Iterator[list[Kernel]]:
    made: list[Kernel] = []
    yield made
    for kernel in made:
        kernel.close()
    # jupyter_client's blocking calls cached an event loop of their own in
    # jupyter_core; close it so later tests (Jupyter server fixtures) get a fresh one
    from jupyter_core.utils import ensure_event_loop

    ensure_event_loop().close()


def ran(tmp_path: Path) -> Counter[str]:
    path = tmp_path / "ran.txt"
    return Counter(path.read_text().split()) if path.exists() else Counter()


def runs(store: Path) -> list[dict[str, Any]]:
    out = subprocess.run(
        [CLI, "runs", "list", "--json", "--store", str(store)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return list(json.loads(out.stdout)["runs"])


def test_a_killed_kernel_s_run_is_interrupted_then_resumed_once_per_node(
    tmp_path: Path, kernels: list[Kernel]
) -> None:
    store = tmp_path / "store"
    first = Kernel(tmp_path)
    kernels.append(first)
    first.run(SETUP)
    first.run(CELL.format(store=store))
    deadline = time.monotonic() + 60
    while ran(tmp_path)["slow"] == 0:
        assert time.monotonic() < deadline, ran(tmp_path)
        time.sleep(0.05)
    (run,) = runs(store)
    assert run["status"] == "running" and run["owner"]["pid"] == first.pid
    os.kill(first.pid, signal.SIGKILL)  # the kernel dies, its run in the middle of "slow"
    killed = time.monotonic()
    while runs(store)[0]["status"] != "interrupted":
        assert time.monotonic() - killed < 15, "the run never read interrupted"
        time.sleep(0.2)
    (tmp_path / "go").touch()
    # a new kernel: define the tool again, resume (the run's scenario was recorded)
    second = Kernel(tmp_path)
    kernels.append(second)
    second.run(SETUP)
    second.run(f"%iterion resume {run['id']} --store {store}")
    outputs = second.run(f"%iterion wait {run['id']} --store {store}")
    results = [m["content"]["data"]["text/plain"] for m in outputs
               if m["msg_type"] == "execute_result"]  # fmt: skip
    assert results == ["'finished'"], outputs
    counts = ran(tmp_path)
    assert counts == Counter({"a": 1, "t1": 1, "b": 1, "slow": 2, "c": 1}), counts
