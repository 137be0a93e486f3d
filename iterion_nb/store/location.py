"""Where the run store lives: argument, then ``ITERION_NB_STORE``, then ``./.iterion/``.

A store is named by a path (a DuckDB file, or a directory holding one) or
by a URL (``scheme://…``). ``postgresql://`` and ``postgres://`` select the
PostgreSQL store; any other scheme is refused with a clear error — a URL is
never taken for a path, so no stray local directory appears.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from iterion_nb.errors import StoreError

if TYPE_CHECKING:
    from iterion_nb.runtime.ports import Store

#: Environment variable naming the store (a ``.duckdb`` file, a directory, or a URL).
STORE_ENV = "ITERION_NB_STORE"
DEFAULT_DIR = ".iterion"
DEFAULT_FILE = "iterion.duckdb"
#: URL schemes that select the PostgreSQL store.
POSTGRES_SCHEMES = ("postgresql", "postgres")

# A scheme of two or more characters then ":/": "C:/x" stays a Windows path,
# while "postgresql:/x" (a URL whose "//" a path normalisation swallowed) is a URL.
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]+):/")
_SECRET_PARAMS = ("password", "sslpassword")


def is_store_url(spec: str | os.PathLike[str]) -> bool:
    """Whether ``spec`` names a store by URL (``scheme://…``) rather than by path."""
    return isinstance(spec, str) and _URL.match(spec) is not None


def store_url(path: str | os.PathLike[str] | None = None) -> str | None:
    """The URL the store is named by (``path``, else ``ITERION_NB_STORE``), or None for a path."""
    chosen = path if path is not None else os.environ.get(STORE_ENV) or None
    if chosen is not None and is_store_url(chosen):
        return str(chosen)
    return None


def mask_url(url: str) -> str:
    """``url`` with its password (in the user part or a query parameter) shown as ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return re.sub(r"//[^/@]*@", "//***@", url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hosts = netloc.rpartition("@")
        if ":" in userinfo:
            userinfo = userinfo.split(":", 1)[0] + ":***"
        netloc = f"{userinfo}@{hosts}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        masked = [(k, "***" if k in _SECRET_PARAMS else v) for k, v in pairs]
        query = urlencode(masked, safe="*/:")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def resolve_store_path(path: str | os.PathLike[str] | None = None) -> Path:
    """The DuckDB file to use.

    ``path`` (or the environment variable) may name the file itself (ending
    in ``.duckdb``) or a directory that holds ``iterion.duckdb``. Without
    either, it is ``.iterion/iterion.duckdb`` under the working directory.

    Raises:
        StoreError: The store is named by a URL, not a path (open it with
            :func:`~iterion_nb.store.remote.open_store`).
    """
    url = store_url(path)
    if url is not None:
        raise StoreError(
            f"the store {mask_url(url)} is a URL, not a DuckDB path: open it with open_store()"
        )
    target = _chosen(path)
    if target.suffix != ".duckdb":
        target = target / DEFAULT_FILE
    return target.absolute()


def _chosen(path: str | os.PathLike[str] | None) -> Path:
    chosen = os.fspath(path) if path is not None else os.environ.get(STORE_ENV) or DEFAULT_DIR
    return Path(chosen).expanduser()


def names_store_dir(path: str | os.PathLike[str] | None = None) -> bool:
    """Whether the store is named by its directory (``.iterion``, a path not ending ``.duckdb``)."""
    return _chosen(path).suffix != ".duckdb"


def make_private_dirs(directory: Path) -> None:
    """Create ``directory`` and its missing parents, each mode 0700 (none is followed if a link).

    Directories that exist are left as they are.
    """
    missing: list[Path] = []
    current = directory
    while not os.path.lexists(current) and current != current.parent:
        missing.append(current)
        current = current.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            continue  # made meanwhile by someone else: not ours to change
        os.chmod(folder, 0o700)  # whatever the umask: we made it


def tighten_store_dir(directory: Path, store_name: str) -> None:
    """Make a store's own directory 0700 if it is this user's and holds only the store's files.

    A directory that holds anything else is someone's folder, not the
    store's: it is left alone, as is one reached through a link.
    """
    try:
        info = os.lstat(directory)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            return
        if not info.st_mode & 0o077:
            return
        names = os.listdir(directory)
    except OSError:
        return
    if all(n.startswith((store_name, f".{store_name}")) for n in names):
        with contextlib.suppress(OSError):
            os.chmod(directory, 0o700)


def open_url_store(url: str, **options: Any) -> Store:
    """Open the store a URL names; ``options`` go to the implementation's opener.

    Raises:
        StoreError: The URL's scheme names no store this build can open, the
            URL is malformed, or the PostgreSQL client (psycopg) is missing.
    """
    shown = mask_url(url)
    scheme = url.split(":", 1)[0].lower()
    if scheme not in POSTGRES_SCHEMES:
        raise StoreError(
            f"cannot open the store {shown}: no store for URL scheme '{scheme}'"
            " (postgresql://… names a PostgreSQL store; a path names a DuckDB file)"
        )
    if not url.split(":", 1)[1].startswith("//"):
        raise StoreError(f"cannot open the store {shown}: expected {scheme}://[user@]host/database")
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        raise StoreError(
            f"cannot open the store {shown}: PostgreSQL needs psycopg 3 and psycopg-pool"
            " (pip install 'iterion-nb[postgres]')"
        ) from None
    from iterion_nb.store.postgres_store import open_postgres_store

    return open_postgres_store(url, **options)
