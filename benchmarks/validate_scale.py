"""Does validation time stay near-linear on dense graphs of routers?

Run: ``.venv/bin/python benchmarks/validate_scale.py [--quick] [--repeat R] [--shapes a,b]``.

For each shape of workflow it validates (``analyze``, what ``iterion-nb
validate`` runs, without the process start-up) versions with 100, 200 and 400
router nodes and prints each time and ``t(400)/t(100)``: about 4 is linear,
16 quadratic, 64 cubic. The shapes aim at C360 (branches of a ``fan_out_all``
router meet at a node without ``await``), whose check is defined in rounds (a
router where branches meet joins them, which can make another one a meeting
point in the next round):

- ``mesh``: each fan-out router goes to the next three; all join in the first round.
- ``cascade``: fan-out ``f{i}`` sends two branches through round-robin routers
  ``x{i}``/``y{i}`` to an agent ``m{i}`` (reported) and on to ``f{i+2}``; ``m{i}``
  goes to ``f{i+1}``, which joins only in the round after ``f{i}`` has joined,
  so there is a round per three routers. Before the one-pass check, each round
  re-ran the whole check (quadratic).
- ``cascade+cycle``: the same and, apart, two agents in a cycle of plain edges
  (C019), which made the former check follow every router's branches one by
  one in every round (cubic: 0.9 s at 300 routers, 7.5 s at 600).
- ``closed-cascade``: the cascade closed into one cycle, which the check runs
  round by round (still quadratic, with a small constant).

Goal: ``t(400)/t(100)`` at most 16 for every shape. Each figure is the
fastest of R runs (``--quick``: one run). Not a unit test: run it when
touching ``iterion_nb/ir/joins.py`` or the graph checks.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from iterion_nb.ir import analyze

SIZES = (100, 200, 400)
RATIO_GOAL = 16.0


def _text(decls: list[str], edges: list[str], entry: str) -> str:
    return "\n".join(decls) + f"\nworkflow w:\n  entry: {entry}\n" + "".join(edges)


def mesh(routers: int) -> str:
    """``routers`` fan-out routers, each going to the next three (or to done)."""
    decls = [f"router r{i}:\n  mode: fan_out_all\n" for i in range(routers)]
    edges: list[str] = []
    for i in range(routers):
        targets = dict.fromkeys(f"r{j}" if j < routers else "done" for j in range(i + 1, i + 4))
        edges += [f"  r{i} -> {dst}\n" for dst in targets]
    return _text(decls, edges, "r0")


def _cascade(routers: int, last: str = "done") -> tuple[list[str], list[str], str]:
    """A cascade of ``routers // 3`` stages, after a chain of single-edge fan-outs (the rest)."""
    layers = routers // 3
    decls = [f"router p{i}:\n  mode: fan_out_all\n" for i in range(routers - 3 * layers)]
    edges = [
        f"  p{i} -> {f'p{i + 1}' if i + 1 < len(decls) else 'f0'}\n" for i in range(len(decls))
    ]
    for i in range(layers):
        one, two = (f"f{j}" if j < layers else "done" for j in (i + 1, i + 2))
        decls += [f"router {k}{i}:\n  mode: {mode}\n" for k, mode in _STAGE]
        edges += [
            f"  f{i} -> x{i}\n",
            f"  f{i} -> y{i}\n",
            f"  x{i} -> {two}\n",
            f"  y{i} -> {two}\n",
        ]
        if i == 0:
            edges += [f"  x0 -> {one}\n", f"  y0 -> {one}\n"]
            continue
        decls.append(f'agent m{i}:\n  model: "scripted"\n')
        edges += [f"  x{i} -> m{i}\n", f"  y{i} -> m{i}\n"]
        edges.append(f"  m{i} -> {one if i + 1 < layers else last}\n")
    return decls, edges, "p0" if routers % 3 else "f0"


_STAGE = (("f", "fan_out_all"), ("x", "round_robin"), ("y", "round_robin"))


def cascade(routers: int) -> str:
    """Each fan-out ``f{i}`` joins in round ``i``: one round per three routers."""
    return _text(*_cascade(routers))


def cascade_and_cycle(routers: int) -> str:
    """The cascade, and apart from it two agents in a cycle of plain edges."""
    decls, edges, entry = _cascade(routers)
    decls += [f'agent {name}:\n  model: "scripted"\n' for name in ("loop_a", "loop_b")]
    edges += ["  loop_a -> loop_b\n", "  loop_b -> loop_a\n"]
    return _text(decls, edges, entry)


def closed_cascade(routers: int) -> str:
    """The cascade whose last agent goes back to the first fan-out: one cycle through it all."""
    return _text(*_cascade(routers, last="f0"))


SHAPES: dict[str, Callable[[int], str]] = {
    "mesh": mesh,
    "cascade": cascade,
    "cascade+cycle": cascade_and_cycle,
    "closed-cascade": closed_cascade,
}


def best_seconds(text: str, repeat: int) -> float:
    """Fastest wall time of validating ``text`` (a result with errors included)."""
    times: list[float] = []
    for _ in range(repeat):
        start = time.perf_counter()
        analyze(text, "bench.iter")
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one run per figure")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated shapes")
    args = parser.parse_args()
    repeat = 1 if args.quick else args.repeat

    print(
        f"{'shape':<16}"
        + "".join(f"{f'{n} routers':>14}" for n in SIZES)
        + f"{'t(400)/t(100)':>15}"
    )
    worst = 0.0
    for name in args.shapes.split(","):
        seconds = [best_seconds(SHAPES[name](n), repeat) for n in SIZES]
        ratio = seconds[-1] / seconds[0]
        worst = max(worst, ratio)
        cells = "".join(f"{s * 1000:>12.1f}ms" for s in seconds)
        print(f"{name:<16}{cells}{ratio:>15.1f}")
    verdict = "meets" if worst <= RATIO_GOAL else "MISSES"
    print(
        f"goal: t(400)/t(100) ≤ {RATIO_GOAL:.0f} (quadratic; linear is 4, cubic 64):"
        f" {verdict} it (worst {worst:.1f})"
    )


if __name__ == "__main__":
    main()
