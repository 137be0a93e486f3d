"""The claude CLI dies with the process that runs it (kill -9 included).

The SDK starts the CLI as a plain child, in our own process group. Were this
process killed with SIGKILL, the CLI would see its stdin close, but only once
it finished the turn it was in: it would take the model's reply, run the tools
it asked for (the node's MCP servers among them) and ask the model again, all
while the run goes on elsewhere from its checkpoint — the node twice at once.

So the CLI runs as the leader of a process group of its own (a one-line
launcher calls ``setsid`` and ``exec``s the CLI, so the pid stays the same),
and this process's reaper (:mod:`iterion_nb.runtime.reaper`) watches that
group as it watches a tool command's, from the CLI's start to its end. The MCP
stdio servers the CLI starts are in the group too: the reaper kills them with
it, and what is left of the group when the CLI ends here is killed then.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

from claude_agent_sdk._internal.transport.subprocess_cli import SubprocessCLITransport

from iterion_nb.runtime import reaper

#: Runs ``argv[1:]`` as the leader of a new session (and so of a new process group).
LAUNCHER = "import os, sys; os.setsid(); os.execvp(sys.argv[1], sys.argv[1:])"


class ReapedTransport(SubprocessCLITransport):
    """The SDK's transport, with the CLI in a process group the reaper watches."""

    group: int | None = None

    def _build_command(self) -> list[str]:
        command = super()._build_command()
        if not hasattr(os, "setsid"):  # no process groups (Windows): as the SDK starts it
            return command
        return [sys.executable, "-c", LAUNCHER, *command]

    async def connect(self) -> None:
        """Start the CLI (as the SDK does), and have the reaper watch its group."""
        await super().connect()
        if self._process is not None and hasattr(os, "setsid"):
            self.group = self._process.pid
            reaper.watch(self.group)

    async def close(self) -> None:
        """Close the CLI (as the SDK does); kill what is left of its group; unwatch it."""
        try:
            await super().close()
        finally:
            if self.group is not None:
                with contextlib.suppress(ProcessLookupError):  # an MCP server left behind
                    os.killpg(self.group, signal.SIGKILL)
                reaper.unwatch(self.group)
                self.group = None
