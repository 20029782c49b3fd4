"""`invoke monitor` on free loopback ports for the tests that need a real Prometheus: the
Stack fixture (Prometheus's query API, the Pushgateway's groups) and what its tests share."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cloudgpu.testing import services
from conftest import PROJECT_ROOT, project_env

DASHBOARDS = PROJECT_ROOT / "monitoring" / "grafana" / "dashboards"


@dataclass
class Stack:
    folder: Path
    prometheus: str
    pushgateway: str

    def query(self, promql: str) -> list[dict]:
        return self._api("query", query=promql)

    def query_range(self, promql: str, seconds: float) -> list[dict]:
        now = time.time()
        return self._api("query_range", query=promql, start=now - seconds, end=now, step=0.25)

    def _api(self, endpoint: str, **params: object) -> list[dict]:
        url = f"{self.prometheus}/api/v1/{endpoint}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as response:
            answer = json.load(response)
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def pushed(self) -> list[dict]:
        """The Pushgateway's groups: their labels and metrics."""
        with urllib.request.urlopen(f"{self.pushgateway}/api/v1/metrics", timeout=10) as response:
            return json.load(response)["data"]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """`invoke monitor` on free ports, scraping every 250 ms; Ctrl-C (SIGINT) at the end."""
    folder = tmp_path_factory.mktemp("monitor")
    ports = [services.free_port() for _ in range(3)]
    process = subprocess.Popen(
        [
            sys.executable, "-m", "invoke", "monitor", f"--port={ports[0]}",
            f"--pushgateway-port={ports[1]}", f"--node-port={ports[2]}",
            "--scrape-interval=250ms", f"--folder={folder}",
        ],
        cwd=PROJECT_ROOT, env=project_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    assert process.stdout is not None
    printed = []
    for line in process.stdout:
        printed.append(line)
        if "Ctrl-C stops them" in line:
            break
    else:
        pytest.fail("invoke monitor did not start:\n" + "".join(printed))
    assert f"http://127.0.0.1:{ports[0]}" in "".join(printed)
    yield Stack(folder, f"http://127.0.0.1:{ports[0]}", f"http://127.0.0.1:{ports[1]}")
    process.send_signal(signal.SIGINT)
    rest = process.communicate(timeout=60)[0]
    assert process.returncode == 0, "".join(printed) + rest
    assert "stopping" in rest
    assert not any(listening(port) for port in ports), "a server outlived invoke monitor"


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def wait(condition, what: str, timeout: float = 120) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def panel_queries(dashboard: str, **variables: str) -> Iterator[tuple[str, str]]:
    """(panel title, PromQL) of a dashboard, with Grafana's variables filled in."""
    for panel in json.loads((DASHBOARDS / dashboard).read_text())["panels"]:
        for target in panel["targets"]:
            expr = target["expr"].replace("$__rate_interval", "2s")
            for name, value in variables.items():
                expr = expr.replace(f"${name}", value)
            yield f"{dashboard}: {panel['title']}", expr
