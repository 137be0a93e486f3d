"""Build the IR from the syntax tree, checking each declaration on its own.

Graph-wide and cross-reference checks live in :mod:`iterion_nb.ir.validate`;
this module turns declarations into typed IR objects and records where each
template and expression is used so those checks know their context.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

from iterion_nb import safe_data
from iterion_nb.dsl import ast
from iterion_nb.dsl.diagnostics import Diagnostics, did_you_mean
from iterion_nb.dsl.limits import NumberTooLargeError, parse_decimal, parse_int, shorten
from iterion_nb.dsl.source import Span
from iterion_nb.ir import cursors as dials
from iterion_nb.ir import model as m
from iterion_nb.ir.expr import Expr, ExprSyntaxError, parse_expression
from iterion_nb.ir.expr import Literal as ExprLiteral
from iterion_nb.ir.properties import (
    ALLOWED,
    BUDGET_PROPERTIES,
    LLM_ROUTER_ONLY,
    WORKFLOW_PROPERTIES,
)
from iterion_nb.ir.templates import Template, TextPart, parse_lines, parse_template
from iterion_nb.ir.values import (
    ENV_REF,
    ValueReader,
    describe,
    literal,
    matches_type,
    string_template,
)

EMPTY = Template(())


#: Upstream's workflow properties this build does not implement: read, warned about (C363).
UNSUPPORTED_WORKFLOW_PROPERTIES = {
    "worktree": "a git worktree per run",
    "sandbox": "tools run in a container",
    "compaction": "long conversations are compacted",
}

#: Upstream's node properties this build does not implement: read, warned about (C363).
UNSUPPORTED_NODE_PROPERTIES = {
    "capabilities": ("its native task board's tools", ("agent", "judge")),
    "sandbox": ("a container per node", ("agent", "judge", "tool")),
    "compaction": ("compacting long conversations", ("agent", "judge")),
    "provider": (
        "which credentials reach a provider; here the model's prefix picks it",
        ("agent", "judge", "router"),
    ),
}

#: Upstream's registry of capabilities (``capabilities:`` entries it knows; C080 otherwise).
KNOWN_CAPABILITIES = (
    "board.read", "board.create", "board.move", "board.assign", "board.label", "board.close",
)  # fmt: skip
_CAPABILITY = re.compile(r"[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)?\Z")

#: A ``tool_policy`` entry: ``*``, a tool name (dotted for MCP tools), or ``prefix.*``.
_TOOL_PATTERN = re.compile(r"\*\Z|[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*(?:\.\*)?\Z")

#: An accept_mime entry: type/subtype, either part may be ``*``.
_MIME = re.compile(r"(\*|[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*)/(\*|[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*)")


@dataclass(frozen=True, slots=True)
class TemplateUse:
    """A template and the node whose ``input`` it sees (None: no node)."""

    template: Template
    node: str | None


@dataclass(frozen=True, slots=True)
class ExprUse:
    """An expression; bare names refer to ``bare_of``'s output or input."""

    expr: Expr
    text_span: Span
    node: str | None
    bare: Literal["output", "input"]


@dataclass
class Draft:
    """Everything built so far, valid or not, for the validation pass."""

    prompts: dict[str, m.Prompt] = field(default_factory=dict)
    schemas: dict[str, m.Schema] = field(default_factory=dict)
    vars: dict[str, m.Var] = field(default_factory=dict)
    #: Typed ends (``fail NAME:``).
    fails: dict[str, m.FailSpec] = field(default_factory=dict)
    #: ``attachments:`` (top level and the workflow's).
    attachments: dict[str, m.Attachment] = field(default_factory=dict)
    #: ``mcp_server NAME:`` declarations.
    mcp_servers: dict[str, m.McpServer] = field(default_factory=dict)
    #: ``cursor NAME:`` declarations, and every agent's settings of them (checked last).
    cursors: dict[str, m.Cursor] = field(default_factory=dict)
    cursor_uses: list[dials.CursorUse] = field(default_factory=list)
    rejected_cursors: set[str] = field(default_factory=set)
    #: The workflow's ``mcp:`` servers (less its ``disable``), which agents inherit.
    mcp_active: tuple[str, ...] = ()
    #: Where the workflow's ``mcp:`` names each server (for an unknown one's error).
    mcp_spans: dict[str, Span] = field(default_factory=dict)
    #: ``autoload_project: true``, and the workflow's ``disable:`` (see m.Workflow).
    mcp_autoload: bool = False
    mcp_disable: tuple[str, ...] = ()
    #: ``presets:``: variable values by preset name.
    presets: dict[str, dict[str, object]] = field(default_factory=dict)
    #: For each node, the fields the `with` mappings of its incoming edges build, by source.
    mapped_into: dict[str, dict[str, set[str]]] = field(default_factory=dict)
    nodes: dict[str, m.Node] = field(default_factory=dict)
    node_decls: dict[str, ast.NodeDecl] = field(default_factory=dict)
    prompt_users: dict[str, list[str]] = field(default_factory=dict)
    workflows: list[ast.WorkflowDecl] = field(default_factory=list)
    name: str = ""
    entry: str | None = None
    entry_span: Span | None = None
    budget: m.Budget = field(default_factory=m.Budget)
    default_backend: str = "claw"
    edges: list[m.Edge] = field(default_factory=list)
    loops: dict[str, m.Loop] = field(default_factory=dict)
    templates: list[TemplateUse] = field(default_factory=list)
    exprs: list[ExprUse] = field(default_factory=list)
    #: Where each ``with`` key of an edge is written: (edge span, key) -> span.
    key_spans: dict[tuple[Span, str], Span] = field(default_factory=dict)


class Builder:
    """Turns an :class:`ast.Module` into a :class:`Draft`."""

    def __init__(self, diags: Diagnostics) -> None:
        self.diags = diags
        self.read = ValueReader(diags)
        self.draft = Draft()
        #: Where each variable was declared: "top" (a module's vars:) or "workflow".
        self._var_level: dict[str, str] = {}

    def build(self, module: ast.Module) -> Draft:
        """Build every declaration of ``module``."""
        decls = module.declarations
        for decl in decls:
            if isinstance(decl, ast.PromptDecl):
                self._prompt(decl)
            elif isinstance(decl, ast.SchemaDecl):
                self._schema(decl)
            elif isinstance(decl, ast.VarsDecl):
                self._vars(decl, "top")
            elif isinstance(decl, ast.WorkflowDecl):
                self.draft.workflows.append(decl)
                for block in decl.vars:
                    self._vars(block, "workflow")
                for attachments in decl.attachments:
                    self._attachments(attachments)
            elif isinstance(decl, ast.AttachmentsDecl):
                self._attachments(decl)
        for decl in decls:
            if isinstance(decl, ast.NodeDecl):
                self._node(decl)
            elif isinstance(decl, ast.PresetsDecl):
                self._presets(decl)
        self._check_attachment_names()
        self._workflow(module)
        return self.draft

    # -- prompts, schemas, vars -------------------------------------------
    def _prompt(self, decl: ast.PromptDecl) -> None:
        if decl.name in self.draft.prompts:
            self._twice("prompt", decl.name, decl.name_span)
            return
        rows = [(line.text, line.line, line.column) for line in decl.lines]
        template = parse_lines(rows, self.diags)
        self.draft.prompts[decl.name] = m.Prompt(decl.name, template, decl.span)

    def _schema(self, decl: ast.SchemaDecl) -> None:
        if decl.name in self.draft.schemas:
            self._twice("schema", decl.name, decl.name_span)
            return
        fields: dict[str, m.Field] = {}
        for f in decl.fields:
            if f.name in fields:
                self._twice("field", f.name, f.name_span)
                continue
            spec = self.read.type_spec(f.type) or m.TypeSpec("json")
            if f.enum and (spec.name != "string"):
                self.diags.add(
                    "C352", f"enum values need a string field; '{f.name}' is {spec}", f.type.span
                )
            fields[f.name] = m.Field(f.name, spec, tuple(e.text for e in f.enum), f.span)
        self.draft.schemas[decl.name] = m.Schema(decl.name, fields, decl.span)

    def _vars(self, block: ast.VarsDecl, level: str) -> None:
        """Declare variables.

        A workflow's ``vars:`` may redeclare a top-level one: the two merge and
        the workflow's declaration wins (as upstream).
        """
        for var in block.vars:
            before = self._var_level.get(var.name)
            if before == level:
                self._twice("variable", var.name, var.name_span)
                continue
            if before == "workflow":  # a top-level one after the workflow's: the workflow's wins
                continue
            self._var_level[var.name] = level
            spec = self.read.type_spec(var.type) or m.TypeSpec("json")
            has_default, default = False, None
            if var.default is not None and not self.read.numbers_fit(var.default):
                pass  # C301 said why; a second "does not match its type" would not help
            elif var.default is not None:
                ok, data = literal(var.default)
                from_env = False  # read (and checked against the type) when a run starts
                if ok and isinstance(data, str) and spec.name != "string" and not spec.is_list:
                    ok, data = _coerce_env_default(data, spec)
                    from_env = ok
                if not ok or not (from_env or matches_type(data, spec)):
                    self.diags.add(
                        "C357",
                        f"default of '{var.name}' does not match its type {spec}",
                        var.default.span,
                    )
                else:
                    has_default, default = True, data
            self.draft.vars[var.name] = m.Var(var.name, spec, has_default, default, var.span)

    def _check_attachment_names(self) -> None:
        """C051: an attachment and a variable share the launch form: not their names."""
        for name, attachment in self.draft.attachments.items():
            if name in self.draft.vars:
                self.diags.add(
                    "C051",
                    f"attachment '{name}' has the name of a variable (they share the launch form)",
                    attachment.span,
                )

    def _attachments(self, decl: ast.AttachmentsDecl) -> None:
        """``attachments:``: ``NAME: file|image`` (description, accept_mime, required)."""
        for item in decl.items:
            if item.name in self.draft.attachments:
                self.diags.add(
                    "C050", f"attachment '{item.name}' is declared twice", item.name_span
                )
                continue
            if item.kind not in ("file", "image"):
                hint = did_you_mean(item.kind, ("file", "image"))
                self.diags.add(
                    "C354",
                    f"attachment '{item.name}' is a file or an image, not '{item.kind}'{hint}",
                    item.kind_span,
                )
            props = {p.name: p for p in item.properties}
            for prop in item.properties:
                if prop.name not in ("description", "accept_mime", "required"):
                    hint = did_you_mean(prop.name, ("description", "accept_mime", "required"))
                    self.diags.add(
                        "C350",
                        f"attachments have no property '{prop.name}'{hint} (allowed:"
                        " description, accept_mime, required)",
                        prop.name_span,
                    )
            accept = self.read.names(props["accept_mime"]) if "accept_mime" in props else ()
            for mime in accept or ():
                if not _MIME.fullmatch(mime):
                    self.diags.add(
                        "C052",
                        f"accept_mime entry '{mime}' of '{item.name}' is not type/subtype"
                        " (such as image/png, application/pdf, image/*)",
                        props["accept_mime"].value.span,
                    )
            description = props.get("description")
            required = props.get("required")
            self.draft.attachments[item.name] = m.Attachment(
                item.name, item.name_span,
                cast("Literal['file', 'image']", item.kind if item.kind == "image" else "file"),
                description=self.read.name(description) if description is not None else None,
                accept_mime=tuple(accept or ()),
                required=bool(self.read.boolean(required)) if required is not None else False,
            )  # fmt: skip

    def _presets(self, decl: ast.PresetsDecl) -> None:
        """``presets:``: each a block of ``var: value`` lines, for declared variables."""
        for preset in decl.presets:
            if preset.name in self.draft.presets:
                self.diags.add(
                    "C072", f"preset '{preset.name}' is declared twice", preset.name_span
                )
                continue
            if not isinstance(preset.value, ast.BlockValue):
                self.diags.add(
                    "C352",
                    f"preset '{preset.name}' expects an indented block of variable: value lines",
                    preset.value.span,
                )
                continue
            values: dict[str, object] = {}
            for entry in preset.value.entries:
                var = self.draft.vars.get(entry.name)
                if var is None:
                    hint = did_you_mean(entry.name, self.draft.vars)
                    self.diags.add(
                        "C070",
                        f"preset '{preset.name}' sets '{entry.name}', which is not a declared"
                        f" variable{hint}",
                        entry.name_span,
                    )
                    continue
                ok, value = literal(entry.value)
                if not ok or not matches_type(value, var.type):
                    self.diags.add(
                        "C071",
                        f"preset '{preset.name}': '{entry.name}' is {var.type}, not"
                        f" {describe(entry.value)}",
                        entry.value.span,
                    )
                    continue
                values[entry.name] = value
            self.draft.presets[preset.name] = values

    def _twice(self, what: str, name: str, span: Span) -> None:
        self.diags.add("C358", f"{what} '{name}' is declared twice", span)

    # -- nodes ---------------------------------------------------------------
    def _node(self, decl: ast.NodeDecl) -> None:
        if decl.kind == "cursor":  # cursors have names of their own
            dials.declare(
                decl, self._properties(decl), self.draft.cursors, self.read, self.diags,
                self.draft.rejected_cursors,
            )  # fmt: skip
            return
        if decl.name in m.TERMINALS:
            self.diags.add(
                "C042",
                f"'{decl.name}' is a built-in terminal and cannot name a node",
                decl.name_span,
            )
            return
        if decl.name in self.draft.nodes or decl.name in self.draft.fails:
            self.diags.add("C041", f"node '{decl.name}' is declared twice", decl.name_span)
            return
        if decl.kind == "mcp_server":
            self._mcp_server(decl)
            return
        props = self._properties(decl)
        if decl.kind == "fail":
            self.draft.fails[decl.name] = self._fail(decl, props)
            return
        builder = _NodeBuilder(self, decl, props)
        node = builder.build()
        self.draft.nodes[decl.name] = node
        self.draft.node_decls[decl.name] = decl

    def _mcp_server(self, decl: ast.NodeDecl) -> None:
        """``mcp_server NAME:`` (transport stdio with command [args], or http with url)."""
        if decl.name in self.draft.mcp_servers:
            self.diags.add("C024", f"MCP server '{decl.name}' is declared twice", decl.name_span)
            return
        props = self._properties(decl)
        transport = "stdio"
        if "transport" in props:
            transport = self.read.choice(props["transport"], ("stdio", "http"), "C025") or "stdio"
        command = self.read.name(props["command"]) if "command" in props else None
        args = self.read.names(props["args"]) if "args" in props else ()
        url = self.read.name(props["url"]) if "url" in props else None
        need = "command" if transport == "stdio" else "url"
        if (command if transport == "stdio" else url) is None:
            self.diags.add(
                "C025",
                f"MCP server '{decl.name}' ({transport}) needs '{need}:'",
                decl.name_span,
            )
        wrong = "url" if transport == "stdio" else "command"
        if wrong in props:
            self.diags.add(
                "C025",
                f"'{wrong}' does not apply to a {transport} MCP server",
                props[wrong].name_span,
            )
        self.draft.mcp_servers[decl.name] = m.McpServer(
            decl.name, decl.name_span, cast("Literal['stdio', 'http']", transport),
            command=command, args=tuple(args or ()), url=url,
        )  # fmt: skip

    def _fail(self, decl: ast.NodeDecl, props: dict[str, ast.Property]) -> m.FailSpec:
        """``fail NAME:``: a typed end (code, message template, resumable)."""
        code = props.get("code")
        message = props.get("message")
        resumable = props.get("resumable")
        template = self.read.template(message) if message is not None else None
        if template is not None:
            self.draft.templates.append(TemplateUse(template, None))
        return m.FailSpec(
            decl.name, decl.name_span,
            code=self.read.name(code) if code is not None else None,
            message=template,
            resumable=bool(self.read.boolean(resumable)) if resumable is not None else False,
        )  # fmt: skip

    def _properties(self, decl: ast.NodeDecl) -> dict[str, ast.Property]:
        allowed = ALLOWED[decl.kind]
        props: dict[str, ast.Property] = {}
        for prop in decl.properties:
            upstream = UNSUPPORTED_NODE_PROPERTIES.get(prop.name)
            if upstream is not None and decl.kind in upstream[1]:
                self._upstream_only(decl, prop, upstream[0])
                continue
            if prop.name not in allowed:
                self.diags.add(
                    "C350",
                    f"{decl.kind} nodes have no property '{prop.name}'"
                    f"{did_you_mean(prop.name, allowed)} (allowed: {', '.join(allowed)})",
                    prop.name_span,
                )
                continue
            if prop.name in props:
                self.diags.add("C351", f"'{prop.name}' is given twice", prop.name_span)
                continue
            props[prop.name] = prop
        return props

    def _upstream_only(self, decl: ast.NodeDecl, prop: ast.Property, what: str) -> None:
        """An upstream node property this build does not do: checked as upstream, else C363."""
        if prop.name == "capabilities" and self._capabilities(prop):
            return
        self.diags.add(
            "C363",
            f"'{prop.name}:' on {decl.kind} '{decl.name}' is upstream iterion's ({what});"
            " iterion_nb does not do it and ignores it",
            prop.name_span,
        )

    def _capabilities(self, prop: ast.Property) -> bool:
        """C081 for a malformed entry, C080 for one upstream's registry does not know."""
        found = False
        for name in self.read.names(prop) or ():
            if not _CAPABILITY.match(name):
                self.diags.add(
                    "C081",
                    f"malformed capability '{name}': expected a lowercase domain or"
                    " domain.action, such as board.create",
                    prop.value.span,
                )
                found = True
            elif name not in KNOWN_CAPABILITIES:
                self.diags.add(
                    "C080",
                    f"unknown capability '{name}'{did_you_mean(name, KNOWN_CAPABILITIES)}"
                    f" (known: {', '.join(KNOWN_CAPABILITIES)}; iterion_nb ignores"
                    " 'capabilities:')",
                    prop.value.span,
                )
                found = True
        return found

    def prompt_or_text(self, prop: ast.Property, node: str) -> Template | None:
        """A prompt name (looked up) or an inline quoted template."""
        value = prop.value
        if isinstance(value, ast.IdentValue):
            prompt = self.draft.prompts.get(value.name)
            if prompt is None:
                hint = did_you_mean(value.name, self.draft.prompts)
                self.diags.add("C003", f"unknown prompt '{value.name}'{hint}", value.span)
                return None
            self.draft.prompt_users.setdefault(value.name, []).append(node)
            return prompt.template
        template = self.read.template(prop)
        if template is not None:
            self.draft.templates.append(TemplateUse(template, node))
        return template

    def schema_ref(self, prop: ast.Property) -> str | None:
        """A schema name, which must be declared.

        An undeclared one (C002) is still returned: the node's fields are then
        unknown, so the checks of its fields say nothing more (as upstream), and
        no workflow is built from a draft with an error.
        """
        name = self.read.name(prop)
        if name is not None and name not in self.draft.schemas:
            hint = did_you_mean(name, self.draft.schemas)
            self.diags.add("C002", f"unknown schema '{name}'{hint}", prop.value.span)
        return name

    def expression(
        self, text: str, span: Span, node: str | None, bare: Literal["output", "input"]
    ) -> Expr | None:
        """Parse an expression located at ``span`` (its first character)."""
        try:
            expr = parse_expression(text)
        except ExprSyntaxError as err:
            where = Span.point(span.line, span.column + err.offset)
            message = (
                err.message if err.code != "C040" else f"expression does not parse: {err.message}"
            )
            self.diags.add(err.code, message, where)
            return None
        self.draft.exprs.append(ExprUse(expr, span, node, bare))
        return expr

    # -- workflow ------------------------------------------------------------
    def _workflow(self, module: ast.Module) -> None:
        workflows = self.draft.workflows
        if not workflows:
            self.diags.add(
                "C006", "no workflow: declare one with 'workflow NAME:'", Span.point(1, 1)
            )
            return
        for extra in workflows[1:]:
            self.diags.add(
                "C007",
                f"more than one workflow: '{extra.name}' follows '{workflows[0].name}';"
                " keep one per source",
                extra.name_span,
            )
        wf = workflows[0]
        self.draft.name = wf.name
        props = self._workflow_properties(wf)
        self._entry(wf, props.get("entry"))
        if "default_backend" in props:
            backend = self.read.choice(props["default_backend"], m.BACKENDS)
            self.draft.default_backend = backend or "claw"
        if "budget" in props:
            self.draft.budget = self._budget(props["budget"])
        if "mcp" in props:
            self._workflow_mcp(props["mcp"])
        if "interaction" in props:
            self._workflow_interaction(props["interaction"])
        if "tool_policy" in props:
            self._workflow_tool_policy(props["tool_policy"])
        self._check_answerers()
        for edge in wf.edges:
            self._edge(edge)

    def _workflow_properties(self, wf: ast.WorkflowDecl) -> dict[str, ast.Property]:
        """The workflow's properties by name; upstream's that it ignores are C363."""
        props: dict[str, ast.Property] = {}
        for prop in wf.properties:
            if prop.name in UNSUPPORTED_WORKFLOW_PROPERTIES:
                what = UNSUPPORTED_WORKFLOW_PROPERTIES[prop.name]
                self.diags.add(
                    "C363",
                    f"'{prop.name}:' is upstream iterion's ({what}); iterion_nb does not do it"
                    " and ignores it: the run works in its working directory, its tools run"
                    " unconfined",
                    prop.name_span,
                )
            elif prop.name == "capabilities":  # as on a node: checked, else C363
                if not self._capabilities(prop):
                    self.diags.add(
                        "C363",
                        f"'capabilities:' on workflow '{wf.name}' is upstream iterion's (its"
                        " native task board's tools, for agents and judges that set none);"
                        " iterion_nb does not do it and ignores it",
                        prop.name_span,
                    )
            elif prop.name not in WORKFLOW_PROPERTIES:
                self.diags.add(
                    "C350",
                    f"workflows have no property '{prop.name}' (allowed: vars,"
                    f" {', '.join(WORKFLOW_PROPERTIES)}, and edges)",
                    prop.name_span,
                )
            elif prop.name in props:
                self.diags.add("C351", f"'{prop.name}' is given twice", prop.name_span)
            else:
                props[prop.name] = prop
        return props

    def block_entries(
        self, block: ast.BlockValue, what: str, allowed: tuple[str, ...]
    ) -> dict[str, ast.Property]:
        """The entries of a ``what:`` block, by name (others get C350, repeats C351)."""
        found: dict[str, ast.Property] = {}
        for entry in block.entries:
            if entry.name not in allowed:
                self.diags.add(
                    "C350",
                    f"'{what}:' has no property '{entry.name}'{did_you_mean(entry.name, allowed)}"
                    f" (allowed: {', '.join(allowed)})",
                    entry.name_span,
                )
            elif entry.name in found:
                self.diags.add("C351", f"'{entry.name}' is given twice", entry.name_span)
            else:
                found[entry.name] = entry
        return found

    def _workflow_interaction(self, prop: ast.Property) -> None:
        """The workflow's ``interaction:``: the mode of nodes that set none (upstream's).

        It reaches agents, judges and human nodes (``async`` agents and judges only).
        """
        modes = ("none", "human", "llm", "llm_or_human", "async")
        mode = self.read.choice(prop, modes)
        if mode is None or mode == "none":
            return
        for name, node in list(self.draft.nodes.items()):
            decl = self.draft.node_decls.get(name)
            if decl is None or any(p.name == "interaction" for p in decl.properties):
                continue
            if isinstance(node, m.AgentNode) or (isinstance(node, m.HumanNode) and mode != "async"):
                self.draft.nodes[name] = replace(node, interaction=cast("m.InteractionMode", mode))

    def tool_policy(self, prop: ast.Property) -> tuple[str, ...] | None:
        """``tool_policy: [ref, ...]``: ``"*"``, ``foo.*`` or a tool name each (C364 otherwise)."""
        patterns = self.read.names(prop)
        for pattern in patterns or ():
            if not _TOOL_PATTERN.match(pattern):
                self.diags.add(
                    "C364",
                    f"tool_policy entry '{shorten(pattern)}' is not a tool name, 'prefix.*'"
                    ' or "*"',
                    prop.value.span,
                )
        return patterns

    def _workflow_tool_policy(self, prop: ast.Property) -> None:
        """The workflow's ``tool_policy``: that of every agent and judge that sets none."""
        policy = self.tool_policy(prop)
        if policy is None:
            return
        for name, node in list(self.draft.nodes.items()):
            if isinstance(node, m.AgentNode) and node.tool_policy is None:
                self.draft.nodes[name] = replace(node, tool_policy=policy)

    def _check_answerers(self) -> None:
        """C366: ``interaction_model`` / ``interaction_prompt`` where no model answers.

        Also C366: ``min_answers`` where only a model answers (``interaction: llm``).

        On a human node they serve ``interaction: llm`` and ``llm_or_human``. No
        model answers an agent's or a judge's questions here (upstream's delegated
        questions): there they are read and ignored (C363).
        """
        for name, decl in self.draft.node_decls.items():
            node = self.draft.nodes[name]
            if not isinstance(node, m.AgentNode | m.HumanNode):
                continue  # elsewhere the property itself is refused (C350)
            mode = getattr(node, "interaction", "none")
            for prop in decl.properties:
                if prop.name == "min_answers" and mode == "llm" and isinstance(node, m.HumanNode):
                    self.diags.add(
                        "C366",
                        f"'min_answers:' has no effect on human '{name}' with interaction:"
                        " llm: the model answers once and no person is asked (use"
                        " llm_or_human to ask people when the model gives no answer)",
                        prop.name_span,
                    )
                if prop.name not in ("interaction_model", "interaction_prompt"):
                    continue
                if isinstance(node, m.AgentNode) and mode in ("llm", "llm_or_human"):
                    self.diags.add(
                        "C363",
                        f"'{prop.name}:' on {decl.kind} '{name}' is upstream iterion's (the"
                        " model answering the questions it asks); iterion_nb does not have a"
                        " model answer an agent's questions and ignores it",
                        prop.name_span,
                    )
                elif mode not in ("llm", "llm_or_human"):
                    self.diags.add(
                        "C366",
                        f"'{prop.name}:' has no effect on {decl.kind} '{name}' with"
                        f" interaction: {mode}: it is for the model that answers with"
                        " interaction: llm or llm_or_human",
                        prop.name_span,
                    )

    def _workflow_mcp(self, prop: ast.Property) -> None:
        """The workflow's ``mcp:``: the servers every agent uses unless it says otherwise.

        ``servers`` less ``disable``; ``autoload_project: true`` adds the servers of
        the working directory's ``.mcp.json`` when an agent runs.
        """
        if not isinstance(prop.value, ast.BlockValue):
            self.draft.mcp_active = tuple(self.read.names(prop) or ())
            self.draft.mcp_spans = {name: prop.value.span for name in self.draft.mcp_active}
            return
        found = self.block_entries(prop.value, "mcp", ("servers", "disable", "autoload_project"))
        if "autoload_project" in found:
            self.draft.mcp_autoload = self.read.boolean(found["autoload_project"]) is True
        servers = tuple(self.read.names(found["servers"]) or ()) if "servers" in found else ()
        disable = tuple(self.read.names(found["disable"]) or ()) if "disable" in found else ()
        for name, entry in (*((n, found["servers"]) for n in servers),
                            *((n, found["disable"]) for n in disable)):  # fmt: skip
            self.draft.mcp_spans.setdefault(name, entry.value.span)
        self.draft.mcp_active = tuple(n for n in dict.fromkeys(servers) if n not in disable)
        self.draft.mcp_disable = disable

    def _entry(self, wf: ast.WorkflowDecl, prop: ast.Property | None) -> None:
        if prop is None:
            self.diags.add("C008", f"workflow '{wf.name}' has no 'entry:' node", wf.name_span)
            return
        name = self.read.name(prop)
        if name is None:
            return
        if name not in self.draft.nodes:
            hint = did_you_mean(name, self.draft.nodes)
            self.diags.add("C008", f"entry '{name}' is not a declared node{hint}", prop.value.span)
            return
        self.draft.entry, self.draft.entry_span = name, prop.value.span

    def _budget(self, prop: ast.Property) -> m.Budget:
        block = prop.value
        if not isinstance(block, ast.BlockValue):
            self.diags.add("C352", "'budget' expects an indented block of limits", block.span)
            return m.Budget()
        values: dict[str, float | int | None] = {}
        for entry in block.entries:
            name = entry.name
            if name not in BUDGET_PROPERTIES:
                self.diags.add(
                    "C350",
                    f"budgets have no limit '{name}' (allowed: {', '.join(BUDGET_PROPERTIES)})",
                    entry.name_span,
                )
            elif name == "max_duration":
                values[name] = self.read.duration(entry)
            elif name == "max_cost_usd":
                values[name] = self._cost(entry)
            else:
                values[name] = self.read.integer(entry, 1)
        return m.Budget(
            max_parallel_branches=cast("int | None", values.get("max_parallel_branches")),
            max_duration_seconds=values.get("max_duration"),
            max_cost_usd=values.get("max_cost_usd"),
            max_tokens=cast("int | None", values.get("max_tokens")),
            max_iterations=cast("int | None", values.get("max_iterations")),
        )

    def _cost(self, entry: ast.Property) -> float | None:
        value = entry.value
        text = value.text if isinstance(value, ast.NumberValue | ast.StringValue) else ""
        try:
            cost = float(parse_decimal(text.strip(), exponent=True))
        except NumberTooLargeError as err:
            self.diags.add("C301", f"'max_cost_usd': {err}", value.span)
            return None
        except ValueError:
            cost = -1.0
        if cost < 0:
            self.diags.add(
                "C046",
                "max_cost_usd must be a non-negative number of dollars,"
                f" found {shorten(text) or describe(value)}",
                value.span,
            )
            return None
        return cost

    def _edge(self, decl: ast.EdgeDecl) -> None:
        condition: m.Condition | None = None
        if isinstance(decl.when, ast.WhenField):
            condition = m.FieldCondition(decl.when.field, decl.when.negated, decl.when.span)
        elif isinstance(decl.when, ast.WhenExpr):
            expr = self.expression(decl.when.text, decl.when.text_span, decl.src, "output")
            # An expression that did not parse (already reported) keeps its
            # edge conditional, so that the routing checks do not add
            # "several unconditional edges" on top.
            placeholder = ExprLiteral(None, 0)
            condition = m.ExprCondition(decl.when.text, expr or placeholder, decl.when.span)
        loop = self._loop(decl.loop) if decl.loop else None
        mapping: list[tuple[str, Template]] = []
        if decl.with_ is not None:
            mapping = self.mapping(decl.with_, decl.src)
            for entry in decl.with_.entries:
                self.draft.key_spans[(decl.span, entry.key)] = entry.key_span
        self.draft.edges.append(
            m.Edge(decl.src, decl.dst, condition, loop, tuple(mapping), decl.span, decl.otherwise)
        )

    def mapping(self, value: ast.MapValue, node: str) -> list[tuple[str, Template]]:
        """``{ key: "template", ... }`` with templates seen from ``node``."""
        out: list[tuple[str, Template]] = []
        seen: set[str] = set()
        for entry in value.entries:
            if entry.key in seen:
                self.diags.add("C351", f"key '{entry.key}' is given twice", entry.key_span)
                continue
            seen.add(entry.key)
            if not isinstance(entry.value, ast.StringValue):
                self.diags.add(
                    "C352", f"'{entry.key}' expects a quoted template string", entry.value.span
                )
                continue
            template = string_template(entry.value, self.diags)
            self.draft.templates.append(TemplateUse(template, node))
            out.append((entry.key, template))
        return out

    def _loop(self, decl: ast.LoopDecl) -> str:
        if isinstance(decl.bound, ast.StringValue):
            return self._templated_loop(decl, decl.bound)
        text = decl.bound.text
        bound: int | None = None
        try:
            bound = parse_int(text)
        except NumberTooLargeError as err:
            self.diags.add("C301", f"loop '{decl.name}': {err}", decl.bound.span)
        except ValueError:
            self.diags.add(
                "C352", f"loop bound must be a whole number, found {shorten(text)}", decl.bound.span
            )
        if bound is None:
            pass
        elif bound < 1:
            self.diags.add(
                "C026",
                f"loop '{decl.name}' must allow at least 1 iteration, found {bound}",
                decl.bound.span,
            )
        known = self.draft.loops.get(decl.name)
        if known is None:
            self.draft.loops[decl.name] = m.Loop(decl.name, max(bound or 1, 1), decl.span)
        elif known.bound is not None and bound is not None:
            self._loop_declared_twice(decl, str(bound), known)
        elif bound is not None and bound >= 1 and known.max_iterations != bound:
            self.diags.add(
                "C005",
                f"loop '{decl.name}' is declared with bound {bound} here and"
                f" {known.max_iterations} at line {known.span.line}",
                decl.span,
            )
        return decl.name

    def _templated_loop(self, decl: ast.LoopDecl, value: ast.StringValue) -> str:
        """``as NAME("{{ref}}")``: a bound the run reads when a loop edge is considered."""
        template = string_template(value, self.diags)
        if template.is_static:
            self.diags.add(
                "C352",
                f"loop '{decl.name}': a quoted bound reads the run, such as"
                f' "{{{{outputs.plan.cap}}}}"; write a plain number otherwise',
                value.span,
            )
        self.draft.templates.append(TemplateUse(template, None))
        known = self.draft.loops.get(decl.name)
        if known is None:
            self.draft.loops[decl.name] = m.Loop(
                decl.name, 1, decl.span, bound=template, bound_source=value.text
            )
        elif known.bound is None or known.bound_source != value.text:
            self._loop_declared_twice(decl, f'"{value.text}"', known)
        return decl.name

    def _loop_declared_twice(self, decl: ast.LoopDecl, bound: str, known: m.Loop) -> None:
        self.diags.add(
            "C005",
            f"loop '{decl.name}' is declared with bound {bound} here and"
            f" {_bound_text(known)} at line {known.span.line}",
            decl.span,
        )


def _bound_text(loop: m.Loop) -> str:
    return f'"{loop.bound_source}"' if loop.bound is not None else str(loop.max_iterations)


def _coerce_env_default(text: str, spec: m.TypeSpec) -> tuple[bool, object]:
    """A quoted default of a non-string variable, such as ``"${N:-3}"``, is kept as text.

    Defaults that read the environment are resolved at run time; anything
    else quoted must match the type and does not.
    """
    if "${" not in text:
        return False, None
    refs = list(ENV_REF.finditer(text))
    if refs and all(ref.group(2) is not None for ref in refs):
        # every reference has a fallback: what the run reads with none set must fit the type
        fallback = ENV_REF.sub(lambda ref: ref.group(2), text)
        try:
            value = safe_data.loads(fallback, "the default")
        except safe_data.DataError:
            return False, None
        if not matches_type(value, spec):
            return False, None
    return True, text


class _NodeBuilder:
    """Builds one node from its checked properties."""

    def __init__(
        self, builder: Builder, decl: ast.NodeDecl, props: dict[str, ast.Property]
    ) -> None:
        self.b = builder
        self.decl = decl
        self.props = props
        self.read = builder.read
        self.diags = builder.diags

    def build(self) -> m.Node:
        kind = self.decl.kind
        if kind in ("agent", "judge"):
            return self._agent()
        method = getattr(self, f"_{kind}")
        return cast("m.Node", method())

    def _get(self, name: str) -> ast.Property | None:
        return self.props.get(name)

    def _base(self) -> tuple[str, Span, m.AwaitMode | None]:
        await_mode = None
        prop = self._get("await")
        if prop is not None:
            await_mode = self.read.choice(prop, ("wait_all", "best_effort"))
        return self.decl.name, self.decl.name_span, cast("m.AwaitMode | None", await_mode)

    def _opt(self, name: str, reader: str, *args: object) -> object:
        prop = self._get(name)
        if prop is None:
            return None
        return getattr(self.read, reader)(prop, *args)

    def _schema(self, name: str) -> str | None:
        prop = self._get(name)
        return self.b.schema_ref(prop) if prop else None

    def _text(self, name: str) -> Template | None:
        prop = self._get(name)
        return self.b.prompt_or_text(prop, self.decl.name) if prop else None

    def _template(self, name: str) -> Template | None:
        prop = self._get(name)
        return self.read.template(prop) if prop else None

    def _effort(self) -> str | None:
        """``reasoning_effort``: one of the levels, or a ``${ENV}`` string (read when it runs)."""
        prop = self._get("reasoning_effort")
        if prop is not None and isinstance(prop.value, ast.StringValue) and "${" in prop.value.text:
            return prop.value.text
        return cast("str | None", self._opt("reasoning_effort", "choice", m.REASONING_EFFORTS,
                                            "C027"))  # fmt: skip

    def _tool_policy(self) -> tuple[str, ...] | None:
        prop = self._get("tool_policy")
        return self.b.tool_policy(prop) if prop is not None else None

    def _interaction_answerer(self) -> tuple[Template | None, Template | None]:
        """``interaction_model`` and ``interaction_prompt``, checked (an unknown prompt: C003)."""
        return self._template("interaction_model"), self._text("interaction_prompt")

    def _agent(self) -> m.AgentNode:
        interaction = self._opt(
            "interaction", "choice", ("none", "human", "llm", "llm_or_human", "async")
        )
        effort = self._effort()
        self._interaction_answerer()  # no model answers an agent's questions here (see build)
        return m.AgentNode(
            *self._base(),
            kind=cast("Literal['agent', 'judge']", self.decl.kind),
            model=self._template("model"),
            backend=cast("str | None", self._opt("backend", "choice", m.BACKENDS)),
            input=self._schema("input"),
            output=self._schema("output"),
            publish=cast("str | None", self._opt("publish", "name")),
            system=self._text("system"),
            user=self._text("user"),
            tools=cast("tuple[str, ...]", self._opt("tools", "names") or ()),
            **self._mcp_fields(),
            cursors=self._cursors(),
            memory=self._memory(),
            tool_max_steps=cast("int | None", self._opt("tool_max_steps", "integer", 1)),
            max_tokens=cast("int | None", self._opt("max_tokens", "integer", 1)),
            reasoning_effort=effort,
            readonly=bool(self._opt("readonly", "boolean")),
            session=cast(
                "m.SessionMode",
                self._opt("session", "choice", m.SESSION_MODES) or "fresh",
            ),
            interaction=cast("m.InteractionMode", interaction or "none"),
            tool_policy=self._tool_policy(),
        )

    def _router(self) -> m.RouterNode:
        mode_prop = self._get("mode")
        mode = None
        if mode_prop is None:
            self.diags.add(
                "C353",
                f"router '{self.decl.name}' needs 'mode:' (fan_out_all, condition,"
                " round_robin or llm)",
                self.decl.name_span,
            )
        else:
            mode = self.read.choice(mode_prop, ("fan_out_all", "condition", "round_robin", "llm"))
        if mode is not None and mode != "llm":
            for name in LLM_ROUTER_ONLY:
                prop = self._get(name)
                if prop is not None:
                    self.diags.add(
                        "C023",
                        f"'{name}' only applies to routers with 'mode: llm'; this one is {mode}",
                        prop.name_span,
                    )
        return m.RouterNode(
            *self._base(),
            mode=cast("m.RouterMode", mode or "fan_out_all"),
            model=self._template("model"),
            backend=cast("str | None", self._opt("backend", "choice", m.BACKENDS)),
            system=self._text("system"),
            user=self._text("user"),
            multi=bool(self._opt("multi", "boolean")),
            reasoning_effort=self._effort(),
        )

    def _human(self) -> m.HumanNode:
        interaction: object = "human"
        prop = self._get("interaction")
        if prop is not None:
            word = self.read.name(prop)
            if word == "async":
                self.diags.add(
                    "C240",
                    "interaction: async is for agents and judges; a human node is"
                    " already a question to a person (use human, llm or llm_or_human)",
                    prop.value.span,
                )
            elif word is not None:
                interaction = self.read.choice(prop, ("human", "llm", "llm_or_human")) or "human"
        # upstream's interaction_model / interaction_prompt: the model answering for the
        # person and its system prompt, over model / system
        answer_model, answer_prompt = self._interaction_answerer()
        model, system = self._template("model"), self._text("system")
        return m.HumanNode(
            *self._base(),
            input=self._schema("input"),
            output=self._schema("output"),
            publish=cast("str | None", self._opt("publish", "name")),
            instructions=self._text("instructions"),
            interaction=cast("m.InteractionMode", interaction),
            min_answers=cast("int", self._opt("min_answers", "integer", 1) or 1),
            model=answer_model or model,
            system=answer_prompt or system,
            expires_in=self._expires_in(),
            on_expire=self._on_expire(),
        )

    def _memory(self) -> m.Memory | None:
        """``memory:`` (upstream's block): None unless ``enabled: true``; C048 without a scope."""
        prop = self._get("memory")
        if prop is None:
            return None
        if not isinstance(prop.value, ast.BlockValue):
            self.diags.add("C352", "'memory' expects an indented block (enabled: true, scope: …)",
                           prop.value.span)  # fmt: skip
            return None
        found = self.b.block_entries(
            prop.value, "memory", ("enabled", "scope", "autoload", "read", "write",
                                   "pre_compact_inject"),
        )  # fmt: skip
        flag = {k: bool(self.read.boolean(found[k])) for k in ("enabled", "read", "write",
                "pre_compact_inject") if k in found}  # fmt: skip
        if not flag.get("enabled"):
            return None
        scope = self.read.name(found["scope"]) if "scope" in found else None
        if not scope or scope in (".", "..") or "/" in scope or "\\" in scope:
            self.diags.add(
                "C048",
                "'memory:' needs 'scope: NAME', one folder name (the notes live in it)"
                + (f"; found {scope!r}" if scope else ""),
                found["scope"].value.span if "scope" in found else prop.name_span,
            )
            return None
        autoload = tuple(self.read.names(found["autoload"]) or ()) if "autoload" in found else ()
        return m.Memory(scope, autoload, flag.get("read", True), flag.get("write", True))

    def _cursors(self) -> tuple[tuple[str, str], ...]:
        prop = self._get("cursors")
        if prop is None:
            return ()
        chosen, uses = dials.settings(self.decl.name, prop, self.read, self.diags)
        self.b.draft.cursor_uses.extend(uses)
        return chosen

    def _mcp_fields(self) -> dict[str, Any]:
        servers, disable, inherit = self._mcp_config()
        return {"mcp": servers, "mcp_disable": disable, "mcp_inherit": inherit}

    def _mcp_config(self) -> tuple[tuple[str, ...], tuple[str, ...], bool]:
        """``mcp: [a, b]``, or upstream's block: ``servers``, ``disable``, ``inherit``."""
        prop = self._get("mcp")
        if prop is None:
            return (), (), True
        if not isinstance(prop.value, ast.BlockValue):
            return tuple(self.read.names(prop) or ()), (), True
        found = self.b.block_entries(prop.value, "mcp", ("servers", "disable", "inherit"))
        inherit = found.get("inherit")
        return (
            tuple(self.read.names(found["servers"]) or ()) if "servers" in found else (),
            tuple(self.read.names(found["disable"]) or ()) if "disable" in found else (),
            bool(self.read.boolean(inherit)) if inherit is not None else True,
        )

    def _expires_in(self) -> float | None:
        prop = self._get("expires_in")
        seconds = cast("float | None", self._opt("expires_in", "duration"))
        if prop is not None and seconds is not None and seconds <= 0:
            self.diags.add("C361", "'expires_in' must be a positive duration", prop.value.span)
            return None
        return seconds

    def _on_expire(self) -> m.OnExpire:
        """``on_expire: fail`` or ``on_expire: default(<answer>)``; only with ``expires_in``."""
        prop = self._get("on_expire")
        if prop is None:
            return m.OnExpire()
        if self._get("expires_in") is None:
            self.diags.add(
                "C361",
                f"'on_expire' on human '{self.decl.name}' needs 'expires_in:' (a question"
                " that never expires never gets there)",
                prop.name_span,
            )
        value = prop.value
        if isinstance(value, ast.IdentValue) and value.name == "fail":
            return m.OnExpire("fail")
        if isinstance(value, ast.CallValue) and value.name == "default" and len(value.args) == 1:
            ok, answer = literal(value.args[0])
            if ok:
                return m.OnExpire("default", answer)
            self.diags.add(
                "C352",
                "default(...) takes a plain answer: a string, number, true/false, or a"
                " list or map of those",
                value.args[0].span,
            )
            return m.OnExpire("fail")
        self.diags.add(
            "C354",
            f"'on_expire' must be fail or default(<answer>); found {describe(value)}",
            value.span,
        )
        return m.OnExpire("fail")

    def _tool(self) -> m.ToolNode:
        """``command:`` (a shell line), or ``script:`` run by ``language:`` (upstream's)."""
        command_prop, script_prop = self._get("command"), self._get("script")
        language_prop = self._get("language")
        command = self._template("command")
        script = self._script(script_prop) if script_prop is not None else None
        if command_prop is None and script_prop is None:
            self.diags.add(
                "C353", f"tool '{self.decl.name}' needs 'command:' or 'script:'",
                self.decl.name_span,
            )  # fmt: skip
        elif command_prop is not None and script_prop is not None:
            self.diags.add(
                "C351", f"tool '{self.decl.name}' has both 'command:' and 'script:'; keep one",
                script_prop.name_span,
            )  # fmt: skip
        if language_prop is not None and script_prop is None:
            self.diags.add(
                "C354", "'language:' only applies to a tool with 'script:'",
                language_prop.name_span,
            )  # fmt: skip
        language = self._opt("language", "choice", tuple(m.SCRIPT_LANGUAGES))
        for template in (command, script):
            if template is not None:
                self.b.draft.templates.append(TemplateUse(template, self.decl.name))
        return m.ToolNode(
            *self._base(),
            command=command or EMPTY,
            input=self._schema("input"),
            output=self._schema("output"),
            publish=cast("str | None", self._opt("publish", "name")),
            timeout_seconds=cast("float | None", self._opt("timeout", "duration")),
            script=script,
            language=cast("str", language or "sh"),
        )

    def _script(self, prop: ast.Property) -> Template | None:
        """A script's text as a template where ``${x.y}`` (not an env name) is text."""
        value = prop.value
        if not isinstance(value, ast.StringValue):
            self.read.template(prop)  # says what is wrong
            return None
        if value.lines:
            rows = [(r.text, r.line, r.column) for r in value.lines]
            return Template((*parse_lines(rows, self.diags, script=True).parts, TextPart("\n")))
        column = value.span.column + 1
        return parse_template(value.text, value.span.line, column, self.diags, script=True)

    def _compute(self) -> m.ComputeNode:
        exprs: list[m.ComputeExpr] = []
        prop = self._get("expr")
        if prop is not None and not isinstance(prop.value, ast.BlockValue):
            self.diags.add(
                "C352",
                "'expr' expects an indented block of field: \"expression\" lines",
                prop.value.span,
            )
        elif prop is not None and isinstance(prop.value, ast.BlockValue):
            exprs = self._compute_lines(prop.value)
        no_lines = prop is None or (
            isinstance(prop.value, ast.BlockValue) and not prop.value.entries
        )
        if no_lines:
            self.diags.add(
                "C039",
                f"compute '{self.decl.name}' has no expressions: add an 'expr:' block",
                self.decl.name_span,
            )
        return m.ComputeNode(
            *self._base(),
            exprs=tuple(exprs),
            input=self._schema("input"),
            output=self._schema("output"),
            publish=cast("str | None", self._opt("publish", "name")),
        )

    def _compute_lines(self, block: ast.BlockValue) -> list[m.ComputeExpr]:
        out: list[m.ComputeExpr] = []
        seen: set[str] = set()
        for line in block.entries:
            if line.name in seen:
                self.diags.add("C351", f"'{line.name}' is computed twice", line.name_span)
                continue
            seen.add(line.name)
            value = line.value
            if not isinstance(value, ast.StringValue):
                self.diags.add("C352", f"'{line.name}' expects a quoted expression", value.span)
                continue
            start = Span.point(value.span.line, value.span.column + 1)
            expr = self.b.expression(value.text, start, self.decl.name, "input")
            if expr is not None:
                out.append(m.ComputeExpr(line.name, value.text, expr, line.span))
        return out

    def _event(self) -> str:
        prop = self._get("event")
        if prop is None:
            self.diags.add(
                "C196",
                f"{self.decl.kind} '{self.decl.name}' needs 'event:' naming the event",
                self.decl.name_span,
            )
            return ""
        return self.read.name(prop) or ""

    def _emit(self) -> m.EmitNode:
        payload: list[tuple[str, Template]] = []
        prop = self._get("with")
        if prop is not None:
            if isinstance(prop.value, ast.MapValue):
                payload = self.b.mapping(prop.value, self.decl.name)
            else:
                self.diags.add("C352", "'with' expects { key: \"template\", ... }", prop.value.span)
        return m.EmitNode(*self._base(), event=self._event(), payload=tuple(payload))

    def _timeout(self, code: str, example: str) -> float:
        """A mandatory, positive ``timeout:`` (0.0 after reporting ``code``)."""
        kind, name = self.decl.kind, self.decl.name
        prop = self._get("timeout")
        if prop is None:
            self.diags.add(
                code,
                f"{kind} '{name}' needs a positive 'timeout:' such as {example};"
                " it must never block forever",
                self.decl.name_span,
            )
            return 0.0
        timeout = self.read.duration(prop)
        if timeout is not None and timeout <= 0:
            self.diags.add(
                code,
                f"{kind} '{name}' needs a positive timeout, found {timeout:g}s",
                prop.value.span,
            )
        return timeout or 0.0

    def _wait(self) -> m.WaitNode:
        return m.WaitNode(
            *self._base(),
            event=self._event(),
            timeout_seconds=self._timeout("C197", '"10m"'),
            output=self._schema("output"),
            publish=cast("str | None", self._opt("publish", "name")),
        )

    def _await_answers(self) -> m.AwaitAnswersNode:
        timeout = self._timeout("C241", '"30m"')
        from_prop = self._get("from")
        return m.AwaitAnswersNode(
            *self._base(),
            timeout_seconds=timeout,
            from_node=self.read.name(from_prop) if from_prop else None,
        )
