"""The model server (cloudgpu.serving) over real HTTP on loopback, as each service calls it
(SageMaker's routes, Vertex AI's AIP_* variables, Azure ML's mount), serving a numpy model
(served_model.py): bad requests, the body limit, the pinned model folder, samples to a folder
and to each cloud's bucket, batching, draining and drift. A project's own tests serve its
exported framework model."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from cloudgpu.serving import cli
from cloudgpu.testing import azure_blob, google_api
from cloudgpu.testing.services import free_port
from served_model import (
    Server,
    make_model,
    serve_command,
    server_env,
    start,
    stop,
    validation_inputs,
)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model(tmp_path_factory.mktemp("serve") / "model")


@pytest.fixture(scope="module")
def server(model: Path) -> Iterator[Server]:
    running = start(model)
    yield running
    stop(running)


def test_v2_infer_answers_the_models_logits_in_json_and_binary(server: Server, model: Path) -> None:
    parity = np.load(model / "parity.npz")
    x, expected = parity["x"][:5], parity["logits"][:5]
    tensor = {"name": "input", "shape": list(x.shape), "datatype": "FP32"}
    status, answer = server.post(
        "/v2/models/model/infer", {"id": "r1", "inputs": [{**tensor, "data": x.ravel().tolist()}]}
    )
    assert status == 200 and answer["id"] == "r1", answer
    logits = next(o for o in answer["outputs"] if o["name"] == "logits")
    assert np.allclose(np.reshape(logits["data"], logits["shape"]), expected, atol=1e-4)
    header = json.dumps({"inputs": [{**tensor, "parameters": {"binary_data_size": x.nbytes}}]})
    status, body = server.call(
        "POST", "/v2/models/model/infer", header.encode() + x.astype(np.float32).tobytes(),
        {"Inference-Header-Content-Length": str(len(header)),
         "Content-Type": "application/octet-stream"},
    )  # fmt: skip
    binary = json.loads(body)["outputs"][0]
    assert status == 200 and np.allclose(np.reshape(binary["data"], binary["shape"]), expected,
                                         atol=1e-4)  # fmt: skip
    metadata = json.loads(server.call("GET", "/v2/models/model")[1])
    assert metadata["platform"] == "numpy" and metadata["inputs"][0]["shape"] == [-1, 1, 8, 8]


BAD_REQUESTS = {  # id: (body, status, the start of the error line)
    "not-json": (b"instances=1", 400, "the body is not JSON"),
    "no-instances": (b'{"inputs": []}', 400, 'the body must be a JSON object with "instances"'),
    "empty": (b'{"instances": []}', 400, '"instances" must be a non-empty list'),
    "wrong-shape": (b'{"instances": [[1, 2, 3]]}', 400, "instance 0 has shape [3]: each input"),
    "text": (json.dumps({"instances": [["a"] * 64]}).encode(), 400, "instance 0 is not all"),
    "ragged": (b'{"instances": [[[1], [2, 3]]]}', 400, "instance 0 is not all numbers"),
    "nan": (b'{"instances": [[' + b",".join([b"NaN"] * 64) + b"]]}", 400, "instance 0 holds NaN"),
    "too-many": (json.dumps({"instances": [[0.0] * 64] * 1025}).encode(), 413, "1025 instances"),
}


@pytest.mark.parametrize(
    ("body", "status", "message"), BAD_REQUESTS.values(), ids=BAD_REQUESTS.keys()
)
def test_a_bad_request_is_a_4xx_with_one_line_and_the_server_goes_on(
    server: Server, body: bytes, status: int, message: str
) -> None:
    got, answer = server.call("POST", "/invocations", body, {"Content-Type": "application/json"})
    assert got == status
    error = json.loads(answer)["error"]
    assert error.startswith(message) and "\n" not in error, error
    assert server.post("/invocations", {"instances": [[0.0] * 64]})[0] == 200


def test_a_body_over_the_limit_is_a_413_and_a_kept_connection_carries_the_next_request(
    server: Server,
) -> None:
    """A body over what 1,024 inputs of the model's shape take (at most SageMaker's 6 MB: this
    one is under it) is refused before it is read (and that connection closed); one that says
    no length is stopped once it passes the limit. A 404 or 405 leaves the connection open for
    the next request, as a load balancer reuses it."""
    import asyncio
    import http.client
    import socket

    from cloudgpu.serving import http as routes
    from cloudgpu.serving import inputs

    port = int(server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(b"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Length: 5700000\r\n\r\n")
        answer = b""
        while chunk := sock.recv(65536):  # until the server closes the connection
            answer += chunk
    limit = 1024 * 64 * 32 + 64 * 1024  # the digits model: 64 numbers an input
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"the body is 5700000 bytes: at most %d per request" % limit in answer
    assert inputs.body_limit((1, 8, 8)) == limit and inputs.body_limit((3, 512, 512)) == 6 << 20

    chunks = [{"body": b"x" * (1 << 20), "more_body": True}] * 7 + [{"body": b""}]

    async def chunked() -> bytes:
        async def receive() -> dict:
            return chunks.pop(0)

        scope = {"method": "POST", "path": "/invocations", "headers": []}
        return await routes.Request(scope, receive).body()

    refusal = r"^the body is over 6291456 bytes: at most that per request$"
    with pytest.raises(ValueError, match=refusal) as refused:
        asyncio.run(chunked())
    assert refused.value.status == 413 and len(chunks) == 1, "it stopped reading at the limit"

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    body = json.dumps({"instances": [[0.0] * 64]})
    for method, path, status in [("POST", "/nowhere", 404), ("PUT", "/invocations", 405),
                                 ("POST", "/invocations", 200), ("GET", "/ping", 200)]:  # fmt: skip
        connection.request(method, path, body if method != "GET" else None)
        answer = connection.getresponse()
        assert answer.status == status and "\n" not in json.loads(answer.read()).get("error", "")
        assert answer.getheader("Connection") != "close"
    connection.close()


def test_vertex_ai_runs_it_by_its_variables(model: Path) -> None:
    """Vertex AI's contract: the port and both routes from AIP_* (no --port)."""
    port = free_port()
    base = "/v1/endpoints/123/deployedModels/456"
    vertex = start(model, AIP_HTTP_PORT=str(port), AIP_HEALTH_ROUTE=base,
                   AIP_PREDICT_ROUTE=f"{base}:predict")  # fmt: skip
    try:
        status, answer = vertex.post(f"{base}:predict", {"instances": [[0.5] * 64] * 3})
        assert status == 200 and len(answer["predictions"]) == 3
    finally:
        stop(vertex)


def test_azure_ml_mounts_a_folder_model_inside_its_model_dir(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Azure ML mounts a model registered from a folder as that folder inside
    AZUREML_MODEL_DIR: the server finds model.json there."""
    mount = tmp_path / "azureml-models" / "digits" / "1"
    shutil.copytree(model, mount / "model")
    monkeypatch.delenv("AIP_STORAGE_URI", raising=False)
    monkeypatch.setenv("AZUREML_MODEL_DIR", str(mount))
    assert cli.model_folder(None) == mount / "model"


def test_a_model_folder_that_is_not_the_deployed_one_is_never_loaded(
    model: Path, tmp_path: Path
) -> None:
    """Deploy pins the model folder's sha256 (MODEL_SHA256): a folder changed in the bucket since
    (one byte of its weights) is not loaded, readiness says why; the pinned folder serves."""
    from cloudgpu.serving.model import PINNED, folder_sha256

    pinned = folder_sha256(model)
    swapped = Path(shutil.copytree(model, tmp_path / "swapped"))
    weights = swapped / json.loads((swapped / "model.json").read_text())["file"]
    if weights.is_dir():  # a SavedModel: one of its files
        files = [path for path in weights.rglob("*") if path.is_file()]
        weights = max(files, key=lambda path: path.stat().st_size)
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    port = free_port()
    process = subprocess.Popen(
        serve_command("--model", str(swapped), "--port", str(port)),
        env=server_env(**{PINNED: pinned}), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    server, why = Server(process, port), b""
    try:
        deadline = time.monotonic() + 60
        while b"not loaded" not in why and time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                status, why = server.call("GET", "/ping")
                assert status == 503, why
            time.sleep(0.1)
        assert b"not the deployed model's" in why, why
    finally:
        stop(server)
    serving = start(model, **{PINNED: pinned})
    stop(serving)


@pytest.mark.parametrize("with_inputs", [False, True], ids=["predictions", "with-inputs"])
def test_sampled_predictions_land_as_json_lines(
    model: Path, tmp_path: Path, with_inputs: bool
) -> None:
    """--sample-rate 1: every input's prediction, one line each, with an id that is the same
    for the same input; the input itself only with --sample-inputs."""
    flags = ["--sample-rate", "1", "--sample-dir", str(tmp_path / "samples")]
    sampling = start(model, *flags, *(["--sample-inputs"] if with_inputs else []))
    x = [[0.5] * 64, [0.25] * 64, [0.5] * 64]
    try:
        status, answer = sampling.post("/invocations", {"instances": x})
        assert status == 200
    finally:
        stop(sampling)
    [written] = (tmp_path / "samples").glob("samples-*.jsonl")
    lines = [json.loads(line) for line in written.read_text().splitlines()]
    assert [line["class"] for line in lines] == [p["class"] for p in answer["predictions"]]
    assert lines[0]["id"] == lines[2]["id"] != lines[1]["id"]
    assert ("input" in lines[0]) is with_inputs
    if with_inputs:
        assert np.ravel(lines[1]["input"]).tolist() == x[1]  # in the model's input shape


@pytest.mark.parametrize("cloud", ["gcp", "azure"])
def test_samples_reach_the_bucket_while_serving_and_at_the_end(
    model: Path, tmp_path: Path, cloud: str
) -> None:
    """Vertex AI's way (gs://, the metadata server's token) and Azure ML's (a blob URL, the
    endpoint identity's token): the hour's file is in the bucket while the server runs, the
    lines of the last requests after SIGTERM, and none stays on the container's disk."""
    with contextlib.ExitStack() as stack:
        if cloud == "gcp":
            api = stack.enter_context(google_api.serve())
            api.storage = tmp_path / "bucket"
            uri = "gs://runs/proj/endpoints/e1/samples"
            env = {"GCE_METADATA_HOST": api.url.removeprefix("http://"),
                   "BUCKETS_TEST_LOOPBACK": api.url}  # fmt: skip
        else:
            blob = stack.enter_context(azure_blob.serve(tmp_path / "bucket"))
            uri, env = blob.container_url("runs", "proj/endpoints/e1/samples"), blob.env
        landed = tmp_path / "bucket" / "runs/proj/endpoints/e1/samples"
        flags = ["--sample-rate", "1", "--sample-dir", str(tmp_path / "samples"),
                 "--sample-uri", uri, "--sample-every", "0.2"]  # fmt: skip
        server = start(model, *flags, **env)
        try:
            assert server.post("/invocations", {"instances": [[0.5] * 64] * 2})[0] == 200
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not list(landed.glob("samples-*.jsonl")):
                time.sleep(0.1)
            [early] = landed.glob("samples-*.jsonl")
            assert len(early.read_text().splitlines()) == 2
            assert server.post("/invocations", {"instances": [[0.25] * 64] * 3})[0] == 200
        finally:
            output = stop(server)
    [copied] = landed.glob("samples-*.jsonl")
    lines = [json.loads(line) for line in copied.read_text().splitlines()]
    assert len(lines) == 5 and "not copied" not in output
    assert not list((tmp_path / "samples").glob("*.jsonl"))
    if cloud == "gcp":
        uploads = [r.body for r in api.requests if r.path.startswith("/upload/runs/")]
        assert uploads and all(u["authorization"] == "Bearer stand-in-token" for u in uploads)


def test_a_bucket_that_refuses_the_samples_leaves_them_on_disk_and_serving_goes_on(
    model: Path, tmp_path: Path
) -> None:
    """A missing role assignment: one warning line per try, the answers unchanged, the file
    kept for the next try, and a clean exit."""
    with azure_blob.serve(tmp_path / "bucket") as blob:
        blob.refuse = True
        to = blob.container_url("runs", "e1")
        flags = ["--sample-rate", "1", "--sample-dir", str(tmp_path / "samples"),
                 "--sample-uri", to, "--sample-every", "0.2"]  # fmt: skip
        server = start(model, *flags, **blob.env)
        try:
            assert server.post("/invocations", {"instances": [[0.5] * 64]})[0] == 200
            time.sleep(0.5)
            assert server.post("/invocations", {"instances": [[0.5] * 64]})[0] == 200
        finally:
            output = stop(server)
    warnings = [line for line in output.splitlines() if "not copied" in line]
    assert warnings and all("403" in line for line in warnings), output
    [kept] = (tmp_path / "samples").glob("samples-*.jsonl")
    assert len(kept.read_text().splitlines()) == 2
    assert not (tmp_path / "bucket").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sample-rate", "2"], "error: --sample-rate 2: a fraction from 0 (none) to 1"),
        (["--sample-uri", "s3://b/p"], "error: --sample-uri s3://b/p: the server writes to gs://"),
        (["--sample-every", "0"], "error: --sample-every 0: seconds, more than 0"),
    ],
    ids=["rate", "s3", "every"],
)
def test_bad_sampling_flags_are_one_line(model: Path, args: list[str], message: str) -> None:
    done = subprocess.run(
        serve_command("--model", str(model), *args),
        env=server_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(message), line


def test_concurrent_requests_share_batches_and_are_counted(model: Path) -> None:
    batching = start(model, "--max-delay-ms", "100")
    try:
        parity = np.load(model / "parity.npz")
        answers: list[tuple[int, dict]] = [(0, {})] * 16

        def ask(index: int) -> None:
            answers[index] = batching.post("/predict", {"instances": [parity["x"][index].tolist()]})

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for index, (status, answer) in enumerate(answers):
            assert status == 200, answer
            expected = str(int(parity["logits"][index].argmax()))
            assert answer["predictions"][0]["class"] == expected
        text = batching.call("GET", "/metrics")[1].decode()
        batches = next(float(line.split()[-1]) for line in text.splitlines()
                       if line.startswith("inference_batch_size_count"))  # fmt: skip
        assert 1 <= batches < 16, "16 requests at once ran in fewer batches"
        assert 'inference_requests_total{code="200",route="/predict"} 16.0' in text
        assert "inference_top_confidence_bucket" in text and "inference_predicted_class" in text
    finally:
        stop(batching)


def test_sigterm_lets_a_request_in_flight_finish(model: Path) -> None:
    """A request whose body is still arriving when SIGTERM comes is answered; then the server
    stops, exit status 0."""
    import socket

    server = start(model)
    body = json.dumps({"instances": [[0.1] * 64]}).encode()
    port = int(server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        head = (f"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()  # fmt: skip
        sock.sendall(head + body[:10])
        time.sleep(0.5)  # the handler is reading the body: in flight
        server.process.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        sock.sendall(body[10:])
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    output, _ = server.process.communicate(timeout=60)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    assert b'"predictions"' in answer
    assert server.process.returncode == 0 and "drained (0 requests still in flight)" in output


def test_shifted_inputs_move_the_drift_gauges_past_the_alerts_threshold(model: Path) -> None:
    """Inputs drawn as the reference's look like it (PSI low); the same inputs shifted by 3 standard
    deviations do not (PSI past 0.25, where monitoring/alerts.yml's drift alerts fire). One
    request, even of more inputs than the window (1,000) holds, adds at most 100 of them: it
    cannot set the gauges alone."""
    test_x = validation_inputs(seed=1)  # another draw of the reference's inputs
    shifted = test_x + 3 * test_x.std()

    def send(x: np.ndarray, times: int = 1) -> None:
        for _ in range(times):
            for at in range(0, len(x), 100):
                assert (
                    fresh.post("/invocations", {"instances": x[at : at + 100].tolist()})[0] == 200
                )

    fresh = start(model)
    try:
        send(test_x)
        assert fresh.gauge("inference_drift_window_inputs") == len(test_x)
        send(test_x, 1000 // len(test_x))  # the window full of calm inputs
        calm_inputs = fresh.gauge("inference_input_psi")
        calm_predictions = fresh.gauge("inference_prediction_psi")
        assert calm_inputs < 0.1, calm_inputs
        one = np.resize(shifted, (1024, *shifted.shape[1:]))
        assert fresh.post("/invocations", {"instances": one.tolist()})[0] == 200
        assert fresh.gauge("inference_input_psi") < 0.25, "one request set the gauge"
        send(shifted, 1000 // len(shifted) + 1)  # fill the window with shifted ones
        assert fresh.gauge("inference_input_psi") > 0.25 > calm_inputs
        assert fresh.gauge("inference_prediction_psi") > max(0.25, 3 * calm_predictions)
    finally:
        stop(fresh)


def test_a_missing_model_folder_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        serve_command("--model", str(tmp_path)),
        env=server_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"error: no model folder with a model.json at {tmp_path}")
