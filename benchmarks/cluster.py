"""Scale on a Dask cluster: parked runs, answers from elsewhere, 1 vs 2 workers, answer -> resume.

Run: ``.venv/bin/python benchmarks/cluster.py [--quick] [--url postgresql://…]``
(full sizes: about two minutes on 2 cores; ``--quick``: under a minute, a
smoke run with smaller sizes). Without ``--url`` it starts a throwaway
PostgreSQL server on loopback (``tests/pgserver.py``: this machine's
binaries, fsync and synchronous commit on, as in production) and removes it
afterwards; with ``--url`` it works in fresh schemas there. Runs execute on
``distributed.LocalCluster(processes=True)`` workers (``--threads`` each,
default 4) as ``Session(url, cluster=…)`` runs them anywhere: a run is a
task that ends when the run finishes or parks, and the watcher plugin
resumes a parked run once its answer is in (LISTEN/NOTIFY). The scheduler
and the session that starts the runs live in this process.

Figures (issue 16 item 6), each printed with its goal, then side by side:

1. 1,000 runs (``--quick``: 500) started on a 2-worker cluster park at a
   ``human`` gate. Once every one reads ``paused_waiting_human``: the worker
   slots they hold — tasks the scheduler has processing, threads executing
   on the workers, leases in the store (by SQL and by ``list_runs``) —
   goal 0. Beside it: the time to park them all, and the CPU the cluster,
   this process and PostgreSQL spend while the runs sit parked.
2. All of them answered by another process (it opens the store with
   ``iterion_nb.store.remote.open_store(url)``, answers one question after
   another, and exits): from its first answer call to the last run
   ``finished``, goal <= 60 s.
3. Compute-only runs (a chain of 20 ``compute`` nodes) per second on a
   1-worker and a 2-worker cluster: all started at once, timed until the last
   finished; goal 2 workers / 1 worker >= 1.6x. Clusters alternate (full:
   1, 2, 2, 1 workers; the mean of each). Printed with each: where the CPU
   went (workers, this process, PostgreSQL, other processes on the machine)
   and per run, and the cores 1.6x would need at the 2-worker CPU per run
   beside the cores the other processes left free.
4. Answer -> the resumed run's next node: the ``node_started`` event of the
   node after the gate (stamped on the worker in UTC, aligned to the
   server's clock — under a millisecond on one machine, printed) minus
   ``time.time()`` when the answering process's ``answer`` call returned,
   p50 / p99: one by one (``--paced`` more runs, each answered once the
   previous one's next node had started, while the 1,000 of item 1 sit
   parked), the latency itself, with the part until the resumed task's
   ``run_resumed`` event; and over the burst of item 2, where it is mostly
   the wait for a free worker thread.

These machines have 2 cores shared with whatever else runs: compare ratios
within one run, and read the "other processes" CPU printed beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import distributed
import psutil
import psycopg

import iterion_nb as it
from iterion_nb.session import Session

ROOT = Path(__file__).resolve().parent.parent
OTHERS = "other processes"

GATE = """\
compute before:
  expr:
    v: "1"

human gate:
  instructions: "Ship it?"

compute after:
  expr:
    v: "2"

workflow gated:
  entry: before
  before -> gate
  gate -> after
  after -> done
"""


def chain_source(nodes: int) -> str:
    """A workflow of ``nodes`` compute nodes in a row."""
    body = "".join(f'compute c{i}:\n  expr:\n    v: "{i} + 1"\n\n' for i in range(nodes))
    edges = "".join(f"  c{i} -> c{i + 1}\n" for i in range(nodes - 1))
    return f"{body}workflow chain:\n  entry: c0\n{edges}  c{nodes - 1} -> done\n"


# -- figures -------------------------------------------------------------------------
def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(values: list[float]) -> str:
    """p50 and p99 of seconds, in ms."""
    return f"p50 {pct(values, 0.5) * 1000:7.1f} ms, p99 {pct(values, 0.99) * 1000:7.1f} ms"


def short(values: list[float]) -> str:
    return f"p50 {pct(values, 0.5) * 1000:.0f} / p99 {pct(values, 0.99) * 1000:.0f} ms"


@dataclass
class Summary:
    """One line per figure, printed together at the end."""

    rows: list[tuple[str, str, str, str]] = field(default_factory=list)

    def add(self, what: str, figure: str, goal: str = "", ok: bool | None = None) -> None:
        result = "reported" if ok is None else ("meets" if ok else "MISSES")
        self.rows.append((what, figure, goal, result))

    def print(self) -> None:
        print("\nsummary")
        for what, figure, goal, result in self.rows:
            print(f"  {what:<48} {figure:>22}   {goal:<9} {result}")


# -- the store, read through SQL (cheap polling, no load on the store code under test) -----
def schema_url(base: str) -> tuple[str, str]:
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    return f"{base}{'&' if '?' in base else '?'}schema={schema}", schema


class Probe:
    """One autocommit connection that reads a schema's tables directly."""

    def __init__(self, conn: psycopg.AsyncConnection[Any], schema: str) -> None:
        self.conn = conn
        self.schema = schema

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, base: str, schema: str) -> AsyncIterator[Probe]:
        conn = await psycopg.AsyncConnection.connect(base.split("?")[0], autocommit=True)
        try:
            yield cls(conn, schema)
        finally:
            await conn.close()

    async def rows(self, query: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
        cur = await self.conn.execute(query.replace("{s}", self.schema), params)
        return await cur.fetchall()

    async def statuses(self) -> dict[str, tuple[int, int]]:
        """Status -> (runs, runs with a lease)."""
        found = await self.rows("SELECT status, count(*), count(owner_id) FROM {s}.runs GROUP BY 1")
        return {status: (n, leased) for status, n, leased in found}

    async def until(self, status: str, n: int, timeout: float, every: float = 0.05) -> float:
        """Poll until ``n`` runs read ``status``; the time.time() when they did."""
        deadline = time.monotonic() + timeout
        while (found := (await self.statuses()).get(status, (0, 0))[0]) < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{found}/{n} runs {status} after {timeout:.0f} s")
            await asyncio.sleep(every)
        return time.time()

    async def last_event(
        self, kind: str, node: str | None = None, run_id: str | None = None
    ) -> dict[str, float]:
        """Run id -> when its last event ``kind`` (of ``node``) happened, epoch seconds."""
        found = await self.rows(
            "SELECT run_id, max(occurred_at) FROM {s}.events WHERE type = %s"
            " AND node_id IS NOT DISTINCT FROM %s AND (%s::text IS NULL OR run_id = %s)"
            " GROUP BY run_id",
            [kind, node, run_id, run_id],
        )
        return {run: at.timestamp() for run, at in found}


# -- CPU accounting -----------------------------------------------------------------
def _cpu(proc: psutil.Process, reaped: bool = False) -> float:
    """CPU seconds of ``proc`` (and of its children already reaped, if ``reaped``)."""
    with contextlib.suppress(psutil.Error):
        times = proc.cpu_times()
        own = times.user + times.system
        return own + (times.children_user + times.children_system if reaped else 0.0)
    return 0.0


class CpuMeter:
    """CPU used by the workers (with nannies), this process, PostgreSQL, and everything else."""

    def __init__(self, client: Any, pg_pid: int | None) -> None:
        workers = [psutil.Process(pid) for pid in client.run(os.getpid).values()]
        nannies = [p.parent() for p in workers]
        self.workers = workers + [p for p in nannies if p is not None and p.pid != os.getpid()]
        self.server = psutil.Process(pg_pid) if pg_pid is not None else None
        self._start = self._read()
        self._t0 = time.monotonic()

    def _postgres(self) -> float:
        if self.server is None:
            return 0.0
        # its backends come and go: the live ones, and those gone (reaped by the postmaster)
        children = self.server.children(recursive=True)
        return _cpu(self.server, reaped=True) + sum(_cpu(child) for child in children)

    def _read(self) -> dict[str, float]:
        ours = {
            "workers": sum(_cpu(proc) for proc in self.workers),
            "this process": _cpu(psutil.Process()),
            "PostgreSQL": self._postgres(),
        }
        machine = psutil.cpu_times()
        busy = sum(machine) - machine.idle - getattr(machine, "iowait", 0.0)
        return {**ours, OTHERS: busy - sum(ours.values())}

    def cores(self) -> dict[str, float]:
        """Each group's CPU since this meter started, in cores (CPU seconds a second)."""
        now, elapsed = self._read(), time.monotonic() - self._t0
        return {name: (now[name] - self._start[name]) / elapsed for name in now}


def cpu_line(cores: dict[str, float]) -> str:
    parts = ", ".join(f"{name} {used:.2f}" for name, used in cores.items())
    return f"{parts} (cores; {sum(cores.values()):.2f} of {os.cpu_count()} busy)"


def ours(cores: dict[str, float]) -> float:
    return sum(used for name, used in cores.items() if name != OTHERS)


# -- the cluster ---------------------------------------------------------------------
@contextlib.asynccontextmanager
async def cluster_session(
    workers: int, threads: int, url: str, workdir: Path
) -> AsyncIterator[tuple[Session, Any]]:
    """A LocalCluster of ``workers`` processes, a client, and a session running runs on it."""
    cluster = await asyncio.to_thread(
        distributed.LocalCluster, n_workers=workers, threads_per_worker=threads,
        processes=True, dashboard_address=None, silence_logs=40,
    )  # fmt: skip
    client = await asyncio.to_thread(distributed.Client, cluster, set_as_default=False)
    session = Session(url, cluster=client, workdir=workdir)
    try:
        yield session, client
    finally:
        await session.close()
        await asyncio.to_thread(client.close)
        await asyncio.to_thread(cluster.close)


async def start_all(session: Session, wf: Any, n: int, concurrency: int = 8) -> list[str]:
    """Start ``n`` runs of ``wf`` on the cluster (``concurrency`` creations at a time)."""
    gate = asyncio.Semaphore(concurrency)

    async def one() -> str:
        async with gate:
            return (await session.start(wf)).id

    return list(await asyncio.gather(*(one() for _ in range(n))))


def _executing(dask_worker: Any) -> int:
    return len(dask_worker.state.executing)


def busy_slots(client: Any) -> tuple[int, int]:
    """Tasks the scheduler has processing, and threads executing a task on the workers."""
    processing = sum(len(tasks) for tasks in client.processing().values())
    return processing, sum(client.run(_executing).values())


def _skew(spec: str) -> float:
    from iterion_nb.session.cluster import worker_store

    return float(worker_store(spec)._skew.total_seconds())  # type: ignore[attr-defined]


def worker_skew(client: Any, spec: str) -> float:
    """The largest event-time correction of a worker (server clock minus its own), seconds."""
    return max(abs(s) for s in client.run(_skew, spec).values())


# -- the answering process -------------------------------------------------------------
ANSWERER = """
import asyncio, sys, time
from iterion_nb.store.remote import open_store

async def main():
    store = open_store(sys.argv[1])
    await store.list_runs(limit=1)  # connected before the first answer is timed
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        iid = line.strip()
        called = time.time()
        await store.answer(iid, "yes", answered_by="elsewhere")
        print(iid, called, time.time(), flush=True)
    await store.close()

asyncio.run(main())
"""


@contextlib.asynccontextmanager
async def answerer(url: str) -> AsyncIterator[asyncio.subprocess.Process]:
    """Another process that answers the interaction ids written to it, one a line."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", ANSWERER, url,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        assert line.strip() == b"ready", line
        yield proc
    finally:
        if proc.returncode is None:
            with contextlib.suppress(Exception):
                assert proc.stdin is not None
                proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def pending_ids(session: Session) -> dict[str, str]:
    """Run id -> the id of the question its gate asked."""
    return {i.run_id: i.id for i in await session.store.pending_interactions()}


# -- 1: park ------------------------------------------------------------------------
@dataclass
class Context:
    """What the sections share."""

    args: argparse.Namespace
    base: str
    summary: Summary
    latency: dict[str, tuple[list[float], list[float] | None]] = field(default_factory=dict)


async def park(ctx: Context, session: Session, client: Any, probe: Probe) -> None:
    args, n = ctx.args, ctx.args.parked
    wf = it.compile(GATE)
    print(f"1. {n:,} runs parked at a human gate (2 workers, {args.threads} threads each)")
    started = time.time()
    await start_all(session, wf, n)
    submitted = time.time() - started
    parked_at = await probe.until("paused_waiting_human", n + args.warm, 600)
    took = parked_at - started
    print(f"   all parked {took:5.1f} s after the first start ({n / took:.0f} runs/s;"
          f" starting them took {submitted:.1f} s)")  # fmt: skip
    await asyncio.sleep(0.5)  # the tasks of runs that just parked return
    processing, executing = await asyncio.to_thread(busy_slots, client)
    leased = sum(leases for _, leases in (await probe.statuses()).values())
    parked = await session.store.list_runs(status="paused_waiting_human", limit=n + 100)
    listed = sum(run.lease is not None for run in parked)
    held = processing + executing + leased + listed
    print(f"   held now: tasks processing {processing}, threads executing {executing},"
          f" leases {leased} (SQL) / {listed} (list_runs of {len(parked):,})   goal 0")  # fmt: skip
    ok = held == 0 and len(parked) == n + args.warm
    ctx.summary.add(f"{n:,} parked runs: worker slots and leases", f"{held}", "0", ok)
    ctx.summary.add("  ... time to park them all", f"{took:.1f} s")
    meter = await asyncio.to_thread(CpuMeter, client, args.pg_pid)
    await asyncio.sleep(args.idle)
    idle = meter.cores()
    print(f"   CPU while they sit parked ({args.idle:.0f} s): {cpu_line(idle)}")
    ctx.summary.add("  ... CPU while they sit parked", f"{ours(idle):.2f} cores")


# -- 2 + 4a: answer them all from another process ------------------------------------------
async def answer_all(ctx: Context, session: Session, client: Any, probe: Probe, url: str) -> None:
    questions = await pending_ids(session)
    n = len(questions)
    print(f"2. {n:,} answers from another process, one after another")
    finished = (await probe.statuses()).get("finished", (0, 0))[0]
    async with answerer(url) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("".join(f"{iid}\n" for iid in questions.values()).encode())
        await proc.stdin.drain()
        proc.stdin.close()
        done_at = await probe.until("finished", finished + n, 600)
        words = (await proc.stdout.read()).decode().split()
    lines = [words[i : i + 3] for i in range(0, len(words), 3)]
    returned = {iid: float(back) for iid, _, back in lines}
    first_call = min(float(called) for _, called, _ in lines)
    answering, total = max(returned.values()) - first_call, done_at - first_call
    print(f"   answering took {answering:4.1f} s ({n / answering:.0f} answers/s); the last run"
          f" finished {total:4.1f} s after the first answer call   goal <= 60 s")  # fmt: skip
    ctx.summary.add(f"{n:,} answered elsewhere -> all finished", f"{total:.1f} s", "<= 60 s",
                    total <= 60)  # fmt: skip
    ctx.summary.add("  ... of which answering them", f"{answering:.1f} s")
    after = await probe.last_event("node_started", "after")
    run_of = {iid: run_id for run_id, iid in questions.items()}
    ctx.latency[f"burst of {n:,}"] = ([after[run_of[i]] - t for i, t in returned.items()], None)
    ctx.args.skew = await asyncio.to_thread(worker_skew, client, url)


# -- 4b: one by one, while the others sit parked -------------------------------------------
async def paced(ctx: Context, session: Session, probe: Probe, url: str) -> None:
    n, parked = ctx.args.paced, ctx.args.parked + ctx.args.warm
    before = set(await pending_ids(session))
    await start_all(session, it.compile(GATE), n)
    await probe.until("paused_waiting_human", parked + n, 120)
    questions = {r: i for r, i in (await pending_ids(session)).items() if r not in before}
    to_node: list[float] = []
    to_resumed: list[float] = []
    async with answerer(url) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        for run_id, iid in questions.items():
            proc.stdin.write(f"{iid}\n".encode())
            await proc.stdin.drain()
            returned = float((await proc.stdout.readline()).decode().split()[2])
            deadline = time.monotonic() + 60
            while not (at := (await probe.last_event("node_started", "after", run_id)).get(run_id)):
                assert time.monotonic() < deadline, f"run {run_id} did not go on"
                await asyncio.sleep(0.005)
            resumed = (await probe.last_event("run_resumed", None, run_id)).get(run_id, at)
            to_node.append(at - returned)
            to_resumed.append(resumed - returned)
            await asyncio.sleep(0.02)
    await probe.until("finished", n, 60)
    ctx.latency[f"one by one ({n})"] = (to_node, to_resumed)  # with the others parked


async def gate_sections(ctx: Context) -> None:
    """Items 1, 4b (while those runs sit parked), then 2 and 4a, on one 2-worker cluster."""
    args = ctx.args
    url, schema = schema_url(ctx.base)
    async with (
        Probe.open(ctx.base, schema) as probe,
        cluster_session(2, args.threads, url, args.tmp) as (session, client),
    ):
        await start_all(session, it.compile(GATE), args.warm)  # imports, connections, plugin
        await probe.until("paused_waiting_human", args.warm, 120)
        await park(ctx, session, client, probe)
        await paced(ctx, session, probe, url)
        await answer_all(ctx, session, client, probe, url)


def print_latency(ctx: Context) -> None:
    print(f"\n4. answer returned -> the resumed run's next node started (event times aligned"
          f" to this machine's clock within {ctx.args.skew * 1000:.2f} ms)")  # fmt: skip
    for label, (to_node, to_resumed) in ctx.latency.items():
        line = f"   {label:<18} {ms(to_node)}"
        if to_resumed is not None:
            slow = sum(t > 0.25 for t in to_node)
            line += (
                f", max {max(to_node) * 1000:.0f} ms ({slow} over 250 ms); of which until"
                f" its run_resumed event: {ms(to_resumed)}"
            )
        print(line)
        ctx.summary.add(f"answer -> next node, {label}", short(to_node))


# -- 3: compute-only runs/s, 1 worker vs 2 ----------------------------------------------
async def throughput(ctx: Context, workers: int) -> tuple[float, dict[str, float]]:
    args = ctx.args
    url, schema = schema_url(ctx.base)
    wf = it.compile(chain_source(args.nodes))
    warm = 2 * workers * args.threads
    async with (
        Probe.open(ctx.base, schema) as probe,
        cluster_session(workers, args.threads, url, args.tmp) as (session, client),
    ):
        await start_all(session, wf, warm)
        await probe.until("finished", warm, 120)
        meter = await asyncio.to_thread(CpuMeter, client, args.pg_pid)
        started = time.time()
        await start_all(session, wf, args.runs)
        done_at = await probe.until("finished", args.runs + warm, 600)
        cores = meter.cores()
    took = done_at - started
    rate = args.runs / took
    per_run = ", ".join(
        f"{name} {used / rate * 1000:.1f}" for name, used in cores.items() if name != OTHERS
    )
    plural = "s" if workers > 1 else " "
    print(f"   {workers} worker{plural}: {args.runs} runs in {took:5.2f} s = {rate:5.1f} runs/s"
          f" ({rate * args.nodes:,.0f} nodes/s)")  # fmt: skip
    print(f"     CPU: {cpu_line(cores)}\n     CPU per run (ms): {per_run}")
    return rate, cores


async def scaling(ctx: Context) -> None:
    args = ctx.args
    order = [1, 2] if args.quick else [1, 2, 2, 1]
    print(f"\n3. compute-only runs ({args.nodes} compute nodes each, {args.runs} a cluster,"
          f" {args.threads} threads a worker), clusters in the order {order}")  # fmt: skip
    rates: dict[int, list[float]] = {1: [], 2: []}
    cpu: dict[int, list[dict[str, float]]] = {1: [], 2: []}
    for workers in order:
        rate, cores = await throughput(ctx, workers)
        rates[workers].append(rate)
        cpu[workers].append(cores)
    one, two = statistics.mean(rates[1]), statistics.mean(rates[2])
    # the CPU 1.6x would take at the cost of a run with 2 workers (all of ours), and what
    # the other processes on this machine left free meanwhile
    cost = statistics.mean(ours(c) / r for c, r in zip(cpu[2], rates[2], strict=True))
    need = 1.6 * one * cost
    free = (os.cpu_count() or 1) - statistics.mean(c[OTHERS] for c in cpu[2])
    print(f"   2 workers / 1 worker: {two / one:.2f}x   goal >= 1.6x")
    print(f"   1.6x the 1-worker rate ({1.6 * one:.0f} runs/s) at {cost * 1000:.1f} ms of CPU a run"
          f" (2 workers) needs {need:.2f} cores; other processes left {free:.2f} of"
          f" {os.cpu_count()} free")  # fmt: skip
    ctx.summary.add("compute-only runs/s, 1 worker", f"{one:.1f} runs/s")
    ctx.summary.add("compute-only runs/s, 2 workers", f"{two:.1f} runs/s")
    ctx.summary.add("  ... 2 workers / 1 worker", f"{two / one:.2f}x", ">= 1.6x", two / one >= 1.6)
    ctx.summary.add("  ... cores 1.6x needs / cores left free", f"{need:.2f} / {free:.2f}")


# -- main -----------------------------------------------------------------------------
async def bench(args: argparse.Namespace) -> None:
    server = None
    if args.url is None:
        sys.path.insert(0, str(ROOT))  # tests/pgserver.py starts the throwaway server
        from tests.pgserver import PgServer

        server = await asyncio.to_thread(PgServer.start, durable=True)
    args.pg_pid = server.proc.pid if server is not None else None
    ctx = Context(args, args.url or server.url, Summary())  # type: ignore[union-attr]
    began = time.perf_counter()
    try:
        await gate_sections(ctx)
        await scaling(ctx)
        print_latency(ctx)
    finally:
        if server is not None:
            await asyncio.to_thread(server.stop)
    ctx.summary.print()
    print(f"({time.perf_counter() - began:.0f} s, {os.cpu_count()} cores)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes: under a minute")
    parser.add_argument("--url", help="an existing server (default: start a throwaway one)")
    parser.add_argument("--threads", type=int, default=4, help="threads a worker (default 4)")
    parser.add_argument("--parked", type=int, help="runs parked at a gate (1,000; quick 500)")
    parser.add_argument("--paced", type=int, help="runs answered one by one (100; quick 20)")
    parser.add_argument("--runs", type=int, help="compute-only runs a cluster (300; quick 150)")
    args = parser.parse_args()
    args.parked = args.parked or (500 if args.quick else 1000)
    args.paced = args.paced or (20 if args.quick else 100)
    args.runs = args.runs or (150 if args.quick else 300)
    args.nodes, args.warm = 20, 4
    args.idle = 5.0 if args.quick else 10.0
    with tempfile.TemporaryDirectory(prefix="iterion-bench-") as tmp:
        args.tmp = Path(tmp)
        os.chdir(tmp)  # where the workers' scratch and any tool would run
        asyncio.run(bench(args))


if __name__ == "__main__":
    main()
