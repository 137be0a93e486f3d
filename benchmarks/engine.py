"""Measure the engine: per-node overhead against LangGraph, and parked branches.

Run: ``.venv/bin/python benchmarks/engine.py`` (LangGraph comes with the
``bench`` extra: ``pip install -e '.[bench]'``; without it that comparison is
skipped and said so). Figures printed:

- per-node time of a 1,000-node chain of compute nodes, with durable
  checkpoints in a DuckDB file, and beside it the same chain in LangGraph with
  its SQLite checkpointer in this same invocation: the ratio (goal <= 0.5x);
- 200 branches, each an async agent that posts a question and its
  ``await_answers`` gate, with 4 slots, answered by a concurrent task in
  random order: completion time and the peak RSS of the
  process that ran them (goal < 200 MB).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import iterion_nb as it
from iterion_nb.backends import FunctionBackend
from iterion_nb.runtime.ports import BackendRequest
from iterion_nb.runtime.records import Interaction, utcnow
from iterion_nb.store import open_duckdb_store


def chain_source(n: int) -> str:
    parts = ['compute n0:\n  expr:\n    x: "1"\n']
    parts += [f'compute n{i}:\n  expr:\n    x: "outputs.n{i - 1}.x + 1"\n' for i in range(1, n)]
    edges = "\n".join(f"  n{i} -> n{i + 1}" for i in range(n - 1))
    return "\n".join(parts) + f"\nworkflow chain:\n  entry: n0\n{edges}\n  n{n - 1} -> done\n"


async def ours(n: int, tmp: Path) -> float:
    wf = it.compile(chain_source(n))
    session = it.Session(tmp / "engine.duckdb", workdir=tmp)
    start = time.perf_counter()
    run = await session.start(wf)
    status = await run.wait()
    elapsed = time.perf_counter() - start
    assert status == "finished", run.error
    assert run.outputs[f"n{n - 1}"] == {"x": n}
    await session.close()
    return elapsed / n


def langgraph(n: int, tmp: Path) -> float | None:
    try:
        import sqlite3
        from typing import TypedDict

        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, StateGraph
    except ImportError:
        return None

    class State(TypedDict):
        x: int

    graph = StateGraph(State)
    for i in range(n):
        graph.add_node(f"n{i}", lambda state: {"x": state["x"] + 1})
    graph.add_edge(START, "n0")
    for i in range(n - 1):
        graph.add_edge(f"n{i}", f"n{i + 1}")
    graph.add_edge(f"n{n - 1}", END)
    saver = SqliteSaver(sqlite3.connect(tmp / "langgraph.sqlite", check_same_thread=False))
    app = graph.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "bench"}, "recursion_limit": n + 10}
    start = time.perf_counter()
    result = app.invoke({"x": 0}, config)  # type: ignore[arg-type]
    elapsed = time.perf_counter() - start
    assert result["x"] == n
    return elapsed / n


def parked_source(branches: int) -> str:
    """A fan-out of ``branches`` branches, each an async asker and its own gate."""
    nodes = "\n".join(
        f'agent ask{i}:\n  model: "m"\n  interaction: async\n\n'
        f'await_answers gate{i}:\n  from: ask{i}\n  timeout: "10m"\n'
        for i in range(branches)
    )
    edges = "\n".join(
        f"  split -> ask{i}\n  ask{i} -> gate{i}\n  gate{i} -> end" for i in range(branches)
    )
    return (
        f"router split:\n  mode: fan_out_all\n\n{nodes}\n"
        'compute end:\n  await: wait_all\n  expr:\n    answered: "length(input)"\n\n'
        "workflow parked:\n  entry: split\n  budget:\n    max_parallel_branches: 4\n"
        f"{edges}\n  end -> done\n"
    )


async def parked(branches: int, tmp: Path) -> float:
    async def asker(request: BackendRequest) -> str:
        assert request.context is not None
        name = request.node.name
        question = Interaction(f"q-{name}", request.run_id, name, "async", ("ok?",), utcnow())
        await request.context.store.add_interaction(question)
        return "asked"

    store = open_duckdb_store(tmp / "parked.duckdb")
    session = it.Session(store, backend=FunctionBackend(default=asker), workdir=tmp)
    start = time.perf_counter()
    run = await session.start(it.compile(parked_source(branches)))

    async def answer_all() -> None:
        while len(await run.pending_questions()) < branches:
            await asyncio.sleep(0.01)
        questions = await run.pending_questions()
        random.shuffle(questions)
        for question in questions:
            await run.answer(question.id, "yes")

    await asyncio.gather(answer_all(), run.wait())
    elapsed = time.perf_counter() - start
    assert run.status == "finished", run.error
    assert run.outputs["end"] == {"answered": branches}
    await session.close()
    await store.close()
    return elapsed


def parked_in_child(branches: int) -> None:
    """Run the parked benchmark in a fresh process so its peak RSS is its own."""
    with tempfile.TemporaryDirectory() as tmp:
        elapsed = asyncio.run(parked(branches, Path(tmp)))
    print(f"{elapsed} {peak_rss_mb()}")


def peak_rss_mb() -> float:
    """This process's peak RSS. VmHWM, where there is one: unlike ru_maxrss it
    is not inherited across exec from the (larger) parent that forked us."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--branches", type=int, default=200)
    parser.add_argument("--child-parked", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_parked:
        parked_in_child(args.child_parked)
        return

    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        per_node = asyncio.run(ours(args.nodes, base))
        theirs = langgraph(args.nodes, base)
    print(f"chain of {args.nodes} compute nodes, durable checkpoints:")
    print(f"  iterion_nb (DuckDB):           {per_node * 1000:7.3f} ms per node")
    if theirs is None:
        print("  LangGraph: not installed (pip install -e '.[bench]'); no ratio")
    else:
        verdict = "meets" if per_node <= 0.5 * theirs else "MISSES"
        print(f"  LangGraph (SQLite saver):      {theirs * 1000:7.3f} ms per step")
        ratio = per_node / theirs
        print(f"  ratio ours/LangGraph:          {ratio:7.2f}x   (goal <= 0.5x: {verdict})")

    out = subprocess.run(
        [sys.executable, __file__, "--child-parked", str(args.branches)],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    elapsed, peak = float(out[0]), float(out[1])
    verdict = "meets" if peak < 200 else "MISSES"
    print(f"{args.branches} branches parked on await_answers, 4 slots, answered in random order:")
    print(f"  completed in {elapsed:.2f} s; peak RSS {peak:.0f} MB   (goal < 200 MB: {verdict})")


if __name__ == "__main__":
    main()
