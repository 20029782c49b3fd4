"""The server's command line: a project's `python -m PACKAGE.serve [--model DIR] [--port N]`
calls main() with its own model opener (model.py says what it returns).

DIR is a model folder (`invoke export --run RUN` writes RUN/model/). Without --model, the first
that exists of: $AIP_STORAGE_URI (Vertex AI: a gs:// URI, copied here first, or a path),
/opt/ml/model (SageMaker), $AZUREML_MODEL_DIR (Azure ML; or the folder in it). The port:
--port, else $AIP_HTTP_PORT (Vertex AI), else 8080 (SageMaker's). http.py lists the routes.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from . import buckets
from .model import Opener
from .samples import Sampling

DEFAULT_PORT = 8080
MODEL_PLACES = ("AIP_STORAGE_URI", "/opt/ml/model", "AZUREML_MODEL_DIR")


def _holding_the_card(folder: Path) -> Path:
    """`folder`, or the folder below it that holds model.json (Azure ML mounts a model
    registered from a folder as that folder, inside AZUREML_MODEL_DIR)."""
    if (folder / "model.json").is_file():
        return folder
    found = sorted(folder.glob("*/model.json")) + sorted(folder.glob("*/*/model.json"))
    return found[0].parent if found else folder


def model_folder(given: str | None) -> Path | None:
    """--model, else the first place a managed endpoint puts the model that exists here (a
    gs:// AIP_STORAGE_URI is copied here first)."""
    if given:
        return Path(given)
    for place in MODEL_PLACES:
        path = os.environ.get(place, "") if not place.startswith("/") else place
        if path.startswith("gs://"):
            return _holding_the_card(buckets.gcs_folder(path))
        if path and "://" not in path and Path(path).is_dir():
            return _holding_the_card(Path(path))
    return None


def main(open_model: Opener, argv: list[str] | None = None, prog: str = "serve") -> None:
    """Parse `argv` (default: the process's), find the model folder, and serve it."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    # SageMaker starts an endpoint's container as `docker run IMAGE serve`.
    parser.add_argument("command", nargs="?", choices=["serve"], help="SageMaker's; ignored")
    parser.add_argument("--model", help="a model folder (invoke export writes RUN/model/)")
    parser.add_argument("--port", type=int, help="default: $AIP_HTTP_PORT, else 8080")
    parser.add_argument("--host", default="0.0.0.0", help="default: every address")
    parser.add_argument("--name", default="model", help="the model's name in KServe V2 routes")
    parser.add_argument("--max-batch", type=int, default=64, help="inputs per run of the model")
    parser.add_argument(
        "--max-delay-ms", type=float, default=2.0, help="how long a request waits for others"
    )
    parser.add_argument(
        "--sample-rate",
        type=float,
        default=float(os.environ.get("SAMPLE_RATE") or 0),
        help="keep this share of inputs' predictions (cloudgpu.serving.samples)",
    )
    parser.add_argument(
        "--sample-dir",
        default=os.environ.get("SAMPLE_DIR") or "samples",
        help="where: samples-<hour>.jsonl files",
    )
    parser.add_argument(
        "--sample-uri",
        default=os.environ.get("SAMPLE_URI", ""),
        help="and copied there: gs://BUCKET/PREFIX, an Azure blob URL or a folder",
    )
    parser.add_argument(
        "--sample-every",
        type=float,
        default=float(os.environ.get("SAMPLE_EVERY_S") or 300),
        help="seconds between copies (and one at the end)",
    )
    parser.add_argument(
        "--sample-inputs",
        action="store_true",
        default=os.environ.get("SAMPLE_INPUTS") == "1",
        help="the inputs too",
    )
    args = parser.parse_args(argv)
    if not 0 <= args.sample_rate <= 1:
        sys.exit(f"error: --sample-rate {args.sample_rate:g}: a fraction from 0 (none) to 1")
    try:
        uri = buckets.check(args.sample_uri)
    except ValueError as error:
        sys.exit(f"error: --sample-uri {error}")
    if args.sample_every <= 0:
        sys.exit(f"error: --sample-every {args.sample_every:g}: seconds, more than 0")
    sample = Sampling(Path(args.sample_dir), args.sample_rate, args.sample_inputs, uri,
                      args.sample_every)  # fmt: skip
    try:
        folder = model_folder(args.model)
    except OSError as error:  # the bucket of AIP_STORAGE_URI: not there, or not ours to read
        sys.exit(f"error: cannot copy the model from {os.environ.get('AIP_STORAGE_URI')}: {error}")
    if folder is None or not (folder / "model.json").is_file():
        where = str(folder) if folder else f"none of {', '.join(MODEL_PLACES)}"
        sys.exit(f"error: no model folder with a model.json at {where}: pass --model DIR "
                 "(invoke export --run RUN writes RUN/model/)")  # fmt: skip
    port = args.port or int(os.environ.get("AIP_HTTP_PORT") or DEFAULT_PORT)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    from .http import Routes
    from .server import serve

    routes = Routes(os.environ.get("AIP_HEALTH_ROUTE", ""), os.environ.get("AIP_PREDICT_ROUTE", ""))
    try:
        serve(folder, open_model, port, args.host, routes, args.name, args.max_batch,
              args.max_delay_ms / 1000, sample if args.sample_rate > 0 else None)  # fmt: skip
    except OSError as error:  # the port is taken, or not ours to bind
        sys.exit(f"error: cannot listen on {args.host}:{port}: {error.strerror or error}")
