from __future__ import annotations

import asyncio
import threading
import time

from iterion_nb.runtime.doorbell import ANY, Doorbell


async def test_a_ring_between_check_and_wait_is_not_lost() -> None:
    bell = Doorbell()
    with bell.arm("r1") as ticket:
        # the waiter has armed and is "checking the store" when the ring lands
        bell.ring("r1")
        started = time.monotonic()
        assert await ticket.wait(timeout=5.0) is True
        assert time.monotonic() - started < 0.5


async def test_wait_times_out_without_a_ring() -> None:
    bell = Doorbell()
    with bell.arm("r1") as ticket:
        bell.ring("other-run")
        assert await ticket.wait(timeout=0.05) is False


async def test_ring_from_another_thread_wakes_the_loop() -> None:
    bell = Doorbell()
    with bell.arm("r1") as ticket:
        timer = threading.Timer(0.05, bell.ring, args=("r1",))
        timer.start()
        started = time.monotonic()
        assert await ticket.wait(timeout=5.0) is True
        assert time.monotonic() - started < 2.0
        timer.join()


async def test_any_sees_every_run_and_each_wait_consumes_rings() -> None:
    bell = Doorbell()
    with bell.arm(ANY) as ticket:
        bell.ring("r1")
        bell.ring("r2")
        assert await ticket.wait(timeout=1.0)
        assert not await ticket.wait(timeout=0.02)


async def test_many_waiters_all_wake() -> None:
    bell = Doorbell()
    tickets = [bell.arm("r1") for _ in range(20)]
    waits = [asyncio.ensure_future(t.wait(timeout=5.0)) for t in tickets]
    await asyncio.sleep(0.01)
    bell.ring("r1")
    assert await asyncio.gather(*waits) == [True] * 20
    for t in tickets:
        t.close()
    assert bell._tickets == {}
