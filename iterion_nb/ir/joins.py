"""C360: where the branches of one ``fan_out_all`` router meet, the node must declare ``await:``.

A branch is followed over non-loop edges from one of the router's
successors until a node that declares ``await:`` (where it ends), never
through the router itself. A node reached by several branches of one router
is a meeting point when none of its predecessors already carried the same
branches of that router; nodes further down inherit the meeting and are not
reported again.

Following each router's branches one by one costs the size of the region
they cover, for every router: a chain of fan-outs whose branches run on
(and never meet) made that quadratic (4,000 routers took 19 s). Instead
every branch is one bit, and one pass in topological order carries each
node's set of branches as an integer; only nodes where paths merge, or
where branches start, can be meeting points, and only routers whose bits
differ from every predecessor there are examined. A graph with a cycle of
plain edges (already C019) is searched the slow way.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace

from iterion_nb.dsl.diagnostics import Diagnostics
from iterion_nb.ir import model as m
from iterion_nb.ir.build import Draft


@dataclass(frozen=True, slots=True)
class _Branches:
    """Bit ``first + i`` is branch ``i`` of ``router``; ``mask`` covers them all."""

    router: str
    first: int
    mask: int


def check_joins(
    draft: Draft,
    succ: dict[str, list[str]],
    pred: dict[str, list[str]],
    diags: Diagnostics,
) -> None:
    """Report C360 at every first meeting point of a fan-out's branches.

    A ``fan_out_all`` router where branches meet joins them as upstream does:
    it waits for all of them (``await: wait_all`` is set on it) before it fans
    out again; only other nodes must say how they join.

    Args:
        draft: The workflow being checked.
        succ: Successors of each node over non-loop edges.
        pred: Predecessors of each node over non-loop edges.
        diags: Where problems go.
    """
    for _ in range(len(draft.nodes) + 1):
        found = _meeting_points(draft, succ, pred)
        routers = [n for _, n in found if isinstance(n, m.RouterNode) and n.mode == "fan_out_all"]
        if not routers:
            break
        for router in routers:  # an implicit join; then look again past it
            draft.nodes[router.name] = replace(router, await_mode="wait_all")
    for router_name, node in found:
        _report(router_name, node, diags)


def _meeting_points(
    draft: Draft, succ: dict[str, list[str]], pred: dict[str, list[str]]
) -> list[tuple[str, m.Node]]:
    """Every (router, node) where the router's branches first meet at a node without await."""
    out: list[tuple[str, m.Node]] = []
    births: dict[str, int] = {}
    owners: list[_Branches] = []  # one entry per bit
    own: dict[str, int] = {}
    for router in draft.nodes.values():
        if not (isinstance(router, m.RouterNode) and router.mode == "fan_out_all"):
            continue
        starts = [d for d in succ.get(router.name, []) if d in draft.nodes]
        if len(starts) < 2:
            continue
        first = len(owners)
        branches = _Branches(router.name, first, ((1 << len(starts)) - 1) << first)
        own[router.name] = branches.mask
        for index, start in enumerate(starts):
            births[start] = births.get(start, 0) | (1 << (first + index))
            owners.append(branches)
    if not owners:
        return out
    order = _topological(draft, succ)
    if order is None:
        return _search(draft, succ, pred)
    labels = _propagate(draft, order, succ, births, own)
    for name in order:
        node = draft.nodes[name]
        preds = pred.get(name, [])
        if node.await_mode is not None or (name not in births and len(set(preds)) < 2):
            continue  # one way in: the node carries its predecessor's branches
        for branches in _meetings(labels, name, preds, owners):
            out.append((branches.router, node))
    return out


def _propagate(
    draft: Draft,
    order: list[str],
    succ: dict[str, list[str]],
    births: dict[str, int],
    own: dict[str, int],
) -> dict[str, int]:
    """Each node's branches: those born there and those its predecessors pass on."""
    labels: dict[str, int] = {}
    for name in order:
        bits = labels.get(name, 0) | births.get(name, 0)
        labels[name] = bits
        if not bits or draft.nodes[name].await_mode is not None:
            continue  # a node that awaits ends the branches that reach it
        for nxt in succ.get(name, []):
            if nxt in draft.nodes:  # never back into the router the branch left
                labels[nxt] = labels.get(nxt, 0) | (bits & ~own.get(nxt, 0))
    return labels


def _meetings(
    labels: dict[str, int], name: str, preds: list[str], owners: list[_Branches]
) -> list[_Branches]:
    """Routers with two branches or more at ``name`` that no predecessor carried alike."""
    here = labels[name]
    diffs = [here ^ labels.get(p, 0) for p in dict.fromkeys(preds)] or [here]
    if not all(diffs):
        return []  # a predecessor carried exactly these branches of every router
    found: list[_Branches] = []
    # A router to report differs from every predecessor, so from the closest one too.
    candidates = min(diffs, key=int.bit_count)
    while candidates:
        low = candidates & -candidates
        branches = owners[low.bit_length() - 1]
        candidates &= ~branches.mask
        if (here & branches.mask).bit_count() >= 2 and all(d & branches.mask for d in diffs):
            found.append(branches)
    return found


def _topological(draft: Draft, succ: dict[str, list[str]]) -> list[str] | None:
    """The nodes in an order where each comes after its predecessors; None on a cycle."""
    indegree = dict.fromkeys(draft.nodes, 0)
    for src in draft.nodes:
        for dst in succ.get(src, []):
            if dst in indegree:
                indegree[dst] += 1
    ready = deque(name for name, count in indegree.items() if count == 0)
    order: list[str] = []
    while ready:
        name = ready.popleft()
        order.append(name)
        for dst in succ.get(name, []):
            if dst in indegree:
                indegree[dst] -= 1
                if indegree[dst] == 0:
                    ready.append(dst)
    return order if len(order) == len(indegree) else None


def _report(router: str, node: m.Node, diags: Diagnostics) -> None:
    diags.add(
        "C360",
        f"parallel branches of '{router}' meet at '{node.name}', which does not"
        " declare 'await: wait_all' or 'await: best_effort'",
        node.span,
    )


def _search(
    draft: Draft, succ: dict[str, list[str]], pred: dict[str, list[str]]
) -> list[tuple[str, m.Node]]:
    """The same search, one router and one branch at a time (for graphs with a cycle)."""
    out: list[tuple[str, m.Node]] = []
    for router in draft.nodes.values():
        if not (isinstance(router, m.RouterNode) and router.mode == "fan_out_all"):
            continue
        starts = [d for d in succ.get(router.name, []) if d in draft.nodes]
        if len(starts) < 2:
            continue
        branches: dict[str, set[int]] = {}
        for index, start in enumerate(starts):
            for name in _branch_nodes(start, router.name, succ, draft):
                branches.setdefault(name, set()).add(index)
        for name, seen_by in branches.items():
            node = draft.nodes[name]
            if len(seen_by) < 2 or node.await_mode is not None:
                continue
            if any(branches.get(p) == seen_by for p in pred.get(name, [])):
                continue
            out.append((router.name, node))
    return out


def _branch_nodes(start: str, router: str, succ: dict[str, list[str]], draft: Draft) -> set[str]:
    seen = {start}
    todo = [start]
    while todo:
        name = todo.pop()
        if draft.nodes[name].await_mode is not None:
            continue
        for nxt in succ.get(name, []):
            if nxt not in seen and nxt != router and nxt in draft.nodes:
                seen.add(nxt)
                todo.append(nxt)
    return seen
