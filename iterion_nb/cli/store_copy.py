"""``iterion-nb store copy SRC DST``: move runs between stores (DuckDB file, PostgreSQL).

Each run travels whole (record, events with their seqs and times, artifacts,
questions and answers, messages) and replaces the destination's copy in one
transaction, so copying again changes nothing. A run that is executing (in
the source: it would be copied half done; in the destination: it would be
overwritten) is skipped and named.

Nothing recorded is lost: a destination's copy is replaced only when it is an
earlier state of the source's (everything it recorded, the source has too).
The destination checks that in the transaction that would replace it, with
both copies at hand (:func:`~iterion_nb.runtime.lineage.import_outcome`):
its events must be the first of the source's, seq for seq, its artifacts,
questions and messages in the source's, as they are or later on (a pending
question since answered, ended or amended; a queued message since
delivered). A copy that recorded what the source lacks is skipped and named,
and the command exits 1: *newer in the destination* when the source has
nothing it lacks, *diverged* when each store recorded something the other
has not (a question answered in both, say). ``--force`` replaces those too;
a run a live owner executes in the destination is never replaced.
"""

from __future__ import annotations

import argparse
from typing import Any

from iterion_nb.cli.inputs import id_arg
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
    copy.add_argument("--run", action="append", default=[], metavar="ID", type=id_arg,
                      help="only this run (repeatable); default: every run")  # fmt: skip
    copy.add_argument("--force", action="store_true",
                      help="also replace the destination's copy of a run that diverged from"
                           " the source's or is newer (what only it recorded is lost)")  # fmt: skip
    copy.add_argument("--json", action="store_true", help="print JSON")


#: Why a run whose destination copy recorded what the source lacks is skipped.
KEPT_WHY = {
    "diverged": "diverged: both stores recorded different things since the last copy;"
    " copy the other way, or pass --force to replace the destination's copy",
    "newer": "newer in the destination: it recorded more since the last copy, and the source"
    " has nothing it lacks; copy the other way, or pass --force to replace the destination's copy",
}


async def copy_runs(
    src: Store, dst: Store, only: list[str], *, force: bool = False
) -> dict[str, Any]:
    """Copy runs; a summary: how many were created, updated, unchanged, and which were skipped.

    Each skipped run is ``{"id", "why", "reason"}``; ``reason`` is ``live_in_source``,
    ``live_in_destination``, ``diverged`` or ``newer`` (in the destination).
    """
    counts = {"created": 0, "updated": 0, "unchanged": 0}
    skipped: list[dict[str, str]] = []
    ids = only or [r.id for r in await src.list_runs(limit=10**9)]
    for run_id in ids:
        run = await src.get_run(run_id)
        if run.lease is not None:
            held = run.lease
            how = (f"waits in a cluster's queue (queued by process {held.pid} on {held.host})"
                   if held.queued else f"owned by process {held.pid} on {held.host}")  # fmt: skip
            skipped.append({"id": run_id, "why": f"{run.status} in the source ({how})",
                            "reason": "live_in_source"})  # fmt: skip
            continue
        bundle = await src.export_run(run_id)
        try:
            outcome = await dst.import_run(bundle, force=force)
        except RunOwnedError as err:
            skipped.append({"id": run_id, "why": f"live in the destination: {err}",
                            "reason": "live_in_destination"})  # fmt: skip
            continue
        if outcome in KEPT_WHY:
            skipped.append({"id": run_id, "why": KEPT_WHY[outcome], "reason": outcome})
        else:
            counts[outcome] += 1
    return {**counts, "skipped": skipped}


def copy_exit_code(result: dict[str, Any]) -> int:
    """1 if a run was skipped because its destination copy recorded what the source lacks."""
    return 1 if any(s.get("reason") in KEPT_WHY for s in result["skipped"]) else 0


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
            return await copy_runs(src, dst, args.run, force=args.force)
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
