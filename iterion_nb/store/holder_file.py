"""The holder file, and how a client checks a holder before it trusts it.

The process that holds a DuckDB store publishes ``{pid, url, token}`` in
``<store>.holder.json``. Nothing in that file is believed on sight:

- the file must be a regular file (not a symbolic link) owned by this user
  and private (no group or other bits): only a process of this user could
  have written it, and only such processes can read the token;
- its URL must be ``http://`` to a literal loopback address (127.0.0.0/8 or
  ``::1``) and a port: a token is never sent off the machine;
- before a request carries the token or any data, the server proves on that
  very connection that it is the holder of *this* store: the client sends a
  random nonce to the unauthenticated ``GET /api/store/hello``, and the
  server answers with an HMAC-SHA256, keyed by the token, of the nonce, its
  pid, its address and the identity (device, inode) of the DuckDB file it
  holds. Only a process that knows the token can answer; a process that
  merely took over the port of a dead holder cannot, a holder of another
  store (or of a copy of this one) answers for another file, and a relay
  answers for another address.

A holder file that fails any check is stale: the client ignores it and opens
the file itself (the DuckDB lock then says whether someone still holds it).
Verified connections are kept alive and reused, so the proof costs one round
trip per connection, not per request.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import http.client
import ipaddress
import json
import os
import re
import secrets
import select
import socket
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from iterion_nb.runtime.ownership import pid_alive

#: What the HMAC of a hello is computed over starts with this (domain separation).
HELLO_CONTEXT = "iterion-nb holder hello v1"
#: The hello route (unauthenticated: it carries no secret either way).
HELLO_PATH = "/api/store/hello"
#: Seconds a server gets to connect and prove itself.
HELLO_TIMEOUT = 5.0
#: A holder file or a hello answer larger than this is not ours.
MAX_HOLDER_BYTES = 64 * 1024
#: Nonces are hex, 32 to 128 characters.
NONCE = re.compile(r"[0-9a-f]{32,128}\Z")
_IDLE = 8


class UntrustedHolderError(Exception):
    """A holder file or a server that fails the checks (the message says which)."""


@dataclass(frozen=True)
class HolderInfo:
    """What a holder publishes: its pid, the API's URL and its bearer token."""

    pid: int
    url: str
    token: str


def holder_file(db_path: Path) -> Path:
    """Where the holder of ``db_path`` publishes itself (beside the database)."""
    return db_path.with_name(db_path.name + ".holder.json")


def alive(pid: int) -> bool:
    """Whether a process with this pid runs (a zombie does not)."""
    return pid_alive(pid)


# -- the proof -----------------------------------------------------------------
def file_identity(db_path: Path) -> str:
    """``device:inode`` of the store file (what a holder proves it holds)."""
    st = os.stat(db_path)
    return f"{st.st_dev}:{st.st_ino}"


def loopback_address(url: str) -> tuple[str, int]:
    """``(host, port)`` of a holder URL, refused unless ``http://`` to a loopback address.

    Raises:
        UntrustedHolderError: Another scheme, a host name, a non-loopback
            address, credentials, a path or a bad port.
    """
    try:
        parts = urlsplit(url)
        port = parts.port
        host = ipaddress.ip_address(parts.hostname or "")
    except ValueError:
        raise UntrustedHolderError(f"its URL {url[:100]!r} is not http://ADDRESS:PORT") from None
    if parts.scheme != "http" or parts.username is not None or parts.password is not None:
        raise UntrustedHolderError(f"its URL {url[:100]!r} is not http://ADDRESS:PORT")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise UntrustedHolderError(f"its URL {url[:100]!r} is not http://ADDRESS:PORT")
    if not host.is_loopback:
        raise UntrustedHolderError(f"its URL names {host}, not a loopback address")
    if port is None or not 0 < port < 65536:
        raise UntrustedHolderError(f"its URL {url[:100]!r} has no valid port")
    return host.compressed, port


def holder_proof(token: str, nonce: str, pid: int, address: str, identity: str) -> str:
    """The answer to a hello: HMAC-SHA256 keyed by the token (hex)."""
    message = "\n".join((HELLO_CONTEXT, nonce, str(pid), address, identity)).encode()
    return hmac.new(token.encode(), message, hashlib.sha256).hexdigest()


# -- the file --------------------------------------------------------------------
def _read_private(path: Path) -> bytes | None:
    """The bytes of a private regular file of this user; None if there is none."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as err:  # ELOOP: a symbolic link; or unreadable
        if os.path.islink(path):
            raise UntrustedHolderError("the holder file is a symbolic link") from None
        raise UntrustedHolderError(f"the holder file cannot be read ({err.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UntrustedHolderError("the holder file is not a regular file")
        if st.st_uid != os.geteuid():
            raise UntrustedHolderError(f"the holder file belongs to uid {st.st_uid}, not to you")
        if st.st_mode & 0o077:
            mode = stat.S_IMODE(st.st_mode)
            raise UntrustedHolderError(f"the holder file is not private (mode {mode:04o})")
        return os.read(fd, MAX_HOLDER_BYTES + 1)
    finally:
        os.close(fd)


def read_holder_file(db_path: Path) -> HolderInfo | None:
    """The holder file's content if it passes the checks on the file and its URL.

    Returns None when there is no holder file.

    Raises:
        UntrustedHolderError: It is a link, someone else's, not private, too
            large, not our JSON, or its URL is not a loopback one.
    """
    raw = _read_private(holder_file(db_path))
    if raw is None:
        return None
    try:
        if len(raw) > MAX_HOLDER_BYTES:
            raise ValueError
        data = json.loads(raw)
        pid, url, token = data["pid"], data["url"], data["token"]
    except (ValueError, KeyError, TypeError, RecursionError):
        raise UntrustedHolderError("the holder file is not a holder's") from None
    if not (type(pid) is int and isinstance(url, str) and isinstance(token, str)):
        raise UntrustedHolderError("the holder file is not a holder's")
    if not 0 < pid < 2**31 or not 16 <= len(token) <= 512 or not token.isascii():
        raise UntrustedHolderError("the holder file is not a holder's")
    loopback_address(url)
    return HolderInfo(pid, url, token)


def publish_holder_file(db_path: Path, info: HolderInfo) -> None:
    """Write the holder file (0600) atomically, never through a planted link or file.

    The content goes to a new file of a random name created exclusively
    without following links, which then replaces the holder file (a link
    there is replaced, not followed).
    """
    path = holder_file(db_path)
    data = json.dumps({"pid": info.pid, "url": info.url, "token": info.token}).encode()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    for _ in range(10):
        tmp = path.with_name(f"{path.name}.{secrets.token_hex(8)}.tmp")
        try:
            fd = os.open(tmp, flags, 0o600)
            break
        except FileExistsError:
            continue
    else:  # pragma: no cover - ten random names taken
        raise FileExistsError(f"cannot create a temporary file beside {path.name}")
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), 0o600)
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def unpublish_holder_file(db_path: Path, pid: int) -> None:
    """Remove the holder file if it is ``pid``'s."""
    with contextlib.suppress(OSError, UntrustedHolderError):
        info = read_holder_file(db_path)
        if info is not None and info.pid == pid:
            os.unlink(holder_file(db_path))


def discard_stale_holder_file(db_path: Path) -> None:
    """Remove a holder file not of this process (call only while holding the file's lock).

    Whoever holds the DuckDB lock is the only possible holder: any other
    holder file is stale (its process died, or it is not one of ours).
    """
    path = holder_file(db_path)
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            return
        info = read_holder_file(db_path)
    except UntrustedHolderError:
        info = None
    except OSError:
        return
    if info is None or info.pid != os.getpid():
        with contextlib.suppress(OSError):
            os.unlink(path)


# -- verified connections --------------------------------------------------------------
class HolderChannel:
    """Keep-alive HTTP connections to one holder, each verified before it carries a secret.

    Thread-safe: a connection serves one request at a time; idle ones are
    kept (up to a few) and reused while the server keeps them open.
    """

    def __init__(self, holder: HolderInfo, db_path: Path, timeout: float = 60.0) -> None:
        self.holder = holder
        self.db_path = db_path
        self.timeout = timeout
        self.host, self.port = loopback_address(holder.url)
        self._idle: list[http.client.HTTPConnection] = []
        #: Connections carrying a request now (close() cuts them short).
        self._busy: set[http.client.HTTPConnection] = set()
        self._lock = threading.Lock()

    def connect(self) -> http.client.HTTPConnection:
        """A new connection on which the holder has proved itself.

        Raises:
            UntrustedHolderError: Something answered that is not this store's holder.
            OSError: Nobody answered (refused, reset, timed out).
        """
        connection = http.client.HTTPConnection(self.host, self.port, timeout=HELLO_TIMEOUT)
        try:
            self._hello(connection)
        except BaseException:
            connection.close()
            raise
        if connection.sock is not None:
            connection.sock.settimeout(self.timeout)
        connection.timeout = self.timeout
        return connection

    def _hello(self, connection: http.client.HTTPConnection) -> None:
        nonce = secrets.token_hex(16)
        where = f"the process at {self.host}:{self.port}"
        try:
            connection.request("GET", f"{HELLO_PATH}?nonce={nonce}")
            response = connection.getresponse()
            body = response.read(MAX_HOLDER_BYTES + 1)
        except http.client.HTTPException as err:
            if isinstance(err, ConnectionError):  # RemoteDisconnected: nobody answers
                raise
            raise UntrustedHolderError(f"{where} does not speak HTTP like a holder") from None
        try:
            data = json.loads(body) if len(body) <= MAX_HOLDER_BYTES else None
        except (ValueError, RecursionError):
            data = None
        if response.status != 200 or not isinstance(data, dict):
            raise UntrustedHolderError(f"{where} is not a store holder")
        if data.get("pid") != self.holder.pid:
            raise UntrustedHolderError(f"{where} is not process {self.holder.pid}")
        try:
            identity = file_identity(self.db_path)
        except OSError:
            raise UntrustedHolderError("the store file does not exist") from None
        expected = holder_proof(
            self.holder.token, nonce, self.holder.pid, f"{self.host}:{self.port}", identity
        )
        given = data.get("proof")
        if not isinstance(given, str) or not hmac.compare_digest(given.encode(), expected.encode()):
            raise UntrustedHolderError(f"{where} cannot prove it holds this store")
        if response.will_close:
            raise UntrustedHolderError(f"{where} closed the connection after its hello")

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        """One request with the token on a verified connection: ``(status, body)``.

        Raises:
            UntrustedHolderError: A new connection found something that is not the holder.
            OSError, http.client.HTTPException: No complete reply.
        """
        connection = self._take() or self.connect()
        headers = {"Authorization": f"Bearer {self.holder.token}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        with self._lock:
            self._busy.add(connection)
        try:
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            data = response.read()
        except BaseException:
            connection.close()
            raise
        finally:
            with self._lock:
                self._busy.discard(connection)
        if response.will_close:
            connection.close()
        else:
            self._give(connection)
        return response.status, data

    def _take(self) -> http.client.HTTPConnection | None:
        while True:
            with self._lock:
                if not self._idle:
                    return None
                connection = self._idle.pop()
            # an idle connection the server closed (or wrote to) is readable: drop it
            if connection.sock is not None and not _readable(connection.sock):
                return connection
            connection.close()

    def _give(self, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < _IDLE:
                self._idle.append(connection)
                return
        connection.close()

    def close(self) -> None:
        """Close the idle connections, and cut short the requests in flight.

        A request to a holder that hangs would otherwise keep its thread for
        up to ``timeout``, and the process waits for that thread to exit (a
        command stopped, or out of time, would hang on for a minute).
        """
        with self._lock:
            idle, self._idle = self._idle, []
            busy = list(self._busy)
        for connection in idle:
            connection.close()
        for connection in busy:
            if connection.sock is not None:
                with contextlib.suppress(OSError):  # it ended meanwhile
                    connection.sock.shutdown(socket.SHUT_RDWR)


def _readable(sock: socket.socket) -> bool:
    """Whether reading would not block (poll: select fails on descriptors over 1023)."""
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select([sock], [], [], 0)[0])  # pragma: no cover - Windows


# -- finding the holder -------------------------------------------------------------
def probe_holder(db_path: Path) -> tuple[HolderInfo | None, str | None]:
    """The verified live holder of ``db_path`` other than this process, or why there is none.

    Returns ``(info, None)`` for a holder that proved itself, ``(None, None)``
    when there is no holder file (or it is this process's), and
    ``(None, reason)`` for a stale or untrusted one.
    """
    try:
        info = read_holder_file(db_path)
    except UntrustedHolderError as err:
        return None, str(err)
    if info is None or info.pid == os.getpid():
        return None, None
    if not alive(info.pid):
        return None, f"the holder file names process {info.pid}, which is gone"
    try:
        HolderChannel(info, db_path).connect().close()
    except UntrustedHolderError as err:
        return None, f"the holder file names process {info.pid}, but {err}"
    except (OSError, http.client.HTTPException) as err:
        return None, f"the holder file names process {info.pid}, which does not answer ({err})"
    return info, None


def find_holder(db_path: Path) -> HolderInfo | None:
    """The live holder of ``db_path`` other than this process, once it proved itself."""
    return probe_holder(db_path)[0]
