"""What a run looks like: node states, the graph's layout and its picture.

Shared by the run widget (live, in the notebook) and the reports (HTML and
Markdown), which must show the same states the same way; both sit in one
layer and may not import each other, so this lives below them. Pure
functions over IR workflows and run records; no I/O.
"""

from iterion_nb.view.layout import graph_layout
from iterion_nb.view.states import STATES, NodeView, Visit, node_views, visits
from iterion_nb.view.svg import graph_svg

__all__ = ["STATES", "NodeView", "Visit", "graph_layout", "graph_svg", "node_views", "visits"]
