"""The compiler's entry points: text or bytes in, a validated workflow out."""

from __future__ import annotations

import contextlib
import gc
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from iterion_nb.dsl import parse_source
from iterion_nb.dsl.diagnostics import Diagnostic, Diagnostics
from iterion_nb.dsl.loading import check_text, decode_source
from iterion_nb.dsl.source import Source
from iterion_nb.errors import CompileError
from iterion_nb.ir import model as m
from iterion_nb.ir.build import Builder
from iterion_nb.ir.validate import validate


@dataclass(frozen=True)
class CompileResult:
    """What compiling produced: the workflow when there was no error, and every problem."""

    source: Source
    diagnostics: tuple[Diagnostic, ...]
    workflow: m.Workflow | None
    #: Problems found past the first :data:`MAX_DIAGNOSTICS` (counted, not kept): 0 when none.
    truncated: int = 0

    @property
    def ok(self) -> bool:
        """Whether compilation produced a workflow (warnings allowed)."""
        return self.workflow is not None


def source_hash(text: str) -> str:
    """The hash resume uses to notice that a workflow's source changed."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@contextlib.contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while compiling.

    A compile allocates several small objects per token (tokens, spans, syntax
    and IR nodes), none of them in a reference cycle, so the collector's
    passes over them are pure overhead that grows with the heap: measured on
    50,000 nodes it was half the compile time and made the time per KB grow
    with the size of the source. Reference counting still frees everything;
    the collector is switched back on (if it was on) when the compile ends.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def analyze(text: str | bytes, name: str = "<string>") -> CompileResult:
    """Compile and return every diagnostic; never raises for bad input."""
    with _cyclic_gc_paused():
        return _analyze(text, name)


def _analyze(text: str | bytes, name: str) -> CompileResult:
    diags = Diagnostics()
    if isinstance(text, bytes):
        source = decode_source(text, name, diags)
    else:
        source = check_text(text, name, diags)
    if source is None:
        return CompileResult(Source(name, ""), tuple(diags.sorted()), None, diags.truncated)
    module = parse_source(source, diags)
    if diags.full and diags.has_errors:
        # Nothing the later checks find could be shown (the list is at its
        # cap) and there is no workflow to build: garbage input stops here.
        return CompileResult(source, tuple(diags.sorted()), None, diags.truncated)
    draft = Builder(diags).build(module)
    validate(draft, diags)
    workflow = None
    if not diags.has_errors and draft.entry is not None:
        env = {name for t in draft.templates for name in t.template.env_names}
        env |= {name for p in draft.prompts.values() for name in p.template.env_names}
        for node in draft.nodes.values():
            model = getattr(node, "model", None)
            if model is not None:
                env |= set(model.env_names)
        workflow = m.Workflow(
            name=draft.name,
            entry=draft.entry,
            nodes=dict(draft.nodes),
            edges=tuple(draft.edges),
            loops=dict(draft.loops),
            vars=dict(draft.vars),
            schemas=dict(draft.schemas),
            prompts=dict(draft.prompts),
            budget=draft.budget,
            default_backend=draft.default_backend,
            source_name=name,
            source_hash=source_hash(source.text),
            env_names=tuple(sorted(env)),
            source=source.text,
            fails=dict(draft.fails),
            presets=dict(draft.presets),
            mcp_servers=dict(draft.mcp_servers),
            mcp_autoload=draft.mcp_autoload,
            mcp_disable=draft.mcp_disable,
            cursors=dict(draft.cursors),
            attachments=dict(draft.attachments),
        )
    return CompileResult(source, tuple(diags.sorted()), workflow, diags.truncated)


def compile_workflow(text: str | bytes, name: str = "<string>") -> m.Workflow:
    """Compile ``text``; raise :class:`CompileError` carrying every diagnostic.

    Raises:
        TypeError: ``text`` is not source text (a file's content: ``compile_file`` reads one).
    """
    if not isinstance(text, str | bytes):
        raise TypeError(
            f"compile takes a workflow's source text (str), not {type(text).__name__}"
            " (a file: it.compile_file(PATH))"
        )
    result = analyze(text, name)
    if result.workflow is None:
        raise CompileError(result.diagnostics, result.source, result.truncated)
    return result.workflow


#: How many stored sources :func:`compile_stored` keeps compiled.
STORED_CACHE_SIZE = 64
_stored: OrderedDict[str, m.Workflow] = OrderedDict()
_stored_lock = threading.Lock()


def compile_stored(text: str, name: str) -> m.Workflow:
    """:func:`compile_workflow` for a run's recorded source, compiled once a process.

    Runs resume from the source they recorded, and many runs share one: a
    cluster worker takes hundreds of runs of one workflow. A compiled workflow
    is frozen, so every run of the same source gets the same one (renamed
    ``name``); a source that fails to compile is compiled, and fails, each time.
    """
    with _stored_lock:
        found = _stored.get(text)
        if found is not None:
            _stored.move_to_end(text)
    if found is None:
        found = compile_workflow(text, name)
        with _stored_lock:
            _stored[text] = found
            while len(_stored) > STORED_CACHE_SIZE:
                _stored.popitem(last=False)
    return found if found.source_name == name else replace(found, source_name=name)


def compile_file(path: str | Path) -> m.Workflow:
    """Compile the file at ``path`` (diagnostics name it as given)."""
    return compile_workflow(Path(path).read_bytes(), str(path))
