"""Serve an exported model: `python -m PACKAGE.serve [--model DIR] [--port N]`.

DIR is a model folder (`invoke export --run RUN` writes RUN/model/). Without --model, the first
that exists of: the folder $AIP_STORAGE_URI names (Vertex AI, when it is a local path),
/opt/ml/model (SageMaker), $AZUREML_MODEL_DIR (Azure ML). The port: --port, else $AIP_HTTP_PORT
(Vertex AI), else 8080 (SageMaker's). serving/http.py lists the routes.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

DEFAULT_PORT = 8080
MODEL_PLACES = ("AIP_STORAGE_URI", "/opt/ml/model", "AZUREML_MODEL_DIR")


def model_folder(given: str | None) -> Path | None:
    """--model, else the first place a managed endpoint puts the model that exists here."""
    if given:
        return Path(given)
    for place in MODEL_PLACES:
        path = os.environ.get(place, "") if not place.startswith("/") else place
        if path and "://" not in path and Path(path).is_dir():
            return Path(path)
    return None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=f"python -m {__package__}.serve", description=__doc__)
    parser.add_argument("--model", help="a model folder (invoke export writes RUN/model/)")
    parser.add_argument("--port", type=int, help="default: $AIP_HTTP_PORT, else 8080")
    parser.add_argument("--host", default="0.0.0.0", help="default: every address")
    parser.add_argument("--name", default="model", help="the model's name in KServe V2 routes")
    parser.add_argument("--max-batch", type=int, default=64, help="inputs per run of the model")
    parser.add_argument(
        "--max-delay-ms", type=float, default=2.0, help="how long a request waits for others"
    )
    args = parser.parse_args(argv)
    folder = model_folder(args.model)
    if folder is None or not (folder / "model.json").is_file():
        where = str(folder) if folder else f"none of {', '.join(MODEL_PLACES)}"
        sys.exit(f"error: no model folder with a model.json at {where}: pass --model DIR "
                 "(invoke export --run RUN writes RUN/model/)")  # fmt: skip
    port = args.port or int(os.environ.get("AIP_HTTP_PORT") or DEFAULT_PORT)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    from .serving.http import Routes, serve

    routes = Routes(os.environ.get("AIP_HEALTH_ROUTE", ""), os.environ.get("AIP_PREDICT_ROUTE", ""))
    try:
        serve(folder, port, args.host, routes, args.name, args.max_batch, args.max_delay_ms / 1000)
    except OSError as error:  # the port is taken, or not ours to bind
        sys.exit(f"error: cannot listen on {args.host}:{port}: {error.strerror or error}")


if __name__ == "__main__":
    main()
