"""The Jupyter server extension: the REST API under ``/iterion/api/...``, behind Jupyter's auth.

Enabled by ``jupyter-config/jupyter_server_config.d/iterion_nb.json``, which
the wheel installs into ``etc/jupyter/jupyter_server_config.d``. The routes
are the store holder's own handlers (``iterion_nb.api.handlers``), each
mixed with jupyter_server's ``APIHandler``: requests need Jupyter's token or
login cookie, and browser POSTs its XSRF token. Calls go to the process that
holds the run store when one is live (so it can resume its runs), else to
the file, which this server then holds and serves. When the server stops,
the extension stops serving and closes the store
(:class:`~iterion_nb.server.extension.IterionExtension`).
"""

from __future__ import annotations

from typing import Any

from iterion_nb.server.extension import IterionExtension, load


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    return [{"module": "iterion_nb.server", "app": IterionExtension}]


__all__ = ["IterionExtension", "load"]
