"""Measure the PostgreSQL run store: ingest, answers, pending listing, cross-process doorbell.

Run: ``.venv/bin/python benchmarks/postgres.py [--quick] [--url postgresql://…]``.
Without ``--url`` it starts a throwaway server on loopback (this machine's
PostgreSQL binaries, fsync and synchronous commit on, as in production) and
removes it afterwards; with ``--url`` it works in a fresh schema there.

Figures (issue 16):
- event ingest through the batching writer, events/s (beside one INSERT
  transaction per event);
- answer transaction latency p50 / p99;
- pending questions of one run among 1M events and 100k interactions;
- doorbell across processes: answer committed in process A -> waiter woken
  in process B (LISTEN/NOTIFY), p50 / p99 (goal p99 <= 50 ms; upstream
  iterion polls every 5 s).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from iterion_nb.runtime.records import Interaction, Run
from iterion_nb.store.postgres_store import open_postgres_store

ROOT = Path(__file__).resolve().parent.parent


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(values: list[float]) -> str:
    return f"p50 {pct(values, 0.5) * 1000:6.2f} ms, p99 {pct(values, 0.99) * 1000:6.2f} ms"


def run_record(run_id: str) -> Run:
    at = datetime.now(UTC)
    return Run(run_id, "bench", "h", "running", at, at)


def question(iid: str, run_id: str) -> Interaction:
    return Interaction(iid, run_id, "asker", "async", ("Which one?",), datetime.now(UTC))


def schema_url(base: str) -> tuple[str, str]:
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    return f"{base}{'&' if '?' in base else '?'}schema={schema}", schema


async def ingest(url: str, events: int) -> float:
    store = open_postgres_store(url)
    await store.create_run(run_record("ingest"))
    start = time.perf_counter()
    for n in range(events):
        await store.append_event("ingest", "llm_step_finished", {"n": n, "tokens": 120})
    await store.flush()
    elapsed = time.perf_counter() - start
    await store.close()
    return events / elapsed


def naive_ingest(base: str, schema: str, events: int) -> float:
    """One INSERT, one transaction per event: what batching saves."""
    with psycopg.connect(base, autocommit=True) as conn:
        start = time.perf_counter()
        for n in range(events):
            conn.execute(
                f"INSERT INTO {schema}.events VALUES (%s, %s, %s, now(), NULL, NULL, %s)",
                ["naive", n + 1, "llm_step_finished", f'{{"n": {n}, "tokens": 120}}'],
            )
        return events / (time.perf_counter() - start)


async def answers(url: str, count: int) -> list[float]:
    store = open_postgres_store(url)
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


def bulk_load(base: str, schema: str, events: int, interactions: int) -> None:
    """Fill the store with many runs' history, straight through SQL."""
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {schema}")
        conn.execute(
            "INSERT INTO runs (id, workflow, source_hash, status, created_at, updated_at, source,"
            " vars, event_seq) SELECT 'run' || i, 'bench', 'h', 'finished', now(), now(), '',"
            " '{}', %s / 1000 FROM generate_series(0, 999) i",
            [events],
        )
        conn.execute(
            "INSERT INTO events SELECT 'run' || (i %% 1000), i / 1000 + 1, 'tick', now(), NULL,"
            " NULL, '{}' FROM generate_series(0, %s - 1) i",
            [events],
        )
        conn.execute(
            "INSERT INTO interactions (id, run_id, node_id, branch_id, kind, questions, options,"
            " allow_free_text, waits_on, requested_at, answered_at, answers, answered_by)"
            " SELECT 'i' || i, 'run' || (i %% 1000), 'asker', NULL, 'async', '[\"q?\"]', '[]',"
            " true, '[]', now(), CASE WHEN (i / 1000) %% 10 = 0 THEN NULL ELSE now() END,"
            " CASE WHEN (i / 1000) %% 10 = 0 THEN NULL ELSE '\"a\"' END, NULL"
            " FROM generate_series(0, %s - 1) i",
            [interactions],
        )
        conn.execute("ANALYZE")


async def pending_listing(url: str, repeat: int) -> list[float]:
    store = open_postgres_store(url)
    await store.pending_interactions("run7")  # warm up
    times = []
    for n in range(repeat):
        start = time.perf_counter()
        found = await store.pending_interactions(f"run{n % 1000}")
        times.append(time.perf_counter() - start)
        assert found, "bulk load should leave pending questions in every run"
    await store.close()
    return times


async def waiter(url: str, count: int) -> None:
    """Process B: arm, say so, wait for the ring, say when it came."""
    store = open_postgres_store(url)
    for n in range(count):
        with store.doorbell.arm("bell") as ticket:
            print(f"armed {n}", flush=True)
            rung = await ticket.wait(timeout=5.0)
            woke = time.time()
            print(f"woke {n} {rung} {woke:.6f}", flush=True)
    await store.close()


async def doorbell(url: str, count: int) -> tuple[list[float], list[float]]:
    """Process A answers; process B's waiter wakes. Two clocks: the call, and its return."""
    store = open_postgres_store(url)
    await store.create_run(run_record("bell"))
    for n in range(count):
        await store.add_interaction(question(f"b{n}", "bell"))
    child = subprocess.Popen(
        [sys.executable, __file__, "--waiter", url, "--count", str(count)],
        stdout=subprocess.PIPE, text=True, bufsize=1,
    )  # fmt: skip
    assert child.stdout is not None
    from_call, from_commit = [], []
    for n in range(count):
        assert (await asyncio.to_thread(child.stdout.readline)).split() == ["armed", str(n)]
        await asyncio.sleep(0.002)  # B is waiting now
        called = time.time()
        await store.answer(f"b{n}", "yes")
        returned = time.time()
        _, index, rung, woke = (await asyncio.to_thread(child.stdout.readline)).split()
        assert (index, rung) == (str(n), "True"), "the waiter timed out: no NOTIFY arrived"
        from_call.append(float(woke) - called)
        from_commit.append(max(0.0, float(woke) - returned))
    child.wait(30)
    await store.close()
    return from_call, from_commit


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument("--url", help="an existing server (default: start a throwaway one)")
    parser.add_argument("--waiter", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=200, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.waiter:
        await waiter(args.waiter, args.count)
        return
    events, naive, n_answers = (20_000, 500, 100) if args.quick else (200_000, 2_000, 500)
    big_events, big_interactions = (100_000, 10_000) if args.quick else (1_000_000, 100_000)
    server = None
    if args.url is None:
        sys.path.insert(0, str(ROOT))  # tests/pgserver.py starts the throwaway server
        from tests.pgserver import PgServer

        server = PgServer.start(durable=True)
    base = args.url or server.url  # type: ignore[union-attr]
    try:
        url, schema = schema_url(base)
        batched = await ingest(url, events)
        slow = naive_ingest(base.split("?")[0], schema, naive)
        print(f"event ingest, batching writer: {batched:12,.0f} events/s")
        print(f"event ingest, one INSERT each: {slow:12,.0f} events/s   (batched/naive = "
              f"{batched / slow:,.0f}x)")  # fmt: skip

        lat = await answers(schema_url(base)[0], n_answers)
        print(f"answer transaction:            {ms(lat)}   ({n_answers} answers)")

        url, schema = schema_url(base)
        await (open_postgres_store(url)).close()
        bulk_load(base.split("?")[0], schema, big_events, big_interactions)
        listing = await pending_listing(url, 200)
        print(
            f"pending of one run ({big_events:,} events, {big_interactions:,} interactions):"
            f" {ms(listing)}"
        )

        from_call, from_commit = await doorbell(schema_url(base)[0], 200)
        print(
            f"doorbell, answer in process A -> waiter woken in B: {ms(from_commit)},"
            f" mean {statistics.mean(from_commit) * 1000:.2f} ms   (goal p99 <= 50 ms)"
        )
        print(f"  ... measured from the start of the answer call:  {ms(from_call)}")
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    asyncio.run(main())
