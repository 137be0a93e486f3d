from __future__ import annotations

import asyncio
import threading

from iterion_nb.runtime.ports import Store

from .conftest import make_run


async def test_messages_are_scoped_and_drained_in_order_once(store: Store) -> None:
    await store.create_run(make_run())
    for n in range(3):
        await store.queue_message("r1", "writer", f"note {n}")
    await store.queue_message("r1", "reviewer", "other node")
    drained = await store.drain_messages("r1", "writer")
    assert [m.text for m in drained] == ["note 0", "note 1", "note 2"]
    assert await store.drain_messages("r1", "writer") == []
    assert [m.text for m in await store.drain_messages("r1", "reviewer")] == ["other node"]


async def test_concurrent_drainers_deliver_each_message_exactly_once(store: Store) -> None:
    await store.create_run(make_run())
    for n in range(50):
        await store.queue_message("r1", "writer", f"m{n}")

    async def drainer() -> list[str]:
        got: list[str] = []
        for _ in range(5):
            got += [m.text for m in await store.drain_messages("r1", "writer")]
            await asyncio.sleep(0)
        return got

    batches = await asyncio.gather(*(drainer() for _ in range(8)))
    everything = [text for batch in batches for text in batch]
    assert sorted(everything) == sorted(f"m{n}" for n in range(50))


async def test_drainers_on_threads_deliver_each_message_exactly_once(store: Store) -> None:
    await store.create_run(make_run())
    got: list[str] = []
    lock = threading.Lock()

    def drain() -> None:
        for _ in range(20):
            batch = asyncio.run(store.drain_messages("r1", "writer"))
            with lock:
                got.extend(m.text for m in batch)

    threads = [threading.Thread(target=drain) for _ in range(4)]
    for t in threads:
        t.start()
    for n in range(40):
        await store.queue_message("r1", "writer", f"m{n}")
    for t in threads:
        t.join()
    got += [m.text for m in await store.drain_messages("r1", "writer")]
    assert sorted(got) == sorted(f"m{n}" for n in range(40))


async def test_answer_and_queue_ring_the_doorbell(store: Store) -> None:
    from .conftest import make_question

    await store.create_run(make_run())
    doorbell = store.doorbell  # type: ignore[attr-defined]
    with doorbell.arm("r1") as ticket:
        await store.queue_message("r1", "writer", "hello")
        assert await ticket.wait(timeout=1.0)
        await store.add_interaction(make_question())
        assert await ticket.wait(timeout=1.0)
        await store.answer("q1", "yes")
        assert await ticket.wait(timeout=1.0)
        # a remote store also hears the holder's rings of its own calls (echoes);
        # once they are in, nothing rings without a cause
        await asyncio.sleep(0.2)
        ticket.consume()
        assert not await ticket.wait(timeout=0.05)


async def test_a_drain_repeated_with_its_token_returns_what_it_took(store: Store) -> None:
    """A drain whose reply was lost (its holder died) is repeated: the messages come back."""
    await store.create_run(make_run())
    await store.queue_message("r1", "writer", "one")
    await store.queue_message("r1", "writer", "two")
    first = await store.drain_messages("r1", "writer", token="t1")
    assert [m.text for m in first] == ["one", "two"]
    again = await store.drain_messages("r1", "writer", token="t1", repeated=True)
    assert [m.text for m in again] == ["one", "two"]
    await store.queue_message("r1", "writer", "three")
    fresh = await store.drain_messages("r1", "writer", token="t2", repeated=True)
    assert [m.text for m in fresh] == ["three"]  # nothing took t2 before: a real drain
    assert await store.drain_messages("r1", "writer") == []
