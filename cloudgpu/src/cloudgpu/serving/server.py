"""The server's state and life around the routes of http.py: listen at once (liveness), load the
model on a thread (then ready), answer until SIGTERM or Ctrl-C, then drain: not ready any more,
the requests in flight answered (for DRAIN_FOR at most), the samples copied a last time
(samples.py), then stop, waiting STOP_WITHIN at most for connections still open. SageMaker
kills 30 s after SIGTERM: all of it fits in 25 s, a client trickling its body or not."""

from __future__ import annotations

import gc
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import numpy as np
import uvicorn

from .batcher import Batcher
from .connections import GuardedHttpTools
from .drift import Drift, softmax
from .http import App, Routes
from .metrics import ServingMetrics
from .model import PINNED, Opener, ServedModel, load
from .samples import Sampler, Sampling

log = logging.getLogger(__name__)
DRAIN_FOR = 12.0  # seconds after SIGTERM for the requests in flight; then the last copy (10 s)
STOP_WITHIN = 3  # seconds for uvicorn to close the connections still open
# Seconds an idle connection stays open: longer than the 60 s a load balancer such as AWS's keeps
# one by default, so the balancer closes idle connections, never the server under its feet.
KEEP_ALIVE = 75
BACKLOG = 1024  # connections waiting to be accepted: a burst of clients is queued, not reset


class ModelServer:
    """What the routes answer from: the model once loaded, its batcher, metrics, drift and
    samples, and whether the server is draining."""

    def __init__(self, open_model: Opener, routes: Routes, name: str,
                 sample: Sampling | None = None) -> None:  # fmt: skip
        self.open_model, self.routes, self.name, self.sample = open_model, routes, name, sample
        self.infer_path = re.compile(rf"/v2/models/{re.escape(name)}(/versions/[^/]+)?/infer")
        self.sampler: Sampler | None = None
        self.model: ServedModel | None = None
        self.batcher: Batcher | None = None
        self.metrics: ServingMetrics | None = None
        self.drift: Drift | None = None
        self.draining = False
        self.load_error = ""
        # Changed on the event loop only. `coming`: requests in flight not yet handed to the
        # batcher, which it waits for (within its delay) before it runs a batch.
        self.in_flight = self.coming = 0

    @property
    def ready(self) -> bool:
        return self.model is not None and not self.draining

    def load(self, folder: Path, max_batch: int, max_delay: float) -> None:
        """Load the model (the server answers liveness meanwhile, readiness with 503)."""
        try:
            model = load(folder, self.open_model, os.environ.get(PINNED, ""))
        except Exception as error:  # said at readiness and in the log; liveness goes on
            self.load_error = f"{type(error).__name__}: {error}".splitlines()[0]
            log.error("cannot load the model: %s", self.load_error)
            return
        self.metrics = ServingMetrics(model.classes)
        if self.sample is not None:
            self.sampler = Sampler(self.sample, model.classes, self.metrics.samples_dropped.inc)
        if (folder / "reference.npz").is_file():
            self.drift = Drift(folder / "reference.npz", len(model.classes))
            self.metrics.watch_drift(self.drift)
        self.batcher = Batcher(self._predict, max_batch, max_delay, self._pending)
        model.predict(np.zeros((1, *model.shape), np.float32))  # warm: the first call traces
        # The framework's objects, now all made, leave the collector's sight: a full collection
        # would walk every one of them, a pause of tens of milliseconds in some request's answer.
        gc.collect()
        gc.freeze()
        self.model = model
        self.metrics.ready.set(1)
        log.info("model %s loaded from %s: ready", model.card["file"], folder)

    def _pending(self) -> int:
        return self.coming

    def _predict(self, inputs: np.ndarray, sizes: list[int]) -> np.ndarray:
        """A batch's logits and probabilities, (inputs, 2, classes), on the model's thread;
        the batch recorded once for all its requests (`sizes`: their inputs)."""
        assert self.model is not None and self.metrics is not None
        logits = np.asarray(self.model.predict(inputs), dtype=np.float64)
        probabilities = softmax(logits)
        self.metrics.batch_size.observe(len(inputs))
        finite = np.isfinite(probabilities).all(axis=1)
        if finite.all():
            self._record(inputs, probabilities, sizes)
        else:  # such a request is answered 422 (http.py) and recorded nowhere
            whole = np.logical_and.reduceat(finite, np.cumsum([0, *sizes[:-1]]))
            kept = np.repeat(whole, sizes)
            self._record(inputs[kept], probabilities[kept],
                         [size for size, ok in zip(sizes, whole, strict=True) if ok])  # fmt: skip
        return np.stack([logits, probabilities], axis=1)

    def _record(self, inputs: np.ndarray, probabilities: np.ndarray, sizes: list[int]) -> None:
        if not sizes:
            return
        assert self.metrics is not None
        self.metrics.observe_predictions(probabilities)
        if self.drift is not None:
            self.drift.observe(inputs, probabilities.argmax(1), sizes)
        if self.sampler is not None:
            try:
                self.sampler.offer(inputs, probabilities)
            except Exception:  # a sampler's fault is no prediction's
                log.exception("samples: not offered")
                self.metrics.samples_dropped.inc(len(inputs))

    def drain(self, stop: Callable[[], None]) -> None:
        """SIGTERM: not ready any more, finish what is in flight (up to DRAIN_FOR), copy the
        samples a last time, then `stop`."""
        self.draining = True
        if self.metrics is not None:
            self.metrics.ready.set(0)
        deadline = time.monotonic() + DRAIN_FOR
        while self.in_flight and time.monotonic() < deadline:
            time.sleep(0.01)
        log.info("drained (%d requests still in flight): stopping", self.in_flight)
        if self.sampler is not None:
            self.sampler.close()
        stop()


class DrainingServer(uvicorn.Server):
    """uvicorn's server, whose first SIGTERM or Ctrl-C drains before it stops (uvicorn's own
    would stop listening at once), and whose exit after a drain is a clean one."""

    def __init__(self, config: uvicorn.Config, model_server: ModelServer) -> None:
        super().__init__(config)
        self.model_server = model_server
        self.draining = False

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.draining:  # a second signal: stop now
            self.should_exit = self.force_exit = True
            return
        self.draining = True
        threading.Thread(target=self.model_server.drain, args=(self.stop,), daemon=True).start()

    def stop(self) -> None:
        self.should_exit = True


def listening(host: str, port: int) -> socket.socket:
    """A socket bound to host:port (OSError if the port is taken or not ours)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def serve(
    folder: Path,
    open_model: Opener,
    port: int,
    host: str = "0.0.0.0",
    routes: Routes | None = None,
    name: str = "model",
    max_batch: int = 64,
    max_delay: float = 0.002,
    sample: Sampling | None = None,
) -> None:
    """Serve `folder`'s model on host:port until SIGTERM or Ctrl-C, then drain and stop."""
    sock = listening(host, port)
    model_server = ModelServer(open_model, routes or Routes(), name, sample)
    config = uvicorn.Config(
        App(model_server),
        loop="auto",  # uvloop where it installs (Linux, macOS), asyncio elsewhere
        http=GuardedHttpTools,  # httptools, with deadlines and a limit for headers
        lifespan="off",
        log_config=None,
        log_level="warning",
        access_log=False,
        server_header=False,
        proxy_headers=False,  # nothing here reads the client's address
        timeout_keep_alive=KEEP_ALIVE,
        timeout_graceful_shutdown=STOP_WITHIN,
        backlog=BACKLOG,
    )
    server = DrainingServer(config, model_server)
    # The model loads on a thread of its own: the server listens (liveness) meanwhile.
    loading = threading.Thread(target=model_server.load, args=(folder, max_batch, max_delay))
    loading.daemon = True
    loading.start()
    log.info("listening on %s:%d", host, port)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        if model_server.batcher is not None:
            model_server.batcher.close()
        if model_server.sampler is not None:
            model_server.sampler.close()
