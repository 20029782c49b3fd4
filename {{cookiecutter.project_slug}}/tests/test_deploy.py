"""invoke deploy, endpoints, predict and undeploy as a user types them, against SageMaker on
moto_server: the model, endpoint config, endpoint and scaling it keeps, field by field, the
archive in the bucket, the price shown, and nothing left after undeploy or a failed deploy.
moto runs no container: that the serving image answers as SageMaker runs it is the template's
Docker test (tests/test_docker.py). Vertex AI and Azure ML: test_deploy_vertex_azure.py.
Nothing here differs between frameworks."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from cloudgpu.serving.model import folder_sha256
from cloudgpu.testing import services
from conftest import copy_of, invoke_cli, project_env

PROJECT = "{{ cookiecutter.project_slug }}"
IMAGE_REF = f"123456789012.dkr.ecr.us-east-1.amazonaws.com/{PROJECT}@sha256:" + "5" * 64
BUCKET = "s3://deploy-bucket"
aws = services.aws
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    folder = tmp_path_factory.mktemp("deploy")
    (folder / "cloud.toml").write_text(f'[aws]\nregion = "us-east-1"\nbucket = "{BUCKET}"\n')
    with services.moto_env() as moto_env:
        env = project_env(
            **moto_env,
            CLOUD_RUNS=str(folder / "runs"),
            CLOUD_SETTINGS=str(folder / "cloud.toml"),
        )
        subprocess.run(["aws", "s3", "mb", BUCKET], env=env, capture_output=True, check=True)
        yield env


def names(moto: dict[str, str], kind: str) -> list[str]:
    """The names of moto's SageMaker models, endpoint configs or endpoints."""
    listed = aws(moto, "sagemaker", f"list-{kind}s")
    key = {"model": "Models", "endpoint-config": "EndpointConfigs", "endpoint": "Endpoints"}[kind]
    field = {"model": "ModelName", "endpoint-config": "EndpointConfigName",
             "endpoint": "EndpointName"}[kind]  # fmt: skip
    return [item[field] for item in listed.get(key, [])]


def foreign(moto: dict[str, str], name: str) -> None:
    """An endpoint of another project, tagged as deploy tags its own."""
    tags = json.dumps([{"Key": "invoke-project", "Value": "another-project"},
                       {"Key": "invoke-endpoint", "Value": name}])  # fmt: skip
    role = "arn:aws:iam::123456789012:role/theirs"
    variant = [{"VariantName": "AllTraffic", "ModelName": name, "InstanceType": "ml.m5.xlarge",
                "InitialInstanceCount": 1}]  # fmt: skip
    aws(moto, "sagemaker", "create-model", "--model-name", name, "--execution-role-arn", role,
        "--primary-container", json.dumps({"Image": IMAGE_REF}))  # fmt: skip
    aws(moto, "sagemaker", "create-endpoint-config", "--endpoint-config-name", name,
        "--production-variants", json.dumps(variant))  # fmt: skip
    aws(moto, "sagemaker", "create-endpoint", "--endpoint-name", name, "--endpoint-config-name",
        name, "--tags", tags)  # fmt: skip


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
                      f"--image={IMAGE_REF}", "--sample-rate=0.25", "--sample-inputs",
                      env=moto)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ml.g4dn.xlarge at $0.7364/h each" in done.stdout
    samples = f"{BUCKET}/{PROJECT}/endpoints/{name}/samples"
    assert f"25% of the predictions and their inputs, as JSON lines to {samples}" in done.stdout
    assert "$0.7364/h, up to $2.2092/h" in done.stdout and "1 to 3" in done.stdout
    assert (run / "model" / "model.json").is_file(), "exported on the way"

    endpoint = aws(moto, "sagemaker", "describe-endpoint", "--endpoint-name", name)
    assert endpoint["EndpointStatus"] == "InService" and endpoint["EndpointConfigName"] == name
    config = aws(moto, "sagemaker", "describe-endpoint-config", "--endpoint-config-name", name)
    [variant] = config["ProductionVariants"]
    assert (variant["InstanceType"], variant["InitialInstanceCount"]) == ("ml.g4dn.xlarge", 1)
    assert variant["ModelName"] == name
    capture = config["DataCaptureConfig"]  # SageMaker's own sampling, to the bucket
    assert (capture["InitialSamplingPercentage"], capture["DestinationS3Uri"]) == (25, samples)
    assert {o["CaptureMode"] for o in capture["CaptureOptions"]} == {"Input", "Output"}
    model = aws(moto, "sagemaker", "describe-model", "--model-name", name)
    archive = f"{BUCKET}/{PROJECT}/endpoints/{name}/model.tar.gz"
    pinned = {"MODEL_SHA256": folder_sha256(run / "model")}  # the server loads no other
    assert model["PrimaryContainer"] == {"Image": IMAGE_REF, "ModelDataUrl": archive,
                                         "Environment": pinned}  # fmt: skip
    assert model["ExecutionRoleArn"].endswith(f":role/{PROJECT}-endpoint")
    tags = aws(moto, "sagemaker", "list-tags", "--resource-arn", endpoint["EndpointArn"])["Tags"]
    assert {"Key": "invoke-endpoint", "Value": name} in tags

    role = f"{PROJECT}-endpoint"
    policy = aws(moto, "iam", "get-role-policy", "--role-name", role, "--policy-name", role)
    by_sid = {s["Sid"]: s["Resource"] for s in policy["PolicyDocument"]["Statement"]}
    assert by_sid["ReadTheModelArchives"] == f"arn:aws:s3:::deploy-bucket/{PROJECT}/endpoints/*"
    assert by_sid["WriteTheCapturedSamples"] == (
        f"arn:aws:s3:::deploy-bucket/{PROJECT}/endpoints/*/samples/*"
    )
    assert "ReadWriteTheProjectBucket" not in by_sid, "an endpoint reads its model, no run"

    packed = subprocess.run(["aws", "s3", "cp", archive, "-"], env=moto, capture_output=True,
                            check=True).stdout  # fmt: skip
    with tarfile.open(fileobj=io.BytesIO(packed)) as tar:
        members = tar.getmembers()
    model_files = [p.relative_to(run / "model").as_posix() for p in (run / "model").rglob("*")]
    assert sorted(m.name for m in members) == sorted(model_files), "the folder's, at the top"
    # Readable by the image's uid 1000: root's, files 0644 and folders (a SavedModel's) 0755.
    assert {m.uid for m in members} == {0}
    assert {m.mode for m in members if m.isfile()} == {0o644}
    assert {m.mode for m in members if m.isdir()} <= {0o755}

    targets = aws(moto, "application-autoscaling", "describe-scalable-targets",
                  "--service-namespace", "sagemaker")["ScalableTargets"]  # fmt: skip
    [target] = [t for t in targets if t["ResourceId"] == f"endpoint/{name}/variant/AllTraffic"]
    assert (target["MinCapacity"], target["MaxCapacity"]) == (1, 3)

    listed = invoke_cli("endpoints", env=moto)
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if line.startswith(name))
    assert row.split()[1:6] == ["aws", "ml.g4dn.xlarge", "1", "serving", "0.7364"]
    assert "billed now: $0.7364/h" in listed.stdout

    # Made elsewhere (its record is not here): found by its tags, beside another project's.
    record = Path(moto["CLOUD_RUNS"]) / "endpoints" / f"{name}.json"
    saved = record.read_text()
    record.unlink()
    foreign(moto, "theirs")
    elsewhere = invoke_cli("endpoints", "--cloud=aws", env=moto)
    record.write_text(saved)
    assert elsewhere.returncode == 0, elsewhere.stderr
    row = next(line for line in elsewhere.stdout.splitlines() if line.startswith(name))
    assert row.split()[1:7] == ["aws", "ml.g4dn.xlarge", "1", "serving", "0.7364", "(made"]
    assert "theirs" not in elsewhere.stdout
    refused = invoke_cli("undeploy", "theirs", "--cloud=aws", env=moto)
    assert refused.returncode == 2 and "theirs" in names(moto, "endpoint")
    assert refused.stderr.strip() == (
        f"error: no endpoint 'theirs' of this project on aws (its endpoints there: {name})"
    )
    for kind in ("endpoint", "endpoint-config", "model"):  # the module's moto is shared
        aws(moto, "sagemaker", f"delete-{kind}", f"--{kind}-name", "theirs")

    inputs = tmp_path / "inputs.json"
    inputs.write_text(json.dumps({"instances": [[0.0] * 64]}))
    predicted = invoke_cli("predict", "--endpoint", name, str(inputs), env=moto)
    assert predicted.returncode == 0 and predicted.stdout.strip(), predicted.stderr
    assert "sagemaker-runtime invoke-endpoint" in predicted.stderr

    gone = invoke_cli("undeploy", name, env=moto)
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert f"undeployed {name}" in gone.stdout
    assert f"its sampled predictions stay in {samples}" in gone.stdout
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
    moto: dict[str, str], exported_run: Path, tmp_path: Path
) -> None:
    """The account has no GPU endpoint quota, as new accounts do: create-endpoint fails (an
    `aws` in front of the real one answers it as SageMaker would). Deploy says so in one line,
    after deleting the model and endpoint config it made and the archive it uploaded."""
    run = copy_of(exported_run, tmp_path / "taken")
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
        (["--cloud=aws", "--sample-rate=2"], "--sample-rate 2: a fraction of the predictions"),
        (["--cloud=aws", "--sample-rate=0.005"], "--sample-rate 0.005: SageMaker's Data Capture"),
        (["--cloud=aws", "--sample-inputs"], "--sample-inputs: give --sample-rate too"),
        (["--cloud=azure", "--sample-rate=0.1"], "--sample-rate: the endpoint writes samples as"),
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
