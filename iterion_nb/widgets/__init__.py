"""The notebook widgets: the inbox (answer agents' questions) and the run view.

Both are anywidgets whose front-end is an ES module shipped in
``iterion_nb/static/`` (sources in ``js/``). They read the store only; an
answer goes through the callable they are given, which is the same path as
the API and the CLI (``RunHandle.answer``). Each display also leaves a
static snapshot of the widget in the notebook.
"""

from iterion_nb.view.layout import graph_layout
from iterion_nb.widgets.common import who_clicked
from iterion_nb.widgets.inbox import InboxWidget
from iterion_nb.widgets.run import RunWidget

__all__ = ["InboxWidget", "RunWidget", "graph_layout", "who_clicked"]
