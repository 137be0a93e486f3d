"""Graph-wide checks of a built workflow: edges, routing, loops, cycles, reach."""

from __future__ import annotations

from collections import deque

from iterion_nb.dsl.diagnostics import Diagnostics, did_you_mean
from iterion_nb.ir import model as m
from iterion_nb.ir.build import Draft
from iterion_nb.ir.cursors import check_uses
from iterion_nb.ir.joins import check_joins
from iterion_nb.ir.mcp_use import resolve_mcp
from iterion_nb.ir.models import serves, static_text, unservable_message
from iterion_nb.ir.refs import RefChecker, input_fields, output_fields


def validate(draft: Draft, diags: Diagnostics) -> None:
    """Run every whole-workflow check, adding problems to ``diags``."""
    edges = _known_edges(draft, diags)
    _check_routing(draft, edges, diags)
    in_loop = _loop_members(draft, edges)
    _check_cycles(draft, edges, diags)
    _check_reach(draft, edges, diags)
    _check_joins(draft, edges, diags)
    _check_nodes(draft, diags)
    resolve_mcp(draft, diags)
    check_uses(draft.cursor_uses, draft.cursors, diags, draft.rejected_cursors)
    _check_mappings(draft, edges, diags)
    refs = RefChecker(draft, in_loop, diags)
    refs.check_prompts()
    refs.check_templates(draft.templates)
    refs.check_exprs(draft.exprs)


def _known_edges(draft: Draft, diags: Diagnostics) -> list[m.Edge]:
    """Edges whose two ends exist; the others get C001."""
    good: list[m.Edge] = []
    for edge in draft.edges:
        ok = True
        if edge.src in m.TERMINALS or edge.src in draft.fails:
            diags.add(
                "C001", f"'{edge.src}' is a terminal and cannot have outgoing edges", edge.span
            )
            ok = False
        elif edge.src not in draft.nodes:
            hint = did_you_mean(edge.src, draft.nodes)
            diags.add("C001", f"unknown node '{edge.src}' in edge{hint}", edge.span)
            ok = False
        if edge.dst not in draft.nodes and edge.dst not in m.TERMINALS + tuple(draft.fails):
            hint = did_you_mean(edge.dst, [*draft.nodes, *m.TERMINALS, *draft.fails])
            diags.add("C001", f"unknown node '{edge.dst}' in edge{hint}", edge.span)
            ok = False
        if ok:
            good.append(edge)
    return good


def _by_source(edges: list[m.Edge]) -> dict[str, list[m.Edge]]:
    out: dict[str, list[m.Edge]] = {}
    for edge in edges:
        out.setdefault(edge.src, []).append(edge)
    return out


def _check_routing(draft: Draft, edges: list[m.Edge], diags: Diagnostics) -> None:
    # What feeds each node, once: a router's field conditions test its
    # predecessors' outputs (scanning every edge per condition was quadratic).
    feeders: dict[str, list[m.Node]] = {}
    for edge in draft.edges:
        if edge.src in draft.nodes:
            feeders.setdefault(edge.dst, []).append(draft.nodes[edge.src])
        if edge.mapping:
            keys = draft.mapped_into.setdefault(edge.dst, {}).setdefault(edge.src, set())
            keys.update(key for key, _ in edge.mapping)
    for src, outs in _by_source(edges).items():
        node = draft.nodes[src]
        if isinstance(node, m.RouterNode):
            _check_router(node, outs, feeders, draft, diags)
        else:
            _check_plain_exits(node, outs, feeders, draft, diags)


def _check_router(
    node: m.RouterNode,
    outs: list[m.Edge],
    feeders: dict[str, list[m.Node]],
    draft: Draft,
    diags: Diagnostics,
) -> None:
    if node.mode == "round_robin" and len(outs) < 2:
        diags.add("C020", f"round_robin router '{node.name}' needs at least 2 edges", node.span)
    if node.mode == "llm":
        if len(outs) < 2:
            diags.add("C021", f"llm router '{node.name}' needs at least 2 edges", node.span)
        for edge in outs:
            if edge.condition is not None:
                diags.add(
                    "C022",
                    f"edges of llm router '{node.name}' take no 'when': the model chooses",
                    edge.condition.span,
                )
    if node.mode == "condition":
        _check_conditions(node, outs, feeders, draft, diags)


def _check_plain_exits(
    node: m.Node,
    outs: list[m.Edge],
    feeders: dict[str, list[m.Node]],
    draft: Draft,
    diags: Diagnostics,
) -> None:
    # One unconditional edge, or one loop edge and one fallback: the loop is
    # taken while it is open, then the fallback (graceful exhaustion).
    plain = [e for e in outs if e.condition is None and e.loop is None]
    looping = [e for e in outs if e.condition is None and e.loop is not None]
    for extra in plain[1:] + looping[1:]:
        diags.add(
            "C010",
            f"'{node.name}' has several unconditional edges; only routers fan out"
            " (add 'when' or use a router; one loop edge may have one fallback edge)",
            extra.span,
        )
    _check_conditions(node, outs, feeders, draft, diags)


def _condition_key(cond: m.Condition) -> str:
    if isinstance(cond, m.FieldCondition):
        return ("not " if cond.negated else "") + cond.field
    return "expr:" + "".join(cond.source.split())


def _check_conditions(
    node: m.Node,
    outs: list[m.Edge],
    feeders: dict[str, list[m.Node]],
    draft: Draft,
    diags: Diagnostics,
) -> None:
    seen: set[str] = set()
    fields: dict[str, set[bool]] = {}
    for edge in outs:
        cond = edge.condition
        if cond is None:
            continue
        key = _condition_key(cond)
        if key in seen:
            diags.add("C011", f"duplicate condition on edges from '{node.name}'", cond.span)
        seen.add(key)
        if isinstance(cond, m.FieldCondition):
            fields.setdefault(cond.field, set()).add(cond.negated)
            _check_field(node, cond, feeders.get(node.name, []), draft, diags)
    conditional = [e for e in outs if e.condition is not None]
    has_fallback = any(e.condition is None for e in outs)
    exhaustive = any(len(v) == 2 for v in fields.values())
    if conditional and not has_fallback and not exhaustive:
        first = conditional[0].condition
        assert first is not None
        fix = "the negated condition"
        if isinstance(first, m.FieldCondition):
            fix = f"'when {'' if first.negated else 'not '}{first.field}'"
        diags.add(
            "C012",
            f"conditions on edges from '{node.name}' may all be false: add {fix}"
            " or an unconditional fallback edge",
            first.span,
        )


def _check_field(
    node: m.Node, cond: m.FieldCondition, feeders: list[m.Node], draft: Draft, diags: Diagnostics
) -> None:
    if isinstance(node, m.RouterNode):
        # a router tests its input: what an incoming edge's `with` mapping builds, else
        # the output of the node before it
        mapped = draft.mapped_into.get(node.name, {})
        if any(cond.field in keys for keys in mapped.values()):
            return
        built = sorted(set().union(*mapped.values())) if mapped else []
        if built and all(f.name in mapped for f in feeders):
            diags.add(
                "C014",
                f"condition field '{cond.field}' is not in the input of router '{node.name}'"
                f" (its incoming 'with' builds {', '.join(built)})"
                f"{did_you_mean(cond.field, built)}",
                cond.span,
            )
            return
        feeders = [f for f in feeders if f.name not in mapped]
    sources = feeders if isinstance(node, m.RouterNode) else [node]
    for source in sources:
        fields = output_fields(source, draft.schemas)
        if fields is None:
            continue
        spec = fields.get(cond.field)
        if spec is None:
            diags.add(
                "C014",
                f"condition field '{cond.field}' is not in the output of '{source.name}'",
                cond.span,
            )
        elif spec.name != "json" and (spec.name != "bool" or spec.is_list):
            diags.add(
                "C013",
                f"condition field '{cond.field}' of '{source.name}' is {spec}, not bool",
                cond.span,
            )


def _successors(edges: list[m.Edge], skip_loops: bool = False) -> dict[str, list[str]]:
    succ: dict[str, list[str]] = {}
    for edge in edges:
        if skip_loops and edge.loop is not None:
            continue
        succ.setdefault(edge.src, []).append(edge.dst)
    return succ


def _reachable(start: str, succ: dict[str, list[str]]) -> set[str]:
    seen = {start}
    queue = deque([start])
    while queue:
        for nxt in succ.get(queue.popleft(), ()):
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return seen


def _loop_members(draft: Draft, edges: list[m.Edge]) -> set[str]:
    """The nodes on a cycle through some loop edge.

    Those are the nodes of the strongly connected components that hold a loop
    edge, found in linear time and space: a chain of many loops in one
    component stays cheap (each component is taken once, however many loops
    it holds).
    """
    component = _components(list(draft.nodes), _successors(edges))
    looped = {
        component[edge.src]
        for edge in edges
        if edge.loop is not None
        and edge.src in component
        and component.get(edge.dst) == component[edge.src]
    }
    return {name for name, index in component.items() if index in looped}


def _components(names: list[str], succ: dict[str, list[str]]) -> dict[str, int]:
    """Strongly connected components (Kosaraju, iterative): node -> component."""
    pred: dict[str, list[str]] = {}
    for src, dsts in succ.items():
        for dst in dsts:
            pred.setdefault(dst, []).append(src)
    component: dict[str, int] = {}
    for index, root in enumerate(reversed(_finish_order(names, succ))):
        if root in component:
            continue
        component[root] = index
        todo = [root]
        while todo:
            for prev in pred.get(todo.pop(), ()):
                if prev not in component:
                    component[prev] = index
                    todo.append(prev)
    return component


def _finish_order(names: list[str], succ: dict[str, list[str]]) -> list[str]:
    """Nodes in the order a depth-first search finishes them."""
    order: list[str] = []
    seen: set[str] = set()
    for root in names:
        if root in seen:
            continue
        seen.add(root)
        stack = [(root, iter(succ.get(root, ())))]
        while stack:
            name, children = stack[-1]
            child = next((c for c in children if c not in seen), None)
            if child is None:
                order.append(name)
                stack.pop()
            else:
                seen.add(child)
                stack.append((child, iter(succ.get(child, ()))))
    return order


def _check_cycles(draft: Draft, edges: list[m.Edge], diags: Diagnostics) -> None:
    """Every cycle must pass through a declared loop edge (C019)."""
    plain = [e for e in edges if e.loop is None]
    succ: dict[str, list[m.Edge]] = {}
    for edge in plain:
        succ.setdefault(edge.src, []).append(edge)
    # upstream's rule: a back-edge between nodes that take part in some loop is bounded
    looping: dict[str, str] = {}
    for edge in edges:
        if edge.loop is not None:
            looping.setdefault(edge.src, edge.loop)
            looping.setdefault(edge.dst, edge.loop)
    state: dict[str, int] = {}  # 1 = on the stack, 2 = finished
    for root in draft.nodes:
        if root in state:
            continue
        state[root] = 1
        stack: list[tuple[str, int]] = [(root, 0)]
        while stack:
            name, index = stack[-1]
            outs = succ.get(name, [])
            if index >= len(outs):
                state[name] = 2
                stack.pop()
                continue
            stack[-1] = (name, index + 1)
            edge = outs[index]
            mark = state.get(edge.dst)
            if mark == 1:
                _cycle(edge, looping, diags)
            elif mark is None:
                state[edge.dst] = 1
                stack.append((edge.dst, 0))


def _cycle(edge: m.Edge, looping: dict[str, str], diags: Diagnostics) -> None:
    """C019 for a cycle no loop touches; C365 (a warning) for one upstream lets through.

    Upstream accepts a back-edge whose ends take part in some declared loop,
    although that loop need not bound this cycle: it runs until the budget ends it.
    """
    near = next((n for n in (edge.src, edge.dst) if n in looping), None)
    if near is None:
        diags.add(
            "C019",
            f"edge {edge.src} -> {edge.dst} closes a cycle that is not a declared"
            " loop: add 'as NAME(N)' to bound it",
            edge.span,
        )
        return
    diags.add(
        "C365",
        f"edge {edge.src} -> {edge.dst} closes a cycle that no loop bounds (upstream accepts"
        f" it because '{near}' is in loop '{looping[near]}'): only the budget stops it; add"
        " 'as NAME(N)' to bound it",
        edge.span,
    )


def _check_reach(draft: Draft, edges: list[m.Edge], diags: Diagnostics) -> None:
    if draft.entry is None:
        return
    seen = _reachable(draft.entry, _successors(edges))
    for name, node in draft.nodes.items():
        if name not in seen:
            diags.add("C016", f"node '{name}' is unreachable from entry '{draft.entry}'", node.span)


def _check_joins(draft: Draft, edges: list[m.Edge], diags: Diagnostics) -> None:
    """C360 (see :mod:`iterion_nb.ir.joins`), over the non-loop edges."""
    pred: dict[str, list[str]] = {}
    for edge in edges:
        if edge.loop is None:
            pred.setdefault(edge.dst, []).append(edge.src)
    check_joins(draft, _successors(edges, skip_loops=True), pred, diags)


def _check_nodes(draft: Draft, diags: Diagnostics) -> None:
    _check_events(draft, diags)
    _check_models(draft, diags)
    for node in draft.nodes.values():
        session = getattr(node, "session", "fresh")
        if node.await_mode is not None and session in m.CONTINUING:
            diags.add(
                "C009",
                f"'{node.name}' joins branches (await: {node.await_mode}), so it cannot"
                f" 'session: {session}': there is no single session to continue",
                node.span,
            )
        if isinstance(node, m.AwaitAnswersNode) and node.from_node is not None:
            _check_await_from(node, draft, diags)
        if isinstance(node, m.ComputeNode):
            _check_compute_output(node, draft, diags)


def _check_events(draft: Draft, diags: Diagnostics) -> None:
    """C198: a wait nothing emits, or an emit nothing waits for."""
    emits = [n for n in draft.nodes.values() if isinstance(n, m.EmitNode)]
    waits = [n for n in draft.nodes.values() if isinstance(n, m.WaitNode)]
    # An emit or wait without its event (C196) could be the partner of any
    # other, so the other side gets no C198 guess.
    sides: list[
        tuple[list[m.WaitNode] | list[m.EmitNode], list[m.WaitNode] | list[m.EmitNode], str]
    ]
    sides = [(waits, emits, "waits for '{e}', which no emit node emits"),
             (emits, waits, "emits '{e}', which no wait node waits for")]  # fmt: skip
    for these, partners, text in sides:
        if not all(n.event for n in partners):
            continue
        known = {n.event for n in partners}
        for node in these:
            if node.event and node.event not in known:
                diags.add(
                    "C198", f"{node.kind} '{node.name}' " + text.format(e=node.event), node.span
                )


def _check_models(draft: Draft, diags: Diagnostics) -> None:
    """C310: a ``model:`` the backend that runs the node cannot serve."""
    for node in draft.nodes.values():
        template = getattr(node, "model", None)
        text = static_text(template) if template is not None else None
        if text is None:
            continue
        backend = getattr(node, "backend", None) or draft.default_backend
        if serves(backend, text):
            continue
        props = draft.node_decls[node.name].properties
        where = next((p.value.span for p in props if p.name == "model"), node.span)
        diags.add("C310", unservable_message(backend, text), where)


def _check_await_from(node: m.AwaitAnswersNode, draft: Draft, diags: Diagnostics) -> None:
    source = draft.nodes.get(node.from_node or "")
    span = draft.node_decls[node.name].properties
    where = next((p.value.span for p in span if p.name == "from"), node.span)
    if source is None:
        diags.add(
            "C242", f"'from: {node.from_node}' names no node; the gate would wait on nothing", where
        )
    elif not (isinstance(source, m.AgentNode) and source.interaction == "async"):
        diags.add(
            "C242",
            f"'from: {node.from_node}' is not an 'interaction: async' agent or judge,"
            " so it never posts async questions",
            where,
        )


def _check_compute_output(node: m.ComputeNode, draft: Draft, diags: Diagnostics) -> None:
    schema = draft.schemas.get(node.output or "")
    if schema is None:
        return
    for expr in node.exprs:
        if expr.field not in schema.fields:
            diags.add(
                "C031",
                f"compute '{node.name}' sets '{expr.field}', which output schema"
                f" '{schema.name}' does not have",
                expr.span,
            )


def _check_mappings(draft: Draft, edges: list[m.Edge], diags: Diagnostics) -> None:
    """Keys of an edge's ``with`` must be fields of the destination's input."""
    for edge in edges:
        fields = input_fields(draft.nodes.get(edge.dst), draft.schemas)
        if fields is None or not edge.mapping:
            continue
        for key, _ in edge.mapping:
            if key not in fields and key not in ("_session_id", "_session_fingerprint"):
                # (those two name a conversation to continue, and its backend)
                diags.add(
                    "C362",  # a warning, as upstream accepts it: the key is passed along
                    f"'{key}' is not a field of the input schema of '{edge.dst}'"
                    f"{did_you_mean(key, fields)}",
                    draft.key_spans.get((edge.span, key), edge.span),
                )
