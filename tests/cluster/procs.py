"""A Dask cluster of real processes for the tests: a scheduler and ``dask worker`` processes."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import distributed

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _children(pid: int) -> list[int]:
    """The child processes of ``pid``, whichever of its threads started them.

    A nanny starts its worker from a thread of its own: the main thread's
    children alone would be multiprocessing's resource tracker only.
    """
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


class CliCluster:
    """``dask scheduler`` and ``dask worker`` processes (each worker: a nanny and its worker)."""

    def __init__(
        self, tmp_path: Path, workers: int = 2, store: str | None = None,
        scheduler_log: Path | None = None,
    ) -> None:  # fmt: skip
        """Start a scheduler and ``workers`` workers (preloaded with the watcher if ``store``).

        The scheduler's log goes to ``scheduler_log`` (appended to), if given.
        """
        self.tmp_path = tmp_path
        self.store = store
        self.scheduler_log = scheduler_log
        self.port = free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.scheduler = self._scheduler()
        self.workers: list[subprocess.Popen[bytes]] = []
        for _ in range(workers):
            self.add_worker()
        if workers:
            self.wait_for_workers(workers)

    def _scheduler(self) -> subprocess.Popen[bytes]:
        log = self.scheduler_log
        output = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115
        proc = subprocess.Popen(
            [str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(self.port),
             "--no-dashboard"],
            stdout=subprocess.DEVNULL, stderr=output,
        )  # fmt: skip
        if log is not None:
            output.close()  # type: ignore[union-attr]
        deadline = time.monotonic() + 60
        while not _listening(self.port):
            assert time.monotonic() < deadline, "the scheduler did not start"
            time.sleep(0.05)
        return proc

    def wait_for_workers(self, count: int) -> None:
        """Until ``count`` workers are connected to the scheduler."""
        with distributed.Client(self.address, timeout="60s") as client:
            client.wait_for_workers(count, timeout=60)

    def restart_scheduler(self) -> None:
        """Kill the scheduler (SIGKILL) and start a new one on the same address."""
        self.scheduler.kill()
        self.scheduler.wait()
        self.scheduler = self._scheduler()

    def add_worker(
        self, store: str | None = None, log: Path | None = None,
        env: dict[str, str] | None = None, preload: bool | None = None,
    ) -> subprocess.Popen[bytes]:  # fmt: skip
        """One more ``dask worker`` process (a nanny and its worker).

        It watches ``store`` (default: the cluster's), and writes its log to ``log``;
        ``env`` adds to its environment; ``preload`` (default: whether it has a store)
        preloads the watcher.
        """
        env = {**os.environ, **(env or {})}
        watched = store if store is not None else self.store
        if watched is not None:
            env["ITERION_NB_STORE"] = watched
        else:
            env.pop("ITERION_NB_STORE", None)
        wanted = watched is not None if preload is None else preload
        preloads = ["--preload", "iterion_nb.session.watcher"] if wanted else []
        output = open(log, "wb") if log is not None else subprocess.DEVNULL  # noqa: SIM115
        local = self.tmp_path / f"worker{len(self.workers)}-{time.monotonic_ns()}"
        proc = subprocess.Popen(
            [str(BIN / "dask"), "worker", self.address, "--nthreads", "2", "--no-dashboard",
             "--local-directory", str(local), *preloads],
            stdout=subprocess.DEVNULL, stderr=output, env=env,
        )  # fmt: skip
        if log is not None:
            output.close()  # type: ignore[union-attr]
        self.workers.append(proc)
        return proc

    def kill_workers(self) -> None:
        """SIGKILL every worker together with its nanny."""
        for proc in self.workers:
            for child in _children(proc.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGKILL)
            proc.kill()
            proc.wait()
        self.workers.clear()

    def wait_workers_gone(self, timeout: float = 60.0) -> None:
        """Until every worker process has exited by itself (as after losing its scheduler)."""
        for proc in self.workers:
            proc.wait(timeout=timeout)
        self.workers.clear()

    def close(self) -> None:
        """Stop everything."""
        self.kill_workers()
        if self.scheduler.poll() is None:
            self.scheduler.kill()
            self.scheduler.wait()
