"""A widget's last state as static HTML, saved in the notebook beside the live view.

A live widget needs its kernel. A notebook saved with one and opened later —
without a kernel, on GitHub, in nbviewer — would show "model not found" or
nothing. So each display of a widget also publishes a *snapshot* output
(HTML, plus a plain-text version), kept current from the widget's refresh
(at most once a second, and at once when the run settles) through
``update_display_data``, in the context of the cell that displayed it.

The live widget hides the snapshots of its own cell (CSS it brings); a
snapshot hides its cell's widget output that failed to render ("model not
found": no element inside), so each place shows one of the two. Sanitizing
renderers drop both style rules and inline SVG, so the graph is an
``<img>`` with an SVG data URI, and everything also reads as text.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import contextvars
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

#: At most one snapshot update a second while things change.
INTERVAL = 1.0
#: Displays of one widget kept up to date (the most recent).
KEEP = 20
#: Hides, in the snapshot's own output area, a widget output that rendered nothing:
#: JupyterLab's widget renderer (the output without a ``data-mime-type``) left with
#: "Error displaying widget: model not found" (it then has the class
#: ``jupyter-widgets``: the whole output goes) or "Loading widget..." (its text goes).
#: (``:has()`` may not nest, hence two rules.)
STYLE = (
    "<style>.jp-OutputArea:has(.iterion-snapshot) > .jp-OutputArea-child:has("
    "> .jp-OutputArea-output.jupyter-widgets:not([data-mime-type])){display:none}"
    ".jp-OutputArea:has(.iterion-snapshot) .jp-OutputArea-output:not([data-mime-type])"
    ":not(:has(*)){display:none}</style>"
)

Bundle = dict[str, str]


def as_of(now: datetime | None = None) -> str:
    """When a snapshot was taken, as it says so: UTC, to the minute."""
    return (now or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")


def saved_line(what: str, when: str) -> str:
    """The first line of a snapshot: a saved view as of a time, not a live state."""
    return (
        f"Snapshot as of {when}, saved with the notebook — not live"
        f" (the live {what} needs the notebook's kernel)"
    )


def svg_image(svg: str, alt: str) -> str:
    """An SVG picture as an ``<img>`` (kept by HTML sanitizers, unlike inline SVG)."""
    from html import escape

    data = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    return f'<img alt="{escape(alt)}" src="data:image/svg+xml;base64,{data}">'


class Snapshots:
    """The snapshot outputs of one widget: published on display, updated as it changes."""

    def __init__(self, render: Callable[[], Bundle]) -> None:
        self._render = render
        self._shown: list[tuple[Any, contextvars.Context]] = []
        self._last = 0.0
        self._sent: Bundle | None = None
        self._timer: asyncio.TimerHandle | None = None

    def publish(self) -> None:
        """Show a snapshot below (before) the widget's output in the current cell."""
        try:
            from IPython import get_ipython
            from IPython.display import display

            if get_ipython() is None:
                return
            bundle = self._render()
            handle = display(bundle, raw=True, display_id=True)  # type: ignore[no-untyped-call]
        except Exception:  # never in the way of the live widget
            return
        if handle is not None:
            self._shown = [*self._shown, (handle, contextvars.copy_context())][-KEEP:]
            self._last = time.monotonic()
            self._sent = None  # the new one may be older than the others: update them all

    def changed(self, *, now: bool = False) -> None:
        """The widget changed: update the snapshots (soon, or ``now``)."""
        if not self._shown:
            return
        wait = INTERVAL - (time.monotonic() - self._last)
        if now or wait <= 0:
            self._update()
            return
        if self._timer is None:
            with contextlib.suppress(RuntimeError):
                self._timer = asyncio.get_running_loop().call_later(wait, self._update)

    def _update(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._last = time.monotonic()
        try:
            bundle = self._render()
        except Exception:
            return
        if bundle == self._sent:
            return
        self._sent = bundle
        for handle, context in self._shown:
            with contextlib.suppress(Exception):
                context.run(handle.update, bundle, raw=True)

    def stop(self) -> None:
        """No more updates (the widget closed)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
