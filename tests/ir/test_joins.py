"""C360 in linear time: the one-pass check finds exactly what the round-by-round search finds."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import iterion_nb as it
from iterion_nb.dsl import parse_source
from iterion_nb.dsl.diagnostics import Diagnostics
from iterion_nb.dsl.source import Source
from iterion_nb.ir.build import Builder
from iterion_nb.ir.joins import _fan_outs, _Walk, find_joins


@st.composite
def graphs(draw: st.DrawFn) -> str:
    """A workflow of agents (some awaiting) and fan-out routers over a random DAG."""
    count = draw(st.integers(2, 12))
    kinds = draw(st.lists(st.sampled_from(["agent", "await", "router"]), min_size=count,
                          max_size=count))  # fmt: skip
    lines = []
    for i, kind in enumerate(kinds):
        if kind == "router":
            lines.append(f"router n{i}:\n  mode: fan_out_all\n")
        else:
            wait = "  await: wait_all\n" if kind == "await" else ""
            lines.append(f'agent n{i}:\n  model: "scripted"\n{wait}')
    edges = []
    for i in range(count):
        targets = draw(st.lists(st.integers(i + 1, count), max_size=3)) if i < count - 1 else []
        edges += [f"  n{i} -> {'done' if t == count else f'n{t}'}" for t in targets]
    return "\n".join(lines) + "\nworkflow w:\n  entry: n0\n" + "\n".join(edges) + "\n"


def both(text: str) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    diags = Diagnostics()
    draft = Builder(diags).build(parse_source(Source("g.iter", text), diags))
    succ: dict[str, list[str]] = {}
    pred: dict[str, list[str]] = {}
    for edge in draft.edges:
        if edge.src in draft.nodes and (edge.dst in draft.nodes or edge.dst in ("done", "fail")):
            succ.setdefault(edge.src, []).append(edge.dst)
            pred.setdefault(edge.dst, []).append(edge.src)
    fast = find_joins(draft, succ, pred).found
    # The whole graph as one component: every round computed over it, as in a cycle.
    everything = list(draft.nodes)
    walk = _Walk(draft, succ, pred, _fan_outs(draft, succ))
    walk.settle(everything)
    slow = walk.result(everything).found
    return ({(r, n.name) for r, n in fast}, {(r, n.name) for r, n in slow})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_one_pass_and_search_agree(text: str) -> None:
    fast, slow = both(text)
    assert fast == slow


def test_a_chain_of_fan_outs_whose_branches_never_meet_is_clean() -> None:
    parts, edges = [], []
    for i in range(3000):
        parts.append(f'router r{i}:\n  mode: fan_out_all\n\nagent a{i}:\n  model: "scripted"\n\n')
        edges += [f"  r{i} -> a{i}", f"  r{i} -> done", f"  a{i} -> r{i + 1}"]
    text = "".join(parts) + "workflow w:\n  entry: r0\n" + "\n".join(edges) + "\n  r3000 -> done\n"
    text = text.replace("  r3000 -> done\n", "")
    text = text.replace("  a2999 -> r3000", "  a2999 -> done")
    assert [d.code for d in it.analyze(text).diagnostics] == []


def test_meetings_of_two_routers_at_one_node_are_both_reported() -> None:
    text = (
        "router outer:\n  mode: fan_out_all\n\nrouter inner:\n  mode: fan_out_all\n\n"
        'agent a:\n  model: "scripted"\n\nagent b:\n  model: "scripted"\n\n'
        'agent c:\n  model: "scripted"\n\nagent meet:\n  model: "scripted"\n\n'
        "workflow w:\n  entry: outer\n  outer -> inner\n  outer -> c\n  inner -> a\n"
        "  inner -> b\n  a -> meet\n  b -> meet\n  c -> meet\n  meet -> done\n"
    )
    found = sorted(d.message.split("'")[1] for d in it.analyze(text).diagnostics)
    assert found == ["inner", "outer"]
    fast, slow = both(text)
    assert fast == slow and len(fast) == 2
