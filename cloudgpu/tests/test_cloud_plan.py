"""The cloud launch's checks before any cloud is asked (its data, the catalog and run ids, is
tested in the cloudgpu package): a run that cannot work is refused with the choices."""

from __future__ import annotations

import datetime
import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from baked_project import PROJECT_ROOT, invoke_cli, project_env

from cloudgpu import catalog, plan

DIGEST = "sha256:" + "3" * 64


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cloud=aws", "--gpu=h100", "--spot"], "no spot price for p5.4xlarge"),
        (["--cloud=gcp", "--gpu=a10g"], "gcp offers no a10g in the catalog; it offers t4, l4,"),
        (["--cloud=aws", "--gpu=t5"], "--gpu 't5': no GPU 't5'; choose one of t4, l4"),
        (["--cloud=aws", "--gpu=t4:two"], "the count after ':' must be a whole number"),
        (["--cloud=aws", "--gpu=t4", "--max-hours=0"], "give more than 0 and at most 168 hours"),
        (["--cloud=mars", "--gpu=t4"], "--cloud 'mars': choose one of aws, gcp, azure, local"),
        (["--cloud=aws", "--gpu=t4", "--image=repo:latest"], "give it by digest"),
        (["--cloud=aws", "--gpu=t4", "--resume=Not_A_Run"], "a run id is lowercase"),
        (["--gpu=t4"], "--gpu, --image: only with --cloud"),
        (["--cloud=aws", "--gpus=2"], "with --cloud, --gpu NAME:COUNT"),
    ],
)
def test_a_run_that_cannot_work_is_refused_before_anything(
    args: list[str], message: str, tmp_path
) -> None:
    image = [] if any(a.startswith("--image") for a in args) else [f"--image=r@{DIGEST}"]
    env = project_env(CLOUD_RUNS=str(tmp_path / "runs"), CLOUD_SETTINGS=str(tmp_path / "none"))
    done = invoke_cli("train", *args, *image, "--dry-run", env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr, done.stderr
    assert "$ " not in done.stdout, "nothing was run, not even printed"
    assert not (tmp_path / "runs").exists()


def test_a_gpu_older_than_the_images_cuda_is_refused_and_a_newer_one_is_not(tmp_path) -> None:
    needs = json.loads((PROJECT_ROOT / "image.json").read_text())  # what the project's image needs
    env = project_env(CLOUD_RUNS=str(tmp_path / "runs"), CLOUD_SETTINGS=str(tmp_path / "none"))
    volta = catalog.gpu_spec("v100")["compute_capability"]
    args = ["--cloud=aws", "--gpu=v100", f"--image=r@{DIGEST}", "--dry-run"]
    done = invoke_cli("train", *args, env=env)
    if catalog.version(volta) < catalog.version(needs["min_compute_capability"]):
        assert done.returncode == 2, done.stdout + done.stderr
        assert f"CUDA {needs['cuda']} runs on compute capability" in done.stderr, done.stderr
        assert "a v100 is 7.0: choose a newer GPU" in done.stderr, done.stderr
    else:  # a CUDA 12 image still runs on Volta
        assert done.returncode == 0, done.stdout + done.stderr
        assert "--instance-type p3.2xlarge" in done.stdout, done.stdout


def test_gpus_lists_the_catalog_with_its_sources() -> None:
    done = invoke_cli("gpus", "--cloud", "aws")
    assert done.returncode == 0, done.stderr
    row = r"aws\s+t4:1\s+g4dn\.xlarge\s+4\s+16\s+0\.5260\s+0\.2158\s+us-east-1"
    assert re.search(row, done.stdout)
    assert "Estimates as of" in done.stdout and "read 2026-" in done.stdout
    assert invoke_cli("gpus", "--cloud", "ibm").returncode == 2


def test_data_push_uploads_and_says_what_to_train_on(tmp_path) -> None:
    settings = tmp_path / "cloud.toml"
    settings.write_text(f'[local]\nbucket = "{tmp_path / "bucket"}"\n')
    (tmp_path / "mine.npz").write_bytes(b"not really arrays")
    env = project_env(CLOUD_SETTINGS=str(settings), CLOUD_RUNS=str(tmp_path / "runs"))
    done = invoke_cli("data.push", str(tmp_path / "mine.npz"), "--cloud=local", env=env)
    assert done.returncode == 0, done.stderr
    uploaded = tmp_path / "bucket" / "cloud-gpu-project" / "data" / "mine.npz"
    assert uploaded.read_bytes() == b"not really arrays"
    assert f"data=files data.source={uploaded}" in done.stdout
    spaced = invoke_cli("data", "push", str(tmp_path / "mine.npz"), "--cloud=local", env=env)
    assert spaced.returncode == 2
    hint = "error: invoke names a task of a group with a dot: invoke data.push"
    assert spaced.stderr.strip().startswith(hint)
    missing = invoke_cli("data.push", str(tmp_path / "nope.npz"), env=env)
    assert missing.returncode == 2 and "nope.npz: no such file or folder" in missing.stderr


def _run_with_logs(tmp_path: Path, trainer_log: str, container_log: str | None) -> dict:
    """A --cloud=local run's record, and its outputs in a bucket that is a folder here."""
    run = "proj-261201-120000-lo00"
    bucket = tmp_path / "bucket" / run
    (bucket / "outputs" / "run").mkdir(parents=True)
    (bucket / "outputs" / "run" / "train.log").write_text(trainer_log)
    if container_log is not None:  # the VM uploads it, and status.json, when the run ends
        (bucket / "outputs" / "logs").mkdir()
        (bucket / "outputs" / "logs" / "train.log").write_text(container_log)
        (bucket / "outputs" / "status.json").write_text('{"reason": "failed"}')
    folder = tmp_path / "runs" / run
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"run": run, "cloud": "local",
                                                 "bucket": str(bucket)}))  # fmt: skip
    settings = tmp_path / "cloud.toml"
    settings.write_text(f'[local]\nbucket = "{tmp_path / "bucket"}"\n')
    env = project_env(CLOUD_SETTINGS=str(settings), CLOUD_RUNS=str(tmp_path / "runs"))
    return {"run": run, "env": env}


def test_invoke_logs_shows_the_trainers_log_then_what_the_container_printed_after_it(
    tmp_path: Path,
) -> None:
    trainer = "[12:00:01][train][INFO] - epoch 1/3\n[12:00:02][train][INFO] - epoch 2/3\n"
    container = (
        "pip's warning before training\n" + trainer + "Traceback (most recent call last):\n"
        "RuntimeError: CUDA error: out of memory\n"
    )
    run = _run_with_logs(tmp_path, trainer, container)
    for follow in ([], ["--follow"]):
        done = invoke_cli("logs", "--run", run["run"], *follow, env=run["env"])
        assert done.returncode == 0, done.stderr
        assert done.stdout == (
            trainer + "Traceback (most recent call last):\n"
            "RuntimeError: CUDA error: out of memory\n[run ended: failed]\n"
        )


def test_invoke_logs_of_a_running_run_prints_what_was_uploaded_and_returns(tmp_path: Path) -> None:
    run = _run_with_logs(tmp_path, "[12:00:01][train][INFO] - epoch 1/3\n", None)
    done = invoke_cli("logs", "--run", run["run"], env=run["env"])
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[12:00:01][train][INFO] - epoch 1/3\n"
    empty = _run_with_logs(tmp_path / "empty", "", None)
    done = invoke_cli("logs", "--run", empty["run"], env=empty["env"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("no log in ") and "(uploaded every few minutes)" in done.stdout


@pytest.mark.parametrize("task", ["stop", "logs", "monitor"])
def test_a_run_id_that_cannot_be_one_is_named_with_its_flag(tmp_path, task: str) -> None:
    done = invoke_cli(task, "--run", "BAD_ID", env=project_env(CLOUD_RUNS=str(tmp_path / "r")))
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: --run 'BAD_ID': a run id is lowercase letters, digits and hyphens, starts with "
        "a letter, 40 characters at most (invoke status lists them)"
    )


@pytest.mark.parametrize(
    ("cloud", "command"),
    [("gcp", "gcloud compute instances delete proj-261201-1-ab --zone=z1"),
     ("azure", "az group delete --name proj-261201-1-ab --yes --no-wait")],
)  # fmt: skip
def test_stopping_a_run_started_elsewhere_names_its_machine(tmp_path, cloud, command) -> None:
    """A record without the cloud's ids (a run started elsewhere, or one whose launch never
    answered): the machine (or group) bears the run's id, so stop still names it."""
    (tmp_path / "cloud.toml").write_text('[gcp]\nproject = "p"\nzone = "z1"\n')
    env = project_env(CLOUD_RUNS=str(tmp_path / "r"), CLOUD_SETTINGS=str(tmp_path / "cloud.toml"))
    folder = tmp_path / "r" / "proj-261201-1-ab"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"run": "proj-261201-1-ab", "cloud": cloud}))
    done = invoke_cli("stop", "--run", "proj-261201-1-ab", "--dry-run", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"$ {command}")


@pytest.mark.parametrize(
    ("image", "registry"),
    [
        (f"123456789012.dkr.ecr.us-east-1.amazonaws.com/p@{DIGEST}",
         "123456789012.dkr.ecr.us-east-1.amazonaws.com"),
        (f"ghcr.io/someone/p@{DIGEST}", ""),
        (f"123456789012.dkr.ecr.us-east-1.amazonaws.com.evil.example/p@{DIGEST}", ""),
    ],
)  # fmt: skip
def test_the_vm_logs_in_to_its_clouds_registry_only(image: str, registry: str, tmp_path) -> None:
    """The cloud's registry token (ECR's is good for every repository of the account for 12
    hours) is never handed to another registry named in --image: that image is pulled without."""
    env = project_env(CLOUD_RUNS=str(tmp_path / "runs"), CLOUD_SETTINGS=str(tmp_path / "none"))
    done = invoke_cli("train", "--cloud=aws", "--gpu=t4", f"--image={image}", "--dry-run", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"\nREGISTRY={shlex.quote(registry)}\n" in done.stdout


def test_the_cost_cap_is_the_worst_case_the_run_can_cost(tmp_path) -> None:
    """A spot hour can cost up to the on-demand rate, and each relaunch of --retries runs up to
    --max-hours again: the cap shown (and asked about) is that sum, and names what it leaves out."""
    od = catalog.offer("aws", "t4", 1).on_demand
    env = project_env(CLOUD_RUNS=str(tmp_path / "runs"), CLOUD_SETTINGS=str(tmp_path / "none"))
    done = invoke_cli(
        "train", "--cloud=aws", "--gpu=t4", "--spot", "--max-hours=2", "--retries=1",
        f"--image=r@{DIGEST}", "--dry-run", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (cap,) = [line for line in done.stdout.splitlines() if line.strip().startswith("cost cap")]
    assert f"${od * 2 * 2:.2f} at most: 2 h x ${od:.3f}/h x 2 launches (--max-hours 2, " in cap
    assert "a spot hour bills at most the on-demand rate" in cap
    assert cap.endswith("not counted: the 200 GB disk while the machine exists")


def test_stop_of_a_local_run_whose_pid_went_to_another_process_signals_nothing(tmp_path) -> None:
    """A local run's record keeps its startup.sh's PID; once that process has ended the system
    may give the PID to anything, which `invoke stop` must not kill."""
    other = subprocess.Popen(["sleep", "120"], start_new_session=True)  # holds the reused PID
    try:
        run = "proj-261202-120000-pid0"
        (tmp_path / "runs" / run).mkdir(parents=True)
        record = {"run": run, "cloud": "local", "pid": other.pid}
        (tmp_path / "runs" / run / "run.json").write_text(json.dumps(record))
        env = project_env(CLOUD_RUNS=str(tmp_path / "runs"),
                          CLOUD_SETTINGS=str(tmp_path / "none"))  # fmt: skip
        done = invoke_cli("stop", "--run", run, env=env)
        assert done.returncode != 0
        assert done.stderr.strip() == f"error: run {run} is not running here", done.stderr
        assert other.poll() is None, "the other process was signalled"
    finally:
        other.kill()
        other.wait()


def test_resuming_a_run_that_still_runs_is_refused_and_stop_ends_it(tmp_path) -> None:
    """--resume of a running run would start a second writer of its outputs."""
    run = "proj-261202-120000-run0"
    folder = tmp_path / "runs" / run
    folder.mkdir(parents=True)
    (folder / "startup.sh").write_text("sleep 120\n")  # stands in for the run's script
    script = subprocess.Popen(["bash", str(folder / "startup.sh")], start_new_session=True)
    try:
        (folder / "run.json").write_text(json.dumps({"run": run, "cloud": "local",
                                                     "pid": script.pid}))  # fmt: skip
        env = project_env(CLOUD_RUNS=str(tmp_path / "runs"),
                          CLOUD_SETTINGS=str(tmp_path / "none"))  # fmt: skip
        resumed = invoke_cli("train", "--cloud=local", "--resume", run, "--dry-run",
                             f"--image={DIGEST}", env=env)  # fmt: skip
        assert resumed.returncode == 2, resumed.stdout + resumed.stderr
        assert resumed.stderr.strip() == (
            f"error: --resume {run}: the run is still running on local; stop it first "
            f"(invoke stop --run {run}), then resume it"
        )
        stopped = invoke_cli("stop", "--run", run, env=env)
        assert stopped.returncode == 0, stopped.stderr
        assert script.wait(timeout=30) != 0, "stop signals the run's own script"
    finally:
        script.kill()
        script.wait()


def test_status_says_which_clouds_it_asked_and_an_unknown_run_is_an_error(tmp_path) -> None:
    env = project_env(CLOUD_RUNS=str(tmp_path / "runs"), CLOUD_SETTINGS=str(tmp_path / "none"))
    done = invoke_cli("status", env=env)
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith("clouds asked: gcp (those with runs here, and the default")
    assert "--cloud " in first and done.stdout.rstrip().endswith("no cloud runs")
    unknown = invoke_cli("status", "--run", "proj-261201-120000-zz", env=env)
    assert unknown.returncode == 2
    assert unknown.stderr.strip() == (
        "error: --run proj-261201-120000-zz: no such run here or on gcp"
    )


@pytest.mark.parametrize(
    ("cloud", "needed", "stays"),
    [
        ("gcp", ["no Google Cloud project"], ["Cloud Storage bucket <project>-", "Artifact"]),
        ("azure", ["no Azure storage account", "no managed identity"],
         ["resource group", "blob container runs in the storage account <storage_account>"]),
        ("aws", [], ["S3 bucket", "ECR repository", "IAM role and instance profile"]),
    ],
)  # fmt: skip
def test_a_dry_run_needs_no_settings_and_names_what_stays(
    cloud: str, needed: list[str], stays: list[str], tmp_path
) -> None:
    """The whole plan, with <placeholders> for what is not set, then one list of what a real
    run needs first; what outlives the run is named before anything is asked or paid. No
    --image: the push to the cloud's registry is part of the plan."""
    env = project_env(CLOUD_RUNS=str(tmp_path / "runs"), CLOUD_SETTINGS=str(tmp_path / "none"))
    done = invoke_cli("train", f"--cloud={cloud}", "--gpu=t4", "--dry-run", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("$ docker push ") for line in lines), done.stdout
    kept = [line.split("stays after it", 1)[1] for line in lines if "stays after it" in line]
    assert all(any(word in line for line in kept) for word in stays), kept
    end = next(i for i, line in enumerate(lines) if line.startswith("dry run: nothing started"))
    wanted = [line.strip() for line in lines[end + 2 :]] if needed else []
    assert all(any(line.startswith(f"- {need}") for line in wanted) for need in needed), wanted
    assert len(wanted) == len(needed)
    assert lines[end].endswith(f"its files are in {tmp_path / 'runs'}/{lines[end].rsplit('/')[-1]}")


class GoneMachine:
    """A cloud whose bucket holds a run's log and no status.json, and which lists the run's
    machine as running for `listed` checks, then no more."""

    def __init__(self, run_id: str, listed: int) -> None:
        self.run_id, self.listed, self.asked = run_id, listed, 0

    def read_text(self, uri: str, settings: dict, cmd: object) -> str | None:
        return "[12:00:01][train][INFO] - epoch 1/3\n" if uri.endswith("train.log") else None

    def runs(self, settings: dict, cmd: object) -> list[dict]:
        self.asked += 1
        return [{"run": self.run_id, "state": "running"}] if self.asked <= self.listed else []


@pytest.mark.parametrize(
    ("spot", "hours_ago", "reason"),
    [(True, 0, "preempted"), (False, 0, "lost"), (False, 5, "timeout")],
)
def test_following_a_run_whose_machine_went_without_a_status_ends(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], spot: bool,
    hours_ago: float, reason: str,
) -> None:  # fmt: skip
    """A machine the cloud's cap deleted, or a spot one reclaimed within its notice, uploads no
    status.json: following its run asks every few polls whether the machine is still there and
    ends once it is not, with the likely reason (a preempted spot run is relaunched by
    --retries), instead of waiting forever."""
    from cloudgpu.tasks import remote_run

    created = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=hours_ago)
    run = plan.Plan(run_id="proj-261204-101010-ab12", cloud="gcp", offer=None, spot=spot,
                    region="r", zone="z", image=f"r@{DIGEST}", max_hours=4,
                    bucket="gs://b/proj/proj-261204-101010-ab12", container=["python"],
                    settings={"project_name": "proj"}, created=created.isoformat())  # fmt: skip
    cloud = GoneMachine(run.run_id, listed=2)
    monkeypatch.setitem(remote_run.PROVIDERS, "gcp", cloud)
    monkeypatch.setattr(remote_run.time, "sleep", lambda seconds: None)
    status = remote_run.follow_run(run, remote_run.Commands(verbose=False))
    assert status["reason"] == reason and "no status.json" in status["detail"]
    assert cloud.asked == 3  # listed twice, then gone: asked every MACHINE_CHECK_POLLS polls
    assert capsys.readouterr().out == "[12:00:01][train][INFO] - epoch 1/3\n"
