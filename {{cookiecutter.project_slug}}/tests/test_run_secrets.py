"""A managed job's secrets, read at its start (run_secrets.py): from AWS Secrets Manager on
moto_server, for real; the job itself carries only their names."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from cloudgpu.testing import services
from conftest import PROJECT_ROOT, project_env

from {{ cookiecutter.package_name }}.cluster import run_secrets

SECRET = "token-0123456789abcdef"


@pytest.fixture(scope="module")
def secrets_manager() -> Iterator[dict[str, str]]:
    """moto_server with one secret, `data-token`; the environment that reaches it."""
    with services.moto_env() as env:
        subprocess.run(
            ["aws", "secretsmanager", "create-secret", "--name", "data-token",
             "--secret-string", SECRET],
            env=project_env(**env), check=True, capture_output=True,
        )  # fmt: skip
        yield env


@pytest.mark.needs("aws")
def test_a_job_reads_its_secrets_from_the_store(
    secrets_manager: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in secrets_manager.items():
        monkeypatch.setenv(name, value)
    environ = {"RUN_SECRETS": "DATA_TOKEN=data-token", "RUN_CLOUD": "aws"}
    assert run_secrets.export(environ) == ["DATA_TOKEN"]
    assert environ["DATA_TOKEN"] == SECRET


def test_a_value_given_by_hand_wins_over_the_store() -> None:
    environ = {"RUN_SECRETS": "DATA_TOKEN=data-token", "RUN_CLOUD": "aws", "DATA_TOKEN": "mine"}
    assert run_secrets.export(environ) == []
    assert environ["DATA_TOKEN"] == "mine"


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"RUN_SECRETS": "DATA_TOKEN"}, "RUN_SECRETS: 'DATA_TOKEN' is not VARIABLE=secret-name"),
        ({"RUN_SECRETS": "A=b", "RUN_CLOUD": "ibm"},
         "RUN_CLOUD='ibm': secrets are read on aws, gcp or azure"),
        ({"RUN_SECRETS": "A=b", "RUN_CLOUD": "azure"},
         "RUN_KEY_VAULT is not set: key_vault = ... under [azure] in cloud.toml"),
    ],
    ids=["no-equals", "unknown-cloud", "no-vault"],
)  # fmt: skip
def test_bad_secret_settings_are_named(environ: dict[str, str], message: str) -> None:
    with pytest.raises(run_secrets.SecretError) as raised:
        run_secrets.export(dict(environ))
    assert str(raised.value).startswith(message)


@pytest.mark.needs("aws")
def test_the_launcher_stops_in_one_line_naming_a_missing_secret(
    secrets_manager: dict[str, str],
) -> None:
    env = project_env(
        **secrets_manager,
        RUN_SECRETS="DATA_TOKEN=data-token API_KEY=no-such-secret",
        RUN_CLOUD="aws",
        RUN_REGION="us-east-1",
    )
    env.pop("API_KEY", None)
    done = subprocess.run(
        [sys.executable, "-m", "{{ cookiecutter.package_name }}.launch", "trainer.max_epochs=1"],
        cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(
        "error: cannot read secret 'no-such-secret' (API_KEY) from aws: ResourceNotFound"
    ), line
    assert SECRET not in done.stdout + done.stderr
