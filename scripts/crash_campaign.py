"""A longer crash campaign than CI's: kill -9 owners and holders, then check what runs promise.

Each iteration is one run of the campaign workflow in real processes on a real
DuckDB file (see tests/api/test_crash_campaign.py for what runs and what is
checked), killed with SIGKILL at seeded moments and resumed until it
finishes. Iterations cycle through three set-ups: the owner holds the file;
the owner is a client of a separate holder and is killed; the holder (or the
owner) is killed under a client owner. A seed gives the same schedule of
kills, crash points and answer surfaces (process timing still varies).

Run: .venv/bin/python scripts/crash_campaign.py --iterations 50 --seed 1
Exit code 1 when a violation not yet known (not in KNOWN) was found.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.api.test_crash_campaign import KNOWN, Iteration, Outcome  # noqa: E402

HEADER = f"{'seed':>6}  {'mode':<7} {'kills':>10} {'crashpts':>8} {'answers':>7} {'secs':>6}"
HEADER += "  violations"
SETUPS = {
    "local": ("local", ("owner",)),
    "client-owner": ("client", ("owner",)),
    "client-holder": ("client", ("holder", "holder", "owner")),
}


def setup_for(mode: str, n: int) -> tuple[str, tuple[str, ...]]:
    """The set-up of the n-th iteration (``mixed`` cycles through all three)."""
    if mode == "mixed":
        return list(SETUPS.values())[n % len(SETUPS)]
    return SETUPS[mode]


def row(outcome: Outcome) -> str:
    """One line of the table for one iteration."""
    found = Counter(category for category, _ in outcome.violations)
    text = ", ".join(f"{c} x{k}" for c, k in sorted(found.items())) or "-"
    owners = sum(1 for kill in outcome.kills if kill.status is not None)
    kills = f"{len(outcome.kills)} ({owners}o/{len(outcome.kills) - owners}h)"
    return (
        f"{outcome.seed:>6}  {outcome.mode:<7} {kills:>10} {len(outcome.crashes):>8}"
        f" {outcome.answers:>7} {outcome.seconds:>6.1f}  {text}"
    )


def report(outcomes: list[Outcome]) -> int:
    """Print the summary; 1 if a violation is not a known one."""
    kills = sum(len(o.kills) for o in outcomes)
    crashes = sum(len(o.crashes) for o in outcomes)
    found = Counter(c for o in outcomes for c, _ in o.violations)
    hit = sum(1 for o in outcomes if o.violations)
    print()
    print(f"iterations            {len(outcomes)}")
    owners = sum(1 for o in outcomes for k in o.kills if k.status is not None)
    # an owner's death is probed right after the kill; a bare holder's is not
    print(
        f"kills (SIGKILL)       {kills}: {owners} of an owner, {kills - owners} of a holder only,"
    )
    print(f"                      {crashes} of them at a named crash point")
    print(f"answers acknowledged  {sum(o.answers for o in outcomes)}")
    print(f"violations found      {sum(found.values())} in {hit} iteration(s)")
    for category, count in sorted(found.items()):
        known = KNOWN.get(category)
        note = f"known: {known}" if known else "NEW"
        print(f"  {category:<36} {count:>4}  {note}")
    unknown = [o for o in outcomes if o.unknown()]
    for outcome in unknown:
        for category, detail in outcome.unknown():
            print(f"  seed {outcome.seed}: {category}: {detail}")
    return 1 if unknown else 0


def main(argv: list[str] | None = None) -> int:
    """Run the campaign and print a table and a summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=30, help="how many runs (30)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the first iteration (1)")
    parser.add_argument("--mode", choices=["mixed", *SETUPS], default="mixed")
    parser.add_argument("--kills", type=int, default=3, help="most random kills per run (3)")
    parser.add_argument("--keep", action="store_true", help="keep the working directories")
    parser.add_argument("--verbose", action="store_true", help="print what each run went through")
    args = parser.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="iterion-crash-campaign-"))
    print(HEADER)
    outcomes: list[Outcome] = []
    try:
        for n in range(args.iterations):
            mode, targets = setup_for(args.mode, n)
            iteration = Iteration(base, args.seed + n, mode, targets, args.kills)
            outcomes.append(iteration.run())
            print(row(outcomes[-1]), flush=True)
            if args.verbose:
                print("\n".join(f"        {line}" for line in iteration.journal))
                for category, detail in outcomes[-1].violations:
                    print(f"        ! {category}: {detail}")
    except KeyboardInterrupt:
        print("interrupted")
    finally:
        if args.keep:
            print(f"working directories kept in {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    return report(outcomes)


if __name__ == "__main__":
    sys.exit(main())
