"""C360 in one pass reports what the round-by-round check it replaced reported.

``reference`` below is that check, kept as it was: every round, each
``fan_out_all`` router's branches followed one by one; routers found where
branches meet join (``await: wait_all``); again until a round finds no router.
It costs rounds times routers times the graph, so it is only run on small graphs.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from iterion_nb.dsl import parse_source
from iterion_nb.dsl.diagnostics import Diagnostics
from iterion_nb.dsl.source import Source
from iterion_nb.ir import model as m
from iterion_nb.ir.build import Builder, Draft
from iterion_nb.ir.joins import _topological, check_joins, find_joins

Graph = tuple[Draft, dict[str, list[str]], dict[str, list[str]]]


def reference(
    draft: Draft, succ: dict[str, list[str]], pred: dict[str, list[str]]
) -> tuple[list[tuple[str, m.Node]], int]:
    """The former check on ``draft`` (routers that join get ``await``): its findings and rounds."""
    for rounds in range(1, len(draft.nodes) + 2):
        found = search(draft, succ, pred)
        routers = [n for _, n in found if isinstance(n, m.RouterNode) and n.mode == "fan_out_all"]
        if not routers:
            return found, rounds
        for router in routers:
            draft.nodes[router.name] = replace(router, await_mode="wait_all")
    raise AssertionError("a round without a new router ends it")


def search(
    draft: Draft, succ: dict[str, list[str]], pred: dict[str, list[str]]
) -> list[tuple[str, m.Node]]:
    out: list[tuple[str, m.Node]] = []
    for router in draft.nodes.values():
        if not (isinstance(router, m.RouterNode) and router.mode == "fan_out_all"):
            continue
        starts = [d for d in succ.get(router.name, []) if d in draft.nodes]
        if len(starts) < 2:
            continue
        branches: dict[str, set[int]] = {}
        for index, start in enumerate(starts):
            for name in branch_nodes(start, router.name, succ, draft):
                branches.setdefault(name, set()).add(index)
        for name, seen_by in branches.items():
            node = draft.nodes[name]
            if len(seen_by) < 2 or node.await_mode is not None:
                continue
            if any(branches.get(p) == seen_by for p in pred.get(name, [])):
                continue
            out.append((router.name, node))
    return out


def branch_nodes(start: str, router: str, succ: dict[str, list[str]], draft: Draft) -> set[str]:
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


def build(text: str) -> Graph:
    """The draft, and its edges over which C360 runs, as ``validate`` passes them."""
    diags = Diagnostics()
    draft = Builder(diags).build(parse_source(Source("g.iter", text), diags))
    succ: dict[str, list[str]] = {}
    pred: dict[str, list[str]] = {}
    for edge in draft.edges:
        known = edge.dst in draft.nodes or edge.dst in m.TERMINALS
        if edge.src in draft.nodes and known and edge.loop is None:
            succ.setdefault(edge.src, []).append(edge.dst)
            pred.setdefault(edge.dst, []).append(edge.src)
    return draft, succ, pred


KINDS = {
    "fan": "router {n}:\n  mode: fan_out_all\n",
    "rr": "router {n}:\n  mode: round_robin\n",
    "agent": 'agent {n}:\n  model: "scripted"\n',
    "await": 'agent {n}:\n  model: "scripted"\n  await: wait_all\n',
}


def source(kinds: dict[str, str], edges: list[tuple[str, str]], entry: str) -> str:
    body = "\n".join(KINDS[kind].format(n=name) for name, kind in kinds.items())
    return (
        body + f"\nworkflow w:\n  entry: {entry}\n" + "".join(f"  {a} -> {b}\n" for a, b in edges)
    )


def cascade(layers: int) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """Fan-outs ``f{i}`` whose branches meet at ``f{i+1}`` only once ``f{i-1}`` has joined.

    ``f{i}`` fans out to ``x{i}`` and ``y{i}``, which go on to ``f{i+2}`` and meet at agent
    ``m{i}`` (reported), which goes to ``f{i+1}``; those of ``f0`` meet at ``f1`` at once.
    So ``f{i}`` joins in round ``i``: until ``f{i-1}`` joins, ``m{i-1}`` brings it all
    that ``x{i-2}`` and ``y{i-2}`` bring.
    """
    kinds: dict[str, str] = {}
    edges: list[tuple[str, str]] = []
    for i in range(layers):
        one, two = (f"f{j}" if j < layers else "done" for j in (i + 1, i + 2))
        kinds |= {f"f{i}": "fan", f"x{i}": "rr", f"y{i}": "rr"}
        edges += [(f"f{i}", f"x{i}"), (f"f{i}", f"y{i}"), (f"x{i}", two), (f"y{i}", two)]
        if i == 0:
            edges += [("x0", one), ("y0", one)]
        else:
            kinds[f"m{i}"] = "agent"
            edges += [(f"x{i}", f"m{i}"), (f"y{i}", f"m{i}"), (f"m{i}", one)]
    return kinds, edges


def mutated_cascade(rnd: random.Random) -> str:
    """A small cascade with a few node kinds changed, edges dropped, and edges added."""
    kinds, edges = cascade(rnd.randint(2, 6))
    names = list(kinds)
    for _ in range(rnd.randint(0, 3)):
        kinds[rnd.choice(names)] = rnd.choice(list(KINDS))
    for _ in range(rnd.randint(0, 3)):
        edges.pop(rnd.randrange(len(edges)))
    cyclic = rnd.random() < 0.3
    for _ in range(rnd.randint(0, 3)):
        a, b = rnd.randrange(len(names)), rnd.randrange(len(names))
        if not cyclic:
            a, b = min(a, b), max(a, b)
        if a != b or cyclic:
            edges.append((names[a], names[b]))
    return source(kinds, edges, "f0")


def random_graph(rnd: random.Random) -> str:
    """Up to 14 nodes of every kind; edges mostly forward, sometimes back (a cycle)."""
    count = rnd.randint(2, 14)
    kinds = {f"n{i}": rnd.choice(["agent", "await", "fan", "fan", "rr"]) for i in range(count)}
    back = rnd.random() < 0.3
    edges: list[tuple[str, str]] = []
    for i, kind in enumerate(kinds.values()):
        for _ in range(rnd.randint(1, 3) if kind in ("fan", "rr") else 1):
            to = rnd.randint(0, i) if back and rnd.random() < 0.15 else rnd.randint(i + 1, i + 4)
            edges.append((f"n{i}", f"n{to}" if to < count else "done"))
    return source(kinds, edges, "n0")


def compare(text: str) -> tuple[int, bool]:
    """Assert that both checks agree on ``text``; the former's rounds, and if there is a cycle."""
    draft, succ, pred = build(text)
    order = _topological(draft, succ)
    joins = find_joins(draft, succ, pred)
    diags = Diagnostics()
    check_joins(draft, succ, pred, diags)
    old_draft = build(text)[0]
    old, rounds = reference(old_draft, succ, pred)
    pairs = [(router, node.name) for router, node in joins.found]
    old_pairs = [(router, node.name) for router, node in old]
    assert sorted(pairs) == sorted(old_pairs), text
    awaits = {name: node.await_mode for name, node in draft.nodes.items()}
    assert awaits == {name: node.await_mode for name, node in old_draft.nodes.items()}, text
    fresh = build(text)[0].nodes
    assert set(joins.joined) == {n for n, mode in awaits.items() if mode != fresh[n].await_mode}
    if order is not None:  # the former one-pass order: nodes in topological order, then routers
        routers = list(draft.nodes)
        old_pairs.sort(key=lambda pair: (order.index(pair[1]), routers.index(pair[0])))
        assert pairs == old_pairs, text
    reported = [(d.code, d.message.split("'")[1], d.span) for d in diags]
    assert reported == [("C360", router, node.span) for router, node in joins.found]
    return rounds, order is None


def test_random_graphs_report_what_the_round_by_round_check_reported() -> None:
    seen = {"rounds >= 3": 0, "cyclic": 0, "cyclic, rounds >= 3": 0}
    for seed in range(400):
        rnd = random.Random(seed)
        text = mutated_cascade(rnd) if seed % 2 else random_graph(rnd)
        rounds, cyclic = compare(text)
        seen["rounds >= 3"] += rounds >= 3
        seen["cyclic"] += cyclic
        seen["cyclic, rounds >= 3"] += cyclic and rounds >= 3
    # The graphs exercise what matters: routers that join only after others have.
    assert seen["rounds >= 3"] >= 30 and seen["cyclic"] >= 40 and seen["cyclic, rounds >= 3"] >= 3


@pytest.mark.parametrize("closed", [False, True])
def test_a_cascade_joins_one_router_a_round(closed: bool) -> None:
    kinds, edges = cascade(12)
    if closed:  # one cycle through everything: the whole graph is run round by round
        edges = [(a, "f0" if (a, b) == ("m11", "done") else b) for a, b in edges]
    text = source(kinds, edges, "f0")
    rounds, cyclic = compare(text)
    assert cyclic is closed
    assert rounds == 12  # f1 ... f11 each join a round after the one before, then none
    draft, succ, pred = build(text)
    joins = find_joins(draft, succ, pred)
    assert joins.joined == {f"f{i}": i for i in range(1, 12)}
    assert sorted(node.name for _, node in joins.found) == sorted(f"m{i}" for i in range(1, 12))
