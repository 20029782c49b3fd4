"""invoke deploy on Vertex AI, through the real gcloud against the loopback stand-in of Google's
API (what it sends, field by field; then the server as Vertex AI starts it), and on Azure ML,
the YAML it writes as azure-ai-ml loads it. Nothing here differs between frameworks."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from cloudgpu.serving.model import folder_sha256
from cloudgpu.testing import google_api, sdks, services
from conftest import PROJECT_ROOT, copy_of, invoke_cli, project_env

PACKAGE = "{{ cookiecutter.package_name }}"
PROJECT = "{{ cookiecutter.project_slug }}"
pytestmark = pytest.mark.slow


# --- Vertex AI: the real gcloud against the loopback stand-in of Google's API ---

GCP_IMAGE = f"us-central1-docker.pkg.dev/proj/{PROJECT}/{PROJECT}@sha256:" + "6" * 64
STORAGE_SHIM = """#!/bin/sh
# gcloud storage's upload protocol is not in the stand-in: copies and removals go to the folder
# the stand-in serves as Cloud Storage; every other gcloud command is the real one.
if [ "$1" = storage ] && [ "$2" = rsync ]; then
  target="{root}/$(echo "$5" | sed 's|^gs://||')"; mkdir -p "$target"; exec cp -r "$4/." "$target"
fi
if [ "$1" = storage ] && [ "$2" = rm ]; then
  exec rm -r "{root}/$(echo "$4" | sed 's|^gs://||')"
fi
exec {real} "$@"
"""


@pytest.fixture
def vertex(tmp_path: Path) -> Iterator[tuple[google_api.GoogleApi, dict[str, str]]]:
    (tmp_path / "cloud.toml").write_text(
        '[gcp]\nproject = "proj"\nregion = "us-central1"\nbucket = "gs://deploy-bucket"\n'
    )
    shim = tmp_path / "bin" / "gcloud"
    shim.parent.mkdir()
    with google_api.serve() as api:
        api.storage = tmp_path / "storage"
        real = shutil.which("gcloud")
        shim.write_text(STORAGE_SHIM.format(root=api.storage, real=real))
        shim.chmod(0o755)
        env = project_env(**google_api.gcloud_env(api, tmp_path), CLOUD_SETTINGS=str(
            tmp_path / "cloud.toml"), CLOUD_RUNS=str(tmp_path / "runs"))  # fmt: skip
        env["PATH"] = f"{shim.parent}:{env['PATH']}"
        yield api, env


@pytest.mark.needs("gcloud")
def test_a_vertex_ai_deploy_serves_from_the_bucket_and_undeploy_leaves_nothing(
    vertex: tuple[google_api.GoogleApi, dict[str, str]], exported_run: Path, tmp_path: Path
) -> None:
    """What gcloud sends, field by field; then the server started as Vertex AI starts it, its
    model copied from AIP_STORAGE_URI through the stand-in's Cloud Storage and metadata token,
    gives the trained model's classes (its digest the pinned one) and writes its samples to the
    bucket, as the project's endpoint account; listed and undeployed without its record (as if
    made elsewhere), undeploy takes the model off, then deletes it all but the samples."""
    api, env = vertex
    run = copy_of(exported_run, tmp_path / "digits")
    name = f"{PROJECT}-digits"
    done = invoke_cli("deploy", f"--run={run}", "--cloud=gcp", "--gpu=t4", "--max=2", "--yes",
                      f"--image={GCP_IMAGE}", "--sample-rate=0.5", env=env)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "n1-standard-8+t4 at $0.7300/h each" in done.stdout and "at least:" in done.stdout
    artifacts = f"gs://deploy-bucket/{PROJECT}/endpoints/{name}/model"
    [upload] = api.bodies("POST", r"/models:upload$")
    spec = upload["model"]["containerSpec"]
    assert spec["imageUri"] == GCP_IMAGE and spec["ports"] == [{"containerPort": 8080}]
    assert (spec["healthRoute"], spec["predictRoute"]) == ("/ping", "/invocations")
    assert upload["model"]["artifactUri"] == artifacts and upload["modelId"] == name
    assert upload["model"]["labels"]["invoke-endpoint"] == name
    samples = f"gs://deploy-bucket/{PROJECT}/endpoints/{name}/samples"
    server_env = {item["name"]: item["value"] for item in spec["env"]}
    pinned = folder_sha256(run / "model")  # the server below checks its copy against it
    assert server_env == {"SAMPLE_RATE": "0.5", "SAMPLE_URI": samples, "MODEL_SHA256": pinned}
    [deploy] = api.bodies("POST", r"/endpoints/[^/]+:deployModel$")
    runs_as = deploy["deployedModel"]["serviceAccount"]
    assert runs_as == f"{PROJECT}-endpoint@proj.iam.gserviceaccount.com" in api.accounts
    # Its own account: it reads and adds files under endpoints/, and has no other grant.
    granted = {(b["role"], b["condition"]["expression"]) for resource, policy in
               api.policies.items() for b in policy["bindings"]
               if f"serviceAccount:{runs_as}" in b["members"]}  # fmt: skip
    assert {role for role, _ in granted} == {"roles/storage.objectViewer",
                                             "roles/storage.objectCreator"}  # fmt: skip
    endpoints = f'"projects/_/buckets/deploy-bucket/objects/{PROJECT}/endpoints/")'
    assert all(condition.endswith(endpoints) for _, condition in granted), granted
    resources = deploy["deployedModel"]["dedicatedResources"]
    assert resources["machineSpec"] == {"machineType": "n1-standard-8",
                                        "acceleratorType": "NVIDIA_TESLA_T4",
                                        "acceleratorCount": 1}  # fmt: skip
    assert (resources["minReplicaCount"], resources["maxReplicaCount"]) == (1, 2)
    assert deploy["trafficSplit"] == {"0": 100}

    listed = invoke_cli("endpoints", env=env)
    row = next(line for line in listed.stdout.splitlines() if line.startswith(name))
    assert row.split()[1:6] == ["gcp", "n1-standard-8+t4", "1", "serving", "0.7300"]
    # Made elsewhere (no record here): found by its labels, beside another project's.
    (Path(env["CLOUD_RUNS"]) / "endpoints" / f"{name}.json").unlink()
    api.endpoints["theirs"] = {
        "name": "projects/proj/locations/us-central1/endpoints/theirs",
        "labels": {"invoke-project": "another", "invoke-endpoint": "x"},
    }
    elsewhere = invoke_cli("endpoints", "--cloud=gcp", env=env)
    del api.endpoints["theirs"]
    row = next(line for line in elsewhere.stdout.splitlines() if line.startswith(name))
    assert row.split()[1:7] == ["gcp", "n1-standard-8+t4", "1", "serving", "0.7300", "(made"]
    assert "theirs" not in elsewhere.stdout

    copied = artifacts.removeprefix("gs://")
    server = subprocess.Popen(
        [sys.executable, "-m", f"{PACKAGE}.serve"], cwd=PROJECT_ROOT,
        env=project_env(AIP_STORAGE_URI=artifacts, AIP_HTTP_PORT=str(port := services.free_port()),
                        BUCKETS_TEST_LOOPBACK=api.url, SAMPLE_DIR=str(tmp_path / "samples"),
                        GCE_METADATA_HOST=api.url.removeprefix("http://"), **server_env),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        import numpy as np

        with np.load(api.storage / copied / "parity.npz") as batch:  # type: ignore[operator]
            inputs, classes = batch["x"].tolist(), batch["logits"].argmax(axis=1)
        answer = post_when_ready(port, "/invocations", {"instances": inputs})
        card = json.loads((run / "model" / "model.json").read_text())
        predicted = [card["output"]["classes"].index(p["class"]) for p in answer["predictions"]]
        assert predicted == classes.tolist() and len(inputs) >= 32
    finally:
        server.terminate()
        server.communicate(timeout=60)
    assert any("/storage/v1/b/deploy-bucket/o" in r.path for r in api.requests)
    landed = api.storage / samples.removeprefix("gs://")  # type: ignore[operator]
    sampled = sum(len(p.read_text().splitlines()) for p in landed.glob("samples-*.jsonl"))
    assert 0 < sampled < len(inputs), "about half of the predictions (each kept at 0.5)"

    gone = invoke_cli("undeploy", name, env=env)  # its record is gone: made elsewhere, as it were
    assert gone.returncode == 2 and "--cloud=C undeploys one of the project's" in gone.stderr
    gone = invoke_cli("undeploy", name, "--cloud=gcp", env=env)
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert api.bodies("POST", r":undeployModel$") and api.endpoints == {} and api.models == {}
    assert not (api.storage / copied).exists()  # type: ignore[operator]


def post_when_ready(port: int, path: str, body: dict) -> dict:
    """POST `body` once the server on `port` answers /ping."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=5) as ping:
                if ping.status == 200:
                    break
        except OSError:
            time.sleep(0.2)
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.loads(answer.read())


@pytest.mark.needs("gcloud")
def test_a_failed_vertex_deploy_deletes_what_it_made(
    vertex: tuple[google_api.GoogleApi, dict[str, str]], exported_run: Path, tmp_path: Path
) -> None:
    """The project has no serving quota: deploy-model is refused. Deploy says so in one line,
    after deleting the endpoint and the model it made and the copy in the bucket."""
    api, env = vertex
    api.serving_quota = False
    run = copy_of(exported_run, tmp_path / "refused")
    done = invoke_cli("deploy", f"--run={run}", "--cloud=gcp", "--yes", f"--image={GCP_IMAGE}",
                      env=env)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("error: quota: ") and "what it had made is deleted" in line, line
    assert api.models == {} and api.endpoints == {}
    assert list((api.storage or tmp_path).rglob("model.json")) == []


@pytest.mark.needs("gcloud")
@pytest.mark.parametrize("undeploy_fails", [False, True], ids=["cleaned", "left"])
def test_a_deploy_call_that_fails_after_vertex_deployed_leaves_nothing_billed_unsaid(
    vertex: tuple[google_api.GoogleApi, dict[str, str]],
    exported_run: Path,
    tmp_path: Path,
    undeploy_fails: bool,
) -> None:
    """deploy-model fails though Vertex AI deployed the model (a lost answer, an interrupt):
    cleanup undeploys it and deletes the rest; where the undeploy fails too, the error line
    gives the exact command that takes the billed model down."""
    api, env = vertex
    api.deploy_fails, api.undeploy_fails = True, undeploy_fails
    run = copy_of(exported_run, tmp_path / "lost")
    name = f"{PROJECT}-lost"
    done = invoke_cli("deploy", f"--run={run}", "--cloud=gcp", "--yes", f"--image={GCP_IMAGE}",
                      env=env)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    line = done.stderr.strip().splitlines()[-1]
    if not undeploy_fails:
        assert api.endpoints == {} and api.models == {}, line
        return
    deployed = api.endpoints[name]["deployedModels"]
    assert len(deployed) == 2, "gcloud retried the 503, and each try deployed"
    for model in deployed:
        undeploy = (f"gcloud ai endpoints undeploy-model {name} --deployed-model-id={model['id']}"
                    " --region=us-central1 --project=proj --format=json")  # fmt: skip
        assert undeploy in line, line


@pytest.mark.needs("gcloud")
def test_a_taken_endpoint_name_is_one_line_and_makes_nothing(
    vertex: tuple[google_api.GoogleApi, dict[str, str]], exported_run: Path, tmp_path: Path
) -> None:
    api, env = vertex
    run = copy_of(exported_run, tmp_path / "taken")
    name = f"{PROJECT}-taken"
    api.endpoints[name] = {"name": f"projects/proj/locations/us-central1/endpoints/{name}",
                           "deployedModels": [{"id": "1", "model": "theirs"}]}  # fmt: skip
    done = invoke_cli("deploy", f"--run={run}", "--cloud=gcp", "--yes", f"--image={GCP_IMAGE}",
                      env=env)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: endpoint {name} exists on gcp: invoke undeploy {name} first, or choose "
        "another --name"
    ]
    assert api.models == {} and list(api.endpoints) == [name]


# --- Azure ML: the files az would send, loaded and checked by azure-ai-ml ---

AZURE_IMAGE = f"projectacr.azurecr.io/{PROJECT}@sha256:" + "7" * 64
AZURE_IDENTITY = ("/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/ml/providers/"
                  "Microsoft.ManagedIdentity/userAssignedIdentities/runner")  # fmt: skip


@pytest.mark.needs("cloud-sdks")
def test_an_azure_ml_deploy_writes_what_azure_ai_ml_loads(
    exported_run: Path, tmp_path: Path
) -> None:
    run = copy_of(exported_run, tmp_path / "digits")
    assert invoke_cli("export", "--run", str(run)).returncode == 0
    (tmp_path / "cloud.toml").write_text(
        f'[azure]\nresource_group = "ml"\nworkspace = "ws"\nidentity = "{AZURE_IDENTITY}"\n'
        'storage_account = "projstore"\nbucket = "az://runs"\n'
    )
    env = project_env(CLOUD_SETTINGS=str(tmp_path / "cloud.toml"), CLOUD_RUNS=str(tmp_path / "r"))
    done = invoke_cli("deploy", f"--run={run}", "--cloud=azure", "--gpu=t4", "--min=2", "--max=2",
                      "--dry-run", f"--image={AZURE_IMAGE}", "--sample-rate=0.1",
                      "--sample-inputs", env=env)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Standard_NC4as_T4_v3 at $0.5260/h each" in done.stdout
    assert "$1.0520/h (the VM's price" in done.stdout
    name = f"{PROJECT}-digits"
    for step in (f"az ml online-endpoint create --file {tmp_path}/r/endpoints/{name}/endpoint.yaml",
                 "az ml online-deployment create --file", "--all-traffic"):  # fmt: skip
        assert step in done.stdout, step
    sent = tmp_path / "r" / "endpoints" / name
    loaded = sdks.validate("azureml-online", sent / "deployment.yaml")
    assert loaded == {
        "endpoint": name, "auth_mode": "key", "deployment": "main", "endpoint_name": name,
        "image": AZURE_IMAGE, "model": str((run / "model").resolve()),
        "instance_type": "Standard_NC4as_T4_v3", "instances": 2,
        "routes": {"live": [8080, "/live"], "ready": [8080, "/ready"], "score": [8080, "/score"]},
        "identity": ["user_assigned", [AZURE_IDENTITY]],
        "env": {"SAMPLE_RATE": "0.1", "SAMPLE_INPUTS": "1",
                "SAMPLE_URI": f"https://projstore.blob.core.windows.net/runs/{PROJECT}/endpoints/"
                              f"{name}/samples",
                "AZURE_CLIENT_ID": "<client id of the identity>",
                "MODEL_SHA256": folder_sha256(run / "model")},
    }  # fmt: skip
    assert not list((tmp_path / "r" / "endpoints").glob("*.json")), "a dry run records nothing"


# `az ml` as Azure ML lists a workspace's endpoints: the ml extension cannot be installed
# offline, and Azure ML has no emulator (engines.md C3). What is checked is what we ask and how
# we read the answer, not Azure's answer itself.
AZ_ML_LISTING = """#!PYTHON
import json, sys

args = sys.argv[1:]
if args[:3] == ["ml", "online-endpoint", "list"]:
    ours = {"invoke-project": "PROJECT", "invoke-endpoint": "ours-1"}
    theirs = {"invoke-project": "another", "invoke-endpoint": "theirs-1"}
    print(json.dumps([dict(name="ours-1", tags=ours, provisioning_state="Succeeded"),
                      dict(name="theirs-1", tags=theirs, provisioning_state="Succeeded")]))
elif args[:3] == ["ml", "online-deployment", "list"]:
    print(json.dumps([dict(name="main", instance_type="Standard_F4s_v2", instance_count=2)]))
else:
    sys.exit(2)
"""


def test_azure_endpoints_made_elsewhere_are_listed_by_their_tags(tmp_path: Path) -> None:
    (tmp_path / "cloud.toml").write_text('[azure]\nresource_group = "ml"\nworkspace = "ws"\n')
    stand_in = tmp_path / "bin" / "az"
    stand_in.parent.mkdir()
    stand_in.write_text(AZ_ML_LISTING.replace("PYTHON", sys.executable, 1).replace(
        '"PROJECT"', json.dumps(PROJECT)))  # fmt: skip
    stand_in.chmod(0o755)
    env = project_env(CLOUD_SETTINGS=str(tmp_path / "cloud.toml"), CLOUD_RUNS=str(tmp_path / "r"))
    env["PATH"] = f"{stand_in.parent}:{env['PATH']}"
    done = invoke_cli("endpoints", "--cloud=azure", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    [row] = [line.split() for line in done.stdout.splitlines() if line.startswith("ours-1")]
    assert row[1:7] == ["azure", "Standard_F4s_v2", "2", "serving", "0.3380", "(made"]
    assert "theirs-1" not in done.stdout and "billed now: $0.3380/h" in done.stdout
