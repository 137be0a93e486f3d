"""Many processes answering one store through its holder."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from iterion_nb.store import open_duckdb_store

QUESTIONS = 200
CLIENTS = 20

HOLDER = textwrap.dedent(
    """
    import asyncio, sys
    from datetime import UTC, datetime
    import iterion_nb as it
    from iterion_nb.runtime.records import Interaction, Run

    async def main():
        session = it.Session(sys.argv[1])
        session.serve()
        store = session.store
        now = datetime.now(UTC)
        await store.create_run(Run("burst", "w", "h", "running", now, now))
        for n in range(int(sys.argv[2])):
            question = Interaction(f"q{n}", "burst", "asker", "async", (f"Q{n}?",), now)
            await store.add_interaction(question)
        print("ready", flush=True)
        await asyncio.sleep(120)

    asyncio.run(main())
    """
)

CLIENT = textwrap.dedent(
    """
    import asyncio, json, random, sys
    from iterion_nb.api.holder import open_served_store
    from iterion_nb.errors import AlreadyAnsweredError

    async def main():
        name, count = sys.argv[2], int(sys.argv[3])
        store = open_served_store(sys.argv[1])
        ids = [f"q{n}" for n in range(count)]
        random.shuffle(ids)
        won, lost = [], 0
        for iid in ids:
            try:
                await store.answer(iid, f"from {name}", answered_by=name)
                won.append(iid)
                print(json.dumps({"won": iid}), flush=True)
            except AlreadyAnsweredError:
                lost += 1
                print(json.dumps({"lost1": iid}), flush=True)
        await store.close()
        print(json.dumps({"lost": lost}), flush=True)

    asyncio.run(main())
    """
)


def start_holder(db: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db), str(QUESTIONS)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def clients(db: Path) -> list[subprocess.Popen[str]]:
    return [
        subprocess.Popen(
            [sys.executable, "-c", CLIENT, str(db), f"client{k}", str(QUESTIONS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(CLIENTS)
    ]


def outcomes(
    procs: list[subprocess.Popen[str]], seen: str = ""
) -> tuple[dict[str, list[str]], int]:
    """What each client was told: answers it won, and how many it lost (409)."""
    won: dict[str, list[str]] = {}
    lost = 0
    for k, proc in enumerate(procs):
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-2000:]
        for line in ((seen if k == 0 else "") + out).splitlines():
            record = json.loads(line)
            if "won" in record:
                won.setdefault(record["won"], []).append(f"client{k}")
            elif "lost" in record:
                lost += record["lost"]
    return won, lost


async def check_store(db: Path, won: dict[str, list[str]]) -> None:
    store = open_duckdb_store(db)
    try:
        records = await store.interactions("burst")
        answered = {r.id: r for r in records if not r.pending}
        for iid, winners in won.items():
            assert len(winners) == 1, f"{iid} acknowledged to {winners}"
            assert answered[iid].answered_by == winners[0]
            assert answered[iid].answers == f"from {winners[0]}"
        messages = await store.drain_messages("burst", "asker")
        assert sorted(m.text.split("]")[0] for m in messages) == sorted(
            f"[Answer to question {iid}" for iid in answered
        )
    finally:
        await store.close()


@pytest.mark.timeout(300)
async def test_twenty_processes_answer_two_hundred_questions_once(tmp_path: Path) -> None:
    db = tmp_path / "burst.duckdb"
    holder = start_holder(db)
    try:
        won, lost = await asyncio.to_thread(outcomes, clients(db))
    finally:
        holder.kill()
        holder.wait()
    assert sorted(won) == sorted(f"q{n}" for n in range(QUESTIONS))
    assert lost == QUESTIONS * (CLIENTS - 1)
    await check_store(db, won)


@pytest.mark.timeout(300)
async def test_holder_killed_mid_burst_loses_no_acknowledged_answer(tmp_path: Path) -> None:
    db = tmp_path / "burst.duckdb"
    holder = start_holder(db)
    procs = clients(db)
    try:
        # wait until the burst is under way: the first client has had 20 replies
        first = procs[0].stdout
        assert first is not None
        seen = "".join(first.readline() for _ in range(20))
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        won, lost = await asyncio.to_thread(outcomes, procs, seen)
    finally:
        for proc in [holder, *procs]:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    # every question was acknowledged to exactly one client, and is stored that way
    assert sorted(won) == sorted(f"q{n}" for n in range(QUESTIONS))
    assert lost == QUESTIONS * (CLIENTS - 1)
    await check_store(db, won)
