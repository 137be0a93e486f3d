"""The typed syntax tree of a ``.iter`` source. Every node carries its span.

The tree says what was written, not whether it makes sense: node properties
stay a list of :class:`Property` here, and the ``ir`` layer checks them
against what each node kind accepts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from iterion_nb.dsl.source import Span
from iterion_nb.dsl.tokens import RawLine

NodeKeyword = Literal[
    "agent",
    "judge",
    "router",
    "human",
    "tool",
    "compute",
    "emit",
    "wait",
    "await_answers",
    "fail",
    "mcp_server",
    "cursor",
]
NODE_KEYWORDS: tuple[NodeKeyword, ...] = (
    "agent",
    "judge",
    "router",
    "human",
    "tool",
    "compute",
    "emit",
    "wait",
    "await_answers",
    "fail",
    "mcp_server",
    "cursor",
)


# -- values --------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class StringValue:
    """A double-quoted string, escapes decoded (or a backtick string, or a ``|`` block).

    ``lines`` is set for a ``|`` block: where each of its lines starts in the file.
    """

    text: str
    span: Span
    lines: tuple[RawLine, ...] = ()


@dataclass(frozen=True, slots=True)
class NumberValue:
    """A number as written (``3``, ``0.5``, or a bare duration such as ``30m``)."""

    text: str
    span: Span


@dataclass(frozen=True, slots=True)
class IdentValue:
    """A bare word: a name, ``true``/``false``, or an enumerated value."""

    name: str
    span: Span


@dataclass(frozen=True, slots=True)
class ListValue:
    """``[a, b, "c"]``."""

    items: tuple[Value, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class MapEntry:
    """``key: value`` inside braces."""

    key: str
    key_span: Span
    value: Value
    span: Span


@dataclass(frozen=True, slots=True)
class MapValue:
    """``{ key: value, ... }``."""

    entries: tuple[MapEntry, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class BlockValue:
    """An indented block of ``key: value`` lines under ``name:``."""

    entries: tuple[Property, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class CallValue:
    """``name(value, ...)``: a word applied to values, such as ``default("Formal")``."""

    name: str
    name_span: Span
    args: tuple[Value, ...]
    span: Span


Value = StringValue | NumberValue | IdentValue | ListValue | MapValue | BlockValue | CallValue


@dataclass(frozen=True, slots=True)
class Property:
    """``name: value`` inside a declaration."""

    name: str
    name_span: Span
    value: Value
    span: Span


# -- declarations ----------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TypeRef:
    """A type name, possibly a list (``string[]``)."""

    name: str
    is_list: bool
    span: Span


@dataclass(frozen=True, slots=True)
class VarDecl:
    """``name: type [= default]``."""

    name: str
    name_span: Span
    type: TypeRef
    default: Value | None
    span: Span


@dataclass(frozen=True, slots=True)
class VarsDecl:
    """A ``vars:`` block."""

    vars: tuple[VarDecl, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class PromptDecl:
    """``prompt NAME:`` and its text block."""

    name: str
    name_span: Span
    text: str
    lines: tuple[RawLine, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class FieldDecl:
    """A schema field: ``name: type [enum: "a", "b"]``."""

    name: str
    name_span: Span
    type: TypeRef
    enum: tuple[StringValue, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class SchemaDecl:
    """``schema NAME:`` and its fields."""

    name: str
    name_span: Span
    fields: tuple[FieldDecl, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class NodeDecl:
    """An agent, judge, router, human, tool, compute, emit, wait or await_answers."""

    kind: NodeKeyword
    name: str
    name_span: Span
    properties: tuple[Property, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class WhenField:
    """``when [not] field``."""

    field: str
    negated: bool
    span: Span


@dataclass(frozen=True, slots=True)
class WhenExpr:
    """``when "expression"``; ``text_span`` locates the expression's first character."""

    text: str
    text_span: Span
    span: Span


@dataclass(frozen=True, slots=True)
class LoopDecl:
    """``as name(N)`` on an edge (or ``as name("{{template}}")``, a bound read at run time)."""

    name: str
    name_span: Span
    bound: NumberValue | StringValue
    span: Span


@dataclass(frozen=True, slots=True)
class EdgeDecl:
    """``src -> dst [when ... | else] [as loop(N)] [with {...}]``."""

    src: str
    src_span: Span
    dst: str
    dst_span: Span
    when: WhenField | WhenExpr | None
    loop: LoopDecl | None
    with_: MapValue | None
    span: Span
    #: ``src -> dst else``: taken when no other edge of ``src`` is (upstream's syntax).
    otherwise: bool = False


@dataclass(frozen=True, slots=True)
class AttachmentDecl:
    """``NAME: file|image``, with an optional block: description, accept_mime, required."""

    name: str
    name_span: Span
    kind: str
    kind_span: Span
    properties: tuple[Property, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class AttachmentsDecl:
    """An ``attachments:`` block: files a person gives when a run starts."""

    items: tuple[AttachmentDecl, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class WorkflowDecl:
    """``workflow NAME:`` with its properties, variables and edges."""

    name: str
    name_span: Span
    properties: tuple[Property, ...]
    vars: tuple[VarsDecl, ...]
    edges: tuple[EdgeDecl, ...]
    span: Span
    attachments: tuple[AttachmentsDecl, ...] = ()


@dataclass(frozen=True, slots=True)
class PresetsDecl:
    """``presets:``: named sets of variable values, one of which a run may start with."""

    presets: tuple[Property, ...]
    span: Span


Declaration = (
    VarsDecl | PromptDecl | SchemaDecl | NodeDecl | WorkflowDecl | PresetsDecl | AttachmentsDecl
)


@dataclass(frozen=True, slots=True)
class Module:
    """A whole source file."""

    declarations: tuple[Declaration, ...]
    span: Span
    #: The language version a ``dsl: N`` header names (upstream iterion's), if any.
    dsl: int | None = None
