"""Workspace memory (upstream's ``memory:``): notes an agent keeps across runs.

A node with ``memory: enabled: true, scope: NAME`` works with a folder of
Markdown notes outside the working tree, at
``$ITERION_NB_HOME/projects/<working directory as one name>-<digest>/memory/NAME/``
(``ITERION_NB_HOME`` defaults to ``~/.iterion_nb``), so every run in that
directory, and every node with that scope, shares them. The agent gets:

- ``memory_read(path)`` and ``memory_list(path)`` (unless ``read: false``), and
  ``memory_write(path, content)`` (unless ``write: false``), paths relative to the
  scope's folder and never outside it;
- after its system prompt (read once, as the node's call starts), an index of
  the notes (path, and the ``title``, ``tags`` and ``description`` of a front
  matter, or the first ``# heading``), then the
  files its ``autoload`` globs name, in full (at most :data:`MAX_PROMPT_CHARS`).

Both backends offer the same tools (the claude CLI through the node's MCP server).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
from pathlib import Path
from xml.sax.saxutils import quoteattr

from iterion_nb.backends.tools import Tool, ToolError, make_tool
from iterion_nb.ir import model as m

#: How much of a note the index reads for its front matter or first heading.
_PEEK = 4096


#: The most of the notes' text (index and autoloaded files) put in a system prompt.
MAX_PROMPT_CHARS = 64_000


def memory_root(workdir: str | Path, scope: str) -> Path:
    """The scope's folder for notes of runs in ``workdir``.

    The folder's name is the working directory made one readable name, plus a
    digest of it (``/a/b-c`` and ``/a-b/c`` read alike, and must not share notes).
    """
    home = Path(os.environ.get("ITERION_NB_HOME") or Path.home() / ".iterion_nb")
    where = str(Path(workdir).resolve())
    digest = hashlib.sha256(where.encode()).hexdigest()[:12]
    key = f"{re.sub(r'[^A-Za-z0-9._-]', '-', where).strip('-')[-80:]}-{digest}"
    return home / "projects" / key / "memory" / scope


class MemoryScope:
    """One scope's folder: paths resolved inside it, notes read, listed and written."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def resolve(self, rel: str) -> Path:
        """``rel`` inside the scope; :class:`ToolError` for a path that leaves it.

        Absolute paths, ``..`` and symbolic links that lead out are all refused
        (checked on the real path, as the file tools do).
        """
        if "\0" in rel:
            raise ToolError(f"memory path {rel!r} holds a NUL character")
        if Path(rel).is_absolute():
            raise ToolError(f"memory paths are relative to the scope, not absolute: {rel!r}")
        root = self.root.resolve()
        path = Path(os.path.normpath(self.root / rel))
        real = path.resolve()
        if (path != self.root and self.root not in path.parents) or (
            real != root and root not in real.parents
        ):
            raise ToolError(f"memory path {rel!r} leaves the scope")
        return path

    def read_note(self, path: str) -> str:
        """Read a note of this node's workspace memory (a path relative to its folder)."""
        target = self.resolve(path)
        try:
            return target.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            have = ", ".join(self.names()) or "none yet"
            raise ToolError(f"no note {path!r} in memory (notes: {have})") from None
        except OSError as err:
            raise ToolError(f"memory_read {path!r}: {err.strerror or err}") from None

    def write_note(self, path: str, content: str) -> str:
        """Write a Markdown note to this node's workspace memory (replaces it; relative path)."""
        target = self.resolve(path)
        if target == self.root:
            raise ToolError("memory_write needs a file name")
        try:
            return self._write(path, target, content)
        except OSError as err:  # a folder where a file should be, a name too long …
            raise ToolError(f"memory_write {path!r}: {err.strerror or err}") from None

    def _write(self, path: str, target: Path, content: str) -> str:
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.resolve(path)  # again, now that its folders exist
        # whole or not at all: a reader (another branch) never sees half a note
        fd, temp = tempfile.mkstemp(prefix=".note-", dir=target.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(content)
            os.replace(temp, target)  # (replaces a link, never writes through it)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
        return f"wrote {len(content)} characters to memory note {path}"

    def list_notes(self, path: str = "") -> str:
        """List the notes in a folder of this node's workspace memory ("" for its top)."""
        folder = self.resolve(path)
        if not folder.is_dir():
            return "(empty)"
        names = sorted(p.name for p in folder.iterdir() if p.is_file())
        return "\n".join(str(Path(path) / n) if path else n for n in names) or "(empty)"

    def names(self) -> list[str]:
        """Every note, relative to the scope's folder, sorted (links that lead out left out)."""
        if not self.root.is_dir():
            return []
        found = []
        for path in self.root.rglob("*"):
            rel = str(path.relative_to(self.root))
            if path.is_file() and not path.name.startswith(".note-"):
                with contextlib.suppress(ToolError):
                    self.resolve(rel)
                    found.append(rel)
        return sorted(found)

    def tools(self, spec: m.Memory, readonly: bool = False) -> dict[str, Tool]:
        """The tools the node's ``read`` / ``write`` allow (a ``readonly`` node writes none)."""
        made: list[Tool] = []
        if spec.read:
            made.append(make_tool(self.read_note, "memory_read"))
            made.append(make_tool(self.list_notes, "memory_list"))
        if spec.write and not readonly:
            made.append(make_tool(self.write_note, "memory_write"))
        return {t.name: t for t in made}

    def prompt(self, spec: m.Memory) -> str:
        """The index of the notes, then the ``autoload`` files in full ("" when none).

        At most :data:`MAX_PROMPT_CHARS` of it: past that, a line says what was left out.
        """
        text = self._prompt(spec)
        if len(text) <= MAX_PROMPT_CHARS:
            return text
        left = len(text) - MAX_PROMPT_CHARS
        return (
            text[:MAX_PROMPT_CHARS]
            + f"\n[… {left} more characters of notes left out: read them with memory_read]"
        )

    def _prompt(self, spec: m.Memory) -> str:
        parts = []
        notes = [n for n in self.names() if n.lower().endswith(".md")]
        if notes:
            lines = [f"<workspace_memory_index scope_root={quoteattr(str(self.root))}>"]
            lines += [f"  {_index_line(n, self.root / n)}" for n in notes]
            lines.append("</workspace_memory_index>")
            parts.append("\n".join(lines))
        loaded = self._autoloaded(spec.autoload)
        if loaded:
            lines = [f"<workspace_memory scope_root={quoteattr(str(self.root))}>"]
            for rel, text in loaded:
                lines += [f"<file path={quoteattr(rel)}>", text, "</file>"]
            lines.append("</workspace_memory>")
            parts.append("\n".join(lines))
        return "\n\n".join(parts)

    def _autoloaded(self, patterns: tuple[str, ...]) -> list[tuple[str, str]]:
        seen: dict[str, str] = {}
        for pattern in patterns:
            if not pattern or Path(pattern).is_absolute() or ".." in Path(pattern).parts:
                continue
            for hit in sorted(self.root.glob(pattern)) if self.root.is_dir() else []:
                rel = str(hit.relative_to(self.root))
                try:
                    self.resolve(rel)  # a link that leads out is not autoloaded
                except ToolError:
                    continue
                if hit.is_file() and rel not in seen:
                    seen[rel] = hit.read_text(encoding="utf-8", errors="replace")
        return list(seen.items())


def _index_line(rel: str, path: Path) -> str:
    """``<file path=… title=… tags=…>description</file>`` from a note's head."""
    try:
        with path.open(encoding="utf-8", errors="replace") as note:
            head = note.read(_PEEK).splitlines()
    except OSError:
        head = []
    meta: dict[str, str] = {}
    if head and head[0].strip() == "---":
        for line in head[1:]:
            if line.strip() == "---":
                break
            key, sep, value = line.partition(":")
            if sep and key.strip() in ("title", "tags", "description"):
                meta[key.strip()] = value.strip().strip("\"'")
    else:
        heading = next((x.strip() for x in head[:30] if x.strip().startswith("# ")), "")
        if heading:
            meta["title"] = heading[2:].strip()
    attrs = f"path={quoteattr(rel)}"
    if meta.get("title"):
        attrs += f" title={quoteattr(meta['title'])}"
    if meta.get("tags"):
        tags = ",".join(t.strip() for t in meta["tags"].strip("[]").split(",") if t.strip())
        attrs += f" tags={quoteattr(tags)}"
    description = meta.get("description", "")
    return f"<file {attrs}>{description}</file>" if description else f"<file {attrs}/>"
