"""Reading the files a person names (a workflow, a scenario, pinned answers), safely.

Whatever the path points at, reading it never hangs and never reads without
end: a regular file is read, and so is a pipe (``cmd | iterion-nb validate
/dev/stdin``, ``<(cmd)``, a named FIFO) as long as something comes through it
within :data:`PIPE_IDLE_SECONDS`; a directory, a device such as
``/dev/zero`` or a socket is refused before a byte is read; never more than
a limit is read. YAML is parsed with bounds too: nesting
deeper than :data:`MAX_DEPTH`, and aliases that would expand the document
past :data:`MAX_EXPANDED` (a "billion laughs"), are refused before the
document is built, and so is a mapping (a JSON object) that gives one key
twice, which YAML and ``json`` would otherwise let the last one win,
silently. Every refusal is an :class:`InputFileError` whose message
names the file (and the line and column, where there is one) and the problem.
"""

from __future__ import annotations

import functools
import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from iterion_nb.errors import IterionError

#: The most a scenario, an answers file or a workflow file may hold.
MAX_INPUT_BYTES = 4 * 1024 * 1024
#: The most an attachment (``--attach NAME=PATH``) may hold.
MAX_ATTACHMENT_BYTES = 1024 * 1024 * 1024
#: How deeply a YAML or JSON document may nest its lists and mappings.
MAX_DEPTH = 100
#: How large a YAML document may become once its aliases are expanded, counted
#: as one per value plus the characters of each scalar: about what a document
#: of :data:`MAX_INPUT_BYTES` without aliases can reach at most.
MAX_EXPANDED = 4 * MAX_INPUT_BYTES

TOO_DEEP = f"nested more than {MAX_DEPTH} levels deep"
#: The tag of YAML's merge key (``<<: *base``), which is not a key of the mapping.
_MERGE_TAG = "tag:yaml.org,2002:merge"

#: How long reading a pipe waits for its next bytes (or its end) before giving up.
PIPE_IDLE_SECONDS = 30.0

_READ_CHUNK = 1024 * 1024
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
)


class InputFileError(IterionError):
    """A file a person named cannot be used; the message says which (``where``) and why.

    Attributes:
        where: The file as shown, with ``:line:column`` where there is a position.
        problem: What is wrong, without the file.
    """

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem


def shown_path(path: str | os.PathLike[str]) -> str:
    r"""``path`` for a message: bytes that are not UTF-8 shown as ``\xff``, never raising."""
    text = os.fspath(path)
    try:
        return os.fsencode(text).decode("utf-8", "backslashreplace")
    except UnicodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _kind(mode: int) -> str | None:
    """What a file that is not a regular one is (None for a regular file)."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _refuse_kind(shown: str, mode: int) -> None:
    kind = _kind(mode)
    if kind is not None:
        raise InputFileError(shown, f"is {kind}, not a file")


def _refuse_unless_pipe(shown: str, mode: int, pipes: bool) -> None:
    if not (pipes and stat.S_ISFIFO(mode)):
        _refuse_kind(shown, mode)


@contextmanager
def open_regular(path: str | os.PathLike[str], *, pipes: bool = False) -> Iterator[tuple[int, int]]:
    """Open a regular file (or, with ``pipes``, a pipe) for reading; yields its descriptor, size.

    A path that is not a regular file is refused without being opened for
    long: a FIFO is opened without waiting for a writer (non-blocking).

    Raises:
        InputFileError: No such file, not a regular file, or it cannot be read.
    """
    shown = shown_path(path)
    try:
        _refuse_unless_pipe(shown, os.stat(path).st_mode, pipes)
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
        fd = os.open(path, flags | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise InputFileError(shown, "no such file") from None
    except NotADirectoryError:
        raise InputFileError(shown, "no such file (a part of the path is a file)") from None
    except OSError as err:
        raise InputFileError(shown, f"cannot read it: {err.strerror or err}") from None
    try:
        info = os.fstat(fd)  # what was opened, should the path have changed meanwhile
        _refuse_unless_pipe(shown, info.st_mode, pipes)
        yield fd, info.st_size
    finally:
        os.close(fd)


def too_large(shown: str, size: int | None, limit: int) -> InputFileError:
    """The refusal of a file over ``limit`` bytes (``size`` when known)."""
    over = f"is {size:,} bytes" if size is not None and size > limit else "is larger than that"
    return InputFileError(shown, f"too large: the limit is {limit:,} bytes and the file {over}")


def read_bytes(path: str | os.PathLike[str], *, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The content of the regular file at ``path``, refused past ``limit`` bytes.

    Raises:
        InputFileError: The file is missing, not a regular file, unreadable or too large.
    """
    shown = shown_path(path)
    with open_regular(path, pipes=True) as (fd, size):
        pipe = stat.S_ISFIFO(os.fstat(fd).st_mode)
        if size > limit and not pipe:
            raise too_large(shown, size, limit)
        chunks: list[bytes] = []
        total = 0
        try:
            while total <= limit:  # limit + 1 bytes at most: one more says it is too large
                if pipe:
                    _wait_for_bytes(fd, shown, total)
                try:
                    chunk = os.read(fd, min(_READ_CHUNK, limit + 1 - total))
                except BlockingIOError:
                    continue  # woken with nothing to read yet
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
        except OSError as err:
            raise InputFileError(shown, f"cannot read it: {err.strerror or err}") from None
    if total > limit:
        raise too_large(shown, None, limit)
    return b"".join(chunks)


def _wait_for_bytes(fd: int, shown: str, got: int = 0) -> None:
    """Until the pipe ``fd`` has bytes (or its end) to read; ``got`` bytes came so far.

    Raises:
        InputFileError: Nothing came within :data:`PIPE_IDLE_SECONDS` (a FIFO
            nobody writes to, a command that hangs).
    """
    import select

    ready, _, _ = select.select([fd], [], [], PIPE_IDLE_SECONDS)
    if not ready:
        idle = f"{PIPE_IDLE_SECONDS:.0f} s"
        said = (
            f"is a pipe, and nothing came through it within {idle}"
            if not got
            else f"is a pipe that stalled: {got} bytes came, then nothing more for {idle}"
            " and it was not closed"
        )
        raise InputFileError(shown, said)


def file_digest(
    path: str | os.PathLike[str], *, limit: int = MAX_ATTACHMENT_BYTES
) -> tuple[int, str]:
    """The size and SHA-256 (hex) of the regular file at ``path``, read in chunks.

    Raises:
        InputFileError: The file is missing, not a regular file, unreadable or too large.
    """
    import hashlib

    shown = shown_path(path)
    digest = hashlib.sha256()
    total = 0
    with open_regular(path) as (fd, size):
        if size > limit:
            raise too_large(shown, size, limit)
        try:
            while chunk := os.read(fd, _READ_CHUNK):
                total += len(chunk)
                if total > limit:
                    raise too_large(shown, None, limit)
                digest.update(chunk)
        except OSError as err:
            raise InputFileError(shown, f"cannot read it: {err.strerror or err}") from None
    return total, digest.hexdigest()


def decode_text(data: bytes, shown: str) -> str:
    """``data`` as UTF-8 text (a byte-order mark dropped).

    Raises:
        InputFileError: It is not UTF-8; the message gives the line and column.
    """
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        byte = data[err.start]
        raise InputFileError(
            f"{shown}:{line}:{column}", f"not UTF-8 text (byte 0x{byte:02x} cannot be decoded)"
        ) from None


def read_text(path: str | os.PathLike[str], *, limit: int = MAX_INPUT_BYTES) -> str:
    """The UTF-8 text of the regular file at ``path`` (see :func:`read_bytes`).

    Raises:
        InputFileError: As :func:`read_bytes`, or the file is not UTF-8 text.
    """
    return decode_text(read_bytes(path, limit=limit), shown_path(path))


def load_yaml(text: str, name: str) -> Any:
    """Parse one YAML document (JSON is YAML) with the safe loader, within bounds.

    Raises:
        InputFileError: It is not YAML, nests deeper than :data:`MAX_DEPTH`,
            its aliases expand past :data:`MAX_EXPANDED` or refer to
            themselves, or a mapping gives one key twice (the message gives
            the line and column of both).
    """
    import yaml

    loader = _bounded_loader()(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node, name)
        return loader.construct_document(node)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark is not None else name
        problem = getattr(err, "problem", None) or "not YAML"
        if problem == "but found another document":  # PyYAML's words lack their first half
            problem = "a second YAML document (`---`): the file must hold one"
        raise InputFileError(where, problem) from None
    except RecursionError:  # a bound above should have caught it first
        raise InputFileError(name, "nested too deeply") from None
    finally:
        loader.dispose()


def load_json(text: str, name: str) -> Any:
    """Parse JSON, nesting at most :data:`MAX_DEPTH` levels, each key once in an object.

    Raises:
        InputFileError: It is not JSON, nests too deeply, or gives one key
            twice in an object (``json`` would keep the last, silently).
    """
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as err:
        raise InputFileError(f"{name}:{err.lineno}:{err.colno}", err.msg) from None
    except RecursionError:
        raise InputFileError(name, TOO_DEEP) from None
    except _RepeatedKeyError as err:
        _refuse_as_yaml(text, name)  # JSON is YAML: its reader gives the lines of both
        raise InputFileError(
            name, f"the key '{err.key[:80]}' is given twice in one object; an object holds"
            " each key once",
        ) from None  # fmt: skip
    if _depth(data) > MAX_DEPTH:
        raise InputFileError(name, TOO_DEEP)
    return data


def _refuse_as_yaml(text: str, name: str) -> None:
    """Raise what :func:`load_yaml` says of ``text`` if it finds a key given twice."""
    try:
        load_yaml(text, name)
    except InputFileError as err:
        if "is given twice" in err.problem:
            raise


class _RepeatedKeyError(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's pairs as a dict, refusing a key given twice."""
    data = dict(pairs)
    if len(data) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _RepeatedKeyError(key)
            seen.add(key)
    return data


def _depth(data: Any) -> int:
    """How deeply lists and mappings nest in ``data`` (without recursion)."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            if level <= MAX_DEPTH:
                values = item.values() if isinstance(item, dict) else item
                stack.extend((value, level + 1) for value in values)
    return deepest


@functools.cache
def _bounded_loader() -> type[Any]:
    """``yaml.SafeLoader`` that refuses nesting past :data:`MAX_DEPTH` as it composes."""
    import yaml
    from yaml.composer import ComposerError

    class BoundedLoader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            # the composer recurses once per level: stop well before Python's limit
            if not self.check_event(yaml.SequenceStartEvent, yaml.MappingStartEvent):
                return super().compose_node(parent, index)
            if self.depth >= MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise ComposerError(None, None, TOO_DEEP, mark)
            self.depth += 1
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def compose_mapping_node(self, anchor: Any) -> Any:
            node = super().compose_mapping_node(anchor)
            _refuse_repeated_keys(self, node)
            return node

    return BoundedLoader


def _refuse_repeated_keys(loader: Any, node: Any) -> None:
    """Refuse a mapping that gives one key twice (YAML would keep the last, silently).

    Keys are compared as the values they load as (``1`` and ``0x1`` are one
    key); a merge (``<<: *base``) is not a key, and the keys it brings may be
    given again, which is what it is for.
    """
    import yaml
    from yaml.constructor import ConstructorError

    seen: dict[Any, Any] = {}  # key -> the mark where it first is
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == _MERGE_TAG:
            continue
        key = loader.construct_object(key_node)
        try:
            first: Any = seen.setdefault(key, key_node.start_mark)
        except TypeError:  # not hashable: the constructor says so in its turn
            continue
        if first is not key_node.start_mark:
            shown = f"'{key[:80]}'" if isinstance(key, str) else repr(key)[:80]
            raise ConstructorError(
                None, None,
                f"the key {shown} is given twice in one mapping (first at line {first.line + 1},"
                f" column {first.column + 1}); a mapping holds each key once",
                key_node.start_mark,
            )  # fmt: skip


def _children(node: Any) -> list[Any]:
    import yaml

    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_expansion(root: Any, name: str) -> None:
    """Refuse a document whose aliases expand it past :data:`MAX_EXPANDED` or into a loop.

    Each node is sized once (an alias reuses its anchor's node), so this
    takes time in proportion to the file, not to the expansion.
    """
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()  # the node being sized and its ancestors
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            open_nodes.discard(key)
            size = 1 + len(node.value) if isinstance(node.value, str) else 1
            size += sum(sizes[id(child)] for child in _children(node))
            if size > MAX_EXPANDED:
                raise InputFileError(
                    name,
                    f"its aliases expand it past {MAX_EXPANDED:,} values and characters"
                    " (an alias bomb?)",
                )
            sizes[key] = size
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            line = node.start_mark.line + 1
            raise InputFileError(f"{name}:{line}", "an alias that contains itself")
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)
