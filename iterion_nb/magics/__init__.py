"""``%load_ext iterion_nb``: the ``%%iterion`` cell magic and the ``%iterion`` line magics."""

from iterion_nb.magics.core import IterionMagics, LiveRun, load, unload

__all__ = ["IterionMagics", "LiveRun", "load", "unload"]
