"""The model server's cost: requests per second and p50/p99 latency at 1, 8 and 32 concurrent
clients (one input per request), beside the same exported model called in this process (the
ceiling: no HTTP, no JSON, no batching). The server's own overhead is its p50 at one client minus
the in-process p50 of one input.

    invoke export --run outputs/my-run && python benchmarks/serving.py --model outputs/my-run/model

Beside them, a peer: LitServe (Lightning AI's server: FastAPI on uvicorn, a worker process
for the model, its own batching) serving the same exported model with the same batch size and
delay, where it is installed (`pip install litserve`; --peer none leaves it out).

Targets (issue 21): overhead under 1 ms at p50 on the default model on a CPU, at 32 clients
(batching on) at least 80% of the in-process throughput of one input per call, and ahead of the
peer at every concurrency.
"""

from __future__ import annotations

import argparse
import http.client
import importlib.util
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

PACKAGE = "{{ cookiecutter.package_name }}"
ROOT = Path(__file__).resolve().parents[1]
HEADERS = {"Content-Type": "application/json"}
CLIENTS = (1, 8, 32)
MAX_BATCH = 64  # the servers' batch limit (serve.py's default)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def in_process(model: Path, calls: int) -> list[float]:
    """Seconds per call of the exported model on one input, in this process."""
    from importlib import import_module

    import numpy as np

    sys.path.insert(0, str(ROOT / "src"))
    served = import_module(f"{PACKAGE}.serving.model").load(model)
    one = np.load(model / "parity.npz")["x"][:1]
    served.predict(one)
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        served.predict(one)
        times.append(time.perf_counter() - started)
    return times


# The same model behind LitServe: one input per request in, the logits' classes out.
PEER_APP = """
import sys
import litserve as ls
import numpy as np
from {package}.serving.model import load

class Exported(ls.LitAPI):
    def setup(self, device):
        self.model = load(__import__("pathlib").Path(sys.argv[1]))

    def decode_request(self, request):
        return np.asarray(request["instances"], np.float32).reshape(-1, *self.model.shape)

    def batch(self, inputs):
        return np.concatenate(inputs)

    def predict(self, x):
        return self.model.predict(x)

    def unbatch(self, output):
        return [row[None] for row in output]

    def encode_response(self, output):
        return dict(predictions=output.argmax(1).tolist())

if __name__ == "__main__":  # LitServe starts its workers with multiprocessing's spawn
    api = Exported(max_batch_size=int(sys.argv[3]), batch_timeout=float(sys.argv[4]),
                   api_path="/invocations")
    ls.LitServer(api, accelerator="cpu", workers_per_device=1).run(
        port=int(sys.argv[2]), generate_client_file=False, log_level="warning")
"""


def over_http(port: int, body: bytes, clients: int, calls: int) -> tuple[list[float], float, int]:
    """Each request's seconds, requests per second over all clients, and the failed requests.
    Each client keeps its connection open, as a load balancer does."""
    times: list[float] = []
    failed = 0
    lock = threading.Lock()

    def client() -> None:
        nonlocal failed
        mine, errors = [], 0
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for _ in range(calls):
            started = time.perf_counter()
            try:
                connection.request("POST", "/invocations", body, HEADERS)
                answer = connection.getresponse()
                answer.read()
                ok = answer.status == 200
            except OSError:
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                ok = False
            if ok:
                mine.append(time.perf_counter() - started)
            else:
                errors += 1
        connection.close()
        with lock:
            times.extend(mine)
            failed += errors

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return times, len(times) / (time.perf_counter() - started), failed


def started(command: list[str], health: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """A server, once its `health` URL answers 200 (exit in one line if it ends or stalls)."""
    server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(health, timeout=5) as answer:
                if answer.status == 200:
                    return server
        except OSError:
            if server.poll() is not None:
                last = (server.stderr.read() if server.stderr else "").strip().splitlines()
                sys.exit(f"error: {command[1]} ended: {last[-1] if last else server.returncode}")
            if time.monotonic() > deadline:
                server.kill()
                sys.exit(f"error: {command[1]} did not get ready within 120 s")
            time.sleep(0.2)


def measured(name: str, port: int, body: bytes, calls: int) -> dict[int, tuple[float, ...]]:
    """req/s, p50 and p99 at 1, 8 and 32 clients, each row printed as it is measured."""
    rows = {}
    for clients in CLIENTS:
        times, rate, failed = over_http(port, body, clients, calls)
        if not times:
            sys.exit(f"error: every request of {clients} clients to {name} failed")
        rows[clients] = (rate, statistics.median(times), percentile(times, 0.99))
        print(f"{f'{name}, {clients} clients':<26}{rate:>10.0f}{rows[clients][1] * 1e3:>10.3f}"
              f"{rows[clients][2] * 1e3:>10.3f}{failed:>8}")  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a model folder (invoke export writes it)")
    parser.add_argument("--calls", type=int, default=200, help="requests per client")
    parser.add_argument("--max-delay-ms", default="2", help="the servers' batching delay")
    parser.add_argument("--peer", choices=["litserve", "none"], default="litserve",
                        help="the peer server (measured where it is installed)")  # fmt: skip
    args = parser.parse_args()
    model = Path(args.model)
    import numpy as np

    one = np.load(model / "parity.npz")["x"][:1]
    body = json.dumps({"instances": one.tolist()}).encode()
    local = in_process(model, args.calls)
    local_p50 = statistics.median(local)
    print(f"{'':<26}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'failed':>8}")
    print(f"{'in process, 1 input':<26}{1 / local_p50:>10.0f}{local_p50 * 1e3:>10.3f}"
          f"{percentile(local, 0.99) * 1e3:>10.3f}{0:>8}")  # fmt: skip
    port = free_port()
    server = started(
        [sys.executable, "-m", f"{PACKAGE}.serve", "--model", str(model), "--port", str(port),
         "--max-delay-ms", args.max_delay_ms, "--max-batch", str(MAX_BATCH)],
        f"http://127.0.0.1:{port}/ping",
    )  # fmt: skip
    try:
        ours = measured("this server", port, body, args.calls)
    finally:
        server.terminate()
        server.wait(timeout=60)
    overhead = (ours[1][1] - local_p50) * 1e3
    print(f"server overhead at p50, 1 client: {overhead:.3f} ms (target < 1 ms)")
    print(f"32 clients / in process: {ours[32][0] * local_p50:.2f} (target >= 0.80)")
    if args.peer == "none":
        return
    if importlib.util.find_spec("litserve") is None:
        print("peer: litserve is not installed here (pip install litserve): not measured")
        return
    port = free_port()
    app = Path(tempfile.mkdtemp()) / "litserve_app.py"
    app.write_text(PEER_APP.format(package=PACKAGE), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), *sys.path[1:]])}
    peer = started(
        [sys.executable, str(app), str(model), str(port), str(MAX_BATCH),
         str(float(args.max_delay_ms) / 1000)],
        f"http://127.0.0.1:{port}/health", env,
    )  # fmt: skip
    try:
        theirs = measured("litserve", port, body, args.calls)
    finally:
        peer.terminate()
        peer.wait(timeout=60)
    ahead = [clients for clients in CLIENTS if ours[clients][0] > theirs[clients][0]]
    print(f"ahead of litserve in req/s at {ahead or 'no'} clients of {list(CLIENTS)}")


if __name__ == "__main__":
    main()
