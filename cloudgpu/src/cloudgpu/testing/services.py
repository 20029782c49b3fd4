"""Local services the cloud tests run against: moto's AWS endpoint, a fake instance metadata
service. Each returns None (the test skips, saying why) where this machine lacks it."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def aws(env: dict[str, str], *args: str) -> dict:
    """`aws ARGS --output json` in `env` (moto's endpoint), its answer parsed."""
    done = subprocess.run(
        ["aws", *args, "--output", "json"], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout or "{}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def moto_server() -> Iterator[str | None]:
    """moto's AWS API on a free loopback port: yields its URL, or None without moto_server."""
    if shutil.which("moto_server") is None:
        yield None
        return
    port = free_port()
    process = subprocess.Popen(
        ["moto_server", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        for _ in range(100):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=30)


# What the AWS CLI and boto3 need besides the endpoint to reach moto, which accepts any keys.
MOTO_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@contextlib.contextmanager
def moto_env() -> Iterator[dict[str, str]]:
    """moto_server, as the variables that send the AWS CLI and boto3 to it (a test that uses it
    is marked `needs("aws")`, which skips or fails it first where moto_server is missing)."""
    with moto_server() as url:
        if url is None:
            raise RuntimeError("moto_server is not installed: pip install 'moto[server]'")
        yield {"AWS_ENDPOINT_URL": url, **MOTO_CREDENTIALS}


class SpotNotices:
    """An EC2 instance metadata service (IMDSv2) that answers 404 to spot/instance-action until
    `preempt()`, as AWS does until it reclaims a spot instance. AWS then serves the notice until
    the instance is gone; this stand-in serves it once, so that a relaunch on "a new instance"
    (the same machine, here) starts with no notice."""

    def __init__(self) -> None:
        self.pending = False  # the next ask gets the notice
        self.asked = 0
        notices = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_PUT(self) -> None:  # a session token
                self._send(200, "token-for-tests")

            def do_GET(self) -> None:
                if self.path.endswith("/spot/instance-action"):
                    notices.asked += 1
                    if notices.pending:
                        notices.pending = False
                        self._send(200, json.dumps({"action": "terminate", "time": "soon"}))
                        return
                self._send(404, "")

            def _send(self, status: int, text: str) -> None:
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def preempt(self) -> None:
        """Serve the notice to the next ask."""
        self.pending = True

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
