"""The compiled workflow (IR): plain frozen data the runtime executes.

Names of schemas, prompts and nodes are resolved and checked by the time an
IR exists; templates and expressions are parsed. Spans are kept so that the
runtime can point back at the source in its own errors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from iterion_nb.dsl.source import Span
from iterion_nb.ir.expr import Expr
from iterion_nb.ir.templates import Template

InteractionMode = Literal["none", "human", "llm", "llm_or_human", "async"]
AwaitMode = Literal["wait_all", "best_effort"]
SessionMode = Literal["fresh", "inherit", "fork", "inherit_if_available", "artifacts_only"]
#: The session modes, as upstream iterion names them.
SESSION_MODES: tuple[str, ...] = (
    "fresh", "inherit", "fork", "inherit_if_available", "artifacts_only",
)  # fmt: skip
#: The modes that continue another node's conversation.
CONTINUING = ("inherit", "fork", "inherit_if_available")
RouterMode = Literal["fan_out_all", "condition", "round_robin", "llm"]
NodeKind = Literal[
    "agent", "judge", "router", "human", "tool", "compute", "emit", "wait", "await_answers"
]

#: The built-in terminal nodes.
TERMINALS = ("done", "fail")
SCALAR_TYPES = ("string", "bool", "int", "float", "json")
BACKENDS = ("claw", "claude_code")
REASONING_EFFORTS = ("minimal", "low", "medium", "high", "xhigh", "max")


@dataclass(frozen=True, slots=True)
class TypeSpec:
    """A field or variable type: a scalar, or a list of one (``string[]``)."""

    name: str
    is_list: bool = False

    def __str__(self) -> str:
        return f"{self.name}[]" if self.is_list else self.name


@dataclass(frozen=True, slots=True)
class Var:
    """A run variable; ``default`` is only meaningful when ``has_default``."""

    name: str
    type: TypeSpec
    has_default: bool
    default: object
    span: Span


@dataclass(frozen=True, slots=True)
class Field:
    """A schema field."""

    name: str
    type: TypeSpec
    enum: tuple[str, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class Schema:
    """A typed record used as a node's input or output."""

    name: str
    fields: dict[str, Field]
    span: Span


@dataclass(frozen=True, slots=True)
class Prompt:
    """A named template text block."""

    name: str
    template: Template
    span: Span


@dataclass(frozen=True, slots=True)
class NodeBase:
    """What every node has: name, kind, span, and its join mode if it joins."""

    name: str
    span: Span
    await_mode: AwaitMode | None


@dataclass(frozen=True, slots=True)
class AgentNode(NodeBase):
    """An LLM node (``agent``) or an LLM judging node (``judge``)."""

    kind: Literal["agent", "judge"]
    model: Template | None = None
    backend: str | None = None
    input: str | None = None
    output: str | None = None
    publish: str | None = None
    system: Template | None = None
    user: Template | None = None
    tools: tuple[str, ...] = ()
    #: MCP servers (declared ``mcp_server``) whose tools this agent may call: once
    #: compiled, every active one (the workflow's ``mcp:`` unless ``inherit: false``,
    #: the node's, the servers its ``tools:`` name, less ``disable``).
    mcp: tuple[str, ...] = ()
    #: ``mcp: disable: [...]``: servers of the workflow this node does not use.
    mcp_disable: tuple[str, ...] = ()
    #: ``mcp: inherit: false``: the workflow's MCP servers are not this node's.
    mcp_inherit: bool = True
    tool_max_steps: int | None = None
    max_tokens: int | None = None
    reasoning_effort: str | None = None
    readonly: bool = False
    session: SessionMode = "fresh"
    interaction: InteractionMode = "none"
    #: ``cursors:``: each cursor's setting as written (a value name, a number, or
    #: ``${ENV}``); empty when absent or ``enabled: false``.
    cursors: tuple[tuple[str, str], ...] = ()
    #: ``memory:`` (enabled): the workspace memory this agent reads and writes.
    memory: Memory | None = None
    #: ``tool_policy:`` (the node's, else the workflow's): the tools it may call, as
    #: patterns (see :func:`tool_allowed`); None: no policy, every tool is allowed.
    tool_policy: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Memory:
    """``memory:``: a folder of Markdown notes that outlives runs (upstream's workspace memory).

    It lives outside the working tree, one ``scope`` per feature; the agent gets
    memory_read / memory_list (``read``) and memory_write (``write``), an index of
    the notes in its system prompt, and the ``autoload`` files (globs) in full.
    """

    scope: str
    autoload: tuple[str, ...] = ()
    read: bool = True
    write: bool = True


def mcp_tool_choice(tools: tuple[str, ...], server: str) -> frozenset[str] | None:
    """The tools of MCP server ``server`` that ``tools:`` names (``mcp.SERVER.TOOL``).

    None when it names none of them or ``mcp.SERVER.*``: then every tool of the
    server is offered.
    """
    prefix = f"{MCP_TOOL_PREFIX}{server}."
    chosen = {name.removeprefix(prefix) for name in tools if name.startswith(prefix)}
    if not chosen or "*" in chosen:
        return None
    return frozenset(chosen)


#: How ``tools:`` names an MCP server's tool: ``mcp.SERVER.TOOL`` (or ``mcp.SERVER.*``).
MCP_TOOL_PREFIX = "mcp."


def tool_allowed(policy: tuple[str, ...] | None, name: str) -> bool:
    """Whether ``tool_policy`` lets a node call the tool named ``name`` (as ``tools:`` names it).

    ``*`` allows every tool, ``foo.*`` those whose name starts with ``foo.``, any
    other pattern the tool of that exact name. No policy (None) allows all; an
    empty one, none.
    """
    if policy is None:
        return True
    for pattern in policy:
        if pattern == "*" or pattern == name:
            return True
        if pattern.endswith(".*") and name.startswith(pattern[:-1]):
            return True
    return False


@dataclass(frozen=True, slots=True)
class Cursor:
    """``cursor NAME:``: a framing dial; a setting picks a fragment for the system prompt.

    Either named ``values`` or numeric ``bands`` over [0, 1] (``lo``..``hi``, inclusive).
    """

    name: str
    span: Span
    description: str = ""
    values: tuple[tuple[str, str], ...] = ()
    bands: tuple[tuple[float, float, str], ...] = ()

    def fragment(self, setting: str) -> tuple[str | None, str]:
        """The fragment a setting picks, or None and why not (upstream's rules)."""
        try:
            number = float(setting.strip())
        except ValueError:
            number = None
        if number is not None and number == number:  # (not NaN)
            if not 0 <= number <= 1:
                return None, "numeric cursor values must lie in [0.0, 1.0]"
            for lo, hi, text in self.bands:
                if lo <= number <= hi:
                    return text, ""
            if self.bands or not self.values:
                return None, "no band covers this value"
            index = min(int(number * len(self.values)), len(self.values) - 1)
            return self.values[index][1], ""
        for name, text in self.values:
            if name == setting:
                return text, ""
        if self.bands:
            return None, "cursor expects a numeric value (it declares bands, not values)"
        return None, f"not one of {', '.join(n for n, _ in self.values)}"


@dataclass(frozen=True, slots=True)
class RouterNode(NodeBase):
    """A branching node."""

    mode: RouterMode
    kind: Literal["router"] = "router"
    model: Template | None = None
    #: The backend an ``llm`` router asks (else the workflow's default).
    backend: str | None = None
    system: Template | None = None
    user: Template | None = None
    multi: bool = False
    #: ``reasoning_effort`` of the model choosing (``mode: llm``): one of
    #: :data:`REASONING_EFFORTS`, or a ``${ENV}`` string read when the router runs.
    reasoning_effort: str | None = None


@dataclass(frozen=True, slots=True)
class OnExpire:
    """What a human gate does when its question expires unanswered.

    ``fail``: the node fails, naming the question. ``default``: ``answer``
    is taken as the person's answer (``answered_by`` stays empty; the
    ``interaction_expired`` event says what happened).
    """

    action: Literal["fail", "default"] = "fail"
    answer: object = None


@dataclass(frozen=True, slots=True)
class HumanNode(NodeBase):
    """A blocking human gate: the run pauses until it is answered (or its question expires)."""

    kind: Literal["human"] = "human"
    input: str | None = None
    output: str | None = None
    publish: str | None = None
    instructions: Template | None = None
    interaction: InteractionMode = "human"
    min_answers: int = 1
    model: Template | None = None
    #: The system prompt of the model answering on a person's behalf (interaction: llm…).
    system: Template | None = None
    #: Seconds a person has to answer before the question expires (None: forever).
    expires_in: float | None = None
    on_expire: OnExpire = field(default_factory=OnExpire)


@dataclass(frozen=True, slots=True)
class ToolNode(NodeBase):
    """A shell command (or a script in ``language``), no LLM."""

    command: Template
    kind: Literal["tool"] = "tool"
    input: str | None = None
    output: str | None = None
    publish: str | None = None
    timeout_seconds: float | None = None
    #: ``script:``: a program written to a file and run by ``language``'s interpreter
    #: (then ``command`` is empty).
    script: Template | None = None
    #: ``language:`` of the script (``sh`` when not given).
    language: str = "sh"


#: ``language:`` values of a tool's ``script:`` and the interpreter each runs.
SCRIPT_LANGUAGES = {
    "sh": "sh", "bash": "bash", "js": "node", "node": "node",
    "py": "python3", "python": "python3", "python3": "python3",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class ComputeExpr:
    """One ``field: "expression"`` line of a compute node."""

    field: str
    source: str
    expr: Expr
    span: Span


@dataclass(frozen=True, slots=True)
class ComputeNode(NodeBase):
    """Deterministic expressions, no LLM."""

    exprs: tuple[ComputeExpr, ...]
    kind: Literal["compute"] = "compute"
    input: str | None = None
    output: str | None = None
    publish: str | None = None


@dataclass(frozen=True, slots=True)
class EmitNode(NodeBase):
    """Publishes a sticky run-local event."""

    event: str
    kind: Literal["emit"] = "emit"
    payload: tuple[tuple[str, Template], ...] = ()


@dataclass(frozen=True, slots=True)
class WaitNode(NodeBase):
    """Parks its branch until an event fires, for at most ``timeout_seconds``."""

    event: str
    timeout_seconds: float
    kind: Literal["wait"] = "wait"
    output: str | None = None
    publish: str | None = None


@dataclass(frozen=True, slots=True)
class AwaitAnswersNode(NodeBase):
    """The deterministic sync point for async questions (ADR-081)."""

    timeout_seconds: float
    kind: Literal["await_answers"] = "await_answers"
    from_node: str | None = None


@dataclass(frozen=True, slots=True)
class McpServer:
    """``mcp_server NAME:``: a Model Context Protocol server whose tools agents may call.

    ``stdio``: started as ``command`` with ``args`` (by the node's backend);
    ``http``: reached at ``url`` (streamable HTTP).
    """

    name: str
    span: Span
    transport: Literal["stdio", "http"] = "stdio"
    command: str | None = None
    args: tuple[str, ...] = ()
    url: str | None = None


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file a person gives when a run starts (``attachments:``)."""

    name: str
    span: Span
    kind: Literal["file", "image"] = "file"
    description: str | None = None
    accept_mime: tuple[str, ...] = ()
    required: bool = False


#: What ``{{attachments.NAME.<field>}}`` may name (the bare reference is the path).
ATTACHMENT_FIELDS = ("path", "url", "mime", "size", "sha256")


@dataclass(frozen=True, slots=True)
class FailSpec:
    """A typed end: ``fail NAME:`` with a code, a message and whether a resume may retry.

    Reaching it ends the run like ``fail`` does, ``failed`` (or
    ``failed_resumable`` when ``resumable``), with ``[code] message`` as its error.
    """

    name: str
    span: Span
    code: str | None = None
    message: Template | None = None
    resumable: bool = False


Node = (
    AgentNode
    | RouterNode
    | HumanNode
    | ToolNode
    | ComputeNode
    | EmitNode
    | WaitNode
    | AwaitAnswersNode
)


@dataclass(frozen=True, slots=True)
class FieldCondition:
    """``when [not] field`` on the source node's output."""

    field: str
    negated: bool
    span: Span


@dataclass(frozen=True, slots=True)
class ExprCondition:
    """``when "expression"``; bare names are fields of the source's output."""

    source: str
    expr: Expr
    span: Span


Condition = FieldCondition | ExprCondition


@dataclass(frozen=True, slots=True)
class Edge:
    """A transition between nodes."""

    src: str
    dst: str
    condition: Condition | None
    loop: str | None
    mapping: tuple[tuple[str, Template], ...]
    span: Span
    #: An ``else`` edge: the fallback, taken when no other edge of ``src`` is.
    otherwise: bool = False


@dataclass(frozen=True, slots=True)
class Loop:
    """A declared loop: how many times its edges may be taken.

    With ``bound`` (upstream's ``as fix("{{outputs.plan.cap}}")``) the number is
    read from the run each time a loop edge is considered, and ``max_iterations``
    is unused.
    """

    name: str
    max_iterations: int
    span: Span
    bound: Template | None = None
    #: ``bound`` as written (for messages and the graph).
    bound_source: str = ""


@dataclass(frozen=True, slots=True)
class Budget:
    """Run-wide limits, shared across branches; ``None`` means unlimited."""

    max_parallel_branches: int | None = None
    max_duration_seconds: float | None = None
    max_cost_usd: float | None = None
    max_tokens: int | None = None
    max_iterations: int | None = None


@dataclass(frozen=True)
class Workflow:
    """A compiled, validated workflow."""

    name: str
    entry: str
    nodes: dict[str, Node]
    edges: tuple[Edge, ...]
    loops: dict[str, Loop]
    vars: dict[str, Var]
    schemas: dict[str, Schema]
    prompts: dict[str, Prompt]
    budget: Budget
    default_backend: str
    source_name: str
    source_hash: str
    env_names: tuple[str, ...] = ()
    source: str = field(default="", repr=False, compare=False)
    #: Typed ends (``fail NAME:``), by name: edges may lead to them like to ``fail``.
    fails: dict[str, FailSpec] = field(default_factory=dict)
    #: Named sets of variable values (``presets:``), chosen when a run starts.
    presets: dict[str, dict[str, object]] = field(default_factory=dict)
    #: MCP servers, by name.
    mcp_servers: dict[str, McpServer] = field(default_factory=dict)
    #: ``mcp: autoload_project: true``: the servers of the working directory's ``.mcp.json``
    #: join the workflow's (read when an agent runs), less ``mcp_disable``.
    mcp_autoload: bool = False
    #: The workflow's ``mcp: disable:`` (it may name a server of ``.mcp.json``).
    mcp_disable: tuple[str, ...] = ()
    #: Cursors (``cursor NAME:``), by name.
    cursors: dict[str, Cursor] = field(default_factory=dict)
    #: Files given at launch (``attachments:``), by name.
    attachments: dict[str, Attachment] = field(default_factory=dict)
    _out: dict[str, tuple[Edge, ...]] = field(default_factory=dict, repr=False, compare=False)
    _in: dict[str, tuple[Edge, ...]] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        out: dict[str, list[Edge]] = {}
        into: dict[str, list[Edge]] = {}
        for edge in self.edges:
            out.setdefault(edge.src, []).append(edge)
            into.setdefault(edge.dst, []).append(edge)
        self._out.update({k: tuple(v) for k, v in out.items()})
        self._in.update({k: tuple(v) for k, v in into.items()})

    def outgoing(self, node: str) -> tuple[Edge, ...]:
        """Edges leaving ``node``, in source order."""
        return self._out.get(node, ())

    def incoming(self, node: str) -> tuple[Edge, ...]:
        """Edges entering ``node``, in source order."""
        return self._in.get(node, ())
