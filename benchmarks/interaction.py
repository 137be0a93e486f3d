"""Measure async questions end to end: answer committed -> seen by the agent.

Run: ``.venv/bin/python benchmarks/interaction.py [--branches 20] [--per-branch 50]``.

20 branches each run an agent that posts 50 async questions at once, then
keeps working (a ``work`` tool: 50 ms slices) until it has
seen all its answers in its messages. A concurrent task answers the 1,000
questions in random order. Also: answers POSTed to the holder's REST API by another process, and the
time until a waiter in the holder (armed on the doorbell) wakes.
Printed: the latency from an answer's submission
(its commit included) to the moment the agent's next model turn contains it
(p50/p99), and the total
wall time with its overhead per question. The agents are scripted in Python
(a provider that decides each turn from the conversation).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import statistics
import sys
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


POSTER = """
import json, sys, time, urllib.request
url, token, run_id, ids = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(",")
sent = {}
for iid in ids:
    request = urllib.request.Request(
        f"{url}/api/runs/{run_id}/interactions/{iid}/answer",
        data=json.dumps({"answer": "yes"}).encode(), method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    sent[iid] = time.time()
    urllib.request.urlopen(request).read()
    time.sleep(0.02)
print(json.dumps(sent))
"""


async def cross_process(count: int, tmp: Path) -> list[float]:
    """Answers POSTed by another process: post -> a waiter in the holder woken."""
    from datetime import UTC, datetime

    from iterion_nb.runtime.records import Interaction, Run

    store = open_duckdb_store(tmp / "cross.duckdb")
    session = it.Session(store, workdir=tmp)
    holder = session.serve()
    assert holder is not None
    now = datetime.now(UTC)
    await store.create_run(Run("cross", "w", "h", "running", now, now))
    ids = [f"c{n}" for n in range(count)]
    for iid in ids:
        await store.add_interaction(Interaction(iid, "cross", "n", "async", ("?",), now))
    woken: dict[str, float] = {}

    async def waiter() -> None:
        while len(woken) < count:
            with store.doorbell.arm("cross") as ticket:
                pending = {i.id for i in await store.pending_interactions("cross")}
                stamp = time.time()
                for iid in ids:
                    if iid not in pending and iid not in woken:
                        woken[iid] = stamp
                if len(woken) < count:
                    await ticket.wait(timeout=5)

    task = asyncio.ensure_future(waiter())
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", POSTER, holder.url, holder.token, "cross", ",".join(ids),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await proc.communicate()
    await task
    sent = json.loads(out)
    await session.close()
    await store.close()
    return sorted(woken[i] - sent[i] for i in ids)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--branches", type=int, default=20)
    parser.add_argument("--per-branch", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cross = asyncio.run(cross_process(100, Path(tmp)))
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
    p99 = cross[min(len(cross) - 1, int(0.99 * len(cross)))] * 1000
    verdict = "meets" if p99 <= 50 else "MISSES"
    p50 = cross[len(cross) // 2] * 1000
    print(
        "answer POSTed from another process -> waiter in the holder woken:"
        f" p50 {p50:.1f} ms, p99 {p99:.1f} ms (goal <= 50 ms: {verdict})"
    )


if __name__ == "__main__":
    main()
