"""Where the run store lives: argument, then ``ITERION_NB_STORE``, then ``./.iterion/``.

A store is named by a path (a DuckDB file, or a directory holding one) or
by a URL (``scheme://…``). ``postgresql://`` and ``postgres://`` select the
PostgreSQL store; any other scheme is refused with a clear error — a URL is
never taken for a path, so no stray local directory appears.

A misspelt PostgreSQL URL is a URL too, refused as malformed (naming the
form expected, ``postgresql://USER:PASSWORD@HOST:PORT/DB``, its password
masked), never a path: a name that starts with ``postgresql`` or
``postgres`` (any case) followed by ``:`` (``postgresql:/h/db``,
``postgresql:user:pw@h/db``) or by ``//`` (``postgresql//user:pw@h/db``),
or by ``/`` and then, anywhere after, an ``@`` (``postgres/user:pw@h/db``).
A path whose first part is only named so (``postgresql/runs``,
``./postgresql//a@b``, ``postgres-data/store``) stays a path. A URL whose
user part holds an ``@`` not percent-encoded is refused as malformed too:
libpq would cut it at its first ``@`` and take the rest of the password
for the host.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote, quote_plus, unquote, urlencode, urlsplit, urlunsplit

from iterion_nb.errors import StoreError
from iterion_nb.safe_input import shown_path

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
#: A PostgreSQL URL however misspelt: its scheme name then ":", "//", or "/" and later an "@".
_POSTGRES_LIKE = re.compile(r"^(?i:postgres(?:ql)?)(?::|//|/.*@)", re.DOTALL)
#: A PostgreSQL URL spelt right, up to its host.
_POSTGRES_URL = re.compile(r"^(?i:postgres(?:ql)?)://")
#: The form of a PostgreSQL store's URL, as messages name it.
EXPECTED_URL = "postgresql://USER:PASSWORD@HOST:PORT/DB"
_SECRET_PARAMS = ("password", "sslpassword")
#: The URL parameter that is ours (the PostgreSQL schema), not libpq's.
SCHEMA_PARAM = "schema"
_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def is_store_url(spec: str | os.PathLike[str]) -> bool:
    """Whether ``spec`` names a store by URL (``scheme://…``, or a misspelt ``postgresql://``).

    A ``str`` only: a ``Path`` is a path, whatever it is named.
    """
    if not isinstance(spec, str):
        return False
    return _URL.match(spec) is not None or _POSTGRES_LIKE.match(spec) is not None


def store_url(path: str | os.PathLike[str] | None = None) -> str | None:
    """The URL the store is named by (``path``, else ``ITERION_NB_STORE``), or None for a path."""
    chosen = path if path is not None else os.environ.get(STORE_ENV) or None
    if chosen is not None and is_store_url(chosen):
        return str(chosen)
    return None


def mask_url(url: str) -> str:
    """``url`` with its password (in the user part or a query parameter) shown as ``***``."""
    if _url_problem(url) is not None:
        return _mask_malformed(url)
    parts = urlsplit(url)
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
        query = urlencode(masked, safe="*/:", errors="surrogateescape")  # (bytes not UTF-8)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def without_password(url: str) -> str:
    """``url`` with no password at all: one store's name whether or not it carries one.

    A worker given ``user:secret@host`` and one whose environment supplies the
    password (``PGPASSWORD``) for ``user@host`` use the same store; this is the
    name both share. A malformed URL is masked as :func:`mask_url` does.
    """
    if _url_problem(url) is not None:
        return mask_url(url)
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hosts = netloc.rpartition("@")
        netloc = f"{userinfo.split(':', 1)[0]}@{hosts}"
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    query = urlencode([(k, v) for k, v in pairs if k not in _SECRET_PARAMS], safe="*/:")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


#: A URL's user part in a malformed URL: up to its last ``@``, wherever that is, after
#: ``scheme:``, ``scheme:/``, ``scheme://`` or (a misspelt one) ``scheme/`` or ``scheme//``.
_USERINFO_ANYWHERE = re.compile(
    r"(?P<head>^[A-Za-z][A-Za-z0-9+.\-]*(?::/{0,2}|/{1,2})).*@", re.DOTALL
)
#: In a malformed URL with no ``@``: what stands where its port should (``user:PASSWORD``
#: with the host left out), unless it is a port (or ports: ``h1:5432,h2:5433``).
_PORT_PLACE = re.compile(
    r"(?P<head>^[A-Za-z][A-Za-z0-9+.\-]*(?::/{0,2}|/{1,2})[^/?#:@\[\]]*:)[^/?#@]*"
)
_PORTS = re.compile(r"\d*(?:,[^,:/?#@]*(?::\d*)?)*")
#: A URL's password in running text: ``scheme://user:PASSWORD@`` (or ``scheme:``,
#: ``scheme:/``; and a misspelt PostgreSQL URL's: ``postgresql//user:PASSWORD@``).
_URL_PASSWORD = re.compile(
    r"(?P<head>\b(?:[A-Za-z][A-Za-z0-9+.\-]*:/{0,2}|(?i:postgres(?:ql)?)/{1,2})"
    r"[^\s:/?#@]*:)[^\s/]*@"
)
#: A password given as a parameter, in a URL's query or a libpq connection string:
#: ``password=…`` up to ``&``, a space or a quote, or quoted ``password='…'``.
_PARAM_PASSWORD = re.compile(
    r"(?P<head>\b(?:ssl)?password\s*=\s*)(?P<value>'(?:[^'\\]|\\.)*'|[^\s&'\"]*)",
    re.IGNORECASE,
)
_MASK = "***"
#: What may follow a password in running text, up to the next space: punctuation.
_TRAILING = re.compile(r"[:;,.!?)\]}>]*")


def _mask_malformed(url: str) -> str:
    """A malformed URL masked: up to its last ``@``, else where its port would be; ``password=``."""
    masked = _USERINFO_ANYWHERE.sub(r"\g<head>***@", url)
    if masked == url:  # no user part: a password may stand where the port would
        found = _PORT_PLACE.match(url)
        if found is not None and not _PORTS.fullmatch(url[found.end("head") : found.end()]):
            masked = found["head"] + _MASK + url[found.end() :]
    return _PARAM_PASSWORD.sub(lambda m: m["head"] + _MASK, masked)


def one_line(text: str) -> str:
    """A server's message on one line: libpq adds hints on lines of their own (tab first)."""
    return " — ".join(part.strip() for part in text.splitlines() if part.strip())


def mask_secrets(text: str, password: str | None = None) -> str:
    """``text`` (a message, say) with every password it shows replaced by ``***``.

    A password is masked where it stands — the ``user:PASSWORD@`` of a URL,
    a ``password=`` parameter of a URL or connection string — and
    ``password`` (the store's own, see :func:`url_password`) also wherever it
    appears as a whole word, never inside another word: a password ``p``
    leaves ``postgresql`` as it is. A ``password=`` parameter holding the
    store's own password (or ``***``, masked already) is masked exactly, so
    the text that follows it (``: connection failed``) stays; one holding
    another password is masked up to the next space, ``&`` or quote, since
    where it ends is unknown (a password may hold ``:``).
    """
    text = _URL_PASSWORD.sub(r"\g<head>***@", text)
    forms = _written_forms(password)
    text = _PARAM_PASSWORD.sub(lambda m: m["head"] + _masked_value(m["value"], forms), text)
    if password:
        text = re.sub(rf"(?<!\w){re.escape(password)}(?!\w)", _MASK, text)
    return text


def _written_forms(password: str | None) -> list[str]:
    """How ``password`` may be written in a text: as is, or percent-encoded; longest first."""
    if not password:
        return []
    forms = {password, quote(password, safe=""), quote_plus(password, safe=""), quote(password)}
    return sorted(forms, key=len, reverse=True)


def _masked_value(value: str, forms: list[str]) -> str:
    """A ``password=`` parameter's value masked, keeping the punctuation after a known password.

    Only with the store's password known (``forms``): its value, or ``***``,
    followed by punctuation only (``:``, ``,``, ``)``…, up to the next space)
    is that password, then running text. Anything else is masked whole.
    """
    if forms and not value.startswith("'"):
        for form in [*forms, _MASK]:
            if value.startswith(form) and _TRAILING.fullmatch(value[len(form) :]):
                return _MASK + value[len(form) :]
    return _MASK


def url_password(url: str) -> str | None:
    """The password in a URL (its user part, else a ``password`` parameter), if any."""
    try:
        parts = urlsplit(url)
        if parts.password:
            return unquote(parts.password)
    except ValueError:
        return None
    found = [v for k, v in parse_qsl(parts.query, keep_blank_values=True) if k == "password"]
    return found[-1] if found and found[-1] else None


def check_store_spec(spec: str | os.PathLike[str]) -> None:
    """Refuse a store name that cannot name a store, before anything is opened or created.

    Raises:
        StoreError: A URL that is malformed (its host or port cannot be
            parsed; the message masks its password), or a path that is not
            valid UTF-8 (DuckDB cannot open it) or holds U+0000 (no path can).
    """
    if "\x00" in os.fspath(spec):
        raise StoreError("the store's name holds U+0000, which no path or URL can")
    url = store_url(spec)
    text = os.fspath(spec)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        if url is not None:  # (masked first: the password may be what is not UTF-8)
            raise StoreError(
                f"the store URL {shown_path(mask_url(url))} is not valid UTF-8 text"
            ) from None
        shown = shown_path(text)
        raise StoreError(
            f"the store path {shown} is not valid UTF-8 text: DuckDB cannot open it;"
            " name the store with a UTF-8 path"
        ) from None
    if url is not None:
        _check_url(url)


def _check_url(url: str) -> None:
    """Refuse a URL Python's parser (and so libpq's caller) cannot take apart."""
    problem = _url_problem(url)
    if problem is not None:
        raise StoreError(
            f"the store URL {mask_url(url)} is malformed: {problem} (expected {EXPECTED_URL},"
            " USER, PASSWORD and PORT optional; a user or password with @, :, /, ? or #"
            " in it must be percent-encoded: @ as %40)"
        )
    check_url_parameters(url, parse_qsl(urlsplit(url).query, keep_blank_values=True))


def check_url_parameters(url: str, pairs: Sequence[tuple[str, str]]) -> None:
    """Refuse the URL's parameters (``pairs``) that libpq or we would refuse, once connecting.

    A parameter that is neither ours nor libpq's (naming the one it likely
    meant; without psycopg installed there is nothing to check it against:
    opening says so), one given twice (libpq would silently take the last),
    and a ``schema`` name :func:`check_schema_name` refuses.
    """
    keys = [key for key, _ in pairs]
    _check_known(url, keys)
    twice = sorted({key for key in keys if keys.count(key) > 1})
    if twice:
        raise StoreError(
            f"the parameter {twice[0]}= is given more than once in the store URL"
            f" {mask_url(url)}: give it once"
        )
    for key, value in pairs:
        problem = _schema_problem(value) if key == SCHEMA_PARAM else None
        if problem is not None:
            raise StoreError(f"schema={value!r} in the store URL {mask_url(url)}: {problem}")


def _check_known(url: str, keys: list[str]) -> None:
    """Refuse a parameter that is neither ours nor libpq's (libpq would, with no hint)."""
    try:
        from psycopg import pq
    except ImportError:
        return
    known = {d.keyword.decode() for d in pq.Conninfo.get_defaults()}
    known |= {SCHEMA_PARAM, "ssl"}  # ours; and libpq takes JDBC's ``ssl=true``
    for key in keys:
        if key not in known:
            near = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f" (did you mean {near[0]}=?)" if near else ""
            raise StoreError(f"unknown parameter {key!r} in the store URL {mask_url(url)}{hint}")


def check_schema_name(name: str) -> str:
    """``name`` if it can name our schema (letters, digits, ``_``; at most 63; not ``pg_…``).

    Raises:
        StoreError: It cannot.
    """
    problem = _schema_problem(name)
    if problem is not None:
        raise StoreError(f"schema={name!r}: {problem}")
    return name


def _schema_problem(name: str) -> str | None:
    if not name:
        return "a schema name cannot be empty (leave schema= out for the default, iterion_nb)"
    if not _SCHEMA_NAME.match(name):
        return "a schema name is a letter or '_' then letters, digits or '_', at most 63 characters"
    if name.startswith("pg_"):
        return "names starting with 'pg_' are PostgreSQL's own"
    return None


def _url_problem(url: str) -> str | None:
    """What is wrong with ``url``, in words that never quote its user part."""
    misspelt = _misspelt(url)
    if misspelt is not None:
        return misspelt
    try:
        parts = urlsplit(url)
    except ValueError as err:  # brackets that hold no address, characters not allowed
        said = str(err)
        return "its host part holds characters not allowed" if "netloc" in said else said
    keys = [key for key, _ in parse_qsl(parts.query, keep_blank_values=True)]
    if "@" in parts.path + parts.fragment or any("@" in key for key in keys):
        return "an '@' after the host"  # the user part holds a "/", "?" or "#"
    userinfo, _, hosts = parts.netloc.rpartition("@")
    if "@" in userinfo:  # libpq cuts at the first: the rest of the password is the host
        return "an '@' in the user or password that is not percent-encoded"
    for host in hosts.split(","):  # libpq takes several: host1:5432,host2:5433
        try:
            urlsplit(f"//{host}").port  # noqa: B018 - parsing the port is the check
        except ValueError:  # (its message quotes the port: maybe a piece of a password)
            return "its port is not a number from 0 to 65535"
    return None


def _misspelt(url: str) -> str | None:
    """What is wrong with a PostgreSQL URL not starting ``postgresql://`` (see the module)."""
    if _POSTGRES_URL.match(url) or not _POSTGRES_LIKE.match(url):
        return None
    name = re.split(r"[:/]", url, maxsplit=1)[0]
    if url[len(name)] == ":":
        return f"'{name}:' is not followed by '//'"
    if url[len(name) :].startswith("//"):
        return f"the ':' after '{name}' is missing"
    return f"'{name}/' then an '@': taken for a misspelt URL (a local path: ./{name}/…)"


def resolve_store_path(path: str | os.PathLike[str] | None = None) -> Path:
    """The DuckDB file to use.

    ``path`` (or the environment variable) may name the file itself (ending
    in ``.duckdb``) or a directory that holds ``iterion.duckdb``. Without
    either, it is ``.iterion/iterion.duckdb`` under the working directory.

    Raises:
        StoreError: The store is named by a URL, not a path (open it with
            :func:`~iterion_nb.store.remote.open_store`), or by a path that
            is not valid UTF-8.
    """
    url = store_url(path)
    if url is not None:
        raise StoreError(
            f"the store {mask_url(url)} is a URL, not a DuckDB path: open it with open_store()"
        )
    target = _chosen(path)
    check_store_spec(target)
    if target.suffix != ".duckdb":
        target = target / DEFAULT_FILE
    return target.absolute()


def _chosen(path: str | os.PathLike[str] | None) -> Path:
    chosen = os.fspath(path) if path is not None else os.environ.get(STORE_ENV) or DEFAULT_DIR
    return Path(chosen).expanduser()


def file_in_the_way(target: Path) -> str | None:
    """Why no store can be at ``target``: a file stands where its directory would be."""
    if not target.exists() and target.parent.is_file():  # `--store flow.iter`
        return (
            f"{target.parent} is a file, not a run store (a store is a directory holding"
            f" {DEFAULT_FILE}, or a .duckdb file)"
        )
    return None


def missing_store(
    spec: str | os.PathLike[str] | None, maker: str, another: str = f"--store or {STORE_ENV}"
) -> str | None:
    """Why a command about runs already made must not open ``spec`` (it would make a store).

    None when the store is there. Opening one that is not would create an
    empty store where a typo points, and the command would then say "no runs"
    as if that were the answer. ``maker`` names what makes a store (``iterion-nb
    run``); ``another`` how to name another store.

    Raises:
        StoreError: The path cannot be used at all, or the server does not answer.
    """
    url = store_url(spec)
    if url is not None:
        return _missing_schema(url, maker)
    path = resolve_store_path(spec)
    if path.exists():
        return None
    return file_in_the_way(path) or (
        f"no run store at {path} (nothing was created: {maker} makes one; {another} names another)"
    )


def _missing_schema(url: str, maker: str) -> str | None:
    if url.split(":", 1)[0].lower() not in POSTGRES_SCHEMES:  # opening it says what is wrong
        return None
    try:
        from iterion_nb.store.postgres_store import split_url, store_exists
    except ImportError:  # psycopg missing: opening the store says so
        return None
    try:
        split_url(url)
    except StoreError:  # a malformed URL: opening the store says so, as a usage error
        return None
    schema, exists = store_exists(url)  # (a server away: its StoreError, password masked)
    if exists:
        return None
    return (
        f"no run store in schema '{schema}' of {mask_url(url)} (nothing was created:"
        f" {maker} makes one; ?schema=NAME names another)"
    )


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
    if not _POSTGRES_LIKE.match(url):
        scheme = url.split(":", 1)[0].lower()
        raise StoreError(
            f"cannot open the store {shown}: no store for URL scheme '{scheme}'"
            " (postgresql://… names a PostgreSQL store; a path names a DuckDB file)"
        )
    misspelt = _misspelt(url)
    if misspelt is not None:
        raise StoreError(f"cannot open the store {shown}: {misspelt}; expected {EXPECTED_URL}")
    _check_url(url)
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
