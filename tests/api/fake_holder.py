"""A process that pretends to hold a store: a rogue on a port, or a holder that lies or dies.

Run as ``python fake_holder.py DB MODE LOG [TOKEN]``. It listens on 127.0.0.1,
publishes a holder file for DB naming itself, prints ``ready`` and serves:

- ``rogue``: knows no token; answers anything with 200 and text that is not JSON;
- ``forger``: answers the hello with JSON whose proof is made up;
- ``garbage``: proves itself (it knows the token it published), then answers
  every other request with 200 and text that is not JSON;
- ``shapeless``: proves itself, then answers JSON of the wrong shape;
- ``hangup``: proves itself, then closes every other connection unanswered.

Every request it receives is appended to LOG as one JSON line.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from iterion_nb.store.holder_file import (
    HolderInfo,
    file_identity,
    holder_proof,
    publish_holder_file,
)

DB, MODE, LOG = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
TOKEN = sys.argv[4] if len(sys.argv) > 4 else secrets.token_urlsafe(32)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args: object) -> None:  # type: ignore[override]
        pass

    def _record(self, body: bytes) -> None:
        entry = {"method": self.command, "path": self.path,
                 "authorization": self.headers.get("Authorization"),
                 "body": body.decode("utf-8", "replace")}  # fmt: skip
        with LOG.open("a") as log:
            log.write(json.dumps(entry) + "\n")

    def _answer(self, status: int, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(data)

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self._record(body)
        url = urlsplit(self.path)
        if url.path == "/api/store/hello" and MODE in ("garbage", "shapeless", "hangup"):
            nonce = parse_qs(url.query).get("nonce", [""])[0]
            address = f"127.0.0.1:{self.server.server_address[1]}"
            proof = holder_proof(TOKEN, nonce, os.getpid(), address, file_identity(DB))
            self._answer(200, json.dumps({"pid": os.getpid(), "proof": proof}).encode())
            return
        if url.path == "/api/store/hello" and MODE == "forger":
            self._answer(200, json.dumps({"pid": os.getpid(), "proof": "0" * 64}).encode())
            return
        if MODE == "hangup":
            self.close_connection = True
            self.connection.close()
            return
        if MODE == "shapeless":
            self._answer(200, b'{"runs": 5, "interactions": 7, "status": [], "result": 1}')
            return
        self._answer(200, b"<html>surprise</html>")

    do_GET = do_POST = _serve  # noqa: N815 - http.server's names


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
url = f"http://127.0.0.1:{server.server_address[1]}"
publish_holder_file(DB, HolderInfo(os.getpid(), url, TOKEN))
print("ready", flush=True)
server.serve_forever()
