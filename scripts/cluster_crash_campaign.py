"""A seeded crash campaign for the scale-out set-up: PostgreSQL store + a real Dask cluster.

Each iteration runs the crash campaign's workflow (tests/api/test_crash_campaign.py:
fan_out_all router, scripted agents with ``interaction: async``, tool nodes that
append ``name $PPID`` to ran.txt, the ``mark`` tool, an await_answers gate and a
human gate) on a cluster of real processes: ``dask scheduler`` and two
``dask worker --preload iterion_nb.session.watcher`` processes, over a fresh
schema of a throwaway PostgreSQL server. The run is started with
``iterion-nb run --detach``; an answerer answers every question through the CLI
(``iterion-nb runs answer``) or the Python API (``Session.run(id).answer``), at
times from several processes racing on one question. Meanwhile, at seeded random
moments: SIGKILL of a worker with its nanny (the run's owner, mostly; a
supervisor starts another), SIGKILL of the scheduler (a new one on the same
address, the old workers exit, new ones are started), a PostgreSQL restart
(``pg_ctl stop -m immediate``, then start), two ``iterion-nb resume RUN`` racing.

Then the promises are checked (a violation's category in brackets):
  (a) exactly one executor at a time: the activity (model turns, tool commands)
      of two cluster tasks never interleaves [two-executors,
      executed-outside-a-cluster-task];
  (b) a node ran again only if its earlier run was in flight in a killed
      process (never one in the checkpoint read right after the kill, nor
      one whose ``node_finished`` event was in the store before it started again)
      [rerun, rerun-committed, rerun-after-finished-event, never-ran];
  (c) acknowledged answers: stored once as given, exactly one winner of a race,
      and each reached its gate / the asker's last conversation [answer-*,
      race-*, gate, human-*];
  (d) the run ends ``finished`` within 120 s of the last fault, with exactly one
      ``run_finished`` event [stuck, not-finished, run-finished-events];
  (e) no Python traceback in the output of our CLI commands and API answerers
      [traceback, api-traceback].
A failure of the harness itself is reported as [harness] or [harness-verify].

Expected, not violations: an ``iterion-nb resume`` refused with exit 3 because
another process owns the run ("owned"), or because, after a PostgreSQL outage
longer than a lease, its owner "may still be alive" and renews first; an
answer refused because the question was already answered (exit 4). How each
resume ended is counted in the summary ("resumes (expected)").

Instrumentation (a sitecustomize on every process's PYTHONPATH, workers
included): the DuckDB campaign's HOOKS, plus ``act.jsonl`` lines for every
cluster task's begin/end, every model turn and every tool command, each with
pid, thread and time.

Needs PostgreSQL's server binaries (found as tests/pgserver.py says: nothing is
downloaded) and the repository installed in .venv. Run from the repository's root:

    .venv/bin/python scripts/cluster_crash_campaign.py --iterations N --seed S \
        [--faults F] [--mix worker,scheduler,postgres,postgres-long,resume-race] \
        [--keep] [--verbose]

Iteration k uses seed S+k: the seed fixes the random draws (faults, their
moments, answers), but process timing varies, so a seed's rerun is alike, not
identical. ``--faults F``: 2 to F faults per iteration (default 4); ``--mix``:
the faults to draw from, comma-separated, a repeated one weighs more (default:
all, workers twice).
``--verbose`` prints each iteration's journal; ``--keep`` keeps the working
directories (logs, act.jsonl, ran.txt). One table row per iteration, then
totals and every violation with its evidence.

Exit codes: 0 no violation; 1 at least one violation (or harness failure);
2 bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import textwrap
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.api.test_crash_campaign import (  # noqa: E402
    AGENTS,
    ASKERS,
    FLOW,
    HOOKS,
    TOOLS,
    Procs,
    scenario,
    turns,
)
from tests.cluster.procs import CliCluster, _children  # noqa: E402
from tests.pgserver import PgServer, _run_as  # noqa: E402

CLI = str(Path(sys.executable).parent / "iterion-nb")

EXTRA_HOOKS = textwrap.dedent(
    """

    # -- the cluster campaign's own instrumentation: act.jsonl ------------------------
    import os as _os

    if _os.environ.get("CAMPAIGN_DIR"):
        import functools as _functools
        import json as _json
        import threading as _threading
        import time as _time

        from iterion_nb.backends.providers import scripted as _scripted
        from iterion_nb.runtime import nodes as _nodes
        from iterion_nb.session import core as _core

        def _act(kind, **data):
            data.update(kind=kind, pid=_os.getpid(), tid=_threading.get_ident(), t=_time.time())
            fd = _os.open(_os.path.join(_os.environ["CAMPAIGN_DIR"], "act.jsonl"),
                          _os.O_WRONLY | _os.O_APPEND | _os.O_CREAT, 0o644)
            try:
                _os.write(fd, (_json.dumps(data) + "\\n").encode())
            finally:
                _os.close(fd)

        _execute_queued = _core.Session.execute_queued

        @_functools.wraps(_execute_queued)
        async def execute_queued(self, record, take_from):
            _act("begin", run=record.id, take_from=take_from, status_read=record.status)
            result = "raised"
            try:
                result = await _execute_queued(self, record, take_from)
                return result
            except BaseException as err:
                result = "raised " + type(err).__name__
                raise
            finally:
                _act("end", result=str(result))

        _core.Session.execute_queued = execute_queued

        _run_shell = _nodes._run_shell

        async def run_shell(command, stdin, cwd, timeout):
            words = command.split()
            _act("shell", node=words[1] if len(words) > 1 else command)
            return await _run_shell(command, stdin, cwd, timeout)

        _nodes._run_shell = run_shell

        _complete2 = _scripted.ScriptedProvider.complete

        async def complete2(self, request):
            turn = sum(1 for m in request.messages if m.get("role") == "assistant")
            _act("turn", node=request.node, turn=turn)
            return await _complete2(self, request)

        _scripted.ScriptedProvider.complete = complete2
    """
)

ANSWER_API = textwrap.dedent(
    """
    import asyncio, sys
    import iterion_nb as it
    from iterion_nb.errors import AlreadyAnsweredError, IterionError

    async def main():
        url, run_id, iid, value = sys.argv[1:5]
        try:  # opening a store does not wait for its server (docs/store.md)
            session = it.Session(url)
        except IterionError as err:
            print("refused:", type(err).__name__, err, flush=True)
            sys.exit(5)
        try:
            outcome = await session.run(run_id).answer(iid, value, answered_by="campaign")
            print("acked", outcome, flush=True)
        except AlreadyAnsweredError as err:
            print("already answered", err, flush=True)
            sys.exit(4)
        except IterionError as err:
            print("refused:", type(err).__name__, err, flush=True)
            sys.exit(5)
        finally:
            await session.close()

    asyncio.run(main())
    """
)

#: How much slower than the DuckDB campaign's scenario the model answers.
SLOWER = 3.0
FAULTS = ("worker", "worker", "scheduler", "postgres", "postgres-long", "resume-race")
CLI_KINDS = ("cli-run", "cli-answer", "cli-resume")
#: The CLI's exit code for a run another process owns (RunOwnedError): a refusal.
EXIT_OWNED = 3


@dataclass
class Death:
    """Worker processes that died (a kill, or their scheduler's), and the store right after."""

    pids: set[int]
    cause: str
    at: float
    finished: set[str] | None = None
    status: str | None = None


@dataclass
class Outcome:
    """One iteration's result: faults, violations, answers, races, resume outcomes, journal."""

    seed: int
    faults: Counter[str]
    violations: list[tuple[str, str]]
    answers: int
    races: int
    seconds: float
    journal: list[str] = field(default_factory=list)
    resumes: Counter[str] = field(default_factory=Counter)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of ``path`` (none if it does not exist; a torn line is skipped)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


class StoreThread:
    """One PostgreSQL store, on a loop of its own thread, for the campaign's reads."""

    def __init__(self, url: str) -> None:
        from iterion_nb.store.remote import open_store

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.store = open_store(url)

    def call(self, coro: Any, timeout: float = 120) -> Any:
        """Run ``coro`` on the store's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        """Close the store and stop its loop's thread."""
        with contextlib.suppress(Exception):
            self.call(self.store.close(), 30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class Iteration:
    """One seeded iteration: a fresh schema and cluster, one run, faults, then the checks."""

    def __init__(
        self, base: Path, seed: int, server: PgServer, faults: int, mix: tuple[str, ...] = FAULTS
    ) -> None:
        self.seed = seed
        self.mix = mix
        self.rng = random.Random(seed)
        self.server = server
        self.planned = self.rng.randint(min(2, faults), faults)
        self.workdir = base / f"it-{seed}"
        (self.workdir / "logs").mkdir(parents=True)
        hooks = base / "hooks"
        hooks.mkdir(exist_ok=True)
        (hooks / "sitecustomize.py").write_text(HOOKS + EXTRA_HOOKS)
        # the gate must not time out under faults; slower nodes, so faults find work in flight
        flow = FLOW.replace('"90s"', '"600s"').replace("sleep 0.05", "sleep 0.3")
        flow = flow.replace("sleep 0.1", "sleep 0.4")
        (self.workdir / "flow.iter").write_text(flow)
        script = scenario()
        for node_turns in script["nodes"].values():
            for turn in node_turns:
                turn["delay"] = round(turn.get("delay", 0) * SLOWER, 3)
        (self.workdir / "scenario.json").write_text(json.dumps(script))
        self.url = f"{server.url}?schema=cc_{seed}_{os.getpid()}"
        path = os.pathsep.join(filter(None, [str(hooks), os.environ.get("PYTHONPATH")]))
        self.env = dict(os.environ, PYTHONPATH=path, CAMPAIGN_DIR=str(self.workdir))
        self.env.pop("CAMPAIGN_CRASH", None)
        self.env["ITERION_NB_STORE"] = self.url
        self.procs = Procs(self.workdir, self.env)
        self.cluster: CliCluster | None = None
        self.worker_pids: dict[int, set[int]] = {}  # nanny pid -> its children
        self.deaths: list[Death] = []
        self.violations: list[tuple[str, str]] = []
        self.faults: Counter[str] = Counter()
        self.run_id = ""
        self.store: StoreThread | None = None
        self.answers: dict[str, list[tuple[str, str, int, bool]]] = {}  # iid -> attempts
        self.acked: dict[str, tuple[str, float]] = {}  # iid -> (value, acked at)
        self.busy: set[str] = set()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.races = 0
        self.resumes: Counter[str] = Counter()  # how each `iterion-nb resume` ended
        self.t0 = time.monotonic()
        self.journal: list[str] = []
        self.pg_down = threading.Event()

    def note(self, what: str) -> None:
        """Add a line to the journal, with the seconds since the iteration began."""
        self.journal.append(f"{time.monotonic() - self.t0:6.2f} {what}")

    # -- the cluster ---------------------------------------------------------------
    def start_cluster(self) -> None:
        """Start the scheduler and two workers with the campaign's environment."""
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(self.env)  # CliCluster hands its environment on to the workers
        try:
            self.cluster = CliCluster(self.workdir, 0, self.url)
            for _ in range(2):
                self.add_worker()
            self.cluster.wait_for_workers(2)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        self.refresh_worker_pids()

    def add_worker(self) -> None:
        """Start one more ``dask worker`` (with its nanny), as a supervisor would."""
        assert self.cluster is not None
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(self.env)
        try:
            n = len(list((self.workdir / "logs").glob("worker-*")))
            proc = self.cluster.add_worker(log=self.workdir / "logs" / f"worker-{n:02d}.log")
        finally:
            os.environ.clear()
            os.environ.update(saved)
        self.note(f"worker nanny {proc.pid} started")

    def refresh_worker_pids(self) -> None:
        """Remember the children (worker processes) of every live nanny."""
        assert self.cluster is not None
        for proc in self.cluster.workers:
            if proc.poll() is None:
                self.worker_pids.setdefault(proc.pid, set()).update(_children(proc.pid))

    def nanny_of(self, pid: int) -> Any:
        """The nanny whose process or worker is ``pid``; None when there is none."""
        assert self.cluster is not None
        self.refresh_worker_pids()
        for proc in self.cluster.workers:
            if pid == proc.pid or pid in self.worker_pids.get(proc.pid, set()):
                return proc
        return None

    def kill_worker(self, proc: Any) -> set[int]:
        """SIGKILL a nanny's children (its worker) and the nanny; the pids that died."""
        assert self.cluster is not None
        dead = set(_children(proc.pid)) | self.worker_pids.get(proc.pid, set())
        for child in _children(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
        proc.kill()
        proc.wait()
        self.cluster.workers.remove(proc)
        return dead | {proc.pid}

    # -- reading the store -------------------------------------------------------------
    def read(self) -> dict[str, Any]:
        """The run as stored: status, owner, checkpoint, events and interactions."""
        assert self.store is not None
        store = self.store.store

        async def body() -> dict[str, Any]:
            run = await store.get_run(self.run_id)
            events = await store.events(self.run_id)
            items = await store.interactions(self.run_id)
            return {"run": run, "events": events, "items": items}

        got = self.store.call(body())
        run = got["run"]
        checkpoint = run.checkpoint or {}
        return {
            "status": run.status, "error": run.error,
            "owner": run.lease.pid if run.lease else None,
            "outputs": checkpoint.get("outputs", {}),
            "frontier": [f["node"] for f in checkpoint.get("frontier", [])],
            "events": got["events"],
            "interactions": [
                {"id": i.id, "kind": i.kind, "node": i.node_id, "pending": i.pending,
                 "answers": i.answers, "by": i.answered_by}
                for i in got["items"]
            ],
        }  # fmt: skip

    def status(self) -> dict[str, Any] | None:
        """The run as stored, or None (and a journal line) when the store cannot be read."""
        try:
            state = self.read()
        except Exception as err:
            self.note(f"read failed: {err}")
            return None
        return state

    def activity(self) -> list[dict[str, Any]]:
        """Every ``act.jsonl`` line so far (task begin/end, model turns, tool commands)."""
        return read_jsonl(self.workdir / "act.jsonl")

    def progress(self) -> int:
        """How many activity lines there are so far."""
        return len(self.activity())

    # -- after a death: what the store committed by then ----------------------------------
    def after_death(self, death: Death) -> None:
        """Record a death and what the store had committed right after it.

        The finished nodes are kept only when nothing moved between the death and
        the read: then they were committed before the death.
        """
        self.deaths.append(death)
        try:
            snap = self.read()
        except Exception as err:
            self.note(f"no snapshot after {death.cause}: {err}")
            return
        read_at = time.time()
        moved = [a for a in self.activity() if death.at <= a["t"] <= read_at
                 and a["pid"] not in death.pids]  # fmt: skip
        death.status = snap["status"]
        if not moved:
            running = set(snap["frontier"])
            death.finished = {n for n in snap["outputs"] if n not in running}
        self.note(
            f"after {death.cause} {sorted(death.pids)}: {snap['status']} owner {snap['owner']},"
            f" snapshot {'exact' if not moved else 'moved meanwhile'}"
        )

    # -- faults -------------------------------------------------------------------------
    def fault_worker(self) -> None:
        """SIGKILL a worker and its nanny (mostly the run's owner), then start another."""
        assert self.cluster is not None
        state = self.status()
        owner = state["owner"] if state else None
        proc = self.nanny_of(owner) if owner and self.rng.random() < 0.75 else None
        live = [p for p in self.cluster.workers if p.poll() is None]
        if proc is None and live:
            proc = self.rng.choice(live)
        if proc is None:
            return
        at = time.time()
        dead = self.kill_worker(proc)
        self.note(f"killed worker nanny {proc.pid} (+{sorted(dead - {proc.pid})}), owner {owner}")
        self.after_death(Death(dead, "worker-kill", at))
        if self.rng.random() < 0.35:
            self.resume_race()
        time.sleep(self.rng.uniform(0.2, 2.5))  # the supervisor starts another
        self.add_worker()

    def fault_scheduler(self) -> None:
        """SIGKILL the scheduler, start one on its address, wait for the old workers, add two."""
        assert self.cluster is not None
        self.refresh_worker_pids()
        old = list(self.cluster.workers)
        pids = set()
        for proc in old:
            pids |= self.worker_pids.get(proc.pid, set()) | {proc.pid}
        self.cluster.restart_scheduler()  # SIGKILL, and a new one on the same address
        self.note("killed the scheduler, started a new one")
        deadline = time.monotonic() + 60
        for proc in old:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except Exception:
                self.note(f"worker nanny {proc.pid} did not exit in 60 s: killed")
                self.kill_worker(proc)
                continue
            self.cluster.workers.remove(proc)
        # their worker processes too (a nanny's child may outlive it briefly)
        for _ in range(100):
            if not any(Path(f"/proc/{p}").exists() for p in pids):
                break
            time.sleep(0.05)
        at = time.time()
        self.note(f"old workers gone: {sorted(pids)}")
        self.after_death(Death(pids, "scheduler-kill", at))
        if self.rng.random() < 0.3:
            self.resume_race()
        time.sleep(self.rng.uniform(0.2, 2.0))
        for _ in range(2):
            self.add_worker()

    def fault_postgres(self, away: float | None = None) -> None:
        """``pg_ctl stop -m immediate``, then start again; ``away``: seconds down."""
        server = self.server
        data = server.root / "data"
        self.pg_down.set()
        _run_as(server.user, [str(server.bindir / "pg_ctl"), "-D", str(data), "stop",
                              "-m", "immediate"], server.root)  # fmt: skip
        server.proc.wait(30)
        away = self.rng.uniform(0.3, 4.0) if away is None else away
        self.note(f"postgres stopped (immediate), away {away:.1f} s")
        time.sleep(away)
        server.proc = PgServer._launch(
            server.bindir, server.root, server.port, server.user, server.durable
        ).proc
        if not server._wait_ready(60):
            raise RuntimeError(f"PostgreSQL did not restart:\n{server.log()[-3000:]}")
        self.pg_down.clear()
        self.note("postgres back")

    def resume_race(self) -> None:
        """Start two ``iterion-nb resume RUN`` at once (either may be refused: by design)."""
        assert self.cluster is not None
        racers = 2
        args = [CLI, "resume", self.run_id, "--cluster", self.cluster.address, "--store", self.url]
        pids = [self.procs.spawn("cli-resume", args) for _ in range(racers)]
        self.faults["resume-race"] += 1
        self.note(f"resume race {pids}")

    def fault(self) -> None:
        """Draw one fault from the mix and inflict it."""
        kind = self.rng.choice(self.mix)
        self.faults[kind] += 1
        if kind == "worker":
            self.fault_worker()
        elif kind == "scheduler":
            self.fault_scheduler()
        elif kind == "postgres":
            self.fault_postgres()
        elif kind == "postgres-long":
            # longer than a lease (10 s): every lease lapses, the run reads `interrupted`
            # while its owner waits; someone then resumes it by hand, as the status invites
            self.fault_postgres(self.rng.uniform(10.5, 13.0))
            time.sleep(self.rng.uniform(0, 1.0))
            self.resume_race()
        else:
            self.faults[kind] -= 1
            self.resume_race()

    # -- the answerer ---------------------------------------------------------------------
    def answer_loop(self) -> None:
        """Until stopped: answer every pending question (not await) once, in a thread each."""
        rng = random.Random(self.seed * 7919 + 1)
        while not self.stop.is_set():
            if not self.pg_down.is_set():
                try:
                    state = self.read()
                except Exception:
                    state = None
                for item in (state or {}).get("interactions", []):
                    iid = item["id"]
                    if not item["pending"] or item["kind"] == "await":
                        continue
                    with self.lock:
                        if iid in self.busy or iid in self.acked:
                            continue
                        self.busy.add(iid)
                    racers = rng.choice((2, 3)) if rng.random() < 0.4 else 1
                    surfaces = [rng.choice(("cli", "api")) for _ in range(racers)]
                    thread = threading.Thread(
                        target=self.answer,
                        args=(iid, surfaces, rng.uniform(0, 2.5)),
                        daemon=True,
                    )
                    self.threads.append(thread)
                    thread.start()
            self.stop.wait(rng.uniform(0.05, 0.3))

    def answer(self, iid: str, surfaces: list[str], wait: float = 0.0) -> None:
        """Answer ``iid`` from one or more racing processes (CLI or API), then record who won."""
        time.sleep(wait)  # a person takes a moment: the run may park meanwhile
        if len(surfaces) > 1:
            self.races += 1
        values = [f"ans-{iid}" + (f"-p{k}" if len(surfaces) > 1 else "") for k in
                  range(len(surfaces))]  # fmt: skip
        pids = []
        for surface, value in zip(surfaces, values, strict=True):
            if surface == "cli":
                args = [CLI, "runs", "answer", self.run_id, iid, value, "--as", "campaign",
                        "--store", self.url]  # fmt: skip
                pids.append(self.procs.spawn("cli-answer", args))
            else:
                args = [sys.executable, "-c", ANSWER_API, self.url, self.run_id, iid, value]
                pids.append(self.procs.spawn("api-answer", args))
        attempts = []
        for pid, surface, value in zip(pids, surfaces, values, strict=True):
            code = self.procs.wait(pid, 360)
            attempts.append((surface, value, pid, code == 0))
            if code not in (0, None) and "already answered" not in self.procs.output(pid):
                self.note(f"answer {pid} ({surface}) exit {code}: {self.procs.output(pid)[-300:]}")
        with self.lock:
            self.answers.setdefault(iid, []).extend(attempts)
            won = [a for a in attempts if a[3]]
            if won:
                self.acked[iid] = (won[0][1], time.time())
            if len(won) > 1:
                self.violations.append(("race-two-winners", f"{iid}: {attempts}"))
            self.busy.discard(iid)
        self.note(f"answered {iid}: {[(s, ok) for s, _, _, ok in attempts]}")

    # -- driving -----------------------------------------------------------------------
    def start_run(self) -> None:
        """``iterion-nb run --detach`` on the cluster; remember the run's id."""
        assert self.cluster is not None
        args = [CLI, "run", "flow.iter", "--scenario", "scenario.json", "--cluster",
                self.cluster.address, "--detach", "--store", self.url]  # fmt: skip
        pid = self.procs.spawn("cli-run", args)
        code = self.procs.wait(pid, 120)
        out = self.procs.output(pid)
        if code != 0:
            raise RuntimeError(f"iterion-nb run failed ({code}):\n{out}")
        self.run_id = out.strip().splitlines()[-1].strip()
        self.note(f"run {self.run_id} started")

    def finished(self) -> bool:
        """Whether the run reads ``finished`` in the store."""
        state = self.status()
        return state is not None and state["status"] == "finished"

    def drive(self) -> None:
        """Start cluster and run, inflict the planned faults, wait (120 s at most) for the end."""
        self.start_cluster()
        self.start_run()
        self.store = StoreThread(self.url)
        answerer = threading.Thread(target=self.answer_loop, daemon=True)
        answerer.start()
        for _ in range(self.planned):
            goal = self.progress() + self.rng.randint(1, 14)
            deadline = time.monotonic() + self.rng.uniform(0.3, 4.0)
            while time.monotonic() < deadline and self.progress() < goal:
                time.sleep(0.01)
            time.sleep(self.rng.uniform(0, 0.15))
            if self.finished():
                break
            self.fault()
        self.last_fault = time.monotonic()
        deadline = time.monotonic() + 120
        while not self.finished():
            if time.monotonic() > deadline:
                state = self.status() or {}
                self.violations.append(
                    ("stuck", f"{state.get('status')} owner {state.get('owner')}"
                              f" error {state.get('error')}")
                )  # fmt: skip
                return
            time.sleep(0.2)
        self.note("finished")

    def run(self) -> Outcome:
        """Drive the iteration, then check it and clean up; its outcome."""
        started = time.monotonic()
        try:
            self.drive()
        except Exception as err:
            self.violations.append(("harness", f"{type(err).__name__}: {err}"))
        finally:
            self.stop.set()
            for thread in list(self.threads):
                thread.join(60)
            # let the CLI resumes that follow the run end by themselves
            for pid in self.procs.live(*CLI_KINDS):
                if self.procs.wait(pid, 30) is None:
                    self.note(f"{self.procs.kinds[pid]} {pid} still running: killed")
                    self.procs.kill(pid)
        try:
            time.sleep(1.5)  # anything still going on (a second executor) shows meanwhile
            final = self.read()
            self.verify(final)
        except Exception as err:
            self.violations.append(("harness-verify", f"{type(err).__name__}: {err}"))
        finally:
            if self.store is not None:
                self.store.close()
            if self.cluster is not None:
                self.cluster.close()
            self.procs.cleanup()
        return Outcome(self.seed, self.faults, self.violations, len(self.acked), self.races,
                       time.monotonic() - started, self.journal, self.resumes)  # fmt: skip

    # -- checks ------------------------------------------------------------------------
    def verify(self, final: dict[str, Any]) -> None:
        """Check every promise against the final state, the activity and the outputs."""
        events = final["events"]
        if final["status"] != "finished":
            self.violations.append(("not-finished", f"{final['status']}: {final['error']}"))
        finished = sum(1 for e in events if e.type == "run_finished")
        if finished != 1:
            self.violations.append(("run-finished-events", str(finished)))
        self.check_one_executor()
        self.check_reruns(final)
        self.check_answers(final)
        self.check_gates(final)
        self.check_agents_heard()
        self.check_cli_output()

    def executions(self) -> list[dict[str, Any]]:
        """Cluster tasks (begin..end on one thread of one process), each with its activity."""
        acts = self.activity()
        execs: list[dict[str, Any]] = []
        open_: dict[tuple[int, int], dict[str, Any]] = {}
        orphans = []
        for a in sorted(acts, key=lambda a: a["t"]):
            key = (a["pid"], a["tid"])
            if a["kind"] == "begin":
                open_[key] = {"pid": a["pid"], "tid": a["tid"], "begin": a["t"], "end": None,
                              "result": None, "acts": []}  # fmt: skip
                execs.append(open_[key])
            elif a["kind"] == "end":
                ex = open_.pop(key, None)
                if ex is not None:
                    ex["end"], ex["result"] = a["t"], a["result"]
            else:
                ex = open_.get(key)
                if ex is None:
                    orphans.append(a)
                else:
                    ex["acts"].append(a)
        if orphans:
            self.violations.append(
                ("executed-outside-a-cluster-task", f"{len(orphans)} acts, first {orphans[0]}")
            )
        return execs

    def check_one_executor(self) -> None:
        """(a) The activity of two cluster tasks never overlaps in time."""
        active = [e for e in self.executions() if e["acts"]]
        for n, one in enumerate(active):
            a0, a1 = one["acts"][0]["t"], one["acts"][-1]["t"]
            for other in active[n + 1 :]:
                b0, b1 = other["acts"][0]["t"], other["acts"][-1]["t"]
                if a0 < b1 and b0 < a1:
                    self.violations.append((
                        "two-executors",
                        f"pid {one['pid']} acts {a0:.3f}..{a1:.3f} ({one['result']}) and pid"
                        f" {other['pid']} acts {b0:.3f}..{b1:.3f} ({other['result']})",
                    ))  # fmt: skip

    def check_reruns(self, final: dict[str, Any]) -> None:
        """(b) A node ran again only if its earlier run was in flight in a process that died."""
        starts = self.node_starts()
        died: dict[int, Death] = {}
        for death in self.deaths:
            for pid in death.pids:
                died.setdefault(pid, death)
        first_finish: dict[str, float] = {}
        for e in final["events"]:
            if e.type == "node_finished" and e.node_id not in first_finish:
                first_finish[e.node_id] = e.at.timestamp()
        for node, runs in starts.items():
            self.check_earlier_runs(node, runs, died)
            self.check_runs_after_finish(node, runs, first_finish.get(node))
        missing = [n for n in TOOLS + AGENTS if n not in starts]
        if missing:
            self.violations.append(("never-ran", ", ".join(missing)))

    def node_starts(self) -> dict[str, list[dict[str, Any]]]:
        """Each node's starts (tool command, or first model turn), in time order."""
        starts: dict[str, list[dict[str, Any]]] = {}
        for a in sorted(self.activity(), key=lambda a: a["t"]):
            if a["kind"] == "shell" or (a["kind"] == "turn" and a["turn"] == 0):
                starts.setdefault(a["node"], []).append(a)
        return starts

    def check_earlier_runs(
        self, node: str, runs: list[dict[str, Any]], died: dict[int, Death]
    ) -> None:
        """Every run of ``node`` but its last was in a process that died, uncommitted then."""
        for earlier in runs[:-1]:
            death = died.get(earlier["pid"])
            if death is None:
                self.violations.append(
                    ("rerun", f"{node}: ran in {[r['pid'] for r in runs]}, {earlier['pid']}"
                              " never died")
                )  # fmt: skip
            elif death.finished is not None and node in death.finished:
                self.violations.append(
                    ("rerun-committed", f"{node}: in the checkpoint after {earlier['pid']}"
                                        f" died ({death.cause}), ran again")
                )  # fmt: skip

    def check_runs_after_finish(
        self, node: str, runs: list[dict[str, Any]], done: float | None
    ) -> None:
        """No run of ``node`` started after its first ``node_finished`` event (0.5 s slack)."""
        if done is None:
            return
        for later in runs[1:]:
            if later["t"] > done + 0.5:
                self.violations.append(
                    ("rerun-after-finished-event",
                     f"{node}: finished at {done:.3f}, started again at {later['t']:.3f}"
                     f" in {later['pid']}")
                )  # fmt: skip

    def check_answers(self, final: dict[str, Any]) -> None:
        """(c) An acknowledged answer is stored as given, once; a race has one winner."""
        stored = {i["id"]: i for i in final["interactions"]}
        answered = Counter(
            e.data.get("interaction_id") for e in final["events"]
            if e.type == "interaction_answered"
        )  # fmt: skip
        for iid, attempts in self.answers.items():
            won = [a for a in attempts if a[3]]
            got = stored.get(iid)
            if not won:
                crashed = [a for a in attempts if self.procs.all[a[2]].returncode not in (0, 1, 4)]
                lost = (
                    got is None or got["pending"] or got["answers"] not in [a[1] for a in attempts]
                )
                if lost and not crashed:
                    self.violations.append(("race-no-winner", f"{iid}: {attempts}, {got}"))
                continue
            value = won[0][1]
            if got is None or got["answers"] != value or got["by"] != "campaign":
                self.violations.append(("answer-stored", f"{iid}: acked {value!r}, stored {got}"))
        for iid, item in stored.items():
            n = answered.get(iid, 0)
            if item["pending"] != (n == 0) or n > 1:
                self.violations.append(("answer-event", f"{iid}: {n} events, {item}"))
            if item["kind"] != "await" and not item["pending"] and iid not in self.acked:
                self.violations.append(("answer-foreign", f"{iid}: {item}"))

    def check_gates(self, final: dict[str, Any]) -> None:
        """(c) The await gate passed the asker's answers; the human gate the acked one."""
        outputs = final["outputs"]
        stored = [i for i in final["interactions"] if i["pending"] or i["answers"] is not None]
        asked = {i["id"]: i["answers"] for i in stored if i["node"] == "asker"}
        passed = outputs.get("gate", {}).get("answers", [])
        gate = {a["interaction_id"]: a["answer"] for a in passed if a["interaction_id"] in asked}
        if gate != asked:
            self.violations.append(("gate", f"gate {gate}, asked {asked}"))
        humans = [i for i in stored if i["kind"] == "human"]
        said = outputs.get("approve", {}).get("text")
        for item in humans:
            if item["id"] in self.acked and said != self.acked[item["id"]][0]:
                self.violations.append(("human-answer", f"{item['id']} acked, gate said {said!r}"))
        if len(humans) != 1:
            self.violations.append(("human-questions", f"{len(humans)} human questions"))

    def check_agents_heard(self) -> None:
        """(c) An asker's last conversation heard every answer acked before it began."""
        log = turns(self.workdir)
        killed = {pid for d in self.deaths for pid in d.pids}
        asked_by: dict[str, str] = {}
        for item in self.read()["interactions"]:
            asked_by[item["id"]] = item["node"]
        for node in ASKERS:
            mine = [t for t in log if t["node"] == node]
            starts = [n for n, t in enumerate(mine) if t["turn"] == 0]
            if not starts:
                continue
            last = mine[starts[-1] :]
            heard = set(last[-1]["seen"])
            earlier = {a for t in mine[: starts[-1]] if t["pid"] in killed for a in t["seen"]}
            for iid, (value, acked_at) in self.acked.items():
                if asked_by.get(iid) != node:
                    continue
                if acked_at >= last[0]["t"] or value in heard:
                    continue
                category = "answer-unheard-killed" if value in earlier else "answer-unheard"
                self.violations.append((category, f"{node} never heard {iid} ({value})"))

    def check_cli_output(self) -> None:
        """(e) No traceback in our CLI/API processes' output; journal their exit codes."""
        for pid, kind in self.procs.kinds.items():
            if kind not in CLI_KINDS and kind != "api-answer":
                continue
            text = self.procs.output(pid)
            if "Traceback" in text:
                category = "traceback" if kind != "api-answer" else "api-traceback"
                self.violations.append((category, f"{kind} {pid}: {text[-1500:]}"))
            code = self.procs.all[pid].returncode
            if kind == "cli-resume":
                self.resumes[resume_outcome(code, text)] += 1
            self.note(f"{kind} {pid} exit {code}: {text.strip()[-200:]!r}")


def resume_outcome(code: int | None, text: str) -> str:
    """How an ``iterion-nb resume`` ended; every outcome is expected, none a violation.

    A resume racing the run's live owner (or the other racer) is refused by design:
    exit 3, "may still be alive" while the owner may still renew its lapsed lease
    after a PostgreSQL outage, "owned" (or "queue") when another process holds it.
    """
    if code == 0:
        return "ran"
    if code == EXIT_OWNED and "may still be alive" in text:
        return "refused-may-renew"
    if code == EXIT_OWNED and ("owned" in text or "queue" in text):
        return "refused-owned"
    if code is None or code < 0:
        return "killed"
    return f"exit-{code}"


# -- the campaign -------------------------------------------------------------------------
HEADER = f"{'seed':>6}  {'faults':<28} {'answers':>7} {'races':>5} {'secs':>6}  violations"


def row(o: Outcome) -> str:
    """One iteration's line of the summary table."""
    faults = " ".join(f"{k}:{v}" for k, v in sorted(o.faults.items()) if v) or "-"
    found = Counter(c for c, _ in o.violations)
    text = ", ".join(f"{c} x{k}" for c, k in sorted(found.items())) or "-"
    return f"{o.seed:>6}  {faults:<28} {o.answers:>7} {o.races:>5} {o.seconds:>6.1f}  {text}"


def report(outcomes: list[Outcome]) -> int:
    """Print the campaign's totals and every violation; the exit code (1: violations)."""
    faults: Counter[str] = Counter()
    resumes: Counter[str] = Counter()
    for o in outcomes:
        faults.update(o.faults)
        resumes.update(o.resumes)
    found = Counter(c for o in outcomes for c, _ in o.violations)
    print()
    print(f"iterations            {len(outcomes)}")
    print(f"faults                {dict(faults)}")
    print(f"resumes (expected)    {dict(sorted(resumes.items()))}")
    print(f"answers acknowledged  {sum(o.answers for o in outcomes)}"
          f" ({sum(o.races for o in outcomes)} races)")  # fmt: skip
    print(f"violations found      {sum(found.values())}"
          f" in {sum(1 for o in outcomes if o.violations)} iteration(s)")  # fmt: skip
    for category, count in sorted(found.items()):
        print(f"  {category:<36} {count:>4}")
    for o in outcomes:
        for category, detail in o.violations:
            print(f"  seed {o.seed}: {category}: {detail}")
    return 1 if found else 0


def main(argv: list[str] | None = None) -> int:
    """Run the campaign on a throwaway PostgreSQL server; the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1, help="seed of the first iteration")
    parser.add_argument("--faults", type=int, default=4, help="most faults per iteration (4)")
    parser.add_argument(
        "--mix",
        default=",".join(FAULTS),
        help="the faults to draw from, comma-separated (repeat one to weigh it)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the working directories")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    mix = tuple(args.mix.split(","))
    unknown = sorted(set(mix) - set(FAULTS))
    if unknown:
        known = ", ".join(sorted(set(FAULTS)))
        parser.error(f"unknown fault(s) in --mix: {', '.join(unknown)} (known: {known})")
    base = Path(tempfile.mkdtemp(prefix="iterion-cluster-campaign-"))
    server = PgServer.start(durable=True)
    print(f"# postgres {server.url}, work in {base}", flush=True)
    print(HEADER, flush=True)
    outcomes: list[Outcome] = []
    try:
        for n in range(args.iterations):
            iteration = Iteration(base, args.seed + n, server, args.faults, mix)
            outcomes.append(iteration.run())
            print(row(outcomes[-1]), flush=True)
            if args.verbose:
                print("\n".join(f"        {line}" for line in iteration.journal))
                for category, detail in outcomes[-1].violations:
                    print(f"        ! {category}: {detail}")
    except KeyboardInterrupt:
        print("interrupted")
    finally:
        server.stop()
        if args.keep:
            print(f"working directories kept in {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    return report(outcomes)


if __name__ == "__main__":
    sys.exit(main())
