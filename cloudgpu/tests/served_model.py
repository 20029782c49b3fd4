"""The model server under test with no framework: a linear model in numpy, in a model folder as
`invoke export` writes one (model.json, the weights, parity.npz and the drift reference), served
by `python numpy_server.py` (cloudgpu.serving.cli with this module's opener) in a process of its
own, over real HTTP on loopback. A project's own tests serve its exported framework model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
from cloudgpu.serving.drift import reference
from cloudgpu.testing.services import free_port

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "src"
SHAPE = (1, 8, 8)  # the template's default model's input: 8x8 digits
CLASSES = [str(digit) for digit in range(10)]


def validation_inputs(count: int = 300, seed: int = 0) -> np.ndarray:
    """Inputs like the digits' (pixels from 0 to 16), the reference's split."""
    return np.random.default_rng(seed).uniform(0, 16, (count, *SHAPE)).astype(np.float32)


def logits_of(weights: dict[str, np.ndarray], batch: np.ndarray) -> np.ndarray:
    flat = np.asarray(batch, np.float32).reshape(len(batch), -1)
    return flat @ weights["w"] + weights["b"]


def make_model(folder: Path, seed: int = 0) -> Path:
    """A model folder of a random linear model over SHAPE inputs, 10 classes."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    weights = {"w": rng.normal(0, 0.1, (64, 10)).astype(np.float32),
               "b": rng.normal(0, 0.1, 10).astype(np.float32)}  # fmt: skip
    np.savez(folder / "weights.npz", **weights)
    x = validation_inputs()
    np.savez(folder / "reference.npz", **reference(x, logits_of(weights, x), len(CLASSES)))
    np.savez(folder / "parity.npz", x=x[:64], logits=logits_of(weights, x[:64]))
    card = {"file": "weights.npz", "framework": {"name": "numpy"},
            "input": {"shape": list(SHAPE)}, "output": {"classes": CLASSES}}  # fmt: skip
    (folder / "model.json").write_text(json.dumps(card), encoding="utf-8")
    return folder


def server_env(**overrides: str) -> dict[str, str]:
    path = os.pathsep.join([str(SOURCE), str(HERE), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path, **overrides}


def serve_command(*args: str) -> list[str]:
    return [sys.executable, str(HERE / "numpy_server.py"), *args]


class Server:
    def __init__(self, process: subprocess.Popen, port: int) -> None:
        self.process, self.url = process, f"http://127.0.0.1:{port}"
        self.port = port

    def call(self, method: str, path: str, body: bytes | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, bytes]:  # fmt: skip
        request = urllib.request.Request(self.url + path, body, headers or {}, method=method)
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    def post(self, path: str, payload: Any) -> tuple[int, dict]:
        status, body = self.call("POST", path, json.dumps(payload).encode(),
                                 {"Content-Type": "application/json"})  # fmt: skip
        return status, json.loads(body)

    def gauge(self, name: str) -> float:
        text = self.call("GET", "/metrics")[1].decode()
        return next(float(line.split()[-1]) for line in text.splitlines()
                    if line.startswith(name))  # fmt: skip


def start(model: Path, *args: str, port: int | None = None, **env: str) -> Server:
    """The server in a process of its own; returns once it is ready (or fails the test)."""
    port = port or free_port()
    flags = ["--port", str(port)] if "AIP_HTTP_PORT" not in env else []
    process = subprocess.Popen(
        serve_command("--model", str(model), *flags, *args), env=server_env(**env),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    server = Server(process, int(env.get("AIP_HTTP_PORT", port)))
    health = env.get("AIP_HEALTH_ROUTE", "/ping")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if server.call("GET", health)[0] == 200:
                return server
        except OSError:
            pass
        time.sleep(0.05)
    process.kill()
    raise AssertionError(f"the server never got ready: {process.communicate()[0]}")


def stop(server: Server) -> str:
    server.process.send_signal(signal.SIGTERM)
    output, _ = server.process.communicate(timeout=60)
    assert server.process.returncode == 0, output
    return output
