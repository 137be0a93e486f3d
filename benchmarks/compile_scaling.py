"""Does compile time grow linearly with the size of the source?

Run: ``.venv/bin/python benchmarks/compile_scaling.py [--repeat R] [--shapes a,b]``.

For each shape of input (a deep ``input.b.b.b…`` reference in an expression,
the same in a ``{{…}}`` template, a long prompt body, many nodes, a chain of
fan-outs whose branches never meet, a chain of loops in one cycle) it compiles
sources of about 10 KB, 100 KB and 2 MB and prints, per size, the compile
time, the time per KB, and the time per KB of what the size adds (the
compile time minus that of the shape's smallest source, so that a fixed
cost of a fraction of a millisecond does not weigh on the 10 KB figure);
``ratio`` is that figure over the smallest one of the shape. Goal: every
ratio at most 2 (linear time), and 50,000 nodes compiled in at most 5 s.
Each figure is the fastest of R runs (more for fast compiles): on a shared
machine the fastest run is the one least disturbed by other work. Not a unit
test: run it when touching the lexer, the parser or the checks.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from iterion_nb.ir import analyze

SIZES = (10 * 1024, 100 * 1024, 2 * 1024 * 1024)
RATIO_GOAL = 2.0
NODES_GOAL = (50_000, 5.0)


def expr_reference(size: int) -> str:
    """A compute node whose one expression is ``input.b.b.b…``, ``size`` bytes long."""
    head = 'schema s:\n  b: json\n\ncompute c:\n  input: s\n  expr:\n    x: "input'
    tail = '"\n\nworkflow w:\n  entry: c\n  c -> done\n'
    return head + ".b" * max(1, (size - len(head) - len(tail)) // 2) + tail


def template_reference(size: int) -> str:
    """A prompt holding one ``{{vars.a.b.b…}}`` reference, ``size`` bytes long."""
    head = "vars:\n  a: json\n\nprompt p:\n  {{vars.a"
    tail = '}}\n\nagent g:\n  model: "scripted"\n  user: p\n'
    tail += "\nworkflow w:\n  entry: g\n  g -> done\n"
    return head + ".b" * max(1, (size - len(head) - len(tail)) // 2) + tail


def prompt_body(size: int) -> str:
    """A prompt of ``size`` bytes: one reference, then lines of plain prose."""
    head = "vars:\n  topic: string\n\nprompt p:\n  Write about {{vars.topic}}.\n"
    tail = '\nagent g:\n  model: "scripted"\n  user: p\n'
    tail += "\nworkflow w:\n  entry: g\n  g -> done\n"
    line = "  Three careful paragraphs, citing sources, in plain words; no jargon.\n"
    return head + line * max(1, (size - len(head) - len(tail)) // len(line)) + tail


def chain(count: int) -> str:
    """``count`` agent nodes in a chain (about 52 bytes a node)."""
    nodes = [f'agent n{i}:\n  model: "scripted"\n\n' for i in range(count)]
    edges = [f"  n{i} -> n{i + 1}\n" for i in range(count - 1)]
    edges.append(f"  n{count - 1} -> done\n")
    return "".join(nodes) + "workflow w:\n  entry: n0\n" + "".join(edges)


def many_nodes(size: int) -> str:
    """A chain of agent nodes about ``size`` bytes long."""
    per_node = len(chain(1000)) / 1000
    return chain(max(1, int(size / per_node)))


def fan_outs(size: int) -> str:
    """A chain of ``fan_out_all`` routers whose branches run on and never meet."""
    stage = 'router r{i}:\n  mode: fan_out_all\n\nagent a{i}:\n  model: "scripted"\n\n'
    edge = "  r{i} -> a{i}\n  r{i} -> done\n  a{i} -> {nxt}\n"
    count = max(1, size // (len(stage) + len(edge) + 6))
    parts = [stage.format(i=i) for i in range(count)]
    edges = [edge.format(i=i, nxt=f"r{i + 1}" if i + 1 < count else "done") for i in range(count)]
    return "".join(parts) + "workflow w:\n  entry: r0\n" + "".join(edges)


def loops(size: int) -> str:
    """A chain of compute nodes, each pair joined by a loop of its own (one big cycle)."""
    node = 'compute n{i}:\n  expr:\n    x: "1"\n\n'
    edge = "  n{i} -> n{j}\n  n{j} -> n{i} as l{i}(2)\n"
    count = max(2, size // (len(node) + len(edge) + 10))
    nodes = "".join(node.format(i=i) for i in range(count))
    edges = "".join(edge.format(i=i, j=i + 1) for i in range(count - 1))
    return f"{nodes}workflow w:\n  entry: n0\n{edges}  n{count - 1} -> done\n"


SHAPES: dict[str, Callable[[int], str]] = {
    "expr-reference": expr_reference,
    "template-reference": template_reference,
    "prompt": prompt_body,
    "nodes": many_nodes,
    "fan-outs": fan_outs,
    "loops": loops,
}


def best_seconds(text: str, repeat: int) -> float:
    """Fastest wall time of compiling ``text`` (at least 0.3 s of runs); it must compile cleanly."""
    times: list[float] = []
    while len(times) < repeat or (sum(times) < 0.3 and len(times) < 300):
        start = time.perf_counter()
        result = analyze(text, "bench.iter")
        times.append(time.perf_counter() - start)
        assert result.workflow is not None, [d.message[:200] for d in result.diagnostics[:3]]
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated shapes")
    args = parser.parse_args()

    worst = 0.0
    print(f"{'shape':<20}{'size':>8}{'compile':>12}{'µs/KB':>8}{'added µs/KB':>13}{'ratio':>7}")
    for name in args.shapes.split(","):
        make = SHAPES[name]
        floor = best_seconds(make(0), args.repeat)
        rows = []
        for size in SIZES:
            text = make(size)
            seconds = best_seconds(text, args.repeat)
            kb = len(text) / 1024
            rows.append((kb, seconds, seconds * 1e6 / kb, (seconds - floor) * 1e6 / kb))
        least = min(row[3] for row in rows)
        for kb, seconds, per_kb, added in rows:
            print(
                f"{name:<20}{kb:>6.0f}KB{seconds * 1000:>10.1f}ms{per_kb:>8.0f}{added:>13.0f}"
                f"{added / least:>7.2f}"
            )
        worst = max(worst, max(row[3] for row in rows) / least)
    verdict = "meets" if worst <= RATIO_GOAL else "MISSES"
    print(f"goal: per-KB cost within {RATIO_GOAL:.0f}x across sizes: {verdict} it ({worst:.2f})")

    count, goal = NODES_GOAL
    text = chain(count)
    seconds = best_seconds(text, args.repeat)
    verdict = "meets" if seconds <= goal else "MISSES"
    print(
        f"{count:,} nodes ({len(text) / 1024:.0f} KB): {seconds:.2f} s;"
        f" goal ≤ {goal:.0f} s: {verdict} it (time/goal = {seconds / goal:.2f})"
    )


if __name__ == "__main__":
    main()
