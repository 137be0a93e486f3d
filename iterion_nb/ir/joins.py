"""C360: where the branches of one ``fan_out_all`` router meet, the node must declare ``await:``.

A branch is followed over non-loop edges from one of the router's
successors until a node that declares ``await:`` (where it ends), never
through the router itself. A node reached by several branches of one router
is a meeting point when none of its predecessors already carried the same
branches of that router; nodes further down inherit the meeting and are not
reported again.

A ``fan_out_all`` router that is a meeting point joins the branches by
itself (``await: wait_all`` is implied), so it ends them as any awaiting
node does, and that can make meeting points further down appear or vanish.
The check is therefore defined in rounds: find the meeting points, let the
routers among them join, look again, until a round finds no router; the
meeting points of that last round are reported.

Every branch is one bit, and a node's branches one integer. Running the
whole check once per round costs rounds times the graph, and a chain of
fan-outs where each joins only once the one before it has needs a round per
router: 400 routers took 0.25 s, and 2.3 s when a cycle of plain edges
anywhere sent every round to a search of each router's branches one by one
(``benchmarks/validate_scale.py``). So one walk over the strongly connected
components, in topological order, does every round at once: it carries for
each node a *timeline*, the branches that reach it and the round from which
each no longer does. A router that joins in round ``k`` passes on what it
carries until round ``k`` only; a branch that comes several ways keeps its
latest round; a router joins in the first round where branches meet there,
looked for among the rounds where its branches or its predecessors' change.
A component with a cycle (already C019) is run round by round, alone, in
the rounds where what comes into it changes or one of its routers joins.
"""

from __future__ import annotations

import heapq
import sys
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, replace
from itertools import chain

from iterion_nb.dsl.diagnostics import Diagnostics
from iterion_nb.ir import model as m
from iterion_nb.ir.build import Draft

_NEVER = sys.maxsize
"""A round after every round: what reaches a node until then is never cut off."""

_Timeline = dict[int, int]
"""Branches by the first round in which they no longer reach a node (disjoint bit masks)."""


@dataclass(frozen=True, slots=True)
class _Branches:
    """Bit ``first + i`` is branch ``i`` of ``router``; ``mask`` covers them all."""

    router: str
    first: int
    mask: int


@dataclass(frozen=True, slots=True)
class _FanOuts:
    """The branches of every ``fan_out_all`` router with two successors or more."""

    owners: list[_Branches]  # one entry per bit
    births: dict[str, int]  # the branches that start at each node
    own: dict[str, int]  # each router's own branches, which never come back into it


@dataclass(frozen=True, slots=True)
class Joins:
    """What C360 finds once no more routers join."""

    #: (router, node): the router's branches meet at the node, which does not await.
    found: list[tuple[str, m.Node]]
    #: ``fan_out_all`` routers that join branches by themselves, with the round they start to.
    joined: dict[str, int]


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
    joins = find_joins(draft, succ, pred)
    for name in joins.joined:
        draft.nodes[name] = replace(draft.nodes[name], await_mode="wait_all")
    for router, node in joins.found:
        _report(router, node, diags)


def find_joins(draft: Draft, succ: dict[str, list[str]], pred: dict[str, list[str]]) -> Joins:
    """The meeting points to report and the routers that join, leaving ``draft`` as it is."""
    fan = _fan_outs(draft, succ)
    if not fan.owners:
        return Joins([], {})
    order = _topological(draft, succ)
    parts = [[name] for name in order] if order is not None else _components(draft, succ)
    walk = _Walk(draft, succ, pred, fan)
    for part in parts:
        walk.settle(part)
    return walk.result(chain.from_iterable(parts))


def _fan_outs(draft: Draft, succ: dict[str, list[str]]) -> _FanOuts:
    owners: list[_Branches] = []
    births: dict[str, int] = {}
    own: dict[str, int] = {}
    for router in draft.nodes.values():
        if not _fans_out(router):
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
    return _FanOuts(owners, births, own)


def _fans_out(node: m.Node) -> bool:
    return isinstance(node, m.RouterNode) and node.mode == "fan_out_all"


class _Walk:
    """Every round of C360 in one walk over the components, each settled once."""

    def __init__(
        self,
        draft: Draft,
        succ: dict[str, list[str]],
        pred: dict[str, list[str]],
        fan: _FanOuts,
    ) -> None:
        self.nodes = draft.nodes
        self.succ = succ
        self.pred = pred
        self.fan = fan
        self.timelines: dict[str, _Timeline] = {}
        self.incoming: dict[str, list[_Timeline]] = {}  # from settled predecessors
        self.joined: dict[str, int] = {}

    def settle(self, part: list[str]) -> None:
        """Fix the timelines of one component, whose predecessors are all settled."""
        inputs = {name: self._arrivals(name) for name in part}
        name = part[0]
        if len(part) == 1 and name not in self.succ.get(name, []):
            self.timelines[name] = inputs[name]
            first = self._first_meeting(name) if self._may_join(name) else _NEVER
            if first != _NEVER:
                self.joined[name] = first
        else:
            self._run_rounds(part, inputs)
        for name in part:
            self._pass_on(name)

    def result(self, order: Iterable[str]) -> Joins:
        """The meeting points of the last round, in ``order``, and the routers that joined."""
        final = {name: line.get(_NEVER, 0) for name, line in self.timelines.items()}
        found: list[tuple[str, m.Node]] = []
        for name in order:
            node = self.nodes[name]
            if node.await_mode is not None or name in self.joined:
                continue
            found += [(branches.router, node) for branches in self._routers_meeting(name, final)]
        return Joins(found, self.joined)

    def _arrivals(self, name: str) -> _Timeline:
        """What reaches ``name`` from its settled predecessors and what starts there."""
        lines = self.incoming.pop(name, [])
        born = self.fan.births.get(name, 0)
        keep = ~self.fan.own.get(name, 0)  # never back into the router the branch left
        if len(lines) == 1 and not born and keep == -1:
            return lines[0]  # one way in: shared, as no timeline is changed once made
        raw: _Timeline = {}
        for line in lines:
            for end, bits in line.items():
                raw[end] = raw.get(end, 0) | (bits & keep)
        raw[_NEVER] = raw.get(_NEVER, 0) | born  # a router's own branch may start at itself
        out: _Timeline = {}
        seen = 0
        for end in sorted(raw, reverse=True):  # a bit counts with its latest end
            bits = raw[end] & ~seen
            if bits:
                out[end] = bits
                seen |= bits
        return out

    def _may_join(self, name: str) -> bool:
        node = self.nodes[name]
        return _fans_out(node) and node.await_mode is None and name not in self.joined

    def _first_meeting(self, name: str) -> int:
        """The round after the first in which branches meet at ``name``; else ``_NEVER``."""
        preds = list(dict.fromkeys(self.pred.get(name, [])))
        if name not in self.fan.births and len(preds) < 2:
            return _NEVER  # one way in: the node carries its predecessor's branches
        clock = _Clock({p: self.timelines.get(p, {}) for p in [name, *preds]})
        now = 0
        while now != _NEVER:
            if self._routers_meeting(name, clock.advance(now)):
                return now + 1
            now = clock.next_change()
        return _NEVER

    def _routers_meeting(self, name: str, labels: dict[str, int]) -> list[_Branches]:
        """The routers whose branches meet at ``name`` in the round ``labels`` shows."""
        preds = self.pred.get(name, [])
        if name not in self.fan.births and len(set(preds)) < 2:
            return []
        return _meetings(labels, name, preds, self.fan.owners)

    def _run_rounds(self, part: list[str], inputs: dict[str, _Timeline]) -> None:
        """A component with a cycle: its labels round by round, where anything changes."""
        members = set(part)
        lines = {p: self.timelines.get(p, {}) for n in part for p in self.pred.get(n, [])}
        clock = _Clock({n: line for n, line in lines.items() if n not in members} | inputs)
        made: dict[str, _Timeline] = {name: {} for name in part}
        before: dict[str, int] = {}
        now = 0
        while now != _NEVER:
            alive = clock.advance(now)
            labels = self._reach(part, alive, now)
            for name, bits in before.items():
                if bits & ~labels[name]:  # labels only shrink, round after round
                    made[name][now] = bits & ~labels[name]
            joining = [n for n in part if self._may_join(n) and self._meets(n, labels, alive)]
            for name in joining:
                self.joined[name] = now + 1
            now = now + 1 if joining else clock.next_change()
            before = labels
        for name in part:
            if before[name]:
                made[name][_NEVER] = before[name]
            self.timelines[name] = made[name]

    def _reach(self, part: list[str], alive: dict[str, int], now: int) -> dict[str, int]:
        """The branches at each node of a component in round ``now`` (a least fixed point).

        ``alive`` holds what reaches each node from outside the component in that round.
        A node is taken again only when what it carries grew, earliest in ``part`` first:
        in the order that ``_components`` gives, one sweep, then only where a cycle
        brought something back.
        """
        labels = {name: alive[name] for name in part}
        place = {name: i for i, name in enumerate(part)}
        todo = list(range(len(part)))  # a heap of places, lowest first
        queued = [True] * len(part)
        while todo:
            index = heapq.heappop(todo)
            queued[index] = False
            name = part[index]
            if self._cut(name) <= now:
                continue  # a node that awaits ends the branches that reach it
            for nxt in self.succ.get(name, []):
                if nxt in labels:  # in the component; never back into the router a branch left
                    more = labels[name] & ~self.fan.own.get(nxt, 0) & ~labels[nxt]
                    if more:
                        labels[nxt] |= more
                        if not queued[place[nxt]]:
                            queued[place[nxt]] = True
                            heapq.heappush(todo, place[nxt])
        return labels

    def _meets(self, name: str, labels: dict[str, int], alive: dict[str, int]) -> bool:
        """Whether branches meet at ``name``, in a component, in the round of ``labels``."""
        view = {p: labels[p] if p in labels else alive[p] for p in self.pred.get(name, [])}
        view[name] = labels[name]
        return bool(self._routers_meeting(name, view))

    def _cut(self, name: str) -> int:
        """The first round in which ``name`` awaits, ending the branches that reach it."""
        return 0 if self.nodes[name].await_mode is not None else self.joined.get(name, _NEVER)

    def _pass_on(self, name: str) -> None:
        line = self.timelines[name]
        cut = self._cut(name)
        if not (line and cut):
            return
        if cut != _NEVER:  # a router that joins passes nothing on from that round
            capped: _Timeline = {}
            for end, bits in line.items():
                capped[min(end, cut)] = capped.get(min(end, cut), 0) | bits
            line = capped
        for nxt in self.succ.get(name, []):
            if nxt not in self.timelines and nxt in self.nodes:  # else in the same component
                self.incoming.setdefault(nxt, []).append(line)


class _Clock:
    """The labels of some nodes, from their timelines, as the rounds go by."""

    def __init__(self, lines: dict[str, _Timeline]) -> None:
        self.labels = {name: 0 for name in lines}
        self.ends: dict[int, list[tuple[str, int]]] = {}
        for name, line in lines.items():
            for end, bits in line.items():
                self.labels[name] |= bits
                if end != _NEVER:
                    self.ends.setdefault(end, []).append((name, bits))
        self.order = sorted(self.ends, reverse=True)  # the next change last

    def advance(self, now: int) -> dict[str, int]:
        """The labels in round ``now``, which is at least that of the call before."""
        while self.order and self.order[-1] <= now:
            for name, bits in self.ends[self.order.pop()]:
                self.labels[name] &= ~bits
        return self.labels

    def next_change(self) -> int:
        """The first round after the last ``advance`` in which a label changes, or ``_NEVER``."""
        return self.order[-1] if self.order else _NEVER


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


def _components(draft: Draft, succ: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components, each after those with an edge into it (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    finished: dict[str, int] = {}
    out: list[list[str]] = []
    for root in draft.nodes:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        work = [(root, iter(succ.get(root, [])))]
        while work:
            name, edges = work[-1]
            nxt = next((d for d in edges if d in draft.nodes and _visit(d, name, index, low)), None)
            if nxt is not None:
                index[nxt] = low[nxt] = len(index)
                stack.append(nxt)
                work.append((nxt, iter(succ.get(nxt, []))))
                continue
            work.pop()
            finished[name] = -len(finished)
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[name])
            if low[name] == index[name]:
                part = _pop_component(name, stack, index)
                # Last finished first: every edge inside but those closing a cycle goes forward.
                out.append(sorted(part, key=finished.__getitem__))
    out.reverse()
    return out


def _pop_component(root: str, stack: list[str], index: dict[str, int]) -> list[str]:
    """Take a component off the stack, down to its root; edges into it lower nothing after."""
    part: list[str] = []
    while not part or part[-1] != root:
        part.append(stack.pop())
        index[part[-1]] = -1
    return part


def _visit(dst: str, src: str, index: dict[str, int], low: dict[str, int]) -> bool:
    """Whether ``dst`` is new; else lower ``src``'s link to it if ``dst`` is on the stack."""
    if dst not in index:
        return True
    if index[dst] >= 0:
        low[src] = min(low[src], index[dst])
    return False


def _report(router: str, node: m.Node, diags: Diagnostics) -> None:
    diags.add(
        "C360",
        f"parallel branches of '{router}' meet at '{node.name}', which does not"
        " declare 'await: wait_all' or 'await: best_effort'",
        node.span,
    )
