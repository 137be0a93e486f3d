"""Keeping a widget's state current: refresh on the doorbell, or at least twice a second.

Answers given in this process ring the store's doorbell and show at once;
answers given through another process (the CLI, another notebook holding
the file) are picked up by the periodic refresh, so the widget is never
more than ``interval`` behind.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from iterion_nb.runtime.doorbell import ANY


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread (a kernel's), if any."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class Live:
    """Calls ``refresh`` now, whenever the doorbell rings for ``key``, and every ``interval``."""

    def __init__(
        self,
        store: Any,
        key: str | None,
        refresh: Callable[[], Awaitable[bool]],
        interval: float = 0.5,
    ) -> None:
        self._store = store
        self._key = key if key is not None else ANY
        self._refresh = refresh
        self.interval = interval
        self.loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Start following on ``loop`` (the running one by default; without one, do nothing)."""
        self.loop = loop or running_loop()
        if self.loop is None or self._task is not None:
            return
        if running_loop() is self.loop:
            self._task = self.loop.create_task(self._follow())
        else:
            self.loop.call_soon_threadsafe(self.start, self.loop)

    async def _follow(self) -> None:
        bell = getattr(self._store, "doorbell", None)
        while True:
            if bell is None:
                more = await self._safe_refresh()
                await asyncio.sleep(self.interval)
            else:
                with bell.arm(self._key) as ticket:
                    more = await self._safe_refresh()
                    if more:
                        await ticket.wait(timeout=self.interval)
            if not more:
                return

    async def _safe_refresh(self) -> bool:
        try:
            return await self._refresh()
        except asyncio.CancelledError:
            raise
        except Exception:  # the store closed or went away: keep trying, slowly
            await asyncio.sleep(self.interval)
            return True

    def stop(self) -> None:
        """Stop following (from any thread)."""
        task, loop = self._task, self.loop
        self._task = None
        if task is None or loop is None or loop.is_closed():
            return
        if running_loop() is loop:
            task.cancel()
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(task.cancel)

    @property
    def following(self) -> bool:
        """Whether the refresh task is running."""
        return self._task is not None and not self._task.done()


def on_loop(loop: asyncio.AbstractEventLoop | None, fn: Callable[[], Any]) -> None:
    """Run ``fn`` on ``loop``'s thread: now if this is it, else scheduled thread-safely.

    Widget messages arrive on the kernel's main loop (ipykernel 7.4) or on a
    subshell thread (ipykernel 7.0-7.3 under JupyterLab 4.4+): either way the
    work happens on the loop that runs the workflows.
    """
    if loop is None or running_loop() is loop:
        fn()
    else:
        loop.call_soon_threadsafe(fn)
