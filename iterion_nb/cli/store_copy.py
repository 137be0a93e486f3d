"""``iterion-nb store copy SRC DST``: move runs between stores (DuckDB file, PostgreSQL).

Each run travels whole (record, events with their seqs and times, artifacts,
questions and answers, messages) and replaces the destination's copy in one
transaction, so copying again changes nothing. A run that is executing (in
the source: it would be copied half done; in the destination: it would be
overwritten) is skipped and named.
"""

from __future__ import annotations

import argparse
from typing import Any

from iterion_nb.errors import IterionError, NotFoundError, RunOwnedError
from iterion_nb.runtime.ports import Store
from iterion_nb.store.location import resolve_store_path
from iterion_nb.store.remote import open_store


def add_store_commands(sub: Any) -> None:
    """Register ``store copy``."""
    store = sub.add_parser("store", help="move runs between stores")
    verbs = store.add_subparsers(dest="verb", required=True, metavar="VERB")
    copy = verbs.add_parser(
        "copy", help="copy runs from SRC to DST (a DuckDB path or a postgresql:// URL)"
    )
    copy.add_argument("src")
    copy.add_argument("dst")
    copy.add_argument("--run", action="append", default=[], metavar="ID",
                      help="only this run (repeatable); default: every run")  # fmt: skip
    copy.add_argument("--json", action="store_true", help="print JSON")


async def copy_runs(src: Store, dst: Store, only: list[str]) -> dict[str, Any]:
    """Copy runs; a summary: how many were created, updated, unchanged, and which were skipped."""
    counts = {"created": 0, "updated": 0, "unchanged": 0}
    skipped: list[dict[str, str]] = []
    ids = only or [r.id for r in await src.list_runs(limit=10**9)]
    for run_id in ids:
        run = await src.get_run(run_id)
        if run.lease is not None:
            held = run.lease
            how = (f"waits in a cluster's queue (queued by process {held.pid} on {held.host})"
                   if held.queued else f"owned by process {held.pid} on {held.host}")  # fmt: skip
            skipped.append({"id": run_id, "why": f"{run.status} in the source ({how})"})
            continue
        bundle = await src.export_run(run_id)
        try:
            counts[await dst.import_run(bundle)] += 1
        except RunOwnedError as err:
            skipped.append({"id": run_id, "why": f"live in the destination: {err}"})
    return {**counts, "skipped": skipped}


async def store_copy(args: argparse.Namespace) -> dict[str, Any]:
    """``store copy SRC DST``."""
    if _same(args.src, args.dst):
        raise IterionError("SRC and DST are the same store")
    src = open_store(args.src)
    try:
        for run_id in args.run:  # named runs the source lacks: said before DST is made
            try:
                await src.get_run(run_id)
            except NotFoundError as err:
                raise IterionError(f"the source has {err}; nothing was copied") from None
        dst = open_store(args.dst)
        try:
            return await copy_runs(src, dst, args.run)
        except NotFoundError as err:
            raise IterionError(f"the source has {err}") from None
        finally:
            await dst.close()
    finally:
        await src.close()


def _same(a: str, b: str) -> bool:
    if "://" in a or "://" in b:
        return a == b
    return resolve_store_path(a) == resolve_store_path(b)


def copied_lines(result: dict[str, Any]) -> list[str]:
    """The summary, as text."""
    lines = [f"{result['created']} created, {result['updated']} updated,"
             f" {result['unchanged']} unchanged, {len(result['skipped'])} skipped"]  # fmt: skip
    lines += [f"  skipped {s['id']}: {s['why']}" for s in result["skipped"]]
    return lines
