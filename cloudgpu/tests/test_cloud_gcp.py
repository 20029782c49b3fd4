"""Google Cloud with the real `gcloud` against a loopback stand-in for the Compute API: the exact
requests `invoke train --cloud=gcp`, `status` and `stop` send, checked field by field."""

from __future__ import annotations

import hashlib
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from baked_project import invoke_cli, project_env
from cloudgpu.testing import google_api

from cloudgpu import machines

pytestmark = pytest.mark.needs("gcloud")
DIGEST = "sha256:" + "5" * 64
IMAGE = f"us-central1-docker.pkg.dev/my-project/repo@{DIGEST}"
SECRET = "token-0123456789abcdef"


@pytest.fixture
def gcp(tmp_path: Path) -> Iterator[tuple[google_api.GoogleApi, dict[str, str]]]:
    settings = tmp_path / "cloud.toml"
    settings.write_text(
        '[gcp]\nproject = "my-project"\nregion = "us-central1"\nzone = "us-central1-b"\n'
        'bucket = "gs://my-bucket"\nservice_account = "runner@my-project.iam.gserviceaccount.com"\n'
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


def test_a_spot_t4_run_sends_every_setting(gcp: tuple[google_api.GoogleApi, dict]) -> None:
    api, env = gcp
    done = invoke_cli(
        "train",
        "--cloud=gcp",
        "--gpu=t4",
        "--spot",
        "--yes",
        "--detach",
        f"--image={IMAGE}",
        "--max-hours=2",
        "--",
        "trainer=gpu",
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (body,) = api.bodies("POST", r"/projects/my-project/zones/us-central1-b/instances$")
    run_id = body["name"]
    assert body["machineType"].endswith("/zones/us-central1-b/machineTypes/n1-standard-8")
    (accelerator,) = body["guestAccelerators"]
    assert accelerator["acceleratorType"].endswith("/acceleratorTypes/nvidia-tesla-t4")
    assert accelerator["acceleratorCount"] == 1
    scheduling = body["scheduling"]
    assert scheduling["provisioningModel"] == "SPOT"
    assert scheduling["instanceTerminationAction"] == "DELETE"
    assert scheduling["onHostMaintenance"] == "TERMINATE"
    assert scheduling["automaticRestart"] is False
    assert scheduling["maxRunDuration"] == {"seconds": "7200"}
    assert body["labels"]["invoke-run"] == run_id and body["labels"]["invoke-managed"] == "true"
    assert {"invoke-project", "invoke-creator", "invoke-deadline"} <= set(body["labels"])
    (account,) = body["serviceAccounts"]
    assert account["email"] == "runner@my-project.iam.gserviceaccount.com"
    assert account["scopes"] == ["https://www.googleapis.com/auth/cloud-platform"]
    disk = body["disks"][0]["initializeParams"]
    assert disk["sourceImage"].endswith("/family/common-cu129-ubuntu-2204-nvidia-580")
    metadata = {item["key"]: item["value"] for item in body["metadata"]["items"]}
    script = metadata["startup-script"]
    assert f"IMAGE={IMAGE}" in script and "CLOUD=gcp" in script
    assert "SECRETS=DATA_TOKEN=data-token" in script  # the secret's name, read on the VM
    assert SECRET not in str(body), "no secret in the VM's metadata"
    assert metadata["install-nvidia-driver"] == "True"

    listed = invoke_cli("status", "--cloud", "gcp", env=env)
    assert listed.returncode == 0, listed.stderr
    assert run_id in listed.stdout and "running" in listed.stdout and "1 x t4" in listed.stdout

    stopped = invoke_cli("stop", "--run", run_id, env=env)
    assert stopped.returncode == 0, stopped.stderr
    assert api.bodies("DELETE", rf"/zones/us-central1-b/instances/{run_id}$") == [None]
    assert run_id not in api.instances


def allows(expression: str, name: str) -> bool:
    """Whether an IAM condition grants object `name` of my-bucket: the condition's CEL (&&, ||,
    !, startsWith and ==, all it uses) evaluated as the Python it reads as."""
    python = expression.replace("&&", " and ").replace("||", " or ")
    python = python.replace("!resource", "not resource").replace(".startsWith(", ".startswith(")
    where = f"projects/_/buckets/my-bucket/objects/{name}"
    resource = types.SimpleNamespace(type="storage.googleapis.com/Object", name=where)
    return bool(eval(python, {"resource": resource}))  # the project's own text, no input


def test_without_an_account_named_the_vm_runs_as_the_projects_own_scoped_to_its_run(
    gcp: tuple[google_api.GoogleApi, dict], tmp_path: Path
) -> None:
    """A first run makes <project>-runner and its self-delete role, grants it the bucket's
    project prefix, the named secret and the image's repository, each with the condition that
    scopes it, and the VM runs as it, never as the default compute service account."""
    api, env = gcp
    settings = tmp_path / "own.toml"
    settings.write_text(
        '[gcp]\nproject = "my-project"\nregion = "us-central1"\nzone = "us-central1-b"\n'
        'bucket = "gs://my-bucket"\n[secrets]\nDATA_TOKEN = "data-token"\n'
    )
    slug = "cloud-gpu-project"
    image = f"us-central1-docker.pkg.dev/my-project/{slug}@{DIGEST}"
    done = invoke_cli("train", "--cloud=gcp", "--gpu=t4", "--yes", "--detach",
                      f"--image={image}", env=env | {"CLOUD_SETTINGS": str(settings)})  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (account,) = api.accounts
    account_id, domain = account.split("@")
    assert domain == "my-project.iam.gserviceaccount.com"
    assert account_id.endswith("-runner") and 6 <= len(account_id) <= 30
    (role,) = api.roles.values()
    assert role["includedPermissions"] == [
        "compute.instances.delete", "compute.instances.get", "compute.zoneOperations.get"
    ]  # fmt: skip

    def granted(resource: str) -> list[dict]:
        bindings = api.policies[resource]["bindings"]
        return [b for b in bindings if f"serviceAccount:{account}" in b["members"]]

    (storage,) = granted("/storage/v1/b/my-bucket")
    assert storage["role"] == "roles/storage.objectUser"
    scope = storage["condition"]["expression"]
    # Its objects under the project's prefix, and never the endpoints' (their models).
    assert allows(scope, f"{slug}/r-1/outputs/run/last.ckpt")
    assert not allows(scope, f"{slug}/endpoints/e/model/model.json")
    assert not allows(scope, "another-project/r-1/outputs/x")
    (vms,) = granted("/resourcemanager/v1/projects/my-project")
    assert vms["role"] == role["name"]
    assert f'.startsWith("{slug}-")' in vms["condition"]["expression"]
    secret = "/secretmanager/v1/projects/my-project/secrets/data-token"
    assert [b["role"] for b in granted(secret)] == ["roles/secretmanager.secretAccessor"]
    located = "/artifactregistry/v1/projects/my-project/locations/us-central1"
    repository = f"{located}/repositories/{slug}"
    assert [b["role"] for b in granted(repository)] == ["roles/artifactregistry.reader"]
    (body,) = api.bodies("POST", r"/zones/us-central1-b/instances$")
    assert [a["email"] for a in body["serviceAccounts"]] == [account]

    again = invoke_cli("train", "--cloud=gcp", "--gpu=t4", "--yes", "--detach",
                       f"--image={image}", env=env | {"CLOUD_SETTINGS": str(settings)})  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    assert len(api.accounts) == 1 and len(api.roles) == 1  # made once, found the second time
    assert len(granted(secret)) == 1


def test_a_bucket_of_the_default_name_in_another_project_is_refused(
    gcp: tuple[google_api.GoogleApi, dict], tmp_path: Path
) -> None:
    """<project>-<slug> can be guessed: made first by someone else, it would receive the runs'
    outputs. Its owner is checked before anything starts; the project's own is used."""
    api, env = gcp
    settings = tmp_path / "default-bucket.toml"
    settings.write_text(
        '[gcp]\nproject = "my-project"\nregion = "us-central1"\nzone = "us-central1-b"\n'
        'service_account = "runner@my-project.iam.gserviceaccount.com"\n'
    )
    env = env | {"CLOUD_SETTINGS": str(settings)}
    args = ["train", "--cloud=gcp", "--gpu=t4", "--yes", "--detach", f"--image={IMAGE}"]
    api.bucket_owner = "999999999999"
    refused = invoke_cli(*args, env=env)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert refused.stderr.strip().splitlines()[-1] == (
        "error: bucket gs://my-project-cloud-gpu-project belongs to another Google "
        "Cloud project (number 999999999999, not my-project's 123456789012): set bucket = under "
        "[gcp] in cloud.toml to one of yours"
    )
    assert api.bodies("POST", r"/instances$") == []
    api.bucket_owner = ""
    done = invoke_cli(*args, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    (body,) = api.bodies("POST", r"/instances$")
    metadata = {item["key"]: item["value"] for item in body["metadata"]["items"]}
    assert "BUCKET=gs://my-project-cloud-gpu-project/" in metadata["startup-script"]


def test_stop_stops_only_what_bears_the_projects_labels(
    gcp: tuple[google_api.GoogleApi, dict],
) -> None:
    """A run this machine has no record of is looked up by its labels: someone's VM of that
    name is left alone, in one line; a labelled run started elsewhere is stopped."""
    api, env = gcp
    zone = f"{api.url}/compute/v1/projects/my-project/zones/us-central1-b"
    api.instances["my-db-server"] = {
        "name": "my-db-server", "zone": zone, "status": "RUNNING", "labels": {},
        "machineType": f"{zone}/machineTypes/n2-standard-4", "kind": "compute#instance",
    }  # fmt: skip
    run = "cloud-gpu-project-261201-120000-ab"
    api.instances["vm-of-another-machine"] = {
        **api.instances["my-db-server"], "name": "vm-of-another-machine",
        "labels": {"invoke-managed": "true", "invoke-run": run},
    }  # fmt: skip
    for dry in ([], ["--dry-run"]):
        refused = invoke_cli("stop", "--run", "my-db-server", *dry, env=env)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert refused.stderr.startswith("error: --run my-db-server: no run of this project")
        assert "delete" not in refused.stdout
    stopped = invoke_cli("stop", "--run", run, env=env)
    assert stopped.returncode == 0, stopped.stderr
    assert [r.path.rsplit("/", 1)[-1] for r in api.requests if r.method == "DELETE"] == [
        "vm-of-another-machine"
    ]
    assert "my-db-server" in api.instances


def test_a_gpu_built_into_its_machine_type_takes_no_accelerator(
    gcp: tuple[google_api.GoogleApi, dict],
) -> None:
    api, env = gcp
    done = invoke_cli(
        "train", "--cloud=gcp", "--gpu=l4", "--yes", "--detach", f"--image={IMAGE}", env=env
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (body,) = api.bodies("POST", r"/instances$")
    assert body["machineType"].endswith("/machineTypes/g2-standard-4")
    assert "guestAccelerators" not in body
    assert body["scheduling"]["provisioningModel"] == "STANDARD"


def test_a_cpu_machine_gets_no_gpu_no_driver_and_an_image_without_one(
    gcp: tuple[google_api.GoogleApi, dict],
) -> None:
    api, env = gcp
    chosen = machines.cpu_offer("gcp", 8, 64)
    done = invoke_cli(
        "train", "--cloud=gcp", "--cpus=8", "--memory=64", "--yes", "--detach", f"--image={IMAGE}",
        env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (body,) = api.bodies("POST", r"/instances$")
    assert body["machineType"].endswith(f"/machineTypes/{chosen.machine}")
    assert "guestAccelerators" not in body
    image = machines.vm_image("gcp")
    source = body["disks"][0]["initializeParams"]["sourceImage"]
    # gcloud resolves a public project's family by its zonal view: .../zones/-/imageFamilyViews/F
    assert f"/projects/{image['project']}/" in source and source.endswith(f"/{image['family']}")
    metadata = {item["key"]: item["value"] for item in body["metadata"]["items"]}
    assert "install-nvidia-driver" not in metadata
    assert "GPUS=0" in metadata["startup-script"] and "HOST_TOOLS=1" in metadata["startup-script"]


def test_a_dry_run_prints_the_commands_and_sends_nothing(
    gcp: tuple[google_api.GoogleApi, dict],
) -> None:
    api, env = gcp
    done = invoke_cli(
        "train", "--cloud=gcp", "--gpu=t4:2", "--dry-run", f"--image={IMAGE}", env=env
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "$ gcloud compute instances create" in done.stdout
    assert "--accelerator=type=nvidia-tesla-t4,count=2" in done.stdout
    assert "--- startup script ---" in done.stdout and SECRET not in done.stdout
    assert [r for r in api.requests if r.method != "GET"] == []


def test_a_short_gpu_quota_is_named_before_anything_starts(
    gcp: tuple[google_api.GoogleApi, dict],
) -> None:
    api, env = gcp
    api.quotas.append({"metric": "PREEMPTIBLE_NVIDIA_T4_GPUS", "limit": 1.0, "usage": 1.0})
    done = invoke_cli(
        "train", "--cloud=gcp", "--gpu=t4", "--spot", "--yes", f"--image={IMAGE}", env=env
    )
    assert done.returncode == 1
    assert "quota: PREEMPTIBLE_NVIDIA_T4_GPUS in us-central1 has 0 of 1 GPUs free" in done.stderr
    assert api.bodies("POST", r"/instances$") == []


def test_a_zone_without_capacity_passes_the_run_to_the_next(
    gcp: tuple[google_api.GoogleApi, dict],
) -> None:
    api, env = gcp
    api.exhausted.update({"us-central1-b", "us-central1-a"})
    done = invoke_cli(
        "train", "--cloud=gcp", "--gpu=t4", "--yes", "--detach", f"--image={IMAGE}", env=env
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "us-central1-b: capacity: the cloud says" in done.stderr
    tried = [
        r.path.split("/zones/")[1].split("/")[0]
        for r in api.requests
        if r.method == "POST" and r.path.endswith("/instances")
    ]
    assert tried == ["us-central1-b", "us-central1-a", "us-central1-c"]
    (instance,) = api.instances.values()
    assert instance["zone"].endswith("/zones/us-central1-c")

    api.exhausted.update({"us-central1-c", "us-central1-f"})
    none = invoke_cli(
        "train",
        "--cloud=gcp",
        "--gpu=t4",
        "--spot",
        "--yes",
        "--detach",
        f"--image={IMAGE}",
        env=env,
    )
    assert none.returncode == 1
    assert none.stderr.strip().splitlines()[-1] == (
        "error: no zone of us-central1 has capacity for n1-standard-8 now: try --region, "
        "dropping --spot, or a smaller machine (invoke machines)"
    )


@pytest.mark.parametrize("cloud", ["gcp", "azure"])
def test_push_in_a_dry_run_makes_the_registry_and_pushes(cloud: str, tmp_path: Path) -> None:
    settings = tmp_path / "cloud.toml"
    settings.write_text(
        '[gcp]\nproject = "my-project"\nregion = "europe-west4"\n[azure]\nresource_group = "ops"\n'
        'subscription = "0000"\n'
    )
    env = project_env(CLOUD_SETTINGS=str(settings), CLOUD_RUNS=str(tmp_path / "runs"))
    done = invoke_cli("push", f"--cloud={cloud}", "--dry-run", env=env | {"DOCKER": "true"})
    assert done.returncode == 0, done.stdout + done.stderr
    printed = [line for line in done.stdout.splitlines() if line.startswith("$ ")]
    if cloud == "gcp":
        assert printed[1].startswith(
            "$ gcloud artifacts repositories describe cloud-gpu-project --location=europe-west4"
        )
        assert "$ gcloud auth configure-docker europe-west4-docker.pkg.dev --quiet" in printed
        remote = "europe-west4-docker.pkg.dev/my-project/cloud-gpu-project"
    else:
        assert any(line.startswith("$ az acr show --name") for line in printed)
        # ACR names are global: the project's letters, and 8 hex digits of the subscription.
        acr = "cloud-gpu-project".replace("-", "") + hashlib.sha256(b"0000").hexdigest()[:8]
        remote = f"{acr}.azurecr.io/cloud-gpu-project"
    assert any(line.startswith(f"$ true push {remote}:") for line in printed), printed


def test_a_monitored_run_on_a_private_subnet_is_reachable_by_iap_only(
    gcp: tuple[google_api.GoogleApi, dict], tmp_path: Path
) -> None:
    """cloud.toml's network, subnet and public_ip = false put the VM on a private subnet with no
    address; no project-wide SSH key reaches it; and its metrics ports admit IAP's range and
    deny every other source, the VPC's own VMs too."""
    from test_cloud_monitor import pinned

    api, env = gcp
    settings = tmp_path / "private.toml"
    settings.write_text(
        '[gcp]\nproject = "my-project"\nregion = "us-central1"\nzone = "us-central1-b"\n'
        'bucket = "gs://my-bucket"\nservice_account = "runner@my-project.iam.gserviceaccount.com"\n'
        'network = "runs-vpc"\nsubnet = "runs"\npublic_ip = false\n'
    )
    private = env | {"CLOUD_SETTINGS": str(settings), "CLOUD_EXPORTERS": str(pinned(tmp_path))}
    done = invoke_cli("train", "--cloud=gcp", "--gpu=t4", "--monitor", "--yes", "--detach",
                      f"--image={IMAGE}", env=private)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (body,) = api.bodies("POST", r"/zones/us-central1-b/instances$")
    (nic,) = body["networkInterfaces"]
    assert nic["network"].endswith("/global/networks/runs-vpc")
    assert nic["subnetwork"].endswith("/regions/us-central1/subnetworks/runs")
    assert not nic.get("accessConfigs"), "no public address"
    metadata = {item["key"]: item["value"] for item in body["metadata"]["items"]}
    assert metadata["block-project-ssh-keys"] == "TRUE" and metadata["enable-oslogin"] == "TRUE"
    allow, deny = api.firewalls["invoke-monitor-iap"], api.firewalls["invoke-monitor-deny"]
    for rule in (allow, deny):
        assert rule["network"].endswith("/global/networks/runs-vpc")
        assert rule["targetTags"] == ["invoke-monitor"] and rule["direction"] == "INGRESS"
    assert allow["sourceRanges"] == ["35.235.240.0/20"] and allow["allowed"]
    assert deny["sourceRanges"] == ["0.0.0.0/0"] and deny["denied"]
    assert allow["priority"] < deny["priority"] < 65534
    assert body["tags"]["items"] == ["invoke-monitor"]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ("public_ip = false\n", "cloud.toml [gcp] public_ip = false needs subnet = ..."),
        ('public_ip = "no"\n', "cloud.toml [gcp] public_ip = 'no': give true or false"),
    ],
)
def test_bad_network_settings_are_refused_in_one_line(
    tmp_path: Path, settings: str, message: str
) -> None:
    (tmp_path / "cloud.toml").write_text(f'[gcp]\nproject = "p"\n{settings}')
    env = project_env(CLOUD_SETTINGS=str(tmp_path / "cloud.toml"), CLOUD_RUNS=str(tmp_path / "r"))
    done = invoke_cli("train", "--cloud=gcp", "--gpu=t4", "--dry-run", f"--image={IMAGE}", env=env)
    assert done.returncode == 1  # as every cloud setting the cloud would refuse
    assert done.stderr.strip().startswith(f"error: {message}"), done.stderr
    assert not (tmp_path / "r").exists()
