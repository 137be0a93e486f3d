"""Calling a store holder's REST API from another process (the CLI, the Jupyter extension)."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from typing import Any

from iterion_nb.errors import IterionError
from iterion_nb.store.holder_file import HolderInfo


class HolderCallError(IterionError):
    """The holder answered with an error (``status``, ``code``) or could not be reached (0)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class HolderClient:
    """JSON requests to one holder, with its bearer token."""

    def __init__(self, holder: HolderInfo, timeout: float = 60.0) -> None:
        self.holder = holder
        self.timeout = timeout

    async def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """One request (off the event loop); an error response raises HolderCallError."""
        return await asyncio.to_thread(self._call, method, path, body)

    def _call(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        payload = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.holder.url + path, data=payload, method=method,
            headers={"Authorization": f"Bearer {self.holder.token}",
                     "Content-Type": "application/json"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as err:
            try:
                data = json.loads(err.read() or b"{}")
            except ValueError:
                data = {}
            if not isinstance(data, dict):
                data = {}
            raise HolderCallError(
                err.code,
                str(data.get("code", "holder_error")),
                str(data.get("message", err.reason)),
            ) from None
        except urllib.error.URLError as err:
            raise HolderCallError(
                0,
                "unreachable",
                f"cannot reach the store holder at {self.holder.url}: {err.reason}",
            ) from None
        except (ConnectionError, TimeoutError, OSError, ValueError) as err:
            # the holder went away mid-request (reset, closed, cut-off or garbled reply)
            raise HolderCallError(
                0, "unreachable", f"the store holder at {self.holder.url} did not answer: {err}"
            ) from None
