"""`python -m PACKAGE.serve`: this project's exported model in cloudgpu's server, over real
HTTP: SageMaker's routes answer with the run's own test accuracy, KServe V2 with its logits; and
`invoke serve` as a user types it. The server's own tests (bad requests, samples, drift, hostile
callers) are the cloudgpu package's, on a numpy model."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from cloudgpu.testing.services import free_port
from conftest import PACKAGE, PROJECT_ROOT, project_env, read_metrics

from {{ cookiecutter.package_name }} import export as exporting


@pytest.fixture(scope="module")
def model(short_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = Path(shutil.copytree(short_run, tmp_path_factory.mktemp("serve") / "run"))
    return exporting.export(str(run))


class Server:
    def __init__(self, process: subprocess.Popen, port: int) -> None:
        self.process, self.url = process, f"http://127.0.0.1:{port}"

    def call(self, method: str, path: str, body: bytes | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, bytes]:  # fmt: skip
        request = urllib.request.Request(self.url + path, body, headers or {}, method=method)
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    def post(self, path: str, payload: object) -> tuple[int, dict]:
        status, body = self.call("POST", path, json.dumps(payload).encode(),
                                 {"Content-Type": "application/json"})  # fmt: skip
        return status, json.loads(body)


def start(model: Path, *args: str, port: int | None = None, **env: str) -> Server:
    """The server in a process of its own; returns once it is ready (or fails the test)."""
    port = port or free_port()
    flags = ["--port", str(port)] if "AIP_HTTP_PORT" not in env else []
    process = subprocess.Popen(
        [sys.executable, "-m", f"{PACKAGE}.serve", "--model", str(model), *flags, *args],
        cwd=PROJECT_ROOT, env=project_env(**env), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    server = Server(process, int(env.get("AIP_HTTP_PORT", port)))
    health = env.get("AIP_HEALTH_ROUTE", "/ping")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if server.call("GET", health)[0] == 200:
                return server
        except OSError:
            pass
        time.sleep(0.1)
    process.kill()
    raise AssertionError(f"the server never got ready: {process.communicate()[0]}")


def stop(server: Server) -> str:
    server.process.send_signal(signal.SIGTERM)
    output, _ = server.process.communicate(timeout=60)
    assert server.process.returncode == 0, output
    return output


@pytest.fixture(scope="module")
def server(model: Path) -> Iterator[Server]:
    running = start(model)
    yield running
    stop(running)


def test_invocations_reach_the_runs_test_accuracy(server: Server, model: Path) -> None:
    """SageMaker's contract: /ping, then /invocations; the answers on the test split are the
    trained model's (its test accuracy, to one input)."""
    from omegaconf import OmegaConf

    from {{ cookiecutter.package_name }}.data.sources import load

    card = json.loads((model / "model.json").read_text())
    splits = load(OmegaConf.create(card["run"]["config"]).data)
    correct = 0
    for start_at in range(0, len(splits.test), 100):
        chunk = splits.test.x[start_at : start_at + 100]
        status, answer = server.post("/invocations", {"instances": chunk.tolist()})
        assert status == 200, answer
        predicted = [p["class"] for p in answer["predictions"]]
        wanted = [str(label) for label in splits.test.y[start_at : start_at + 100]]
        correct += sum(p == w for p, w in zip(predicted, wanted, strict=True))
    accuracy = correct / len(splits.test)
    run_accuracy = read_metrics(model.parent)["test/accuracy"]
    assert accuracy == pytest.approx(run_accuracy, abs=1.5 / len(splits.test))
    one = answer["predictions"][0]
    assert set(one) == {"class", "confidence", "probabilities"}
    assert one["confidence"] == pytest.approx(max(one["probabilities"]), abs=1e-6)


def test_v2_infer_gives_the_trained_models_logits_in_json_and_binary(
    server: Server, model: Path
) -> None:
    parity = np.load(model / "parity.npz")
    x, expected = parity["x"][:5], parity["logits"][:5]
    tensor = {"name": "input", "shape": list(x.shape), "datatype": "FP32"}
    request = {"id": "r1", "inputs": [{**tensor, "data": x.ravel().tolist()}]}
    status, answer = server.post("/v2/models/model/infer", request)
    assert status == 200, answer
    logits = next(o for o in answer["outputs"] if o["name"] == "logits")
    assert logits["shape"] == list(expected.shape) and answer["id"] == "r1"
    assert np.allclose(np.reshape(logits["data"], logits["shape"]), expected, atol=1e-4)
    # The binary tensor extension, as tritonclient sends by default: a JSON header, then bytes.
    sized = {**tensor, "parameters": {"binary_data_size": x.nbytes}}
    header = json.dumps({"inputs": [sized]}).encode()
    status, body = server.call(
        "POST", "/v2/models/model/infer", header + x.astype(np.float32).tobytes(),
        {"Inference-Header-Content-Length": str(len(header)),
         "Content-Type": "application/octet-stream"},
    )  # fmt: skip
    assert status == 200, body
    binary = json.loads(body)["outputs"][0]
    assert np.allclose(np.reshape(binary["data"], binary["shape"]), expected, atol=1e-4)
    status, metadata = server.call("GET", "/v2/models/model")
    assert status == 200
    assert json.loads(metadata)["inputs"][0]["shape"] == [-1, *x.shape[1:]]
    assert server.call("GET", "/v2/health/live")[0] == server.call("GET", "/v2/health/ready")[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "error: invoke serve needs --model DIR"),
        (["--model", "nowhere"], "error: --model nowhere: no model.json there"),
        (["--model", "MODEL", "--port", "70000"], "error: --port 70000: a port goes up to 65535"),
    ],
    ids=["no-model", "not-a-model", "bad-port"],
)
def test_bad_serve_commands_get_one_line(model: Path, args: list[str], message: str) -> None:
    from conftest import invoke_cli

    done = invoke_cli("serve", *[str(model) if arg == "MODEL" else arg for arg in args])
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(message), line


def test_invoke_serve_serves_the_model(model: Path) -> None:
    """As a user types it, listening on loopback as it announces; SIGTERM to its process
    group (as a terminal's close would) ends the server too: its port closes."""
    import os

    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "invoke", "serve", "--model", str(model), "--port", str(port)],
        cwd=PROJECT_ROOT, env=project_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )  # fmt: skip
    server = Server(process, port)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if server.call("GET", "/ping")[0] == 200:
                    break
            except OSError:
                time.sleep(0.1)
        status, answer = server.post("/invocations", {"instances": [[0.2] * 64]})
        assert status == 200 and answer["predictions"][0]["class"] in [str(d) for d in range(10)]
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    assert f"listening on 127.0.0.1:{port}" in output, output
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            server.call("GET", "/ping")
        except OSError:
            return  # nothing listens any more
        time.sleep(0.1)
    raise AssertionError("the server outlived invoke serve's SIGTERM")


def test_the_serving_benchmark_prints_its_table(model: Path) -> None:
    """The table; the peer (LitServe) measured where it is installed (the template's `invoke
    bench serving` installs it), and said to be left out where it is not."""
    import importlib.util

    done = subprocess.run(
        [sys.executable, "benchmarks/serving.py", "--model", str(model), "--calls", "5",
         "--seconds", "1"],
        cwd=PROJECT_ROOT, env=project_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    load = "wrk" if shutil.which("wrk") else "python: Python's threads, which bound these figures"
    assert lines[0].endswith(f"({load})"), lines[0]
    rows = [line.split() for line in lines[1:]]
    names = [" ".join(row[:-4]) for row in rows[1:5]]
    assert names == ["in process, 1 input", "this server, 1 clients", "this server, 8 clients",
                     "this server, 32 clients"]  # fmt: skip
    assert all(float(value) > 0 for row in rows[1:5] for value in row[-4:-1])
    assert [row[-1] for row in rows[1:5]] == ["0"] * 4, "no request failed"
    assert "server overhead at p50, 1 client:" in done.stdout
    if importlib.util.find_spec("litserve") is None:
        assert "peer: litserve is not installed here (pip install litserve)" in done.stdout
    else:
        assert [" ".join(row[:3]) for row in rows[7:10]] == [
            "litserve, 1 clients", "litserve, 8 clients", "litserve, 32 clients"
        ]  # fmt: skip
