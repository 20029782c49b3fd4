"""The model server's cost: requests per second and p50/p99 latency at 1, 8 and 32 concurrent
clients (one input per request), beside the same exported model called in this process (the
ceiling: no HTTP, no JSON, no batching). The server's own overhead is its p50 at one client minus
the in-process p50 of one input.

    invoke export --run outputs/my-run && python benchmarks/serving.py --model outputs/my-run/model

The load comes from wrk (a load generator written in C: `apt install wrk`) where it is on PATH,
else from Python threads in this process, which then bound what is measured (the table says
which). Given two cores or more, the servers and the in-process ceiling get half of them and
the load the other half, so that the load is not measured against the server it drives.

Beside them, a peer: LitServe (Lightning AI's server: FastAPI on uvicorn, a worker process
for the model, its own batching) serving the same exported model with the same batch size and
delay, where it is installed (`pip install litserve`; --peer none leaves it out).

Targets (issue 21): overhead under 1 ms at p50 on the default model on a CPU, at 32 clients
(batching on) at least 80% of the in-process throughput of one input per call, and ahead of the
peer at every concurrency.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from http_load import LOADING, SERVING, measure, percentile

PACKAGE = "{{ cookiecutter.package_name }}"
ROOT = Path(__file__).resolve().parents[1]
CLIENTS = (1, 8, 32)
MAX_BATCH = 64  # the servers' batch limit (serve.py's default)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def in_process(model: Path, calls: int) -> list[float]:
    """Seconds per call of the exported model on one input, in this process."""
    from importlib import import_module

    import numpy as np

    sys.path.insert(0, str(ROOT / "src"))
    from cloudgpu.serving.model import load

    served = load(model, import_module(f"{PACKAGE}.serve").open_model)
    one = np.load(model / "parity.npz")["x"][:1]
    served.predict(one)
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        served.predict(one)
        times.append(time.perf_counter() - started)
    return times


def ceiling(model: Path, calls: int) -> list[float]:
    """in_process() in a process of its own on the servers' cores: the framework sizes its
    thread pool from the cores it is given, as the server's does."""
    done = subprocess.run(
        [sys.executable, __file__, "--model", str(model), "--calls", str(calls), "--ceiling"],
        capture_output=True, text=True, preexec_fn=lambda: os.sched_setaffinity(0, SERVING),
    )  # fmt: skip
    if done.returncode != 0:
        sys.exit(f"error: the model in process failed: {done.stderr.strip()[-300:]}")
    return json.loads(done.stdout.splitlines()[-1])


# The same model behind LitServe: one input per request in, the logits' classes out.
PEER_APP = """
import sys
import litserve as ls
import numpy as np
from cloudgpu.serving.model import load
from {package}.serve import open_model

class Exported(ls.LitAPI):
    def setup(self, device):
        self.model = load(__import__("pathlib").Path(sys.argv[1]), open_model)

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


def started(command: list[str], health: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """A server, once its `health` URL answers 200 (exit in one line if it ends or stalls)."""
    # A session of its own: stopped() ends the server with every worker process it started.
    server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, start_new_session=True,
                              preexec_fn=lambda: os.sched_setaffinity(0, SERVING))  # fmt: skip
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
                stopped(server)
                sys.exit(f"error: {command[1]} did not get ready within 120 s")
            time.sleep(0.2)


def stopped(server: subprocess.Popen) -> None:
    """SIGTERM to the server, then SIGKILL to whatever is left of its process group: LitServe's
    worker processes outlive their parent, spinning on a core."""
    server.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        server.wait(timeout=60)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGKILL)
    server.wait()


def measured(name: str, port: int, body: bytes, args: argparse.Namespace) -> dict[int, tuple]:
    """req/s, p50 and p99 at 1, 8 and 32 clients, each row printed as it is measured."""
    rows = {}
    for clients in CLIENTS:
        rate, p50, p99, failed = measure(port, body, clients, args.load, args.seconds, args.calls)
        rows[clients] = (rate, p50, p99)
        print(f"{f'{name}, {clients} clients':<26}{rate:>10.0f}{rows[clients][1] * 1e3:>10.3f}"
              f"{rows[clients][2] * 1e3:>10.3f}{failed:>8}")  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a model folder (invoke export writes it)")
    parser.add_argument(
        "--calls",
        type=int,
        default=200,
        help="calls in process, and requests per client with --load python",
    )
    parser.add_argument("--seconds", type=float, default=5, help="per row, with --load wrk")
    parser.add_argument("--load", choices=["wrk", "python"],
                        default="wrk" if shutil.which("wrk") else "python",
                        help="the load generator (default: wrk where it is on PATH)")  # fmt: skip
    parser.add_argument("--ceiling", action="store_true", help=argparse.SUPPRESS)  # ceiling()
    parser.add_argument("--max-delay-ms", default="2", help="the servers' batching delay")
    parser.add_argument("--peer", choices=["litserve", "none"], default="litserve",
                        help="the peer server (measured where it is installed)")  # fmt: skip
    args = parser.parse_args()
    model = Path(args.model)
    import numpy as np

    one = np.load(model / "parity.npz")["x"][:1]
    body = json.dumps({"instances": one.tolist()}).encode()
    if args.load == "wrk" and not shutil.which("wrk"):
        sys.exit("error: --load wrk: wrk is not on PATH (apt install wrk), or pass --load python")
    if args.ceiling:
        print(json.dumps(in_process(model, args.calls)))
        return
    local = ceiling(model, args.calls)
    local_p50 = statistics.median(local)
    bound = "" if args.load == "wrk" else ": Python's threads, which bound these figures"
    print(f"servers and in process on cores {SERVING}, the load on {LOADING} ({args.load}{bound})")
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
        ours = measured("this server", port, body, args)
    finally:
        stopped(server)
    overhead = (ours[1][1] - local_p50) * 1e3
    print(f"server overhead at p50, 1 client: {overhead:.3f} ms (target < 1 ms)")
    print(f"32 clients / in process: {ours[32][0] * local_p50:.2f} (target >= 0.80)")
    if args.peer == "none":
        return
    if importlib.util.find_spec("litserve") is None:
        print("peer: litserve is not installed here (pip install litserve): not measured")
        return
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), *sys.path[1:]])}
    with tempfile.TemporaryDirectory() as scratch:
        app = Path(scratch) / "litserve_app.py"
        app.write_text(PEER_APP.format(package=PACKAGE), encoding="utf-8")
        peer = started(
            [sys.executable, str(app), str(model), str(port), str(MAX_BATCH),
             str(float(args.max_delay_ms) / 1000)],
            f"http://127.0.0.1:{port}/health", env,
        )  # fmt: skip
        try:
            theirs = measured("litserve", port, body, args)
        finally:
            stopped(peer)
    ahead = [clients for clients in CLIENTS if ours[clients][0] > theirs[clients][0]]
    print(f"ahead of litserve in req/s at {ahead or 'no'} clients of {list(CLIENTS)}")


if __name__ == "__main__":
    main()
