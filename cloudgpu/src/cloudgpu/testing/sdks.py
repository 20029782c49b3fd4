"""The clouds' own SDKs, which check offline what the tasks write: azure-ai-ml's `load_job`,
google-cloud-aiplatform's message types, SkyPilot's `Task`. No task needs them and together they
are 770 MB, so they live in a venv of their own whose Python CLOUD_SDK_PYTHON names (.ci/run of
the template makes one: pip install azure-ai-ml google-cloud-aiplatform skypilot, with the IAM
linters parliament and cloudsplaining beside them: helpers/iam.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

PYTHON = os.environ.get("CLOUD_SDK_PYTHON", "")  # tests that use it are marked needs("cloud-sdks")

# Each reads the file at `path` and prints what its SDK makes of it as one JSON line.
VALIDATORS = {
    # The job as Azure ML would send it: load_job checks the YAML against its schema.
    "azureml": (
        "from azure.ai.ml import load_job\n"
        "print(json.dumps(load_job(path)._to_rest_object(), default=str))\n"
    ),
    # An online endpoint and its deployment (endpoint.yaml beside deployment.yaml), loaded and
    # checked as `az ml online-deployment create` does (_validate: names, scale settings).
    "azureml-online": (
        "from azure.ai.ml import load_online_deployment, load_online_endpoint\n"
        "folder = pathlib.Path(path).parent\n"
        "endpoint = load_online_endpoint(folder / 'endpoint.yaml')\n"
        "deployment = load_online_deployment(path)\n"
        "deployment._validate()\n"
        "config = deployment.environment.inference_config\n"
        "print(json.dumps({'endpoint': endpoint.name, 'auth_mode': endpoint.auth_mode,\n"
        "    'deployment': deployment.name, 'endpoint_name': deployment.endpoint_name,\n"
        "    'image': deployment.environment.image, 'model': str(deployment.model.path),\n"
        "    'instance_type': deployment.instance_type, 'instances': deployment.instance_count,\n"
        "    'routes': {k: [v.port, v.path] for k, v in (('live', config.liveness_route),\n"
        "        ('ready', config.readiness_route), ('score', config.scoring_route))},\n"
        "    'identity': endpoint.identity and [endpoint.identity.type,\n"
        "        [i.resource_id for i in endpoint.identity.user_assigned_identities or []]],\n"
        "    'env': deployment.environment_variables}))\n"
    ),
    # gcloud's request body parsed by Vertex AI's own message type: unknown fields and enum
    # values fail; the JSON that comes back has every enum by name.
    "vertex": (
        "from google.cloud import aiplatform_v1\n"
        "text = open(path).read()\n"
        "job = aiplatform_v1.CustomJob.from_json(text, ignore_unknown_fields=False)\n"
        "named = aiplatform_v1.CustomJob.to_json(job, use_integers_for_enums=False)\n"
        "print(json.dumps(json.loads(named)))\n"
    ),
    # SkyPilot's parser: a typo'd key or a bad value fails, with its suggestion.
    "skypilot": (
        "import sky\nprint(json.dumps(sky.Task.from_yaml(path).to_yaml_config(), default=str))\n"
    ),
}


def validate(kind: str, path: Path) -> Any:
    """What the SDK of `kind` makes of the file at `path`; the test fails with its error."""
    return validate_all(kind, [path])[0]


def validate_all(kind: str, paths: list[Path]) -> list[Any]:
    """What the SDK of `kind` makes of each file, read in one process (an SDK takes seconds of
    CPU to import); the test fails with the error and the name of the file it refused."""
    body = "".join(f"    {line}\n" for line in VALIDATORS[kind].splitlines())
    loop = "import json, pathlib, sys\nfor path in sys.argv[1:]:\n"
    code = loop + "    print(path, file=sys.stderr)\n" + body  # the file it refused: the last one
    done = subprocess.run(
        [PYTHON, "-c", code, *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HOME": str(paths[0].parent)},  # SkyPilot writes ~/.sky
    )
    assert done.returncode == 0, f"{kind} refused a file of {len(paths)}:\n{done.stderr[-3000:]}"
    answers = [line for line in done.stdout.splitlines() if line.startswith(("{", "["))]
    assert len(answers) == len(paths), done.stdout[-3000:]
    return [json.loads(answer) for answer in answers]
