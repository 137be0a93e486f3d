"""Measure the DuckDB run store: ingest, answers, pending listing, doorbell.

Run: ``.venv/bin/python benchmarks/store.py [--quick]``. Uses a temporary
directory; prints each figure with its goal. Compare ratios within one run:
these machines are noisy.

Goals (issue "The durable run store"):
- event ingest through the batching writer >= 100,000 events/s
  (printed beside the naive one-INSERT-per-event figure, as a ratio);
- answer transaction latency p50 / p99 (reported);
- pending questions of one run, with 1M events and 100k interactions in the
  store: <= 5 ms;
- doorbell, answer committed -> waiter woken, in-process: p99 <= 5 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from iterion_nb.runtime.doorbell import Doorbell
from iterion_nb.runtime.records import Interaction, Run
from iterion_nb.store import open_duckdb_store
from iterion_nb.store.duckdb_store import CONNECT_CONFIG


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_record(run_id: str) -> Run:
    at = datetime.now(UTC)
    return Run(run_id, "bench", "h", "running", at, at)


def question(iid: str, run_id: str) -> Interaction:
    return Interaction(iid, run_id, "asker", "async", ("Which one?",), datetime.now(UTC))


async def ingest(path: Path, events: int) -> float:
    store = open_duckdb_store(path)
    await store.create_run(run_record("ingest"))
    start = time.perf_counter()
    for n in range(events):
        await store.append_event("ingest", "llm_step_finished", {"n": n, "tokens": 120})
    await store.flush()
    elapsed = time.perf_counter() - start
    await store.close()
    return events / elapsed


def naive_ingest(path: Path, events: int) -> float:
    con = duckdb.connect(str(path), config=CONNECT_CONFIG)
    start = time.perf_counter()
    for n in range(events):
        con.execute(
            "INSERT INTO events VALUES (?, ?, ?, now()::TIMESTAMP, NULL, NULL, ?)",
            ["naive", n + 1, "llm_step_finished", f'{{"n": {n}, "tokens": 120}}'],
        )
    elapsed = time.perf_counter() - start
    con.close()
    return events / elapsed


async def answers(path: Path, count: int) -> list[float]:
    store = open_duckdb_store(path)
    await store.create_run(run_record("answers"))
    for n in range(count):
        await store.add_interaction(question(f"a{n}", "answers"))
    latencies = []
    for n in range(count):
        start = time.perf_counter()
        await store.answer(f"a{n}", f"answer {n}", answered_by="bench")
        latencies.append(time.perf_counter() - start)
    await store.close()
    return latencies


def bulk_load(path: Path, events: int, interactions: int) -> None:
    """Fill the store with many runs' history, straight through SQL."""
    con = duckdb.connect(str(path), config=CONNECT_CONFIG)
    con.execute(
        "INSERT INTO runs (id, workflow, source_hash, status, created_at, updated_at, source,"
        " vars, error, checkpoint) SELECT 'run' || (i % 1000), 'bench', 'h', 'finished', now(),"
        " now(), '', '{}', NULL, NULL FROM range(1000) t(i)"
    )
    con.execute(
        "INSERT INTO events SELECT 'run' || (i % 1000), i // 1000 + 1, 'tick',"
        " now()::TIMESTAMP, NULL, NULL, '{}' FROM range(?) t(i)",
        [events],
    )
    con.execute(
        "INSERT INTO interactions (id, run_id, node_id, branch_id, kind, questions, options,"
        " allow_free_text, waits_on, requested_at, answered_at, answers, answered_by)"
        " SELECT 'i' || i, 'run' || (i % 1000), 'asker', NULL, 'async', '[\"q?\"]', '[]',"
        " true, '[]', now()::TIMESTAMP,"
        " CASE WHEN (i // 1000) % 10 = 0 THEN NULL ELSE now()::TIMESTAMP END,"
        " CASE WHEN (i // 1000) % 10 = 0 THEN NULL ELSE '\"a\"' END, NULL FROM range(?) t(i)",
        [interactions],
    )
    con.close()


async def pending_listing(path: Path, repeat: int) -> list[float]:
    store = open_duckdb_store(path)
    await store.pending_interactions("run7")  # warm up
    times = []
    for n in range(repeat):
        start = time.perf_counter()
        found = await store.pending_interactions(f"run{n % 1000}")
        times.append(time.perf_counter() - start)
        assert found, "bulk load should leave pending questions in every run"
    await store.close()
    return times


class TimedDoorbell(Doorbell):
    """Records when each ring happened (the ring follows the commit at once)."""

    def __init__(self) -> None:
        super().__init__()
        self.rung_at = 0.0

    def ring(self, key: str) -> None:
        self.rung_at = time.perf_counter()
        super().ring(key)


async def doorbell(path: Path, count: int) -> list[float]:
    bell = TimedDoorbell()
    store = open_duckdb_store(path, doorbell=bell)
    await store.create_run(run_record("bell"))
    for n in range(count):
        await store.add_interaction(question(f"b{n}", "bell"))
    latencies: list[float] = []
    for n in range(count):
        with bell.arm("bell") as ticket:
            # answered from another thread, as a widget handler or REST call would
            answerer = threading.Thread(
                target=lambda n=n: asyncio.run(store.answer(f"b{n}", "yes"))
            )
            answerer.start()
            assert await ticket.wait(timeout=5.0)
            latencies.append(time.perf_counter() - bell.rung_at)
            answerer.join()
    await store.close()
    return latencies


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    args = parser.parse_args()
    events, naive, n_answers = (20_000, 500, 100) if args.quick else (200_000, 2_000, 500)
    big_events, big_interactions = (100_000, 10_000) if args.quick else (1_000_000, 100_000)

    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        batched = await ingest(base / "ingest.duckdb", events)
        slow = naive_ingest(base / "ingest.duckdb", naive)
        print(f"event ingest, batching writer: {batched:12,.0f} events/s   (goal >= 100,000)")
        print(f"event ingest, one INSERT each: {slow:12,.0f} events/s   (batched/naive = "
              f"{batched / slow:,.0f}x)")  # fmt: skip

        lat = await answers(base / "answers.duckdb", n_answers)
        print(
            f"answer transaction:            p50 {pct(lat, 0.5) * 1000:6.2f} ms,"
            f" p99 {pct(lat, 0.99) * 1000:6.2f} ms   ({n_answers} answers)"
        )

        big = base / "big.duckdb"
        open_store = open_duckdb_store(big)
        await open_store.close()
        bulk_load(big, big_events, big_interactions)
        listing = await pending_listing(big, 200)
        print(
            f"pending of one run ({big_events:,} events, {big_interactions:,} interactions):"
            f" p50 {pct(listing, 0.5) * 1000:.2f} ms, p99 {pct(listing, 0.99) * 1000:.2f} ms"
            "   (goal <= 5 ms)"
        )

        woken = await doorbell(base / "bell.duckdb", 200)
        print(
            f"doorbell, commit -> waiter woken (cross-thread): p50 {pct(woken, 0.5) * 1000:.3f} ms,"
            f" p99 {pct(woken, 0.99) * 1000:.3f} ms, mean {statistics.mean(woken) * 1000:.3f} ms"
            "   (goal p99 <= 5 ms)"
        )


if __name__ == "__main__":
    asyncio.run(main())
