"""The model server (cloudgpu.serving) against hostile callers, over real HTTP on loopback:
requests built to cost memory, time or a 500; slow and endless headers; more requests at once
than it holds; a body trickling through SIGTERM; a sampler that cannot write; a bucket that
redirects its token."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import test_serving
from cloudgpu.testing import google_api
from served_model import Server, start, stop

model, server = test_serving.model, test_serving.server  # the fixtures: one model, one server


def strict(body: bytes) -> dict:
    """`body` as JSON, refusing NaN and infinity as JSON itself does."""

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in the answer: not JSON")

    return json.loads(body, parse_constant=refuse)


def v2(tensor: dict) -> bytes:
    return json.dumps({"inputs": [{"name": "input", "datatype": "FP32", **tensor}]}).encode()


HOSTILE = {  # id: (path, body, headers, status, the start of the error line)
    "v2-shape-16M-by-0": ("/v2/models/model/infer", v2({"shape": [16000000, 0], "data": []}), {},
                          400, "shape [16000000, 0]: send [N, 1, 8, 8] or [N, 64]"),
    "v2-shape-16M": ("/v2/models/model/infer", v2({"shape": [16000000, 64], "data": []}), {},
                     413, "shape [16000000, 64]"),
    "v2-negative": ("/v2/models/model/infer", v2({"shape": [-1, -64], "data": [0] * 64}), {},
                    400, "shape [-1, -64]"),
    "v2-zero": ("/v2/models/model/infer", v2({"shape": [0], "data": []}), {}, 400, "shape [0]"),
    "v2-header-length": ("/v2/models/model/infer", v2({"shape": [1, 64]}),
                         {"Inference-Header-Content-Length": "1e3"}, 400,
                         "inference-header-content-length '1e3'"),
    "5000-digits": ("/invocations", b'{"instances": [[' + b"9" * 5000 + b"]]}", {}, 400,
                    "the body holds a number of over 4300 digits"),
    "3000-deep": ("/invocations", b'{"instances": ' + b"[" * 3000 + b"]" * 3000 + b"}", {}, 400,
                  "the body's JSON nests too deep"),
    "many-lists": ("/invocations", b'{"instances": [' + b"[0]," * 400_000 + b"[0]]}", {}, 413,
                   "the body holds more than 1024 inputs of shape [1, 8, 8]"),
    "huge-but-finite": ("/invocations", json.dumps({"instances": [[3e38] * 64]}).encode(), {},
                        422, "instance 0: the model's output is not finite"),
}  # fmt: skip


@pytest.mark.parametrize(
    ("path", "body", "headers", "status", "message"), HOSTILE.values(), ids=HOSTILE.keys()
)
def test_a_hostile_request_is_a_4xx_in_one_line_and_costs_little(
    server: Server, path: str, body: bytes, headers: dict, status: int, message: str
) -> None:
    """Checked before anything is built from it: answered at once, in strict JSON; then the
    server answers the next request, and its metrics stay finite."""
    started = time.monotonic()
    got, answer = server.call("POST", path, body, {"Content-Type": "application/json", **headers})
    took = time.monotonic() - started
    assert got == status, answer[:300]
    error = strict(answer)["error"]
    assert error.startswith(message) and "\n" not in error, error
    assert took < 2, f"{took:.1f} s to refuse it"
    status, fine = server.call(
        "POST", "/invocations", json.dumps({"instances": [[0.0] * 64]}).encode()
    )
    assert status == 200 and strict(fine)["predictions"]
    metrics = server.call("GET", "/metrics")[1].decode().splitlines()
    values = {line.split()[-1] for line in metrics if not line.startswith("#")}
    assert not values & {"NaN", "+Inf", "-Inf"}, "the metrics stay finite"


def trickle(port: int, head: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(head)
    return sock


def cut_off(sock: socket.socket, status: bytes) -> bool:
    """Whether the server answered `status` and closed, or closed (its answer lost to the
    reset that our writes after its close brought)."""
    sock.settimeout(1)
    try:
        answer = sock.recv(300)
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return answer == b"" or answer.startswith(b"HTTP/1.1 " + status)


def test_slow_or_endless_headers_and_too_many_requests_do_not_hold_the_server(
    server: Server,
) -> None:
    """240 connections trickling their headers are cut off after 10 s while /live answers; a
    header block past 64 KiB gets a 431; requests beyond 256 at once get a 503 at once."""
    port = int(server.url.rsplit(":", 1)[1])
    slow = [trickle(port, b"POST /invocations HTTP/1.1\r\nHost: x\r\n") for _ in range(240)]
    deadline = time.monotonic() + 13
    while time.monotonic() < deadline:
        for sock in slow:
            with contextlib.suppress(OSError):  # once cut off
                sock.sendall(b"X-Slow: 1\r\n")
        assert server.call("GET", "/live")[0] == 200
        time.sleep(1)
    assert all(cut_off(sock, b"408") for sock in slow), "cut off after 10 s"
    for sock in slow:
        sock.close()

    endless = trickle(port, b"GET /live HTTP/1.1\r\nHost: x\r\n")
    try:
        for _ in range(32):  # 2 MB of header, of the 300 MB once accepted
            endless.sendall(b"X-Big: " + b"a" * 65536 + b"\r\n")
    except OSError:  # the server closed it
        pass
    assert cut_off(endless, b"431")
    endless.close()

    head = b"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
    waiting = [trickle(port, head) for _ in range(300)]  # their bodies never come
    try:
        busy: set[int] = set()
        deadline = time.monotonic() + 10
        while len(busy) < 300 - 256 and time.monotonic() < deadline:
            for index, sock in enumerate(waiting):
                sock.settimeout(0.001)
                with contextlib.suppress(TimeoutError):
                    if sock.recv(300).startswith(b"HTTP/1.1 503"):
                        busy.add(index)
        assert len(busy) == 300 - 256, "the requests past 256 at once answered 503"
        assert server.call("GET", "/live")[0] == 200
    finally:
        for sock in waiting:
            sock.close()


def test_sigterm_stops_within_sagemakers_30_s_though_a_body_trickles_and_copies_samples(
    model: Path, tmp_path: Path
) -> None:
    """A client sending its body a byte at a time keeps no server past SIGTERM: the samples
    are copied, then the server stops, all within SageMaker's 30 s."""
    flags = ["--sample-rate", "1", "--sample-dir", str(tmp_path / "samples"),
             "--sample-uri", str(tmp_path / "bucket"), "--sample-every", "600"]  # fmt: skip
    serving = start(model, *flags)
    assert serving.post("/invocations", {"instances": [[0.5] * 64]})[0] == 200
    port = int(serving.url.rsplit(":", 1)[1])
    sock = trickle(port, b"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Length: 900\r\n\r\n")
    done = threading.Event()

    def drip() -> None:
        while not done.wait(0.5):
            try:
                sock.sendall(b" ")
            except OSError:
                return

    threading.Thread(target=drip, daemon=True).start()
    time.sleep(1)
    started = time.monotonic()
    serving.process.send_signal(signal.SIGTERM)
    try:
        output, _ = serving.process.communicate(timeout=40)
    finally:
        done.set()
        sock.close()
        if serving.process.poll() is None:
            serving.process.kill()
    assert time.monotonic() - started < 27, "stopped within SageMaker's 30 s"
    assert serving.process.returncode == 0, output
    [copied] = (tmp_path / "bucket").glob("samples-*.jsonl")
    assert len(copied.read_text().splitlines()) == 1


def test_a_sampler_that_cannot_write_fails_no_prediction(model: Path, tmp_path: Path) -> None:
    """The hour's file cannot be written (a directory stands in its place, as a full disk
    would refuse): the answers are 200, the samples dropped and counted."""
    import datetime

    folder = tmp_path / "samples"
    now = datetime.datetime.now(datetime.UTC)
    for hour in (now, now + datetime.timedelta(hours=1)):
        (folder / f"samples-{hour:%Y%m%dT%H}.jsonl").mkdir(parents=True)
    sampling = start(model, "--sample-rate", "1", "--sample-dir", str(folder))
    try:
        for _ in range(3):
            assert sampling.post("/invocations", {"instances": [[0.5] * 64] * 2})[0] == 200
        time.sleep(0.5)  # the writer's turn
        text = sampling.call("GET", "/metrics")[1].decode()
        assert "inference_samples_dropped_total 6.0" in text
    finally:
        output = stop(sampling)
    assert output.count("samples: not written") == 1, "said once, not per batch"


def test_a_bucket_that_redirects_never_gets_the_token_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 302 from Cloud Storage's API is an error: the token is not sent on. Only https to
    Blob Storage's own hosts is written to (the tests' loopback stand-in aside)."""
    from cloudgpu.serving import buckets

    reached: list[str] = []

    class Redirecting(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            if self.path.startswith("/elsewhere/"):
                reached.append(self.headers.get("Authorization", ""))
                self.send_response(200)
                body = b'{"items": []}'
            else:
                self.send_response(302)
                self.send_header("Location", f"http://127.0.0.1:{port}/elsewhere{self.path}")
                body = b""
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    redirecting = ThreadingHTTPServer(("127.0.0.1", 0), Redirecting)
    port = redirecting.server_address[1]
    threading.Thread(target=redirecting.serve_forever, daemon=True).start()
    with google_api.serve() as api:
        monkeypatch.setenv("GCE_METADATA_HOST", api.url.removeprefix("http://"))
        monkeypatch.setenv("BUCKETS_TEST_LOOPBACK", f"http://127.0.0.1:{port}")
        with pytest.raises(OSError, match="302"):
            buckets.gcs_folder("gs://runs/proj/endpoints/e1/model")
    redirecting.shutdown()
    assert reached == [], "the token went on to where the redirect pointed"
    for refused in ("http://projstore.blob.core.windows.net/runs", "https://example.com/runs",
                    "https://projstore.blob.core.windows.net.example.com/runs"):  # fmt: skip
        with pytest.raises(ValueError, match="the server writes to gs://"):
            buckets.check(refused)
    assert buckets.check("https://projstore.blob.core.windows.net/runs/e1")
    monkeypatch.setenv("BUCKETS_TEST_LOOPBACK", "http://example.com")
    with pytest.raises(ValueError, match="a stand-in on this machine only"):
        buckets.check("http://example.com/runs")
