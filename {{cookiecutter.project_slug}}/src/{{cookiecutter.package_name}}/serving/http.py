"""The routes, one handler each, and the server's life: ready once the model is loaded, drained
on SIGTERM.

    SageMaker   GET /ping, POST /invocations on the port given (8080 in its container)
    Vertex AI   GET $AIP_HEALTH_ROUTE, POST $AIP_PREDICT_ROUTE, on $AIP_HTTP_PORT
    Azure ML    GET /ready (readiness), /live (liveness), POST /score: the routes its
                deployment's inference_config names
    KServe V2   GET /v2/health/ready, /v2/health/live, /v2/models/NAME[/ready];
                POST /v2/models/NAME/infer (JSON, or a JSON header and binary tensor data)
    anyone      POST /predict; GET /health, /metrics

Instances in, predictions out: {"instances": [input, ...]} answers
{"predictions": [{"class": ..., "confidence": ..., "probabilities": [...]}, ...]}. A bad
request gets a 4xx and {"error": "one line"}; the server and its other requests go on.
"""

from __future__ import annotations

import json
import logging
import re
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from . import v2
from .batcher import Batcher
from .drift import Drift, softmax
from .metrics import ServingMetrics
from .model import RequestError, ServedModel, as_batch, load
from .samples import Sampler, Sampling

log = logging.getLogger(__name__)
MAX_BODY = 6 * 1024 * 1024  # bytes: SageMaker's real-time payload limit
ANSWER_WITHIN = 55.0  # seconds: SageMaker waits 60 for an answer
DRAIN_FOR = 25.0  # seconds after SIGTERM: SageMaker kills 30 s after it


class Routes:
    """Which path does what: the defaults, and those the services' variables name."""

    def __init__(self, health: str = "", predict: str = "") -> None:
        self.ready = {"/ping", "/health", "/ready", "/v2/health/ready", *filter(None, [health])}
        self.live = {"/live", "/v2/health/live"}
        self.predict = {"/invocations", "/predict", "/score", *filter(None, [predict])}


class ModelServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # the listen backlog: socketserver's 5 resets bursts of clients

    def __init__(
        self, address: tuple[str, int], routes: Routes, name: str, sample: Sampling | None = None
    ) -> None:
        super().__init__(address, Handler)
        self.routes, self.name, self.sample = routes, name, sample
        self.sampler: Sampler | None = None
        self.model: ServedModel | None = None
        self.batcher: Batcher | None = None
        self.metrics: ServingMetrics | None = None
        self.drift: Drift | None = None
        self.draining = False
        self.load_error = ""
        self._in_flight = 0
        self._lock = threading.Lock()

    @property
    def ready(self) -> bool:
        return self.model is not None and not self.draining

    def load(self, folder: Path, max_batch: int, max_delay: float) -> None:
        """Load the model (the server answers liveness meanwhile, readiness with 503)."""
        try:
            model = load(folder)
        except Exception as error:  # said at readiness and in the log; liveness goes on
            self.load_error = f"{type(error).__name__}: {error}".splitlines()[0]
            log.error("cannot load the model: %s", self.load_error)
            return
        self.metrics = ServingMetrics(model.classes)
        if self.sample is not None:
            self.sampler = Sampler(self.sample, model.classes)
        if (folder / "reference.npz").is_file():
            self.drift = Drift(folder / "reference.npz", len(model.classes))
            self.metrics.watch_drift(self.drift)
        self.batcher = Batcher(
            model.predict, max_batch, max_delay, self.metrics.batch_size.observe, self._predicting
        )
        model.predict(np.zeros((1, *model.shape), np.float32))  # warm: the first call traces
        self.model = model
        self.metrics.ready.set(1)
        log.info("model %s loaded from %s: ready", model.card["file"], folder)

    def _predicting(self) -> int:
        """Requests being answered now: the batcher waits for those not yet queued."""
        return self._in_flight

    def enter(self) -> None:
        with self._lock:
            self._in_flight += 1

    def leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def drain(self) -> None:
        """SIGTERM: not ready any more, finish what is in flight (up to DRAIN_FOR), stop."""
        self.draining = True
        if self.metrics is not None:
            self.metrics.ready.set(0)
        deadline = time.monotonic() + DRAIN_FOR
        while self._in_flight and time.monotonic() < deadline:
            time.sleep(0.01)
        log.info("drained (%d requests still in flight): stopping", self._in_flight)
        self.shutdown()


class Handler(BaseHTTPRequestHandler):
    server: ModelServer
    protocol_version = "HTTP/1.1"  # keep-alive: load balancers and clients reuse connections
    # The answer leaves in one write, at once: with Nagle's algorithm, headers and body written
    # apart wait for the client's delayed ACK (40 ms a request on Linux).
    disable_nagle_algorithm = True
    wbufsize = 1 << 16

    def log_message(self, format: str, *args: Any) -> None:
        log.debug(format, *args)

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, payload: Any) -> None:
        self._send(status, json.dumps(payload).encode())

    def _timed(self, route: str, answer: Callable[[], tuple[int, Any]]) -> None:
        """Answer a prediction request, counted and timed. One that arrives after SIGTERM gets a
        503 (the load balancer sends it elsewhere); one already in flight is answered."""
        server, started = self.server, time.perf_counter()
        server.enter()
        try:
            try:
                if server.draining:
                    raise RequestError(503, "not ready: draining")
                status, payload = answer()
            except RequestError as error:
                status, payload = error.status, {"error": str(error)}
            except FutureTimeout:
                status, payload = 504, {"error": f"no answer within {ANSWER_WITHIN:g} s"}
            except Exception as error:  # the model failed: this request's 500, not the server's
                log.exception("request failed")
                status, payload = 500, {"error": f"{type(error).__name__}: {error}"}
            self._json(status, payload)
        finally:
            server.leave()
        if server.metrics is not None:
            server.metrics.requests.labels(route=route, code=str(status)).inc()
            server.metrics.latency.labels(route=route).observe(time.perf_counter() - started)

    def do_GET(self) -> None:
        path, server = self.path.split("?", 1)[0], self.server
        if path in server.routes.live:
            self._json(200, {"live": True})
        elif path in server.routes.ready or path in (f"/v2/models/{server.name}/ready",):
            if server.ready:
                self._json(200, {"ready": True})
            else:
                why = server.load_error or ("draining" if server.draining else "loading the model")
                self._json(503, {"ready": False, "error": why})
        elif path == "/metrics":
            metrics = server.metrics
            body = generate_latest(metrics.registry) if metrics is not None else b""
            self._send(200, body, CONTENT_TYPE_LATEST)
        elif path == f"/v2/models/{server.name}" and server.model is not None:
            self._json(200, v2.metadata(server.name, server.model))
        elif path == "/v2":
            self._json(200, {"name": server.name, "version": "1", "extensions": []})
        else:
            self._json(404, {"error": f"no route GET {path}"})

    def do_POST(self) -> None:
        path, server = self.path.split("?", 1)[0], self.server
        if path in server.routes.predict:
            self._timed(path, self._instances)
        elif re.fullmatch(rf"/v2/models/{re.escape(server.name)}(/versions/[^/]+)?/infer", path):
            self._timed("/v2/infer", self._v2_infer)
        else:
            self._discard_body()
            self._json(404, {"error": f"no route POST {path}"})

    def _discard_body(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if 0 < length <= MAX_BODY:
            self.rfile.read(length)

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self.close_connection = True  # its body stays unread
            raise RequestError(413, f"the body is {length} bytes: at most {MAX_BODY} per request")
        return self.rfile.read(length)

    def _usable(self) -> ServedModel:
        if self.server.batcher is None or self.server.model is None:
            raise RequestError(503, "not ready: the model is loading")
        return self.server.model

    def _logits(self, inputs: np.ndarray) -> np.ndarray:
        assert self.server.batcher is not None
        logits = self.server.batcher.submit(inputs).result(timeout=ANSWER_WITHIN)
        return np.asarray(logits, dtype=np.float64)

    def _instances(self) -> tuple[int, Any]:
        body = self._body()
        model = self._usable()
        try:
            request = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise RequestError(400, 'the body is not JSON: send {"instances": [...]}') from None
        if not isinstance(request, dict) or "instances" not in request:
            raise RequestError(400, 'the body must be a JSON object with "instances": [...]')
        inputs = as_batch(request["instances"], model.shape)
        probabilities = softmax(self._logits(inputs))
        self._observe(inputs, probabilities)
        classes = model.classes
        return 200, {
            "predictions": [
                {"class": classes[int(row.argmax())], "confidence": float(row.max()),
                 "probabilities": [round(float(p), 6) for p in row]}
                for row in probabilities
            ]
        }  # fmt: skip

    def _v2_infer(self) -> tuple[int, Any]:
        body = self._body()
        model = self._usable()
        inputs, request_id = v2.parse_infer(
            body, self.headers.get("Inference-Header-Content-Length"), model.shape
        )
        logits = self._logits(inputs)
        probabilities = softmax(logits)
        self._observe(inputs, probabilities)
        return 200, v2.infer_answer(self.server.name, request_id, logits, probabilities)

    def _observe(self, inputs: np.ndarray, probabilities: np.ndarray) -> None:
        if self.server.metrics is not None:
            self.server.metrics.observe_predictions(probabilities)
        if self.server.drift is not None:
            self.server.drift.observe(inputs, probabilities.argmax(1))
        if self.server.sampler is not None:
            self.server.sampler.offer(inputs, probabilities)


def serve(
    folder: Path,
    port: int,
    host: str = "0.0.0.0",
    routes: Routes | None = None,
    name: str = "model",
    max_batch: int = 64,
    max_delay: float = 0.002,
    sample: Sampling | None = None,
) -> None:
    """Listen at once (liveness), load the model (then ready), answer until SIGTERM or Ctrl-C,
    then drain (and copy the samples a last time: samples.py)."""
    server = ModelServer((host, port), routes or Routes(), name, sample)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: threading.Thread(target=server.drain, daemon=True).start())
    threading.Thread(target=server.load, args=(folder, max_batch, max_delay), daemon=True).start()
    log.info("listening on %s:%d", host, port)
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        if server.batcher is not None:
            server.batcher.close()
        server.server_close()
        if server.sampler is not None:
            server.sampler.close()
