"""A client of a holder that dies takes the file over and goes on (no concurrent burst)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from iterion_nb.store.remote import RemoteStore, open_store

from .test_takeover import HOLDER


async def test_a_client_takes_the_file_over_when_its_holder_dies(tmp_path: Path) -> None:
    db = tmp_path / "burst.duckdb"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db), "4"], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
    store = open_store(db)
    try:
        assert isinstance(store, RemoteStore)
        first = await store.answer("q0", "before", answered_by="me")
        assert first.message is not None
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        second = await store.answer("q1", "after", answered_by="me")
        assert store.took_over
        assert second.interaction.answers == "after"
        # an acknowledged answer retried after the take-over counts once
        again = await store.answer("q0", "before", answered_by="me")
        assert again.interaction.answers == "before"
        drained = await store.drain_messages("burst", "asker")
        assert [m.text.split("]")[0] for m in drained] == [
            "[Answer to question q0",
            "[Answer to question q1",
        ]
        pending = await store.pending_interactions("burst")
        assert [p.id for p in pending] == ["q2", "q3"]
    finally:
        await store.close()
        if holder.poll() is None:
            holder.kill()
            holder.wait()
