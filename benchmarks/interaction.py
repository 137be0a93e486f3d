"""Measure async questions end to end: answer committed -> seen by the agent.

Run: ``.venv/bin/python benchmarks/interaction.py [--branches 20] [--per-branch 50]``.

20 branches each run an agent that posts 50 async questions at once, then
keeps working (a ``work`` tool: 50 ms slices) until it has
seen all its answers in its messages. A concurrent task answers the 1,000
questions in random order. Printed: the latency from an answer's submission
(its commit included) to the moment the agent's next model turn contains it
(p50/p99), and the total
wall time with its overhead per question. The agents are scripted in Python
(a provider that decides each turn from the conversation).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import statistics
import tempfile
import time
from pathlib import Path

import iterion_nb as it
from iterion_nb.backends.claw import ClawBackend
from iterion_nb.backends.providers.base import ProviderRequest, ProviderResponse
from iterion_nb.store import open_duckdb_store

ANSWER = re.compile(r"\[Answer to question (\S+)\]")
committed: dict[str, float] = {}
seen: dict[str, float] = {}


@it.tool
async def work() -> str:
    """Do a 50 ms slice of work."""
    await asyncio.sleep(0.05)
    return "worked"


class BenchAgent:
    """Turn 0: post every question. Then work until every answer was seen."""

    def __init__(self, per_branch: int) -> None:
        self.per_branch = per_branch
        self.read: dict[str, int] = {}  # messages already looked at, per node
        self.answered: dict[str, set[str]] = {}

    async def complete(self, request: ProviderRequest) -> ProviderResponse:
        now = time.perf_counter()
        answered = self.answered.setdefault(request.node, set())
        start = self.read.get(request.node, 0)
        for message in request.messages[start:]:
            if message["role"] != "user" or isinstance(message["content"], str):
                continue
            for block in message["content"]:
                for iid in ANSWER.findall(str(block.get("text", ""))):
                    answered.add(iid)
                    seen.setdefault(iid, now)
        self.read[request.node] = len(request.messages)
        turn = sum(m["role"] == "assistant" for m in request.messages)
        if turn == 0:
            calls = [
                {"type": "tool_use", "id": f"toolu_{request.node}_{n}", "name": "ask_user_async",
                 "input": {"question": f"{request.node} question {n}?"}}
                for n in range(self.per_branch)
            ]  # fmt: skip
            return ProviderResponse(calls, "tool_use")
        if len(answered) < self.per_branch:
            call = {"type": "tool_use", "id": f"toolu_{request.node}_w{turn}", "name": "work",
                    "input": {}}  # fmt: skip
            return ProviderResponse([call], "tool_use")
        return ProviderResponse([{"type": "text", "text": "all answers seen"}])


def source(branches: int) -> str:
    agents = "\n".join(
        f'agent a{i}:\n  model: "bench"\n  interaction: async\n  tools: [work]\n'
        for i in range(branches)
    )
    edges = "\n".join(f"  split -> a{i}\n  a{i} -> end" for i in range(branches))
    return (
        f"router split:\n  mode: fan_out_all\n\n{agents}\n"
        'compute end:\n  await: wait_all\n  expr:\n    n: "length(input)"\n\n'
        f"workflow bench:\n  entry: split\n{edges}\n  end -> done\n"
    )


async def run(branches: int, per_branch: int, tmp: Path) -> float:
    store = open_duckdb_store(tmp / "interaction.duckdb")
    backend = ClawBackend(BenchAgent(per_branch))
    session = it.Session(store, backend=backend, workdir=tmp)
    total = branches * per_branch
    start = time.perf_counter()
    handle = await session.start(it.compile(source(branches)))

    async def answer_all() -> None:
        while len(await handle.pending_questions()) < total:
            await asyncio.sleep(0.01)
        questions = await handle.pending_questions()
        random.shuffle(questions)
        for question in questions:
            committed[question.id] = time.perf_counter()  # the answer call starts
            await handle.answer(question.id, "yes")

    await asyncio.gather(answer_all(), handle.wait())
    elapsed = time.perf_counter() - start
    assert handle.status == "finished", handle.error
    await session.close()
    await store.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--branches", type=int, default=20)
    parser.add_argument("--per-branch", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        elapsed = asyncio.run(run(args.branches, args.per_branch, Path(tmp)))
    latencies = sorted(seen[i] - committed[i] for i in committed if i in seen)
    total = args.branches * args.per_branch
    assert len(latencies) == total, f"{len(latencies)} of {total} answers were seen"

    def pct(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000

    print(f"{total} async questions, {args.branches} branches, answered in random order")
    print(f"answer submitted (commit included) -> in the agent's next turn: p50 {pct(0.5):.1f} ms,"
          f" p99 {pct(0.99):.1f} ms, mean {statistics.mean(latencies) * 1000:.1f} ms")  # fmt: skip
    print(f"total {elapsed:.2f} s for the run: {elapsed / total * 1000:.2f} ms per question")


if __name__ == "__main__":
    main()
