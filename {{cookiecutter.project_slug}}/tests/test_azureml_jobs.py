"""Azure ML command jobs as `invoke train --cloud=azure --backend=managed` writes them, loaded by
azure-ai-ml: the one kind of managed job whose file names the framework (its `distribution`),
and whose GPUs are those this framework's image runs on. The other services' jobs, which do not
differ between frameworks, are tested in test_managed_jobs.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from cloudgpu import catalog, machines
from cloudgpu.testing import sdks
from conftest import invoke_cli, project_env

PACKAGE = "{{ cookiecutter.package_name }}"
PROJECT = "{{ cookiecutter.project_slug }}"
DISTRIBUTION = "{{ 'TensorFlow' if cookiecutter.framework == 'tensorflow' else 'PyTorch' }}"
DIGEST = "sha256:" + "4" * 64


def azure_dry_run(tmp_path: Path, *flags: str) -> tuple[subprocess.CompletedProcess, Path]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    settings = tmp_path / "cloud.toml"
    settings.write_text(
        '[azure]\nresource_group = "ml"\nworkspace = "ws"\nstorage_account = "projectruns"\n'
        'bucket = "az://runs"\nkey_vault = "project-vault"\n[secrets]\nDATA_TOKEN = "data-token"\n'
    )
    env = project_env(CLOUD_SETTINGS=str(settings), CLOUD_RUNS=str(tmp_path / "runs"))
    done = invoke_cli(
        "train", "--cloud=azure", "--backend=managed", "--dry-run", f"--image=reg/x@{DIGEST}",
        *flags, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (spec,) = (tmp_path / "runs").glob("*/azureml-job.yaml")
    return done, spec


@pytest.mark.needs("cloud-sdks")
@pytest.mark.parametrize("spot", [False, True], ids=["standard", "spot"])
def test_the_azure_ml_job_loads_in_azure_ai_ml_as_planned(tmp_path: Path, spot: bool) -> None:
    spot_flag = ["--spot"] if spot else []
    done, spec = azure_dry_run(
        tmp_path, "--nodes=2", "--gpu=t4", *spot_flag, "--", "trainer.max_epochs=3"
    )
    assert "--- azureml-job.yaml ---" in done.stdout
    rest = sdks.validate("azureml", spec)
    assert rest["resources"] == {"instance_count": 2, "instance_type": "Standard_NC4as_T4_v3"}
    assert rest["distribution"]["distribution_type"] == DISTRIBUTION
    assert rest["queue_settings"]["job_tier"] == ("Spot" if spot else "Standard")
    assert rest["limits"]["timeout"] == "PT4H"
    run_id = spec.parent.name
    assert rest["outputs"]["run"] == {
        "uri": f"azureml://datastores/{PACKAGE}_runs/paths/{PROJECT}/{run_id}/outputs/run",
        "mode": "ReadWriteMount",
        "job_output_type": "uri_folder",
    }
    assert rest["environment_variables"]["RUN_KEY_VAULT"] == "project-vault"
    assert rest["environment_variables"]["RUN_SECRETS"] == "DATA_TOKEN=data-token"
    command = "launch 'hydra.run.dir={% raw %}${{outputs.run}}{% endraw %}' trainer.max_epochs=3"
    assert command in spec.read_text()


def runs_here(offer: catalog.Offer) -> bool:
    """Whether this project's GPU image runs on that machine (its CUDA against the GPU's)."""
    try:
        catalog.check_runs(offer)
    except catalog.CatalogError:
        return False
    return True


AZURE_GPUS = [f"{o.gpu}:{o.count}" for o in catalog.rows("azure") if runs_here(o)]


@pytest.mark.needs("cloud-sdks")
def test_every_azure_gpu_makes_a_job_azure_ai_ml_loads(tmp_path: Path) -> None:
    assert len(AZURE_GPUS) > 5
    specs = [azure_dry_run(tmp_path / gpu, "--nodes=2", f"--gpu={gpu}")[1] for gpu in AZURE_GPUS]
    loaded = sdks.validate_all("azureml", specs)  # one process: azure-ai-ml imports slowly
    assert [rest["resources"]["instance_count"] for rest in loaded] == [2] * len(AZURE_GPUS)


@pytest.mark.needs("cloud-sdks")
def test_a_cpu_job_runs_on_the_cheapest_vm_size_that_fits(tmp_path: Path) -> None:
    chosen = machines.cpu_offer("azure", 8, 32, backend="managed")
    _, spec = azure_dry_run(tmp_path, "--nodes=2", "--cpus=8", "--memory=32")
    rest = sdks.validate("azureml", spec)
    assert rest["resources"] == {"instance_count": 2, "instance_type": chosen.machine}
    assert rest["distribution"]["distribution_type"] == DISTRIBUTION
