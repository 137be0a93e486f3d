"""Which ``model:`` strings each backend can serve, checked at compile time (C310).

The ir layer sits below the backends and must not import them, so the rule
is written down here, from what each backend does with the string:

- ``claw`` (the in-process loop) hands it, stripped, to its provider
  resolver: ``scripted`` or ``scripted/…`` answer from the scenario,
  ``anthropic/<model>`` and ``openai/<model>`` use the official SDKs, and
  anything else fails when the node runs ("unknown model").
- ``claude_code`` passes it unchanged to the ``claude`` CLI as ``--model``,
  which knows Claude model names (``claude-…``), its aliases (``default``,
  ``sonnet``, ``opus``, ``haiku``, ``opusplan``, each optionally with
  ``[1m]``) and Bedrock model ids and ARNs. It does not strip an
  ``anthropic/`` prefix, so ``anthropic/claude-…`` is not served there.

A model written as a template (``{{vars.model}}``) or through the
environment (``${MODEL}``) is only known when the run starts and is not
checked. ``tests/ir/test_models.py`` keeps the ``claw`` rule in step with the
provider resolver.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from iterion_nb.dsl.limits import shorten
from iterion_nb.ir.templates import Template, TextPart

if TYPE_CHECKING:
    from iterion_nb.ir.model import Edge, Workflow

_CLAW_FAMILIES = ("anthropic/", "openai/")
_CLAUDE_ALIAS = re.compile(r"(default|sonnet|opus|haiku|opusplan)(\[1m\])?\Z")
_CLAUDE_NAME = re.compile(r"claude-[A-Za-z0-9][A-Za-z0-9._@:\[\]-]*\Z")
_BEDROCK = re.compile(r"([a-z]{2,}\.)?anthropic\.claude-[A-Za-z0-9._:-]+\Z|arn:aws:bedrock:\S+\Z")


def static_text(model: Template) -> str | None:
    """The model's text when it is written out in full, else None (it is decided at run time)."""
    if not model.is_static:
        return None
    return "".join(part.text for part in model.parts if isinstance(part, TextPart))


def serves(backend: str, model: str) -> bool:
    """Whether ``backend`` can serve a node whose ``model:`` is ``model``."""
    if backend == "claw":
        name = model.strip() or "scripted"
        if name == "scripted" or name.startswith("scripted/"):
            return True
        return any(name.startswith(f) and len(name) > len(f) for f in _CLAW_FAMILIES)
    if backend == "claude_code":
        if not model:
            return True  # the CLI's own default model
        return bool(
            _CLAUDE_ALIAS.match(model) or _CLAUDE_NAME.match(model) or _BEDROCK.match(model)
        )
    return True  # a backend this module does not know: nothing to say


def unservable_message(backend: str, model: str) -> str:
    """What C310 says about ``model`` on ``backend``, with the likely fix."""
    model = shorten(model, 80)
    if backend == "claw":
        hint = "it serves scripted, anthropic/<model> and openai/<model>"
        if serves("claude_code", model):
            hint += f"; write 'anthropic/{model}', or set 'backend: claude_code'"
        return f"backend claw cannot serve model '{model}': {hint}"
    hint = "the claude CLI knows claude-… names and the aliases sonnet, opus and haiku"
    if model.startswith("anthropic/") and serves("claude_code", model[len("anthropic/") :]):
        hint += f"; write '{model[len('anthropic/') :]}' (the 'anthropic/' prefix is not stripped)"
    elif serves("claw", model):
        hint += "; this model is for backend claw"
    return f"backend claude_code cannot serve model '{model}': {hint}"


def sure_nodes(wf: Workflow) -> set[str]:
    """The nodes every run of ``wf`` reaches: from the entry, along edges that are always taken.

    An edge is always taken when it has no condition (nor ``else``) and its
    source has no other way out, or fans out to all of them.
    """
    out: dict[str, list[Edge]] = {}
    for edge in wf.edges:
        out.setdefault(edge.src, []).append(edge)
    sure, todo = {wf.entry}, [wf.entry]
    while todo:
        edges = out.get(todo.pop(), [])
        src = wf.nodes.get(edges[0].src) if edges else None
        fans = getattr(src, "mode", None) == "fan_out_all"
        for edge in edges:
            always = edge.condition is None and not edge.otherwise and not edge.loop
            if always and (fans or len(edges) == 1) and edge.dst not in sure:
                sure.add(edge.dst)
                todo.append(edge.dst)
    return sure


def scripted_nodes(wf: Workflow, backend: str | None = None) -> list[str]:
    """The agents and judges of ``wf`` that answer from a scenario (the scripted model).

    Those run on ``claw`` with ``model: "scripted"`` (or ``scripted/…``) or no
    model at all; a model decided at run time (a template) is not counted.
    ``backend`` is the one a run was launched with for nodes that name none
    (else the workflow's default). Without a scenario they fail when they
    run, so a launcher can say so first.
    """
    found = []
    for node in wf.nodes.values():
        if node.kind not in ("agent", "judge"):
            continue
        if (getattr(node, "backend", None) or backend or wf.default_backend) != "claw":
            continue
        template = getattr(node, "model", None)
        text = "" if template is None else static_text(template)
        if text is None:
            continue
        name = text.strip() or "scripted"
        if name == "scripted" or name.startswith("scripted/"):
            found.append(node.name)
    return found
