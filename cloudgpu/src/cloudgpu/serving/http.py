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
request gets a 4xx and {"error": "one line"} (inputs.py checks what a request holds); the server
and its other requests go on. A body must arrive within BODY_WITHIN seconds, and at most
MAX_IN_FLIGHT prediction requests are read or answered at once (connections.py bounds the rest).

The routes are one ASGI application run by uvicorn (serving/__init__.py says why): requests are
read and answered on one event loop while the model runs on a thread of its own (batcher.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from . import inputs, v2
from .inputs import RequestError
from .model import ServedModel

if TYPE_CHECKING:
    from .server import ModelServer

log = logging.getLogger(__name__)
ANSWER_WITHIN = 55.0  # seconds: SageMaker waits 60 for an answer
BODY_WITHIN = 20.0  # seconds for a whole body to arrive: 6 MB at 300 kB/s
MAX_IN_FLIGHT = 256  # prediction requests at once: each may hold a body (inputs.body_limit)
JSON = "application/json"

Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Handler = Callable[["Request"], Awaitable[tuple[int, Any]]]


class Routes:
    """Which path does what: the defaults, and those the services' variables name."""

    def __init__(self, health: str = "", predict: str = "") -> None:
        self.ready = {"/ping", "/health", "/ready", "/v2/health/ready", *filter(None, [health])}
        self.live = {"/live", "/v2/health/live"}
        self.predict = {"/invocations", "/predict", "/score", *filter(None, [predict])}


class Request:
    """One request's method, path, headers and body (read within BODY_WITHIN seconds, at most
    a limit's bytes of it)."""

    def __init__(self, scope: dict[str, Any], receive: Receive) -> None:
        self.method, self.path, self._receive = scope["method"], scope["path"], receive
        self.coming = False  # counted in ModelServer.coming
        self.headers = {key.decode("latin-1"): value for key, value in scope["headers"]}

    def header(self, name: str) -> str | None:
        value = self.headers.get(name)
        return value.decode("latin-1") if value is not None else None

    async def body(self, limit: int = inputs.MAX_BODY) -> bytes:
        length = int(self.header("content-length") or 0)  # the parser checked it is a number
        if length > limit:  # its body stays unread, and the connection is closed
            raise RequestError(413, f"the body is {length} bytes: at most {limit} per request")
        try:
            return await asyncio.wait_for(self._read(limit), BODY_WITHIN)
        except TimeoutError:  # a client trickling its body holds no slot for long
            raise RequestError(408, f"the body did not arrive within {BODY_WITHIN:g} s") from None

    async def _read(self, limit: int) -> bytes:
        chunks, size = [], 0
        while True:
            message = await self._receive()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:  # a chunked body says its size only by sending it
                raise RequestError(413, f"the body is over {limit} bytes: at most that per "
                                   "request")  # fmt: skip
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


UNREAD = {408, 413, 503}  # the body was not (all) read: the connection cannot carry another


async def respond(send: Send, status: int, body: bytes, content_type: str = JSON) -> None:
    headers = [(b"content-type", content_type.encode()), (b"content-length", b"%d" % len(body))]
    if status in UNREAD:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def respond_json(send: Send, status: int, payload: Any) -> None:
    await respond(send, status, json.dumps(payload, allow_nan=False).encode())


class App:
    """The ASGI application: every route of every contract above."""

    def __init__(self, server: ModelServer) -> None:
        self.server = server

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan and websockets: nothing to do
            return
        request = Request(scope, receive)
        if request.method in ("GET", "HEAD"):
            await self._get(request.path, send)
        elif request.method == "POST":
            await self._post(request, send)
        else:
            await respond_json(send, 405, {"error": f"{request.method}: send GET or POST"})

    async def _get(self, path: str, send: Send) -> None:
        server = self.server
        if path in server.routes.live:
            await respond_json(send, 200, {"live": True})
        elif path in server.routes.ready or path == f"/v2/models/{server.name}/ready":
            if server.ready:
                await respond_json(send, 200, {"ready": True})
            else:
                why = server.load_error or ("draining" if server.draining else "loading the model")
                await respond_json(send, 503, {"ready": False, "error": why})
        elif path == "/metrics":
            metrics = server.metrics
            body = generate_latest(metrics.registry) if metrics is not None else b""
            await respond(send, 200, body, CONTENT_TYPE_LATEST)
        elif path == f"/v2/models/{server.name}" and server.model is not None:
            await respond_json(send, 200, v2.metadata(server.name, server.model))
        elif path == "/v2":
            await respond_json(send, 200, {"name": server.name, "version": "1", "extensions": []})
        else:
            await respond_json(send, 404, {"error": f"no route GET {path}"})

    async def _post(self, request: Request, send: Send) -> None:
        if request.path in self.server.routes.predict:
            await self._timed(request.path, self._instances, request, send)
        elif self.server.infer_path.fullmatch(request.path):
            await self._timed("/v2/infer", self._v2_infer, request, send)
        else:
            try:
                await request.body()  # read, so the connection can carry the next request
            except RequestError as error:
                await respond_json(send, error.status, {"error": str(error)})
                return
            await respond_json(send, 404, {"error": f"no route POST {request.path}"})

    async def _timed(self, route: str, answer: Handler, request: Request, send: Send) -> None:
        """Answer a prediction request, counted and timed. One that arrives after SIGTERM gets a
        503 (the load balancer sends it elsewhere); one already in flight is answered."""
        server, started, metrics = self.server, time.perf_counter(), self.server.metrics
        server.in_flight += 1
        server.coming += 1
        request.coming = True
        if metrics is not None:
            metrics.in_flight.inc()
        try:
            try:
                if server.draining:
                    raise RequestError(503, "not ready: draining")
                if server.in_flight > MAX_IN_FLIGHT:
                    raise RequestError(503, f"busy: {MAX_IN_FLIGHT} requests in flight")
                status, payload = await answer(request)
            except RequestError as error:
                status, payload = error.status, {"error": str(error)}
            except TimeoutError:
                status, payload = 504, {"error": f"no answer within {ANSWER_WITHIN:g} s"}
            except Exception:  # the model failed: this request's 500, said in the log only
                log.exception("request failed")
                status, payload = 500, {"error": "the server failed on this request"}
            await respond_json(send, status, payload)
        finally:
            server.in_flight -= 1
            self._arrived(request)
            if metrics is not None:
                metrics.in_flight.dec()
        if metrics is not None:
            metrics.requests.labels(route=route, code=str(status)).inc()
            metrics.latency.labels(route=route).observe(time.perf_counter() - started)

    def _usable(self) -> ServedModel:
        if self.server.batcher is None or self.server.model is None:
            raise RequestError(503, "not ready: the model is loading")
        return self.server.model

    def _arrived(self, request: Request) -> None:
        """`request` has reached the batcher, or will not: the batcher waits for it no more."""
        if request.coming:
            request.coming = False
            self.server.coming -= 1

    async def _predicted(self, request: Request, batch: np.ndarray) -> np.ndarray:
        """The logits and probabilities of `batch`: (inputs, 2, classes); a 422 where the model
        gives no finite answer (inputs far outside what it learned: JSON holds no NaN)."""
        assert self.server.batcher is not None
        self._arrived(request)
        predicted = await asyncio.wait_for(self.server.batcher.submit(batch), ANSWER_WITHIN)
        finite = np.isfinite(predicted).all(axis=(1, 2))
        if not finite.all():
            raise RequestError(422, f"instance {int(finite.argmin())}: the model's output is not "
                               "finite (inputs far outside what it was trained on?)")  # fmt: skip
        return predicted

    async def _body(self, request: Request) -> tuple[bytes, ServedModel]:
        model = self._usable()
        return await request.body(inputs.body_limit(model.shape)), model

    async def _instances(self, request: Request) -> tuple[int, Any]:
        body, model = await self._body(request)
        batch = inputs.instances(body, model.shape, model.prepared)
        probabilities = (await self._predicted(request, batch))[:, 1]
        classes, rounded = model.classes, probabilities.round(6).tolist()
        chosen, confidence = probabilities.argmax(1).tolist(), probabilities.max(1).tolist()
        return 200, {
            "predictions": [
                {"class": classes[index], "confidence": top, "probabilities": row}
                for index, top, row in zip(chosen, confidence, rounded, strict=True)
            ]
        }

    async def _v2_infer(self, request: Request) -> tuple[int, Any]:
        body, model = await self._body(request)
        header = request.header("inference-header-content-length")
        batch, request_id = inputs.v2_tensor(body, header, model.shape)
        predicted = await self._predicted(request, batch)
        return 200, v2.infer_answer(self.server.name, request_id, predicted[:, 0], predicted[:, 1])
