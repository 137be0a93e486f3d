"""Checking ``{{...}}`` and expression references against the workflow."""

from __future__ import annotations

from iterion_nb.dsl.diagnostics import Diagnostics, did_you_mean
from iterion_nb.dsl.source import Span
from iterion_nb.ir import model as m
from iterion_nb.ir.build import Draft, ExprUse, TemplateUse
from iterion_nb.ir.evaluate import NAMESPACES
from iterion_nb.ir.expr import references

_LOOP_ATTRS = ("iteration", "max", "previous_output")
_RUN_ATTRS = ("id", "tokens", "cost_usd", "iterations", "elapsed_seconds")
_STRING = m.TypeSpec("string")

#: Output shapes of nodes that have no output schema.
_FIXED_OUTPUTS: dict[str, dict[str, m.TypeSpec]] = {
    "agent": {"text": _STRING},
    "judge": {"text": _STRING},
    "human": {"text": _STRING},
    "tool": {"stdout": _STRING, "stderr": _STRING, "exit_code": m.TypeSpec("int")},
    "await_answers": {"answers": m.TypeSpec("json", True)},
    "emit": {},
}

#: What a human node asking several people outputs (and, with a schema, adds to it).
_SEVERAL_ANSWERS = {"text": _STRING, "answers": m.TypeSpec("json", True)}


def output_fields(node: m.Node, schemas: dict[str, m.Schema]) -> dict[str, m.TypeSpec] | None:
    """The fields a node's output has, or None when they cannot be known.

    A human node that asks several people (``min_answers`` above 1) outputs
    the first answer's ``text`` and the list of ``answers``, whoever answered
    (with ``llm_or_human``, a model's answer is the one answer of the list).
    """
    schema_name = getattr(node, "output", None)
    if isinstance(node, m.HumanNode) and node.min_answers > 1 and node.interaction != "llm":
        return dict(_SEVERAL_ANSWERS)
    if isinstance(schema_name, str):
        schema = schemas.get(schema_name)
        if schema is None:
            return None
        return {f.name: f.type for f in schema.fields.values()}
    if isinstance(node, m.ComputeNode):
        return {e.field: m.TypeSpec("json") for e in node.exprs}
    return _FIXED_OUTPUTS.get(node.kind)


def input_fields(node: m.Node | None, schemas: dict[str, m.Schema]) -> set[str] | None:
    """The fields of a node's input schema, or None when it has none."""
    name = getattr(node, "input", None) if node is not None else None
    schema = schemas.get(name) if isinstance(name, str) else None
    return set(schema.fields) if schema else None


class RefChecker:
    """Validates references seen from a given node."""

    def __init__(self, draft: Draft, in_loop: set[str], diags: Diagnostics) -> None:
        self.d = draft
        self.diags = diags
        #: Nodes on a cycle through a loop edge (their outputs may be from an earlier round).
        self.in_loop = in_loop
        published = (getattr(n, "publish", None) for n in draft.nodes.values())
        self.artifacts: set[str] = {name for name in published if isinstance(name, str)}

    def check_templates(self, uses: list[TemplateUse]) -> None:
        """Check every reference of every template use."""
        for use in uses:
            for ref in use.template.refs:
                self.check(ref.path, ref.span, use.node)

    def check_prompts(self) -> None:
        """Check prompt templates as seen from every node that uses them."""
        for name, prompt in self.d.prompts.items():
            users: list[str | None] = list(self.d.prompt_users.get(name, [])) or [None]
            for node in users:
                for ref in prompt.template.refs:
                    self.check(ref.path, ref.span, node)

    def check_exprs(self, uses: list[ExprUse]) -> None:
        """Check the references of every expression."""
        for use in uses:
            base = use.text_span
            for ref in references(use.expr):
                span = Span(
                    base.line,
                    base.column + ref.offset,
                    base.line,
                    base.column + ref.offset + ref.length,
                )
                if ref.path[0] in NAMESPACES:
                    self.check(ref.path, span, use.node)
                else:
                    self._bare(ref.path[0], span, use)

    def _bare(self, name: str, span: Span, use: ExprUse) -> None:
        node = self.d.nodes.get(use.node or "")
        if node is None:
            return
        if use.bare == "output":
            fields = output_fields(node, self.d.schemas)
            if fields is not None and name not in fields:
                self.diags.add(
                    "C014",
                    f"condition refers to '{name}', which the output of"
                    f" '{node.name}' does not have",
                    span,
                )
            return
        inputs = input_fields(node, self.d.schemas)
        if inputs is not None and name not in inputs:
            self.diags.add(
                "C034", f"'{name}' is not a field of the input schema of '{node.name}'", span
            )
        elif inputs is None and getattr(node, "input", None) is None:  # (undeclared: C002)
            self.diags.add(
                "C034",
                f"'{name}' is not a namespace ({', '.join(NAMESPACES)})"
                f" and '{node.name}' has no input schema",
                span,
            )

    def check(self, path: tuple[str, ...], span: Span, node: str | None) -> None:
        """Check one dotted reference."""
        head = path[0]
        if head == "vars":
            self._vars(path, span)
        elif head == "input":
            self._input(path, span, node)
        elif head == "outputs":
            self._outputs(path, span)
        elif head == "artifacts":
            self._artifacts(path, span)
        elif head == "attachments":
            self._attachments(path, span)
        elif head == "loop":
            self._loop(path, span)
        elif head == "run":
            if len(path) != 2 or path[1] not in _RUN_ATTRS:
                hint = did_you_mean(path[1], _RUN_ATTRS) if len(path) > 1 else ""
                self._bad(
                    span,
                    f"'{'.'.join(path)}': the run namespace has {', '.join(_RUN_ATTRS)}{hint}",
                )
        else:
            hint = did_you_mean(head, NAMESPACES) or f"; expected {', '.join(NAMESPACES)}"
            self._bad(span, f"unknown namespace '{head}' in '{'.'.join(path)}'{hint}")

    def _bad(self, span: Span, message: str) -> None:
        self.diags.add("C004", message, span)

    def _vars(self, path: tuple[str, ...], span: Span) -> None:
        if len(path) < 2:
            self._bad(span, "'vars' needs a variable name, as in vars.topic")
        elif path[1] not in self.d.vars:
            hint = did_you_mean(path[1], self.d.vars)
            self.diags.add("C033", f"undeclared variable '{path[1]}'{hint}", span)

    def _input(self, path: tuple[str, ...], span: Span, node: str | None) -> None:
        if len(path) < 2 or node is None:
            return
        owner = self.d.nodes.get(node)
        fields = input_fields(owner, self.d.schemas)
        if fields is not None and path[1] not in fields:
            schema = getattr(owner, "input", "")
            hint = did_you_mean(path[1], fields)
            self.diags.add(
                "C034",
                f"'{path[1]}' is not a field of input schema '{schema}' of '{node}'{hint}",
                span,
            )

    def _outputs(self, path: tuple[str, ...], span: Span) -> None:
        if len(path) < 2:
            self._bad(span, "'outputs' needs a node name, as in outputs.review")
            return
        target = self.d.nodes.get(path[1])
        if target is None:
            hint = did_you_mean(path[1], self.d.nodes)
            self.diags.add("C029", f"'outputs.{path[1]}': no node is named '{path[1]}'{hint}", span)
            return
        if len(path) < 3:
            return
        field = path[2]
        if field in ("_session_id", "_session_fingerprint"):  # its conversation (inherit/fork)
            if not isinstance(target, m.AgentNode):
                self.diags.add(
                    "C031",
                    f"'outputs.{path[1]}.{field}': '{path[1]}' is a {target.kind} node;"
                    " only agents and judges hold a conversation",
                    span,
                )
            return
        if field == "history":
            if path[1] not in self.in_loop:
                self.diags.add(
                    "C017",
                    f"'outputs.{path[1]}.history': '{path[1]}' is not inside a declared loop",
                    span,
                )
            return
        fields = output_fields(target, self.d.schemas)
        if fields is not None and field not in fields:
            hint = did_you_mean(field, fields)
            self.diags.add("C031", f"the output of '{path[1]}' has no field '{field}'{hint}", span)

    def _artifacts(self, path: tuple[str, ...], span: Span) -> None:
        if len(path) < 2:
            self._bad(span, "'artifacts' needs an artifact name, as in artifacts.plan")
        elif path[1] not in self.artifacts:
            hint = did_you_mean(path[1], self.artifacts)
            self.diags.add(
                "C035", f"unknown artifact '{path[1]}': no node publishes it{hint}", span
            )

    def _attachments(self, path: tuple[str, ...], span: Span) -> None:
        if len(path) < 2:
            self._bad(span, "'attachments' needs an attachment name, as in attachments.spec")
            return
        if path[1] not in self.d.attachments:
            known = ", ".join(self.d.attachments) or "none"
            hint = did_you_mean(path[1], self.d.attachments)
            self.diags.add(
                "C053",
                f"unknown attachment '{path[1]}'{hint} (declared: {known})",
                span,
            )
        elif len(path) > 3 or (len(path) == 3 and path[2] not in m.ATTACHMENT_FIELDS):
            hint = did_you_mean(path[2], m.ATTACHMENT_FIELDS)
            self.diags.add(
                "C054",
                f"'{'.'.join(path)}': an attachment has {', '.join(m.ATTACHMENT_FIELDS)}{hint}",
                span,
            )

    def _loop(self, path: tuple[str, ...], span: Span) -> None:
        deeper = len(path) > 3 and path[2] == "previous_output"  # a field of that output
        if (len(path) != 3 and not deeper) or path[2] not in _LOOP_ATTRS:
            self._bad(
                span,
                "loop references look like loop.NAME.iteration, loop.NAME.max or"
                " loop.NAME.previous_output[.FIELD]",
            )
        elif path[1] not in self.d.loops:
            hint = did_you_mean(path[1], self.d.loops)
            self._bad(span, f"'{'.'.join(path)}': no loop is named '{path[1]}'{hint}")
