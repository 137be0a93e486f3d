"""Agent tools: Python functions registered with ``@iterion_nb.tool``, and built-ins.

::

    import iterion_nb as it

    @it.tool
    def word_count(text: str, unique: bool = False) -> int:
        \"\"\"Count the words of a text.\"\"\"
        words = text.split()
        return len(set(words)) if unique else len(words)

A workflow names the tools an agent may use (``tools: [word_count,
read_file]``). The input schema comes from the type hints (validated with
pydantic); the docstring's first paragraph is the description. A tool may be
a coroutine function. What it returns is sent to the model as text (JSON for
anything that is not a string).
"""

from __future__ import annotations

import inspect
import json
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pydantic

from iterion_nb.backends.providers.base import ToolSpec
from iterion_nb.ir.model import MCP_TOOL_PREFIX

F = TypeVar("F", bound=Callable[..., Any])

#: Tools registered with @tool, by name (the process-wide registry).
REGISTRY: dict[str, Tool] = {}


class ToolError(Exception):
    """A tool call that failed in a way the model should hear about and may recover from."""


@dataclass(frozen=True)
class ToolContext:
    """Where a tool runs: the run's working directory, and whether writes are allowed."""

    workdir: Path
    readonly: bool = False


@dataclass(frozen=True)
class Tool:
    """A callable the model may use."""

    name: str
    description: str
    fn: Callable[..., Any]
    model: type[pydantic.BaseModel]
    wants_context: bool = False

    @property
    def spec(self) -> ToolSpec:
        """How the model sees it."""
        schema = self.model.model_json_schema()
        schema.pop("title", None)
        return ToolSpec(self.name, self.description, schema)

    def _parse(self, arguments: Any) -> pydantic.BaseModel:
        try:
            return self.model.model_validate(arguments if arguments is not None else {})
        except pydantic.ValidationError as err:
            problems = "; ".join(_problem(e) for e in err.errors())
            raise ToolError(f"invalid input for {self.name}: {problems}") from None

    def input_problem(self, arguments: Any) -> str | None:
        """Why ``arguments`` are not a valid call (unknown or ill-typed ones named), or None."""
        try:
            self._parse(arguments)
        except ToolError as err:
            return str(err)
        return None

    async def run(self, arguments: Any, context: ToolContext) -> str:
        """Validate ``arguments`` and call the tool; ToolError explains a bad call."""
        parsed = self._parse(arguments)
        kwargs = {name: getattr(parsed, name) for name in type(parsed).model_fields}
        if self.wants_context:
            kwargs["context"] = context
        result = self.fn(**kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)


def _problem(error: Any) -> str:
    where = ".".join(str(p) for p in error["loc"]) or "input"
    if error["type"] == "extra_forbidden":
        return f"unknown argument '{where}'"
    return f"{where}: {error['msg']}"


def make_tool(
    fn: Callable[..., Any], name: str | None = None, description: str | None = None
) -> Tool:
    """Build a Tool from a function's signature, type hints and docstring."""
    hints = typing.get_type_hints(fn)
    fields: dict[str, Any] = {}
    wants_context = False
    for param in inspect.signature(fn).parameters.values():
        if param.name == "context" and hints.get("context") is ToolContext:
            wants_context = True
            continue
        annotation = hints.get(param.name, Any)
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, default)
    tool_name = name or fn.__name__
    # an argument the function does not take is an error the model hears, not ignored
    model = pydantic.create_model(
        f"{tool_name}_input", __config__=pydantic.ConfigDict(extra="forbid"), **fields
    )
    doc = inspect.getdoc(fn) or ""
    text = description or doc.split("\n\n")[0].replace("\n", " ").strip() or tool_name
    return Tool(tool_name, text, fn, model, wants_context)


def tool(fn: F | None = None, *, name: str | None = None, description: str | None = None) -> Any:
    """Register a function as an agent tool (usable as ``@tool`` or ``@tool(name=...)``)."""

    def register(func: F) -> F:
        made = make_tool(func, name, description)
        REGISTRY[made.name] = made
        return func

    return register(fn) if fn is not None else register


# -- built-ins -------------------------------------------------------------------
def _inside(context: ToolContext, path: str) -> Path:
    root = context.workdir.resolve()
    target = (root / path).resolve()
    if target != root and root not in target.parents:
        raise ToolError(f"'{path}' is outside the run's working directory")
    return target


def read_file(path: str, context: ToolContext) -> str:
    """Read a text file of the run's working directory."""
    target = _inside(context, path)
    if not target.is_file():
        raise ToolError(f"no file '{path}'")
    return target.read_text(encoding="utf-8", errors="replace")


def list_files(context: ToolContext, path: str = ".") -> list[str]:
    """List the files under a folder of the run's working directory."""
    root = context.workdir.resolve()
    target = _inside(context, path)
    if not target.is_dir():
        raise ToolError(f"no folder '{path}'")
    return sorted(str(p.relative_to(root)) for p in target.rglob("*") if p.is_file())[:1000]


def write_file(path: str, content: str, context: ToolContext) -> str:
    """Write a text file in the run's working directory (not for readonly agents)."""
    if context.readonly:
        raise ToolError("this agent is readonly: it cannot write files")
    target = _inside(context, path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content, encoding="utf-8")
    return f"wrote {len(content)} characters to {path}"


BUILTINS: dict[str, Tool] = {
    t.name: t for t in (make_tool(read_file), make_tool(list_files), make_tool(write_file))
}


def resolve_tools(names: tuple[str, ...], readonly: bool) -> dict[str, Tool]:
    """The tools a node names: built-ins and registered ones; KeyError names unknown ones.

    ``mcp.SERVER.TOOL`` names are left to :class:`~iterion_nb.backends.mcp.McpConnections`.
    """
    found: dict[str, Tool] = {}
    for name in names:
        if name.startswith(MCP_TOOL_PREFIX):
            continue  # an MCP server's tool: offered once its server is connected
        chosen = REGISTRY.get(name) or BUILTINS.get(name)
        if chosen is None:
            known = ", ".join(sorted({*REGISTRY, *BUILTINS}))
            raise KeyError(
                f"unknown tool '{name}' (known: {known}; a tool is a built-in, or a function"
                " registered with @iterion_nb.tool in the process that executes the run)"
            )
        if readonly and name == "write_file":
            continue
        found[name] = chosen
    return found
