"""``%load_ext iterion_nb``: the ``%%iterion`` cell magic and the ``%iterion`` line magics."""

from iterion_nb.magics.core import IterionMagics, load, unload
from iterion_nb.magics.results import Answered, LiveRun

__all__ = ["Answered", "IterionMagics", "LiveRun", "load", "unload"]
