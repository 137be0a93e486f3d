"""The notebook widgets: the inbox (answer agents' questions) and the run view.

Both are anywidgets whose front-end is an ES module shipped in
``iterion_nb/static/`` (sources in ``js/``). They read the store only; an
answer goes through the callable they are given, which is the same path as
the API and the CLI (``RunHandle.answer``).
"""

from iterion_nb.ir.layout import graph_layout
from iterion_nb.widgets.inbox import InboxWidget
from iterion_nb.widgets.run import RunWidget

__all__ = ["InboxWidget", "RunWidget", "graph_layout"]
