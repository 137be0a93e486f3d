"""The ``iterion-nb`` command's entry point: Ctrl-C from its very start is a message.

Loading the command takes a few tenths of a second; a Ctrl-C meanwhile (or
before the command's own handling begins) would otherwise print Python's
traceback of whatever was being imported.
"""

from __future__ import annotations

import sys

#: Ctrl-C (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED = 130


def main() -> int:
    """Load the command and run it; Ctrl-C anywhere on the way exits 130 with one line."""
    try:
        from iterion_nb.cli.main import main as command

        return command()
    except KeyboardInterrupt:
        sys.stderr.write("iterion-nb: interrupted\n")
        return EXIT_INTERRUPTED
