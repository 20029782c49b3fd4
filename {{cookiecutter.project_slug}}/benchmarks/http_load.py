"""The load a serving benchmark puts on a server: wrk (a load generator written in C) where it is
on PATH, else Python threads in this process. Given two cores or more, the server gets half of
them and the load the other half, so that the load is not measured against the server it drives.
"""

from __future__ import annotations

import http.client
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HEADERS = {"Content-Type": "application/json"}
CORES = sorted(os.sched_getaffinity(0))
# The servers' and the ceiling's cores, and the load's: half each, or all shared on one core.
SERVING, LOADING = (CORES[: len(CORES) // 2], CORES[len(CORES) // 2 :]) if len(CORES) > 1 else (
    CORES, CORES)  # fmt: skip
WRK_SCRIPT = """wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local file = io.open(os.getenv("BODY_FILE"), "rb"); wrk.body = file:read("*a"); file:close()
"""
WRK_SECONDS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def with_wrk(port: int, body: bytes, clients: int, seconds: float) -> tuple[float, ...]:
    """wrk's requests per second, p50 and p99 (seconds) and failed requests, over `clients`
    connections kept open (as a load balancer keeps them), on the load's cores."""
    with tempfile.TemporaryDirectory() as scratch:
        script, body_file = Path(scratch) / "post.lua", Path(scratch) / "body.json"
        script.write_text(WRK_SCRIPT, encoding="utf-8")
        body_file.write_bytes(body)
        threads = str(min(clients, len(LOADING)))
        done = subprocess.run(
            ["wrk", "-t", threads, "-c", str(clients), "-d", f"{seconds:g}s", "--latency",
             "-s", str(script), f"http://127.0.0.1:{port}/invocations"],
            env={**os.environ, "BODY_FILE": str(body_file)}, capture_output=True, text=True,
            preexec_fn=lambda: os.sched_setaffinity(0, LOADING), timeout=seconds + 60,
        )  # fmt: skip
    out = done.stdout
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if done.returncode != 0 or rate is None:
        sys.exit(f"error: wrk failed: {(done.stderr or out).strip()[-300:]}")

    def latency(share: str) -> float:
        value, unit = re.search(rf"^\s+{share}%\s+([\d.]+)(us|ms|s|m)$", out, re.M).groups()
        return float(value) * WRK_SECONDS[unit]

    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    failed = sum(map(int, errors.groups())) if errors else 0
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    failed += int(non_2xx.group(1)) if non_2xx else 0
    return float(rate.group(1)), latency("50"), latency("99"), failed


def over_http(port: int, body: bytes, clients: int, calls: int) -> tuple[list[float], float, int]:
    """Each request's seconds, requests per second over all clients, and the failed requests,
    from Python threads on the load's cores. Each client keeps its connection open, as a load
    balancer does."""
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
    os.sched_setaffinity(0, LOADING)
    started = time.perf_counter()
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        os.sched_setaffinity(0, CORES)
    return times, len(times) / (time.perf_counter() - started), failed


def measure(port: int, body: bytes, clients: int, how: str, seconds: float, calls: int) -> tuple:
    """Requests per second, p50 and p99 (seconds) and failed requests of `clients` clients
    posting `body` to /invocations, by `how`: "wrk" for `seconds`, or "python", `calls` each."""
    if how == "wrk":
        return with_wrk(port, body, clients, seconds)
    times, rate, failed = over_http(port, body, clients, calls)
    if not times:
        sys.exit(f"error: every request of {clients} clients failed")
    return rate, statistics.median(times), percentile(times, 0.99), failed
