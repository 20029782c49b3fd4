"""invoke deploy, endpoints, predict and undeploy as a user types them, against SageMaker on
moto_server: the model, endpoint config, endpoint and scaling it keeps, field by field, the
archive in the bucket, the price shown, and nothing left after undeploy or a failed deploy.
moto runs no container: that the serving image answers as SageMaker runs it is the template's
Docker test (tests/test_docker.py). Nothing here differs between frameworks."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import PROJECT_ROOT, invoke_cli, project_env
from helpers import google_api, sdks, services

PACKAGE = "{{ cookiecutter.package_name }}"
PROJECT = "{{ cookiecutter.project_slug }}"
IMAGE_REF = f"123456789012.dkr.ecr.us-east-1.amazonaws.com/{PROJECT}@sha256:" + "5" * 64
BUCKET = "s3://deploy-bucket"
aws = services.aws
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    folder = tmp_path_factory.mktemp("deploy")
    (folder / "cloud.toml").write_text(f'[aws]\nregion = "us-east-1"\nbucket = "{BUCKET}"\n')
    with services.moto_server() as url:
        assert url is not None
        env = project_env(
            AWS_ENDPOINT_URL=url,
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_DEFAULT_REGION="us-east-1",
            CLOUD_RUNS=str(folder / "runs"),
            CLOUD_SETTINGS=str(folder / "cloud.toml"),
        )
        subprocess.run(["aws", "s3", "mb", BUCKET], env=env, capture_output=True, check=True)
        yield env


def copy_of(run: Path, into: Path) -> Path:
    """A copy of the short run, named `into`: not exported yet."""
    subprocess.run(["cp", "-r", str(run), str(into)], check=True)
    return into


def names(moto: dict[str, str], kind: str) -> list[str]:
    """The names of moto's SageMaker models, endpoint configs or endpoints."""
    listed = aws(moto, "sagemaker", f"list-{kind}s")
    key = {"model": "Models", "endpoint-config": "EndpointConfigs", "endpoint": "Endpoints"}[kind]
    field = {"model": "ModelName", "endpoint-config": "EndpointConfigName",
             "endpoint": "EndpointName"}[kind]  # fmt: skip
    return [item[field] for item in listed.get(key, [])]


def nothing_left(moto: dict[str, str], name: str) -> None:
    """No model, endpoint config, endpoint or archive of endpoint `name`, and no record here."""
    for kind in ("model", "endpoint-config", "endpoint"):
        assert name not in names(moto, kind), kind
    left = subprocess.run(["aws", "s3", "ls", f"{BUCKET}/{PROJECT}/endpoints/{name}/"],
                          env=moto, capture_output=True, text=True)  # fmt: skip
    assert left.stdout.strip() == ""
    assert "no endpoints deployed from here" in invoke_cli("endpoints", env=moto).stdout


@pytest.mark.needs("aws")
def test_deploy_makes_the_endpoint_and_undeploy_leaves_nothing(
    moto: dict[str, str], short_run: Path, tmp_path: Path
) -> None:
    run = copy_of(short_run, tmp_path / "digits")
    name = f"{PROJECT}-digits"
    done = invoke_cli("deploy", f"--run={run}", "--cloud=aws", "--gpu=t4", "--max=3", "--yes",
                      f"--image={IMAGE_REF}", env=moto)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ml.g4dn.xlarge at $0.7364/h each" in done.stdout
    assert "$0.7364/h, up to $2.2092/h" in done.stdout and "1 to 3" in done.stdout
    assert (run / "model" / "model.json").is_file(), "exported on the way"

    endpoint = aws(moto, "sagemaker", "describe-endpoint", "--endpoint-name", name)
    assert endpoint["EndpointStatus"] == "InService" and endpoint["EndpointConfigName"] == name
    config = aws(moto, "sagemaker", "describe-endpoint-config", "--endpoint-config-name", name)
    [variant] = config["ProductionVariants"]
    assert (variant["InstanceType"], variant["InitialInstanceCount"]) == ("ml.g4dn.xlarge", 1)
    assert variant["ModelName"] == name
    model = aws(moto, "sagemaker", "describe-model", "--model-name", name)
    archive = f"{BUCKET}/{PROJECT}/endpoints/{name}/model.tar.gz"
    assert model["PrimaryContainer"] == {"Image": IMAGE_REF, "ModelDataUrl": archive}
    assert model["ExecutionRoleArn"].endswith(f":role/{PROJECT}-endpoint")
    tags = aws(moto, "sagemaker", "list-tags", "--resource-arn", endpoint["EndpointArn"])["Tags"]
    assert {"Key": "invoke-endpoint", "Value": name} in tags

    role = f"{PROJECT}-endpoint"
    policy = aws(moto, "iam", "get-role-policy", "--role-name", role, "--policy-name", role)
    by_sid = {s["Sid"]: s["Resource"] for s in policy["PolicyDocument"]["Statement"]}
    assert by_sid["ReadTheModelArchives"] == f"arn:aws:s3:::deploy-bucket/{PROJECT}/endpoints/*"
    assert "ReadWriteTheProjectBucket" not in by_sid, "an endpoint reads its model, no run"

    packed = subprocess.run(["aws", "s3", "cp", archive, "-"], env=moto, capture_output=True,
                            check=True).stdout  # fmt: skip
    with tarfile.open(fileobj=io.BytesIO(packed)) as tar:
        members = tar.getmembers()
    assert sorted(m.name for m in members) == sorted(p.name for p in (run / "model").iterdir())
    assert {(m.uid, m.mode) for m in members} == {(0, 0o644)}, "readable by the image's uid 1000"

    targets = aws(moto, "application-autoscaling", "describe-scalable-targets",
                  "--service-namespace", "sagemaker")["ScalableTargets"]  # fmt: skip
    [target] = [t for t in targets if t["ResourceId"] == f"endpoint/{name}/variant/AllTraffic"]
    assert (target["MinCapacity"], target["MaxCapacity"]) == (1, 3)

    listed = invoke_cli("endpoints", env=moto)
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if line.startswith(name))
    assert row.split()[1:6] == ["aws", "ml.g4dn.xlarge", "1", "serving", "0.7364"]
    assert "billed now: $0.7364/h" in listed.stdout

    inputs = tmp_path / "inputs.json"
    inputs.write_text(json.dumps({"instances": [[0.0] * 64]}))
    predicted = invoke_cli("predict", "--endpoint", name, str(inputs), env=moto)
    assert predicted.returncode == 0 and predicted.stdout.strip(), predicted.stderr
    assert "sagemaker-runtime invoke-endpoint" in predicted.stderr

    gone = invoke_cli("undeploy", name, env=moto)
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert f"undeployed {name}" in gone.stdout
    targets = aws(moto, "application-autoscaling", "describe-scalable-targets",
                  "--service-namespace", "sagemaker")["ScalableTargets"]  # fmt: skip
    assert targets == []
    nothing_left(moto, name)


@pytest.mark.needs("aws")
def test_a_cloud_runs_id_is_copied_here_exported_and_deployed(
    moto: dict[str, str], short_run: Path, tmp_path: Path
) -> None:
    """--run takes the id of a run started from here: its folder comes from the bucket."""
    run_id = "digits-on-aws"
    prefix = f"{BUCKET}/{PROJECT}/{run_id}"
    record = Path(moto["CLOUD_RUNS"]) / run_id / "run.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"run": run_id, "cloud": "aws", "region": "us-east-1",
                                  "bucket": prefix}))  # fmt: skip
    subprocess.run(["aws", "s3", "sync", "--only-show-errors", str(short_run),
                    f"{prefix}/outputs/run"], env=moto, check=True)  # fmt: skip
    done = invoke_cli("deploy", f"--run={run_id}", "--cloud=aws", "--yes", f"--image={IMAGE_REF}",
                      env=moto)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"copying run {run_id}'s folder from {prefix}/outputs/run" in done.stdout
    assert (record.parent / "run" / "model" / "model.json").is_file()
    name = f"{PROJECT}-{run_id}"
    assert name in names(moto, "endpoint")
    assert invoke_cli("undeploy", name, env=moto).returncode == 0


QUOTA = (
    "An error occurred (ResourceLimitExceeded) when calling the CreateEndpoint operation: "
    "The account-level service limit 'ml.g4dn.xlarge for endpoint usage' is 0 Instances"
)


@pytest.mark.needs("aws")
def test_a_failed_deploy_deletes_what_it_made(
    moto: dict[str, str], short_run: Path, tmp_path: Path
) -> None:
    """The account has no GPU endpoint quota, as new accounts do: create-endpoint fails (an
    `aws` in front of the real one answers it as SageMaker would). Deploy says so in one line,
    after deleting the model and endpoint config it made and the archive it uploaded."""
    run = copy_of(short_run, tmp_path / "taken")
    name = f"{PROJECT}-taken"
    shim = tmp_path / "bin" / "aws"
    shim.parent.mkdir()
    real = shutil.which("aws")
    shim.write_text(f"""#!/bin/sh
for arg in "$@"; do
  if [ "$arg" = create-endpoint ]; then echo "{QUOTA}" >&2; exit 254; fi
done
exec {real} "$@"
""")
    shim.chmod(0o755)
    env = {**moto, "PATH": f"{shim.parent}:{moto['PATH']}"}
    done = invoke_cli("deploy", f"--run={run}", "--cloud=aws", "--gpu=t4", "--yes",
                      f"--image={IMAGE_REF}", env=env)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("error: quota: ") and "what it had made is deleted" in line, line
    assert "Traceback" not in done.stderr
    nothing_left(moto, name)


@pytest.mark.needs("aws")
def test_a_dry_run_prints_every_command_and_makes_nothing(
    moto: dict[str, str], short_run: Path, tmp_path: Path
) -> None:
    run = copy_of(short_run, tmp_path / "dry")
    done = invoke_cli("deploy", f"--run={run}", "--cloud=aws", "--dry-run", env=moto)
    assert done.returncode == 0, done.stdout + done.stderr
    printed = done.stdout
    for step in ("invoke export --run", "invoke build --cpu --serve", "docker push",
                 "aws s3 cp model.tar.gz", "sagemaker create-model", "create-endpoint-config",
                 "sagemaker create-endpoint ", "wait endpoint-in-service"):  # fmt: skip
        assert step in printed, step
    assert "ml.m5.xlarge at $0.2300/h each" in printed
    assert not (run / "model").exists() and names(moto, "model") == []
    assert "testing" not in printed, "no credential in a dry run"


@pytest.mark.needs("aws")
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cloud=mars"], "--cloud mars: deploy to aws"),
        (["--cloud=aws", "--gpu=h100"], "--gpu h100: SageMaker real-time endpoint GPUs here: a10g"),
        (["--cloud=aws", "--instance=ml.x9.huge"], "--instance ml.x9.huge: not an instance of"),
        (["--cloud=aws", "--name=Bad_Name"], "--name Bad_Name: an endpoint's name is 3-32"),
        (["--cloud=aws", "--name=ab"], "--name ab: an endpoint's name is 3-32"),
        (["--cloud=aws", "--min=2", "--max=1"], "--min 2 --max 1: at least one instance"),
        (["--cloud=aws", "--image=repo/x:latest"], "--image repo/x:latest: give it by digest"),
        (["--cloud=aws"], "costs money every hour: add --yes"),
        (["--cloud=azure", "--max=2"], "--max 2: Azure ML endpoints scale through Azure Monitor"),
    ],
)
def test_bad_deploys_are_one_line_and_make_nothing(
    moto: dict[str, str], short_run: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    run = copy_of(short_run, tmp_path / "bad")
    (run / "model").mkdir()
    (run / "model" / "model.json").write_text("{}")  # exported already: nothing to export here
    done = invoke_cli("deploy", f"--run={run}", *args, env=moto)
    assert done.returncode == 2, done.stdout + done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: ") and message in line
    assert f"{PROJECT}-bad" not in names(moto, "model")


def test_endpoints_of_an_unknown_cloud_is_one_line() -> None:
    done = invoke_cli("endpoints", "--cloud", "mars")
    assert done.returncode == 2
    assert done.stderr.strip() == "error: --cloud mars: deploy to aws, gcp, azure"


@pytest.mark.needs("aws")
def test_a_run_without_a_checkpoint_is_one_line(moto: dict[str, str], tmp_path: Path) -> None:
    empty = tmp_path / "empty-run"
    empty.mkdir()
    done = invoke_cli("deploy", f"--run={empty}", "--cloud=aws", "--yes", env=moto)
    assert done.returncode != 0, done.stdout + done.stderr
    assert "no checkpoints/" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert not (empty / "model").exists()


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
    vertex: tuple[google_api.GoogleApi, dict[str, str]], short_run: Path, tmp_path: Path
) -> None:
    """What gcloud sends, field by field; then the server started as Vertex AI starts it, its
    model copied from AIP_STORAGE_URI through the stand-in's Cloud Storage and metadata token,
    gives the trained model's classes; undeploy takes the model off, then deletes it all."""
    api, env = vertex
    run = copy_of(short_run, tmp_path / "digits")
    name = f"{PROJECT}-digits"
    done = invoke_cli("deploy", f"--run={run}", "--cloud=gcp", "--gpu=t4", "--max=2", "--yes",
                      f"--image={GCP_IMAGE}", env=env)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "n1-standard-8+t4 at $0.7300/h each" in done.stdout and "at least:" in done.stdout
    artifacts = f"gs://deploy-bucket/{PROJECT}/endpoints/{name}/model"
    [upload] = api.bodies("POST", r"/models:upload$")
    spec = upload["model"]["containerSpec"]
    assert spec["imageUri"] == GCP_IMAGE and spec["ports"] == [{"containerPort": 8080}]
    assert (spec["healthRoute"], spec["predictRoute"]) == ("/ping", "/invocations")
    assert upload["model"]["artifactUri"] == artifacts and upload["modelId"] == name
    assert upload["model"]["labels"]["invoke-endpoint"] == name
    [deploy] = api.bodies("POST", r"/endpoints/[^/]+:deployModel$")
    resources = deploy["deployedModel"]["dedicatedResources"]
    assert resources["machineSpec"] == {"machineType": "n1-standard-8",
                                        "acceleratorType": "NVIDIA_TESLA_T4",
                                        "acceleratorCount": 1}  # fmt: skip
    assert (resources["minReplicaCount"], resources["maxReplicaCount"]) == (1, 2)
    assert deploy["trafficSplit"] == {"0": 100}

    listed = invoke_cli("endpoints", env=env)
    row = next(line for line in listed.stdout.splitlines() if line.startswith(name))
    assert row.split()[1:6] == ["gcp", "n1-standard-8+t4", "1", "serving", "0.7300"]

    copied = artifacts.removeprefix("gs://")
    server = subprocess.Popen(
        [sys.executable, "-m", f"{PACKAGE}.serve"], cwd=PROJECT_ROOT,
        env=project_env(AIP_STORAGE_URI=artifacts, AIP_HTTP_PORT=str(port := services.free_port()),
                        STORAGE_EMULATOR_HOST=api.url,
                        GCE_METADATA_HOST=api.url.removeprefix("http://")),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        import numpy as np

        with np.load(api.storage / copied / "parity.npz") as batch:  # type: ignore[operator]
            inputs, classes = batch["x"][:8].tolist(), batch["logits"][:8].argmax(axis=1)
        answer = post_when_ready(port, "/invocations", {"instances": inputs})
        card = json.loads((run / "model" / "model.json").read_text())
        predicted = [card["output"]["classes"].index(p["class"]) for p in answer["predictions"]]
        assert predicted == classes.tolist()
    finally:
        server.terminate()
        server.communicate(timeout=60)
    assert any("/storage/v1/b/deploy-bucket/o" in r.path for r in api.requests)

    gone = invoke_cli("undeploy", name, env=env)
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
    vertex: tuple[google_api.GoogleApi, dict[str, str]], short_run: Path, tmp_path: Path
) -> None:
    """The project has no serving quota: deploy-model is refused. Deploy says so in one line,
    after deleting the endpoint and the model it made and the copy in the bucket."""
    api, env = vertex
    api.serving_quota = False
    run = copy_of(short_run, tmp_path / "refused")
    done = invoke_cli("deploy", f"--run={run}", "--cloud=gcp", "--yes", f"--image={GCP_IMAGE}",
                      env=env)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("error: quota: ") and "what it had made is deleted" in line, line
    assert api.models == {} and api.endpoints == {}
    assert list((api.storage or tmp_path).rglob("model.json")) == []


@pytest.mark.needs("gcloud")
def test_a_taken_endpoint_name_is_one_line_and_makes_nothing(
    vertex: tuple[google_api.GoogleApi, dict[str, str]], short_run: Path, tmp_path: Path
) -> None:
    api, env = vertex
    run = copy_of(short_run, tmp_path / "taken")
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


@pytest.mark.needs("cloud-sdks")
def test_an_azure_ml_deploy_writes_what_azure_ai_ml_loads(short_run: Path, tmp_path: Path) -> None:
    run = copy_of(short_run, tmp_path / "digits")
    assert invoke_cli("export", "--run", str(run)).returncode == 0
    (tmp_path / "cloud.toml").write_text('[azure]\nresource_group = "ml"\nworkspace = "ws"\n')
    env = project_env(CLOUD_SETTINGS=str(tmp_path / "cloud.toml"), CLOUD_RUNS=str(tmp_path / "r"))
    done = invoke_cli("deploy", f"--run={run}", "--cloud=azure", "--gpu=t4", "--min=2", "--max=2",
                      "--dry-run", f"--image={AZURE_IMAGE}", env=env)  # fmt: skip
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
    }  # fmt: skip
    assert not list((tmp_path / "r" / "endpoints").glob("*.json")), "a dry run records nothing"
