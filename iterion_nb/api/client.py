"""Calling a store holder's REST API from another process (the CLI, the Jupyter extension).

Requests go over connections on which the holder first proved that it holds
the store (:class:`~iterion_nb.store.holder_file.HolderChannel`): the token
and the data are never sent to anything else.
"""

from __future__ import annotations

import asyncio
import http.client
import json
from pathlib import Path
from typing import Any

from iterion_nb.errors import IterionError
from iterion_nb.store.holder_file import HolderChannel, HolderInfo, UntrustedHolderError


class HolderCallError(IterionError):
    """The holder answered with an error (``status``, ``code``) or could not be reached (0).

    With status 0, ``code`` is ``unreachable`` (nobody answered, or the reply
    was cut off or garbled) or ``untrusted`` (what answered is not the
    store's holder); ``sent`` says whether the request may have reached it.
    ``body`` is the error's whole JSON body (its fields beyond ``code`` and
    ``message``: a conflict's ``existing`` answer, say), empty with status 0.
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        sent: bool = True,
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.sent = sent
        self.body = body or {}


class HolderClient:
    """JSON requests to one holder, with its bearer token, once it proved itself."""

    def __init__(self, holder: HolderInfo, db_path: Path, timeout: float = 60.0) -> None:
        self.holder = holder
        self.timeout = timeout
        try:
            self._channel: HolderChannel | None = HolderChannel(holder, db_path, timeout)
        except UntrustedHolderError:
            self._channel = None

    async def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """One request (off the event loop); an error response raises HolderCallError."""
        return await asyncio.to_thread(self._call, method, path, body)

    def close(self) -> None:
        """Close the idle connections."""
        if self._channel is not None:
            self._channel.close()

    def _call(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        where = f"the store holder (process {self.holder.pid})"
        payload = json.dumps(body).encode() if body is not None else None
        if self._channel is None:
            raise HolderCallError(0, "untrusted", f"{where} has no loopback URL", sent=False)
        try:
            status, raw = self._channel.request(method, path, payload)
        except UntrustedHolderError as err:
            raise HolderCallError(0, "untrusted", f"{where}: {err}", sent=False) from None
        except (OSError, http.client.HTTPException) as err:
            # refused, reset mid-request, timed out, or a cut-off reply
            raise HolderCallError(
                0, "unreachable", f"{where} did not answer: {err or type(err).__name__}"
            ) from None
        try:
            data = json.loads(raw or b"{}")
        except (ValueError, RecursionError):
            data = None
        if not isinstance(data, dict):
            raise HolderCallError(0, "unreachable", f"{where} sent a garbled reply (HTTP {status})")
        if status >= 400:
            raise HolderCallError(
                status, str(data.get("code", "holder_error")), str(data.get("message", status)),
                body=data,
            )  # fmt: skip
        return data
