"""The model server's cost: requests per second and p50/p99 latency at 1, 8 and 32 concurrent
clients (one input per request), beside the same exported model called in this process (the
ceiling: no HTTP, no JSON, no batching). The server's own overhead is its p50 at one client minus
the in-process p50 of one input.

    invoke export --run outputs/my-run && python benchmarks/serving.py --model outputs/my-run/model

Targets (issue 21): overhead under 1 ms at p50 on the default model on a CPU, and at 32 clients
(batching on) at least 80% of the in-process throughput of one input per call. A peer server
(BentoML, LitServe) on the same model is not measured yet.
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

PACKAGE = "{{ cookiecutter.package_name }}"
ROOT = Path(__file__).resolve().parents[1]
HEADERS = {"Content-Type": "application/json"}


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a model folder (invoke export writes it)")
    parser.add_argument("--calls", type=int, default=200, help="requests per client")
    parser.add_argument("--max-delay-ms", default="2", help="the server's batching delay")
    args = parser.parse_args()
    model = Path(args.model)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", f"{PACKAGE}.serve", "--model", str(model), "--port", str(port),
         "--max-delay-ms", args.max_delay_ms],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/ping", timeout=5) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                if server.poll() is not None:
                    last = (server.stderr.read() if server.stderr else "").strip().splitlines()
                    sys.exit(f"error: the server ended: {last[-1] if last else server.returncode}")
                if time.monotonic() > deadline:
                    sys.exit("error: the server did not get ready within 120 s")
                time.sleep(0.2)
        import numpy as np

        one = np.load(model / "parity.npz")["x"][:1]
        body = json.dumps({"instances": one.tolist()}).encode()
        local = in_process(model, args.calls)
        local_p50 = statistics.median(local)
        print(f"{'':<24}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'failed':>8}")
        print(f"{'in process, 1 input':<24}{1 / local_p50:>10.0f}{local_p50 * 1e3:>10.3f}"
              f"{percentile(local, 0.99) * 1e3:>10.3f}{0:>8}")  # fmt: skip
        rows = {}
        for clients in (1, 8, 32):
            times, rate, failed = over_http(port, body, clients, args.calls)
            if not times:
                sys.exit(f"error: every request of {clients} clients failed")
            rows[clients] = (rate, statistics.median(times), percentile(times, 0.99))
            print(f"{f'server, {clients} clients':<24}{rate:>10.0f}{rows[clients][1] * 1e3:>10.3f}"
                  f"{rows[clients][2] * 1e3:>10.3f}{failed:>8}")  # fmt: skip
        overhead = (rows[1][1] - local_p50) * 1e3
        print(f"server overhead at p50, 1 client: {overhead:.3f} ms (target < 1 ms)")
        print(f"32 clients / in process: {rows[32][0] * local_p50:.2f} (target >= 0.80)")
    finally:
        server.terminate()
        server.wait(timeout=60)


if __name__ == "__main__":
    main()
