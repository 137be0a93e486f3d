"""Measure report rendering: a 10,000-event run, as HTML and as Markdown.

Run: ``.venv/bin/python benchmarks/report.py [--events N] [--repeat R]``.
Builds a run in a temporary DuckDB store (a real workflow source, 10,000
events spread over its nodes, 50 questions), then times reading the data and
rendering each format. Prints the best of R runs, each with the goal
(issue "REST inside Jupyter, and exported run reports": <= 1 s), and the
share of reading vs rendering. Compare ratios within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from iterion_nb.report.build import collect
from iterion_nb.report.html import to_html
from iterion_nb.report.markdown import to_markdown
from iterion_nb.runtime.records import Interaction, Option, Run
from iterion_nb.store import open_duckdb_store

ROOT = Path(__file__).resolve().parent.parent
GOAL_SECONDS = 1.0


async def build(path: Path, events: int) -> None:
    """A finished run of fanout_retry.iter with ``events`` events and 50 answered questions."""
    store = open_duckdb_store(path)
    source = (ROOT / "examples" / "fanout_retry.iter").read_text()
    now = datetime.now(UTC)
    await store.create_run(Run("bench", "review_loop", "h", "running", now, now, source=source))
    nodes = ["writer", "reviews", "accuracy", "style", "judge"]
    for n in range(events):
        node = nodes[n % len(nodes)]
        kind = ("node_started", "llm_step_finished", "tool_called", "node_finished")[n % 4]
        data = {"turn": n, "text": f"step {n} of {node}: " + "lorem ipsum " * 8}
        await store.append_event("bench", kind, data, node_id=node)
    for q in range(50):
        question = Interaction(
            f"q{q}", "bench", nodes[q % 5], "async", (f"Question {q}? <b>bold</b>",), now,
            options=(Option("a", "A"), Option("b", "B")),
        )  # fmt: skip
        await store.add_interaction(question)
        await store.answer(f"q{q}", "a", answered_by="bench")
    outputs = {name: {"summary": "x" * 200, "score": 8} for name in nodes}
    await store.update_run(
        "bench", status="finished",
        checkpoint={"outputs": outputs, "usage": {"tokens": 123456, "cost_usd": 1.23}},
    )  # fmt: skip
    await store.close()


async def measure(path: Path, repeat: int) -> dict[str, float]:
    store = open_duckdb_store(path)
    best = {"read": 1e9, "html": 1e9, "md": 1e9}
    try:
        for _ in range(repeat):
            t0 = time.perf_counter()
            data = await collect(store, "bench")
            t1 = time.perf_counter()
            html = to_html(data)
            t2 = time.perf_counter()
            md = to_markdown(data)
            t3 = time.perf_counter()
            best["read"] = min(best["read"], t1 - t0)
            best["html"] = min(best["html"], t2 - t1)
            best["md"] = min(best["md"], t3 - t2)
        best["html_bytes"] = len(html.encode())
        best["md_bytes"] = len(md.encode())
        best["events"] = len(data.events)
    finally:
        await store.close()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "report.duckdb"
        asyncio.run(build(path, args.events))
        best = asyncio.run(measure(path, args.repeat))
    for fmt in ("html", "md"):
        total = best["read"] + best[fmt]
        verdict = "ok" if total <= GOAL_SECONDS else "OVER GOAL"
        print(
            f"{fmt:>4} report of {int(best['events']):,} events: {total * 1000:7.1f} ms "
            f"(read {best['read'] * 1000:.1f} ms + render {best[fmt] * 1000:.1f} ms; "
            f"{best[f'{fmt}_bytes'] / 1e6:.1f} MB) — goal <= {GOAL_SECONDS:.0f} s: "
            f"{total / GOAL_SECONDS:.2f} of the budget, {verdict}"
        )
    print(f"html / md render time ratio: {best['html'] / best['md']:.2f}")


if __name__ == "__main__":
    main()
