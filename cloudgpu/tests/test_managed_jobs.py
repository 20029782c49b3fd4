"""Several nodes on the clouds' training services: `invoke train --backend=managed|skypilot` as a
user types it, against what runs here. SageMaker on moto_server (the job it keeps, field by
field); Vertex AI through the real gcloud and a loopback stand-in, the request checked by
google-cloud-aiplatform's own types; Azure ML's job sent by the real az, and a stand-in `az ml`
that preempts a spot job so that it is resubmitted (its YAML, which names the framework, is
loaded by azure-ai-ml in test_azureml_jobs.py); SkyPilot's task parsed by SkyPilot. None of them
proves that the service schedules the job: only that it would be asked for exactly this. Nothing
here differs between frameworks."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from baked_project import PACKAGE, PROJECT, invoke_cli, project_env
from cloudgpu.providers import sagemaker_instances
from cloudgpu.testing import google_api, sdks, services

from cloudgpu import catalog, machines

DIGEST = "sha256:" + "4" * 64
SECRET = "token-5555aaaa6666bbbb"
AZ = os.environ.get("AZ_CLI") or shutil.which("az")


def run_id_of(stdout: str) -> str:
    return stdout.split("submitted ", 1)[1].split(" ", 1)[0]


aws = services.aws


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    tmp_path = tmp_path_factory.mktemp("sagemaker")
    settings = tmp_path / "cloud.toml"
    settings.write_text(
        '[aws]\nregion = "us-east-1"\nbucket = "s3://jobs-bucket"\n'
        '[secrets]\nDATA_TOKEN = "data-token"\n'
    )
    with services.moto_env() as moto_env:
        yield project_env(
            **moto_env,
            CLOUD_RUNS=str(tmp_path / "runs"),
            CLOUD_SETTINGS=str(settings),
            DATA_TOKEN=SECRET,
        )


@pytest.mark.needs("aws")
def test_a_two_node_spot_sagemaker_job_is_the_plan_field_by_field(moto: dict) -> None:
    image = f"123456789012.dkr.ecr.us-east-1.amazonaws.com/{PROJECT}@{DIGEST}"
    done = invoke_cli(
        "train", "--cloud=aws", "--backend=managed", "--nodes=2", "--gpu=a10g:4", "--spot",
        "--max-hours=3", "--yes", "--detach", f"--image={image}", "--", "trainer.max_epochs=3",
        env=moto,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SageMaker training job" in done.stdout and "2 machines" in done.stdout
    run_id = run_id_of(done.stdout)
    job = aws(moto, "sagemaker", "describe-training-job", "--training-job-name", run_id)
    assert job["ResourceConfig"]["InstanceType"] == "ml.g5.12xlarge"
    assert job["ResourceConfig"]["InstanceCount"] == 2
    assert job["EnableManagedSpotTraining"] is True
    assert job["StoppingCondition"] == {
        "MaxRuntimeInSeconds": 3 * 3600,
        "MaxWaitTimeInSeconds": 6 * 3600,
    }
    prefix = f"s3://jobs-bucket/{PROJECT}/{run_id}"
    checkpoints = {"S3Uri": f"{prefix}/outputs", "LocalPath": "/opt/ml/checkpoints"}
    assert job["CheckpointConfig"] == checkpoints
    spec = job["AlgorithmSpecification"]
    assert spec["TrainingImage"] == image  # by digest
    assert spec["ContainerEntrypoint"] == ["dumb-init", "--", "python", "-m", f"{PACKAGE}.launch"]
    assert spec["ContainerArguments"] == [
        "hydra.run.dir=/opt/ml/checkpoints/run",
        "trainer.max_epochs=3",
    ]
    assert job["OutputDataConfig"]["S3OutputPath"] == f"{prefix}/outputs/model"
    assert job["RoleArn"].endswith(f":role/{PROJECT}-sagemaker")
    role = aws(moto, "iam", "get-role", "--role-name", f"{PROJECT}-sagemaker")["Role"]
    trusted = role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"]["Service"]
    assert trusted == "sagemaker.amazonaws.com"
    name = f"{PROJECT}-sagemaker"
    policy = aws(moto, "iam", "get-role-policy", "--role-name", name, "--policy-name", name)
    by_sid = {s["Sid"]: s["Resource"] for s in policy["PolicyDocument"]["Statement"]}
    assert by_sid["ReadWriteTheProjectBucket"] == "arn:aws:s3:::jobs-bucket/*"
    assert by_sid["WriteTheJobLogs"].endswith(":log-group:/aws/sagemaker/TrainingJobs:*")
    tags = aws(moto, "sagemaker", "list-tags", "--resource-arn", job["TrainingJobArn"])["Tags"]
    assert {"Key": "invoke-run", "Value": run_id} in tags
    # moto keeps no Environment: the request kept beside the run's record is what was sent.
    sent = json.loads((Path(moto["CLOUD_RUNS"]) / run_id / "sagemaker-request.json").read_text())
    assert sent["Environment"]["RUN_SECRETS"] == "DATA_TOKEN=data-token"
    assert sent["Environment"]["RUN_CLOUD"] == "aws"
    everything = json.dumps(sent) + done.stdout + done.stderr
    assert SECRET not in everything and "testing" not in json.dumps(sent)

    status = invoke_cli("status", "--run", run_id, env=moto)
    assert status.returncode == 0, status.stderr
    row = next(line for line in status.stdout.splitlines() if line.startswith(run_id))
    assert "aws managed" in row and "2 x 4 x a10g" in row and "finished (Completed)" in row

    log = "epoch 1 loss 0.9\nepoch 2 loss 0.5\n"
    subprocess.run(
        ["aws", "s3", "cp", "-", f"{prefix}/outputs/run/train.log"],
        input=log, text=True, env=moto, check=True,
    )  # fmt: skip
    logs = invoke_cli("logs", "--run", run_id, "--follow", env=moto)
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout == log + "[run ended: finished]\n"

    # moto has no StopTrainingJob: the request `invoke stop` sends is what is checked.
    stop = invoke_cli("stop", "--run", run_id, "--dry-run", env=moto)
    assert stop.returncode == 0, stop.stderr
    assert stop.stdout.strip() == (
        f"$ aws sagemaker stop-training-job --training-job-name {run_id} --region us-east-1"
    )


@pytest.mark.needs("aws")
def test_a_cpu_sagemaker_job_runs_on_a_machine_sagemaker_trains_on(moto: dict) -> None:
    """--cpus picks among the catalog's machines whose ml.* type SageMaker lists (no c7a)."""
    chosen = machines.cpu_offer("aws", 32, backend="managed")
    assert f"ml.{chosen.machine}" in sagemaker_instances.names("TrainingInstanceType")
    image = f"123456789012.dkr.ecr.us-east-1.amazonaws.com/{PROJECT}@{DIGEST}"
    done = invoke_cli(
        "train", "--cloud=aws", "--backend=managed", "--nodes=2", "--cpus=32", "--yes",
        "--detach", f"--image={image}", env=moto,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    job = aws(moto, "sagemaker", "describe-training-job", "--training-job-name",
              run_id_of(done.stdout))  # fmt: skip
    assert job["ResourceConfig"] == {**job["ResourceConfig"], "InstanceType":
                                     f"ml.{chosen.machine}", "InstanceCount": 2}  # fmt: skip
    assert job["AlgorithmSpecification"]["TrainingImage"] == image
    refused = invoke_cli(
        "train", "--cloud=aws", "--backend=managed", "--machine=c7a.8xlarge", "--yes",
        f"--image={image}", env=moto,
    )  # fmt: skip
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "error: --machine c7a.8xlarge: SageMaker has no training instance ml.c7a.8xlarge" in (
        refused.stderr
    )


@pytest.mark.needs("aws")
def test_a_job_followed_in_the_foreground_ends_with_its_state(moto: dict) -> None:
    """Without --detach the task follows the job until the service says it ended (moto's jobs
    complete at once) and records how."""
    done = invoke_cli(
        "train", "--cloud=aws", "--backend=managed", "--gpu=a10g", "--yes",
        f"--image=123456789012.dkr.ecr.us-east-1.amazonaws.com/{PROJECT}@{DIGEST}", env=moto,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("run ")]
    run_id = line.split()[1]
    assert line == f"run {run_id} finished: outputs in s3://jobs-bucket/{PROJECT}/{run_id}/outputs"
    record = json.loads((Path(moto["CLOUD_RUNS"]) / run_id / "run.json").read_text())
    assert record["status"] == {"reason": "finished"} and record["job"] == run_id


@pytest.mark.needs("aws")
def test_a_machine_sagemaker_does_not_train_on_is_refused_before_anything_is_made(
    moto: dict,
) -> None:
    before = aws(moto, "sagemaker", "list-training-jobs")["TrainingJobSummaries"]
    done = invoke_cli(
        "train", "--cloud=aws", "--backend=managed", "--gpu=t4:8", "--yes",
        f"--image=x@{DIGEST}", env=moto,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("error: --gpu t4:8: SageMaker has no training instance ml.g4dn.metal")
    assert "ml.g4dn.12xlarge" in line
    assert aws(moto, "sagemaker", "list-training-jobs")["TrainingJobSummaries"] == before


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--nodes=2"], "error: --nodes 2: one VM per run with --backend=vm; several nodes run "
         "as a job of the cloud's training service: add --backend=managed (or --backend=skypilot)"),
        (["--backend=k8s"], "error: --backend 'k8s': choose one of vm, managed, skypilot"),
        (["--backend=managed", "--nodes=two"], "error: --nodes 'two' is not a whole number; "
         "e.g. --nodes 2"),
        (["--cloud=local", "--backend=managed"], "error: --cloud local: --backend=managed runs "
         "on aws, azure, gcp (--cloud=local is --backend=vm only)"),
        (["--cloud=any", "--backend=managed"], "error: --cloud=any: only --backend=skypilot picks "
         "the cloud itself; add it, or choose one of aws, gcp, azure"),
        (["--cloud=any", "--backend=skypilot", "--region=us-east-1"], "error: --region us-east-1 "
         "with --cloud=any: it names one cloud's; give --gpu or --cpus [--memory] and SkyPilot "
         "picks the cloud, or name the cloud"),
        (["--cloud=any", "--backend=skypilot", "--machine=c7i.8xlarge"], "error: --machine "
         "c7i.8xlarge with --cloud=any: it names one cloud's; give --gpu or --cpus [--memory] and "
         "SkyPilot picks the cloud, or name the cloud"),
        (["--cloud=any", "--backend=skypilot", "--gpu=t4", "--cpus=8"], "error: --gpu with --cpus: "
         "choose the machine one way: --gpu NAME[:COUNT], --cpus N [--memory GB] or --machine "
         "TYPE (invoke machines lists them)"),
    ],
    ids=["nodes-on-a-vm", "unknown-backend", "nodes-not-a-number", "local-managed", "any-managed",
         "any-region", "any-machine", "any-gpu-and-cpus"],
)  # fmt: skip
def test_bad_backend_flags_get_one_line_and_start_nothing(
    tmp_path: Path, flags: list[str], message: str
) -> None:
    cloud = [] if any(flag.startswith("--cloud") for flag in flags) else ["--cloud=aws"]
    env = project_env(CLOUD_RUNS=str(tmp_path / "runs"))
    done = invoke_cli("train", *cloud, *flags, "--dry-run", f"--image=x@{DIGEST}", env=env)
    assert done.returncode == 2
    assert done.stderr.strip() == message
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())


@pytest.fixture
def vertex(tmp_path: Path) -> Iterator[tuple[google_api.GoogleApi, dict[str, str]]]:
    settings = tmp_path / "cloud.toml"
    settings.write_text(
        '[gcp]\nproject = "my-project"\nregion = "us-central1"\nbucket = "gs://my-bucket"\n'
        'service_account = "runner@my-project.iam.gserviceaccount.com"\n'
        '[secrets]\nDATA_TOKEN = "data-token"\n'
    )
    with google_api.serve() as api:
        yield (
            api,
            project_env(
                **google_api.gcloud_env(api, tmp_path),
                CLOUD_SETTINGS=str(settings),
                CLOUD_RUNS=str(tmp_path / "runs"),
                DATA_TOKEN=SECRET,
            ),
        )


@pytest.mark.needs("gcloud")
def test_a_three_node_spot_vertex_job_is_what_gcloud_sends(
    vertex: tuple[google_api.GoogleApi, dict[str, str]], tmp_path: Path
) -> None:
    api, env = vertex
    image = f"us-central1-docker.pkg.dev/my-project/repo@{DIGEST}"
    done = invoke_cli(
        "train", "--cloud=gcp", "--backend=managed", "--nodes=3", "--gpu=t4", "--spot",
        "--max-hours=2", "--yes", "--detach", f"--image={image}", "--", "trainer.max_epochs=3",
        env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    run_id = run_id_of(done.stdout)
    (body,) = api.bodies("POST", r"/v1/projects/my-project/locations/us-central1/customJobs$")
    assert body["displayName"] == run_id and body["labels"]["invoke-run"] == run_id
    chief, workers = body["jobSpec"]["workerPoolSpecs"]
    assert (int(chief["replicaCount"]), int(workers["replicaCount"])) == (1, 2)
    for pool in (chief, workers):
        assert pool["machineSpec"] == {
            "machineType": "n1-standard-8",
            "acceleratorType": "NVIDIA_TESLA_T4",
            "acceleratorCount": 1,
        }
        container = pool["containerSpec"]
        assert container["imageUri"] == image
        assert container["command"] == ["dumb-init", "--", "python", "-m", f"{PACKAGE}.launch"]
        run_dir = f"/gcs/my-bucket/{PROJECT}/{run_id}/outputs/run"
        assert container["args"] == [f"hydra.run.dir={run_dir}", "trainer.max_epochs=3"]
        variables = {item["name"]: item["value"] for item in container["env"]}
        assert variables["RUN_SECRETS"] == "DATA_TOKEN=data-token"
        assert variables["RUN_PROJECT"] == "my-project"
    assert body["jobSpec"]["scheduling"] == {
        "timeout": "7200s",
        "strategy": "SPOT",
        "restartJobOnWorkerRestart": True,
    }
    assert body["jobSpec"]["serviceAccount"] == "runner@my-project.iam.gserviceaccount.com"
    assert SECRET not in json.dumps(body) + done.stdout + done.stderr
    if sdks.PYTHON:  # Vertex AI's own message type takes it, enums and all
        (tmp_path / "request.json").write_text(json.dumps(body))
        parsed = sdks.validate("vertex", tmp_path / "request.json")
        assert parsed["jobSpec"]["workerPoolSpecs"][1]["machineSpec"]["acceleratorType"] == (
            "NVIDIA_TESLA_T4"
        )
        assert parsed["jobSpec"]["scheduling"]["strategy"] == "SPOT"

    (job_id,) = api.jobs
    status = invoke_cli("status", "--run", run_id, env=env)
    assert status.returncode == 0, status.stderr
    assert "pending (JOB_STATE_PENDING)" in status.stdout and "3 x 1 x t4" in status.stdout
    api.jobs[job_id]["state"] = "JOB_STATE_RUNNING"
    assert "running (JOB_STATE_RUNNING)" in invoke_cli("status", "--run", run_id, env=env).stdout
    stop = invoke_cli("stop", "--run", run_id, env=env)
    assert stop.returncode == 0, stop.stderr
    assert api.bodies("POST", rf"/customJobs/{job_id}:cancel$")
    assert api.jobs[job_id]["state"] == "JOB_STATE_CANCELLING"


@pytest.mark.needs("gcloud")
def test_a_cpu_vertex_job_asks_for_a_machine_vertex_lists_and_no_accelerator(
    vertex: tuple[google_api.GoogleApi, dict[str, str]], tmp_path: Path
) -> None:
    api, env = vertex
    chosen = machines.cpu_offer("gcp", 16, backend="managed")
    assert chosen.machine in machines.load()["services"]["vertex_training"]["types"]
    image = f"us-central1-docker.pkg.dev/my-project/repo@{DIGEST}"
    done = invoke_cli(
        "train", "--cloud=gcp", "--backend=managed", "--nodes=2", "--cpus=16", "--yes",
        "--detach", f"--image={image}", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (body,) = api.bodies("POST", r"/v1/projects/my-project/locations/us-central1/customJobs$")
    for pool in body["jobSpec"]["workerPoolSpecs"]:
        assert pool["machineSpec"] == {"machineType": chosen.machine}
    if sdks.PYTHON:
        (tmp_path / "request.json").write_text(json.dumps(body))
        parsed = sdks.validate("vertex", tmp_path / "request.json")
        assert parsed["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["machineType"] == (
            chosen.machine
        )
    refused = invoke_cli(
        "train", "--cloud=gcp", "--backend=managed", "--machine=c3d-standard-30", "--yes",
        f"--image={image}", env=env,
    )  # fmt: skip
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "--machine c3d-standard-30: Vertex AI trains on none of that family" in refused.stderr


@pytest.mark.needs("gcloud")
def test_a_vertex_job_runs_as_the_projects_own_account_without_the_vm_grants(
    vertex: tuple[google_api.GoogleApi, dict[str, str]], tmp_path: Path
) -> None:
    """Without service_account in cloud.toml, a job runs as <project>-runner (never Vertex's
    default, the project's compute account), granted the bucket's project prefix and the named
    secret, but not the VMs' self-delete role: the service deletes its own machines."""
    api, env = vertex
    settings = tmp_path / "own.toml"
    settings.write_text(
        '[gcp]\nproject = "my-project"\nregion = "us-central1"\nbucket = "gs://my-bucket"\n'
        '[secrets]\nDATA_TOKEN = "data-token"\n'
    )
    done = invoke_cli(
        "train", "--cloud=gcp", "--backend=managed", "--gpu=t4", "--yes", "--detach",
        f"--image=us-central1-docker.pkg.dev/my-project/repo@{DIGEST}",
        env=env | {"CLOUD_SETTINGS": str(settings)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (account,) = api.accounts
    (body,) = api.bodies("POST", r"/v1/projects/my-project/locations/us-central1/customJobs$")
    assert body["jobSpec"]["serviceAccount"] == account
    assert api.roles == {}

    def roles_on(resource: str) -> list[str]:
        bindings = api.policies.get(resource, {}).get("bindings", [])
        return [b["role"] for b in bindings if f"serviceAccount:{account}" in b["members"]]

    assert roles_on("/storage/v1/b/my-bucket") == ["roles/storage.objectUser"]
    assert roles_on("/resourcemanager/v1/projects/my-project") == []
    secret = "/secretmanager/v1/projects/my-project/secrets/data-token"
    assert roles_on(secret) == ["roles/secretmanager.secretAccessor"]


def test_every_gpu_vertex_is_asked_for_is_one_of_its_accelerator_types() -> None:
    from cloudgpu import catalog

    named = catalog.load()["services"]["vertex_accelerator"]
    assert set(catalog.load()["clouds"]["gcp"]["gpus"]) <= set(named)


@pytest.mark.needs("cloud-sdks")
def test_every_vertex_accelerator_name_is_one_of_aiplatforms() -> None:
    from cloudgpu import catalog

    named = catalog.load()["services"]["vertex_accelerator"]
    names = [name for gpu, name in named.items() if gpu != "source"]
    code = (
        "import json, sys\nfrom google.cloud import aiplatform_v1\n"
        "print(json.dumps([n.name for n in aiplatform_v1.AcceleratorType]))\n"
    )
    done = subprocess.run([sdks.PYTHON, "-c", code], capture_output=True, text=True, check=True)
    assert set(names) <= set(json.loads(done.stdout))


@pytest.mark.needs("az")
def test_az_without_its_ml_extension_says_how_to_add_it(tmp_path: Path) -> None:
    """The real az, asked to send the job: without the ml extension (it cannot be installed
    offline) the task says how to add it, in one line, and records no job."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "az").symlink_to(str(AZ))
    settings = tmp_path / "cloud.toml"
    settings.write_text('[azure]\nstorage_account = "projectruns"\nsubscription = "0000"\n')
    env = project_env(
        CLOUD_SETTINGS=str(settings),
        CLOUD_RUNS=str(tmp_path / "runs"),
        AZURE_CONFIG_DIR=str(tmp_path / "azure"),
        AZURE_EXTENSION_DIR=str(tmp_path / "extensions"),
        PATH=f"{bin_dir}:{os.environ['PATH']}",
    )
    done = invoke_cli(
        "train", "--cloud=azure", "--backend=managed", "--yes", "--detach",
        f"--image=reg/x@{DIGEST}", env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "error: the az CLI has no ml extension (Azure ML jobs): az extension add -n ml"
    )
    (record,) = (tmp_path / "runs").glob("*/run.json")
    saved = json.loads(record.read_text())
    assert "job" not in saved and saved["status"] == {"reason": "not submitted"}
    listed = invoke_cli("status", "--run", record.parent.name, env=env, timeout=600)
    assert listed.returncode == 0, listed.stderr
    assert "not submitted" in listed.stdout


# `az ml` as Azure ML would answer a spot job whose node was taken back, then its resubmission:
# the ml extension cannot be installed offline, and Azure ML has no emulator (engines.md C3).
AZ_ML_STAND_IN = """#!PYTHON
import json, sys
from pathlib import Path

here = Path(__file__).parent
args = sys.argv[1:]
jobs = json.loads((here / "jobs.json").read_text()) if (here / "jobs.json").exists() else []
if args[:3] == ["ml", "job", "create"]:
    jobs.append(Path(args[args.index("--file") + 1]).read_text())
    (here / "jobs.json").write_text(json.dumps(jobs))
    print(json.dumps(dict(name="job-" + str(len(jobs)))))
elif args[:3] == ["ml", "job", "show"]:
    first = args[args.index("--name") + 1] == "job-1"
    preempted = dict(status="Failed", error=dict(message="MESSAGE"))
    print(json.dumps(preempted if first else dict(status="Completed")))
elif args[:3] == ["ml", "datastore", "show"]:
    print("{}")
else:
    sys.exit(1)  # a blob that is not there (yet)
"""
PREEMPTED = "PreemptionError: the job's low priority node was preempted"


@pytest.mark.parametrize("retries", [1, 0])
def test_a_preempted_azure_ml_spot_job_is_resubmitted_into_the_same_run_folder(
    tmp_path: Path, retries: int
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in = bin_dir / "az"
    script = AZ_ML_STAND_IN.replace("PYTHON", sys.executable).replace("MESSAGE", PREEMPTED)
    stand_in.write_text(script)
    stand_in.chmod(0o755)
    settings = tmp_path / "cloud.toml"
    settings.write_text('[azure]\nresource_group = "ml"\nworkspace = "ws"\n'
                        'storage_account = "projectruns"\nbucket = "az://runs"\n')  # fmt: skip
    env = project_env(CLOUD_SETTINGS=str(settings), CLOUD_RUNS=str(tmp_path / "runs"),
                      PATH=f"{bin_dir}:{os.environ['PATH']}")  # fmt: skip
    done = invoke_cli(
        "train", "--cloud=azure", "--backend=managed", "--nodes=2", "--gpu=t4", "--spot",
        "--yes", f"--retries={retries}", f"--image=reg/x@{DIGEST}", env=env,
    )  # fmt: skip
    (record_file,) = (tmp_path / "runs").glob("*/run.json")
    run_id, record = record_file.parent.name, json.loads(record_file.read_text())
    assert f"job-1: {PREEMPTED}" in done.stderr
    sent = json.loads((bin_dir / "jobs.json").read_text())
    if not retries:
        assert done.returncode == 1, done.stdout + done.stderr
        assert done.stderr.strip().splitlines()[-1] == f"run {run_id} preempted"
        assert len(sent) == 1 and record["status"] == {"reason": "preempted"}
        return
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"preempted: resubmitting {run_id} (retry 1 of 1)" in done.stdout
    assert f"run {run_id} finished" in done.stdout
    assert len(sent) == 2 and record["job"] == "job-2"
    assert record["status"] == {"reason": "finished"}
    # The same run folder both times: the second job resumes from the first one's checkpoint.
    folders = [line for job in sent for line in job.splitlines() if "azureml://datastores/" in line]
    assert len(folders) == 2 and folders[0] == folders[1]
    assert folders[0].strip().endswith(f"/{run_id}/outputs/run")


@pytest.mark.parametrize(
    ("backend", "stays", "never"),
    [
        ("vm", ["instance profile", "security group"], ["jobs controller", "-sagemaker"]),
        ("managed", ["IAM role {project}-sagemaker"], ["instance profile", "security group"]),
        ("skypilot", ["SkyPilot's jobs controller"], ["IAM role", "security group"]),
    ],
)
def test_the_dry_run_names_what_each_backend_leaves_and_what_its_cap_leaves_out(
    tmp_path: Path, backend: str, stays: list[str], never: list[str]
) -> None:
    """What outlives the run is what that backend makes (SkyPilot's controller among it), and
    the cost cap names what it does not count."""
    settings = tmp_path / "cloud.toml"
    settings.write_text('[aws]\nregion = "us-east-1"\nbucket = "s3://jobs-bucket"\n')
    env = project_env(CLOUD_SETTINGS=str(settings), CLOUD_RUNS=str(tmp_path / "runs"))
    nodes = [] if backend == "vm" else [f"--backend={backend}", "--nodes=2"]
    done = invoke_cli("train", "--cloud=aws", *nodes, "--gpu=t4", "--spot", "--retries=1",
                      "--dry-run", f"--image=reg/x@{DIGEST}", env=env)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    left = "\n".join(line for line in done.stdout.splitlines() if "stays after it" in line)
    for text in stays:
        assert text.format(project=PROJECT) in left, left
    for text in never:
        assert text not in left, left
    (cap,) = [line for line in done.stdout.splitlines() if line.strip().startswith("cost cap")]
    assert "x 2 launches (--max-hours" in cap
    if backend == "skypilot":
        assert cap.endswith("not counted: each node's 200 GB disk, and SkyPilot's jobs controller")
    elif backend == "vm":
        assert cap.endswith("not counted: the 200 GB disk while the machine exists")


@pytest.mark.parametrize(
    ("gpu", "nodes", "row"), [("a100:8", 2, True), ("a100:8", 1, False), ("t4", 2, False)]
)
def test_the_plan_says_when_nodes_with_efa_will_talk_over_tcp(
    tmp_path: Path, gpu: str, nodes: int, row: bool
) -> None:
    settings = tmp_path / "cloud.toml"
    settings.write_text('[aws]\nregion = "us-east-1"\nbucket = "s3://jobs-bucket"\n')
    env = project_env(CLOUD_SETTINGS=str(settings), CLOUD_RUNS=str(tmp_path / "runs"))
    done = invoke_cli("train", "--cloud=aws", "--backend=managed", f"--nodes={nodes}",
                      f"--gpu={gpu}", "--dry-run", f"--image=reg/x@{DIGEST}", env=env)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    said = [
        line.strip().removeprefix("between nodes").strip()
        for line in done.stdout.splitlines()
        if "between nodes" in line
    ]
    if row:
        assert said == [
            "400 Gbps EFA on p4d.24xlarge, but NCCL reaches EFA only through "
            "AWS's aws-ofi-nccl plugin, which this project's images lack: the nodes talk over "
            "TCP (cloudgpu docs/clouds.md: Between nodes: EFA)"
        ]
    else:
        assert said == []


@pytest.mark.needs("cloud-sdks")
def test_the_skypilot_task_parses_in_skypilot(tmp_path: Path) -> None:
    settings = tmp_path / "cloud.toml"
    settings.write_text('[aws]\nregion = "us-east-1"\nbucket = "s3://jobs-bucket"\n')
    env = project_env(CLOUD_SETTINGS=str(settings), CLOUD_RUNS=str(tmp_path / "runs"))
    registry = "123456789012.dkr.ecr.us-east-1.amazonaws.com"
    done = invoke_cli(
        "train", "--cloud=aws", "--backend=skypilot", "--nodes=2", "--gpu=a10g:4", "--spot",
        "--dry-run", f"--image={registry}/x@{DIGEST}", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (spec,) = (tmp_path / "runs").glob("*/skypilot-task.yaml")
    assert f"$ sky jobs launch --yes --detach-run --name {spec.parent.name} {spec}" in done.stdout
    task = sdks.validate("skypilot", spec)
    assert task["num_nodes"] == 2
    resources = task["resources"]
    # The private image: SkyPilot logs in to ECR as the VM (an empty password), no secret sent.
    login = {"username": "AWS", "password": "", "server": registry}
    assert resources["_docker_login_config"] == login
    assert resources["accelerators"] == {"A10G": 4} and resources["use_spot"] is True
    assert resources["infra"] == "aws/us-east-1"
    # SkyPilot may pick another machine with these GPUs, or another region: none dearer an hour
    # than the node's rate the cap counts.
    assert resources["max_hourly_cost"] == catalog.offer("aws", "a10g", 4).on_demand
    assert resources["job_recovery"]["strategy"] == "EAGER_NEXT_REGION"
    assert list(resources["image_id"].values()) == [f"docker:{registry}/x@{DIGEST}"]
    outputs = f"s3://jobs-bucket/{PROJECT}/{spec.parent.name}/outputs"
    assert task["file_mounts"]["/outputs"]["source"] == outputs
    launch = f"python -m {PACKAGE}.launch hydra.run.dir=/outputs/run"
    assert f'timeout --signal=TERM --kill-after=90 "$left" {launch}' in task["run"]
    assert "deadline" in done.stdout and "(the task stops itself then)" in done.stdout


@pytest.mark.needs("cloud-sdks")
def test_a_cpu_skypilot_task_asks_for_the_machines_vcpus_and_memory_and_no_gpu(
    tmp_path: Path,
) -> None:
    settings = tmp_path / "cloud.toml"
    settings.write_text('[gcp]\nproject = "p"\nregion = "us-central1"\nbucket = "gs://jobs"\n')
    env = project_env(CLOUD_SETTINGS=str(settings), CLOUD_RUNS=str(tmp_path / "runs"))
    chosen = machines.cpu_offer("gcp", 30, spot=True)
    done = invoke_cli(
        "train", "--cloud=gcp", "--backend=skypilot", "--cpus=30", "--spot", "--dry-run",
        f"--image=reg/x@{DIGEST}", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (spec,) = (tmp_path / "runs").glob("*/skypilot-task.yaml")
    resources = sdks.validate("skypilot", spec)["resources"]
    # The cheapest SkyPilot finds with at least the catalog machine's vCPUs and memory.
    assert resources["cpus"] == f"{chosen.vcpus}+" and resources["use_spot"] is True
    assert resources["memory"] == f"{chosen.memory_gib:g}+" and not resources.get("accelerators")


@pytest.mark.needs("cloud-sdks")
def test_any_cloud_leaves_the_cloud_to_skypilot_under_the_dearest_catalog_rate(
    tmp_path: Path,
) -> None:
    """--cloud=any: the task names no cloud, SkyPilot's max_hourly_cost is the rate the cap
    counts (the dearest on-demand machine of the catalog's clouds for these GPUs), and the image
    and outputs stay on the home cloud of cloud.toml's [skypilot]."""
    settings = tmp_path / "cloud.toml"
    settings.write_text('[aws]\nregion = "us-east-1"\nbucket = "s3://jobs-bucket"\n'
                        '[skypilot]\nhome = "aws"\n')  # fmt: skip
    env = project_env(CLOUD_SETTINGS=str(settings), CLOUD_RUNS=str(tmp_path / "runs"))
    registry = "123456789012.dkr.ecr.us-east-1.amazonaws.com"
    done = invoke_cli(
        "train", "--cloud=any", "--backend=skypilot", "--nodes=2", "--gpu=t4", "--spot",
        "--max-hours=3", "--dry-run", f"--image={registry}/x@{DIGEST}", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    rate = max(catalog.offer(cloud, "t4", 1).on_demand for cloud in catalog.CLOUDS)
    (spec,) = (tmp_path / "runs").glob("*/skypilot-task.yaml")
    task = sdks.validate("skypilot", spec)
    resources = task["resources"]
    assert "infra" not in resources and "cloud" not in resources and "region" not in resources
    assert resources["accelerators"] == {"T4": 1} and resources["use_spot"] is True
    assert resources["max_hourly_cost"] == rate
    assert task["file_mounts"]["/outputs"]["source"].startswith(f"s3://jobs-bucket/{PROJECT}/")
    # ECR from any cloud: SkyPilot logs in with the AWS credentials it uploads, no token.
    assert resources["_docker_login_config"]["password"] == ""
    rows = {line.strip().split("  ", 1)[0]: line for line in done.stdout.splitlines()
            if line.startswith("  ")}  # fmt: skip
    assert "any that SkyPilot has enabled (sky check); image and outputs on aws" in rows["cloud"]
    assert f"${2 * rate:.3f}/h, at most" in rows["price"]
    assert f"${round(2 * rate * 3, 2):.2f} at most: 3 h x ${2 * rate:.3f}/h" in rows["cost cap"]
    assert "between aws and another cloud (egress)" in rows["cost cap"]
    assert "image pull" not in rows


@pytest.mark.needs("aws")
def test_an_any_cloud_job_is_recorded_on_its_home_and_shown_as_any(
    moto: dict, tmp_path: Path
) -> None:
    """Submitted (to a stand-in `sky` on PATH: no cloud here), the job's record keeps its home
    for the bucket and the settings, and `invoke status` says SkyPilot placed it."""
    settings = tmp_path / "cloud.toml"
    settings.write_text('[aws]\nregion = "us-east-1"\nbucket = "s3://jobs-bucket"\n'
                        '[skypilot]\nhome = "aws"\n')  # fmt: skip
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sky").write_text(
        "#!/bin/sh\n"  # launch: keep the job's name; queue: list it as running
        f'if [ "$2" = launch ]; then printf "%s" "$6" > {tmp_path}/job; exit 0; fi\n'
        'echo "ID TASK NAME REQUESTED SUBMITTED TOT.DURATION JOB.DURATION #RECOVERIES STATUS"\n'
        f'echo "1 - $(cat {tmp_path}/job) 1x[T4:1] 1m 1m 1m 0 RUNNING"\n'
    )
    (bin_dir / "sky").chmod(0o755)
    env = moto | {"CLOUD_SETTINGS": str(settings), "PATH": f"{bin_dir}:{moto['PATH']}"}
    done = invoke_cli("train", "--cloud=any", "--backend=skypilot", "--gpu=t4", "--yes",
                      "--detach", f"--image=reg/x@{DIGEST}", env=env)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    run_id = run_id_of(done.stdout)
    record = json.loads((Path(moto["CLOUD_RUNS"]) / run_id / "run.json").read_text())
    assert record["cloud"] == "aws" and record["anywhere"] is True
    assert record["price"] == max(catalog.offer(c, "t4", 1).on_demand for c in catalog.CLOUDS)
    status = invoke_cli("status", "--run", run_id, env=env)
    assert status.returncode == 0, status.stderr
    (row,) = [line for line in status.stdout.splitlines() if line.startswith(run_id)]
    assert row.split()[1:3] == ["any", "skypilot"] and "running (RUNNING)" in row


@pytest.mark.needs("cloud-sdks")
def test_any_cloud_cpu_asks_for_the_least_machine_and_hands_artifact_registry_a_token(
    tmp_path: Path,
) -> None:
    """--cloud=any --cpus N: at least the least vCPUs and memory of the catalog's choice on each
    cloud. A VM outside GCP has no gcloud to pull from Artifact Registry, so an access token goes
    to `sky jobs launch --secret` (never into the task file); the plan says how long it lasts."""
    settings = tmp_path / "cloud.toml"
    settings.write_text('[gcp]\nproject = "p"\nregion = "us-central1"\nbucket = "gs://jobs"\n'
                        '[skypilot]\nhome = "gcp"\n')  # fmt: skip
    env = project_env(CLOUD_SETTINGS=str(settings), CLOUD_RUNS=str(tmp_path / "runs"))
    chosen = [machines.cpu_offer(cloud, 30, spot=True) for cloud in catalog.CLOUDS]
    image = f"us-central1-docker.pkg.dev/p/r/x@{DIGEST}"
    done = invoke_cli("train", "--cloud=any", "--backend=skypilot", "--cpus=30", "--spot",
                      "--dry-run", f"--image={image}", env=env)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (spec,) = (tmp_path / "runs").glob("*/skypilot-task.yaml")
    task = sdks.validate("skypilot", spec)
    resources = task["resources"]
    assert resources["cpus"] == f"{min(o.vcpus for o in chosen)}+"
    assert resources["memory"] == f"{min(o.memory_gib for o in chosen):g}+"
    assert resources["max_hourly_cost"] == max(o.on_demand for o in chosen)
    assert "infra" not in resources and not resources.get("accelerators")
    assert not any(name.startswith("SKYPILOT_DOCKER_") for name in task.get("envs", {}))
    assert "$ gcloud auth print-access-token --impersonate-service-account=" in done.stdout
    assert "--secret SKYPILOT_DOCKER_PASSWORD" in done.stdout
    pull = "image pull      with a pull-only token of us-central1-docker.pkg.dev that lasts 1 h"
    assert pull in done.stdout


def recording_sky(folder: Path) -> Path:
    """A stand-in `sky` on PATH (no cloud here): it keeps the login variables it was handed."""
    folder.mkdir(exist_ok=True)
    (folder / "sky").write_text(f"#!/bin/sh\nenv | grep ^SKYPILOT_DOCKER_ > {folder}/env\n")
    (folder / "sky").chmod(0o755)
    return folder


@pytest.mark.needs("gcloud")
def test_any_cloud_pulls_artifact_registry_as_a_reader_account_never_as_the_user(
    tmp_path: Path,
) -> None:
    """--cloud=any from Artifact Registry: the job gets a token of `<project>-puller`, made once,
    reader of the image's repository only, by impersonation (real gcloud against the stand-in,
    twice: the second run makes nothing again), never the user's own token; no printout holds it."""
    settings = tmp_path / "cloud.toml"
    settings.write_text('[gcp]\nproject = "p"\nregion = "us-central1"\nbucket = "gs://jobs"\n'
                        '[skypilot]\nhome = "gcp"\n')  # fmt: skip
    bin_dir = recording_sky(tmp_path / "bin")
    image = f"us-central1-docker.pkg.dev/p/repo/x@{DIGEST}"
    with google_api.serve() as api:
        env = project_env(**google_api.gcloud_env(api, tmp_path), CLOUDSDK_CORE_ACCOUNT="me@x.org",
                          CLOUD_SETTINGS=str(settings), CLOUD_RUNS=f"{tmp_path}/runs")  # fmt: skip
        env["PATH"] = f"{bin_dir}:{env['PATH']}"
        for _ in range(2):
            done = invoke_cli("train", "--cloud=any", "--backend=skypilot", "--cpus=8", "--yes",
                              "--detach", f"--image={image}", env=env)  # fmt: skip
            assert done.returncode == 0, done.stdout + done.stderr
            handed = dict(line.split("=", 1) for line in (bin_dir / "env").read_text().split())
            puller = f"{PROJECT}-puller@p.iam.gserviceaccount.com"
            assert handed["SKYPILOT_DOCKER_PASSWORD"] == f"impersonated-{puller}"
            assert handed["SKYPILOT_DOCKER_PASSWORD"] not in done.stdout + done.stderr
        made = api.bodies("POST", r"/iam/v1/projects/p/serviceAccounts$")
        assert [body["accountId"] for body in made] == [f"{PROJECT}-puller"]
        repository = api.policies["/artifactregistry/v1/projects/p/locations/us-central1/"
                                  "repositories/repo"]  # fmt: skip
        assert repository["bindings"] == [
            {"role": "roles/artifactregistry.reader", "members": [f"serviceAccount:{puller}"]}
        ]
        account = api.policies[f"/iam/v1/projects/p/serviceAccounts/{puller}"]
        assert account["bindings"] == [
            {"role": "roles/iam.serviceAccountTokenCreator", "members": ["user:me@x.org"]}
        ]
        # No other grant anywhere: the account reads that one repository and nothing else.
        assert [r for r, policy in api.policies.items() if puller in json.dumps(policy)] == [
            "/artifactregistry/v1/projects/p/locations/us-central1/repositories/repo"
        ]
    assert "dummy-token" not in handed.values()  # the user's own token never leaves


def test_the_task_unsets_the_registry_login_before_training() -> None:
    """SkyPilot exports a task's secrets to its command: the pull token must not reach training."""
    import datetime

    from cloudgpu.jobs import skypilot
    from cloudgpu.plan import Plan

    now = datetime.datetime.now(datetime.UTC).isoformat()
    plan = Plan(run_id="r", cloud="gcp", offer=None, spot=False, region="us-central1", zone="",
                image="i", max_hours=1, bucket="gs://b", container=["env"], settings={},
                launched=now)  # fmt: skip
    login = dict.fromkeys(skypilot.LOGIN, "pull-token-1234")
    done = subprocess.run(["bash", "-c", skypilot.run_script(plan)], capture_output=True,
                          text=True, timeout=30, env={**os.environ, **login})  # fmt: skip
    assert done.returncode == 0 and "PATH=" in done.stdout, done.stderr
    assert "pull-token-1234" not in done.stdout


@pytest.mark.needs("cloud-sdks")
def test_an_acr_image_reaches_skypilot_as_a_pull_only_token_never_in_the_task_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ACR has no VM login path in SkyPilot: the run gets a token of its own on a scope map that
    allows content/read of the image's repository only, expiring at the run's deadline (an
    expired one of an earlier run is deleted), handed to `sky jobs launch --secret` through its
    environment. Real `sky`'s Task takes the same three as secrets and logs in with them; the
    task file, the command line and the printout hold no token; real az accepts every command."""
    from cloudgpu.commands import Commands
    from cloudgpu.jobs import skypilot
    from cloudgpu.plan import Plan

    token = "acr-token-" + "9" * 20
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    old = {"name": "old-sky-pull", "expiry": "2020-01-01T00:00:00+00:00"}
    new = {"name": "new-sky-pull", "expiry": "2999-01-01T00:00:00+00:00"}
    listed = json.dumps([old, new])
    (bin_dir / "az").write_text(
        "#!/bin/sh\n"  # keep each command line; the scope map is not there yet
        f'printf "%s\\t" "$@" >> {tmp_path}/az; echo >> {tmp_path}/az\n'
        'case "$2 $3" in "scope-map show") exit 3;; "token list") echo \'' + listed + "';;\n"
        f'"token create") echo {token};; esac\n'
    )
    (bin_dir / "sky").write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$@" > {tmp_path}/argv\n'
        f"env | grep ^SKYPILOT_DOCKER_ | sort > {tmp_path}/env\n"
    )
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    image = f"projacr.azurecr.io/team/x@{DIGEST}"
    plan = Plan(run_id="r-261201-000000-abcd", cloud="azure", offer=None, spot=False,
                region="eastus", zone="", image=image, max_hours=5, bucket="az://runs",
                container=["true"], settings={"project_name": "p"},
                launched="2026-12-01T00:00:00+00:00")  # fmt: skip
    spec = tmp_path / "task.yaml"
    spec.write_text(f"name: r\nresources:\n  infra: azure/eastus\n  image_id: docker:{image}\n"
                    "run: 'true'\n")  # fmt: skip
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    skypilot.submit(plan, str(spec), Commands())
    az = [line.rstrip("\t").split("\t") for line in (tmp_path / "az").read_text().splitlines()]
    scope_map = next(c for c in az if c[1:3] == ["scope-map", "create"])
    assert scope_map[scope_map.index("--repository") + 1 :][:2] == ["team/x", "content/read"]
    made = next(c for c in az if c[1:3] == ["token", "create"])
    name = made[made.index("--name") + 1]
    assert name == "r-261201-000000-abcd-sky-pull"
    assert made[made.index("--scope-map") + 1] == scope_map[scope_map.index("--name") + 1]
    assert made[made.index("--expiration") + 1] == "2026-12-01T05:00:00Z"  # the run's cap
    deleted = [c[c.index("--name") + 1] for c in az if c[1:3] == ["token", "delete"]]
    assert deleted == ["old-sky-pull"]
    dry = Commands(dry_run=True)
    skypilot.submit(plan, str(spec), dry)
    argv = (tmp_path / "argv").read_text().split()
    secrets = [argv[i + 1] for i, word in enumerate(argv) if word == "--secret"]
    assert secrets == list(skypilot.LOGIN) and token not in argv
    handed = dict(line.split("=", 1) for line in (tmp_path / "env").read_text().splitlines())
    assert handed == {"SKYPILOT_DOCKER_USERNAME": name, "SKYPILOT_DOCKER_PASSWORD": token,
                      "SKYPILOT_DOCKER_SERVER": "projacr.azurecr.io"}  # fmt: skip
    assert any("az acr token create" in line for line in dry.printed)
    assert "--secret SKYPILOT_DOCKER_PASSWORD" in dry.printed[-1]
    assert token not in " ".join(dry.printed) + spec.read_text()
    if AZ:  # offline, az parses each command line and stops only at the login
        for command in az:
            parsed = subprocess.run([AZ, *command], capture_output=True, text=True,
                                    timeout=300, env={**os.environ, "AZURE_CONFIG_DIR":
                                                      str(tmp_path / "azure")})  # fmt: skip
            assert "Please run 'az login'" in parsed.stderr, (command, parsed.stderr[-2000:])
    script = (
        "import json, sys, sky\n"
        "task = sky.Task.from_yaml(sys.argv[1]).update_secrets(json.loads(sys.argv[2]))\n"
        "print(json.dumps(list(task.resources)[0]._docker_login_config.__dict__))\n"
    )
    done = subprocess.run([sdks.PYTHON, "-c", script, str(spec), json.dumps(handed)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HOME": str(tmp_path)})  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "username": name, "password": token, "server": "projacr.azurecr.io"
    }  # fmt: skip


@pytest.mark.parametrize(("hours_left", "ends_within"), [(-1.0, 2.0), (1 / 3600, 6.0)])
def test_a_skypilot_task_stops_at_the_runs_deadline(hours_left: float, ends_within: float) -> None:
    """SkyPilot has no time limit: the task's own command ends at the deadline (exit 124)."""
    import datetime
    import subprocess
    import time

    from cloudgpu.jobs import skypilot
    from cloudgpu.plan import Plan

    created = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
    plan = Plan(run_id="r", cloud="aws", offer=None, spot=False, region="", zone="", image="i",
                max_hours=1 + hours_left, bucket="s3://b", container=["sleep", "60"],
                settings={"project_name": "p"}, created=created.isoformat())  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(["bash", "-c", skypilot.run_script(plan)], timeout=30)
    assert done.returncode == 124
    assert time.monotonic() - started < ends_within


def test_every_catalog_machine_is_one_sagemaker_trains_on_or_refused_by_name() -> None:
    """SageMaker's own list decides, machine by machine of the catalog: a g4dn.metal (8 x T4) is
    no SageMaker training instance, and the plan says so before anything is sent."""
    known = sagemaker_instances.names("TrainingInstanceType")
    offered = {f"ml.{offer.machine}" for offer in catalog.rows("aws")}
    assert offered - set(known) == {"ml.g4dn.metal"}


@pytest.mark.parametrize("shape", sagemaker_instances.SHAPES)
def test_the_shipped_sagemaker_lists_are_botocores(shape: str) -> None:
    """sagemaker_instances.json holds what the API accepts: every name in it is one botocore's
    model of SageMaker's API (the dev tools' botocore) takes, and it names the version read."""
    from botocore.session import get_session

    accepted = get_session().get_service_model("sagemaker").shape_for(shape).enum
    shipped = sagemaker_instances.names(shape)
    assert len(shipped) > 100 and set(shipped) <= set(accepted)
    assert json.loads(sagemaker_instances.LISTS.read_text())["source"].startswith("botocore 1.")


def test_a_machine_sagemaker_does_not_train_on_is_refused_without_botocore(tmp_path: Path) -> None:
    """The check is the same where botocore is not installed (a venv without s3fs): it once let
    every machine through there."""
    blocker = tmp_path / "botocore.py"
    blocker.write_text("raise ImportError('botocore is not installed here')\n")
    code = (
        "from cloudgpu.jobs import sagemaker; from cloudgpu.plan import PlanError\n"
        "from cloudgpu import catalog\n"
        "import types\n"
        "offer = next(o for o in catalog.rows('aws') if o.machine == 'g4dn.metal')\n"
        "plan = types.SimpleNamespace(offer=offer, max_hours=1)\n"
        "try:\n    sagemaker.check(plan)\nexcept PlanError as error:\n    print(error)\n"
    )
    path = f"{tmp_path}{os.pathsep}{Path(catalog.__file__).parents[1]}"
    done = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": path},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "SageMaker has no training instance ml.g4dn.metal" in done.stdout
