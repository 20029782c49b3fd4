"""The secrets of a managed job, read at its start from the cloud's secret store.

`invoke train --backend=managed` puts only names in the job: RUN_SECRETS="DATA_TOKEN=data-token"
(environment variable = the secret's name in the store) and RUN_CLOUD. launch.py reads each value
here with the job's own identity (its role, service account or managed identity) and hands it to
training in the environment, never in a file, a log line or the job's description:

    aws     Secrets Manager (botocore, in the image for s3fs)
    gcp     Secret Manager's REST API (google-auth, in the image for gcsfs), project RUN_PROJECT
    azure   Key Vault's REST API (azure-identity, in the image for adlfs), vault RUN_KEY_VAULT

A variable already set is kept: a value given by hand wins over the store.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable, Mapping, MutableMapping

KEY_VAULT_API = "7.4"


class SecretError(Exception):
    """A secret that could not be read: its name and where from, never a value."""


def names(environ: Mapping[str, str]) -> dict[str, str]:
    """RUN_SECRETS as {variable: secret name}."""
    pairs = environ.get("RUN_SECRETS", "").split()
    found = dict(pair.split("=", 1) for pair in pairs if "=" in pair)
    bad = [pair for pair in pairs if "=" not in pair]
    if bad:
        raise SecretError(f"RUN_SECRETS: {bad[0]!r} is not VARIABLE=secret-name")
    return found


def export(environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Read every secret RUN_SECRETS names into `environ` (os.environ); the variables set."""
    env = os.environ if environ is None else environ
    wanted = {var: name for var, name in names(env).items() if not env.get(var)}
    if not wanted:
        return []
    cloud = env.get("RUN_CLOUD", "")
    if cloud not in READERS:
        raise SecretError(f"RUN_CLOUD={cloud!r}: secrets are read on aws, gcp or azure")
    read = READERS[cloud]
    for variable, name in wanted.items():
        try:
            env[variable] = read(name, env)
        except SecretError:
            raise
        except Exception as error:  # the store's own reason, without the value
            raise SecretError(
                f"cannot read secret {name!r} ({variable}) from {cloud}: "
                f"{type(error).__name__}: {str(error)[:200]}"
            ) from None
    return list(wanted)


def _aws(name: str, env: Mapping[str, str]) -> str:
    from botocore.session import get_session

    region = env.get("RUN_REGION") or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    client = get_session().create_client("secretsmanager", region_name=region)
    return str(client.get_secret_value(SecretId=name)["SecretString"])


def _gcp(name: str, env: Mapping[str, str]) -> str:
    import google.auth
    from google.auth.transport.requests import AuthorizedSession

    credentials, project = google.auth.default(
        scopes=["https://www.googleapis.com/auth/cloud-platform"]
    )
    project = env.get("RUN_PROJECT") or project
    url = (
        f"https://secretmanager.googleapis.com/v1/projects/{project}/secrets/{name}"
        "/versions/latest:access"
    )
    answer = AuthorizedSession(credentials).get(url, timeout=30)
    answer.raise_for_status()
    return base64.b64decode(answer.json()["payload"]["data"]).decode()


def _azure(name: str, env: Mapping[str, str]) -> str:
    vault = env.get("RUN_KEY_VAULT")
    if not vault:
        raise SecretError("RUN_KEY_VAULT is not set: key_vault = ... under [azure] in cloud.toml")
    import requests
    from azure.identity import DefaultAzureCredential

    token = DefaultAzureCredential().get_token("https://vault.azure.net/.default").token
    answer = requests.get(
        f"https://{vault}.vault.azure.net/secrets/{name}?api-version={KEY_VAULT_API}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    answer.raise_for_status()
    return str(answer.json()["value"])


READERS: dict[str, Callable[[str, Mapping[str, str]], str]] = {
    "aws": _aws,
    "gcp": _gcp,
    "azure": _azure,
}
