"""A loopback stand-in for what an Azure ML endpoint's container reaches for a bucket: the
managed identity's token service (MSI_ENDPOINT, with the MSI_SECRET header, as Azure ML sets
them) and Blob Storage's Put Blob. Blobs land in a folder; a request without the secret, the
token or the headers Blob Storage requires of a bearer token is refused as Azure refuses it.
It proves what the server sends, not what Azure accepts.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

SECRET = "stand-in-msi-secret"
TOKEN = "stand-in-storage-token"


@dataclass
class AzureBlob:
    url: str
    folder: Path
    refuse: bool = False  # every Put Blob answered 403, as a missing role assignment is
    token_queries: list[dict[str, str]] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        """The variables Azure ML gives an endpoint's container, and the one that lets the
        server's buckets.py write to this stand-in (on loopback, over http)."""
        return {"MSI_ENDPOINT": f"{self.url}/msi/token", "MSI_SECRET": SECRET,
                "BUCKETS_TEST_LOOPBACK": self.url}  # fmt: skip

    def container_url(self, container: str, prefix: str) -> str:
        return f"{self.url}/{container}/{prefix}"


def error(code: str) -> bytes:
    return f"<Error><Code>{code}</Code></Error>".encode()


def _handler(store: AzureBlob) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _answer(self, status: int, body: bytes = b"", kind: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            if parts.path != "/msi/token" or self.headers.get("secret") != SECRET:
                return self._answer(400, b'{"error": "no such identity endpoint or secret"}')
            store.token_queries.append(dict(parse_qsl(parts.query)))
            self._answer(200, json.dumps({"access_token": TOKEN, "expires_on": "0"}).encode())

        def do_PUT(self) -> None:
            data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = self.headers
            if headers.get("Authorization") != f"Bearer {TOKEN}":
                return self._answer(401, error("NoAuthenticationInformation"))
            version = headers.get("x-ms-version", "")  # 2017-11-09 first took a bearer token
            if headers.get("x-ms-blob-type") != "BlockBlob" or version < "2017-11-09":
                return self._answer(400, error("MissingRequiredHeader"))
            if store.refuse:
                return self._answer(403, error("AuthorizationPermissionMismatch"))
            target = store.folder / unquote(urlsplit(self.path).path).lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            self._answer(201)

    return Handler


@contextlib.contextmanager
def serve(folder: Path) -> Iterator[AzureBlob]:
    """The stand-in on a free loopback port, its blobs under `folder`, for the block."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    store = AzureBlob(f"http://127.0.0.1:{server.server_address[1]}", folder)
    server.RequestHandlerClass = _handler(store)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield store
    finally:
        server.shutdown()
        server.server_close()
