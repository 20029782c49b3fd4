"""Pull-only registry tokens for SkyPilot jobs whose VM cannot log in to the image's registry as
itself (ACR anywhere; Artifact Registry with --cloud=any): never the user's own credentials.

Artifact Registry: a service account of the project's own, `<project>-puller`, made on first use,
reader of the image's repository and nothing else; the job gets a short-lived access token of it,
made by impersonation (the user is granted Token Creator on that one account).
ACR: a scope map per repository that allows content/read only, and a token of the run's own on
it that expires at the run's deadline; the project's tokens whose passwords have expired are
deleted at each launch (a registry holds a limited number of tokens).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
import time
from typing import Any

from ..commands import CloudError, Commands
from ..plan import Plan
from ..providers import gcp_identity

GAR_TOKEN_USER = "oauth2accesstoken"  # the user name a Google access token goes with
GAR_TOKEN_HOURS = 1  # an impersonated access token's lifetime
TOKEN_SUFFIX = "-sky-pull"  # the ACR tokens this project makes end in it
# A grant made just now reaches the token service within a minute or so: ask again until then.
IMPERSONATION_TRIES, IMPERSONATION_WAIT_S = 6, 15


def repository_of(image: str) -> tuple[str, str]:
    """The registry host and the repository path of an image reference."""
    server, _, rest = image.partition("/")
    return server, re.split(r"[@:]", rest, maxsplit=1)[0]


def hours(plan: Plan) -> float:
    """How long the token of the plan's image lasts."""
    server, _ = repository_of(plan.image)
    return plan.max_hours if server.endswith(".azurecr.io") else GAR_TOKEN_HOURS


def token(plan: Plan, cmd: Commands) -> tuple[str, str]:
    """The user name and a pull-only token for the plan's image (see the module's text)."""
    server, repository = repository_of(plan.image)
    if server.endswith(".azurecr.io"):
        return _acr(plan, server.removesuffix(".azurecr.io"), repository, cmd)
    return GAR_TOKEN_USER, _artifact_registry(plan.settings, server, repository, cmd)


def _artifact_registry(
    settings: dict[str, Any], server: str, repository: str, cmd: Commands
) -> str:
    project = settings["project"]
    account = gcp_identity.ensure_account(settings, "puller", "image pulls (SkyPilot)", cmd)
    repo_project, repo_name = [*repository.split("/"), "", ""][:2]
    cmd.run(["gcloud", "artifacts", "repositories", "add-iam-policy-binding", repo_name,
             f"--location={server.removesuffix('-docker.pkg.dev')}", f"--project={repo_project}",
             f"--member=serviceAccount:{account}", "--role=roles/artifactregistry.reader",
             "--condition=None", "--format=json"])  # fmt: skip
    caller = cmd.run(["gcloud", "config", "get-value", "account"], dry_answer="YOU",
                     quiet=True).stdout.strip()  # fmt: skip
    if caller:
        kind = "serviceAccount" if caller.endswith(".gserviceaccount.com") else "user"
        cmd.run(["gcloud", "iam", "service-accounts", "add-iam-policy-binding", account,
                 f"--project={project}", f"--member={kind}:{caller}",
                 "--role=roles/iam.serviceAccountTokenCreator", "--condition=None",
                 "--format=json"])  # fmt: skip
    impersonate = ["gcloud", "auth", "print-access-token",
                   f"--impersonate-service-account={account}"]  # fmt: skip
    for _ in range(IMPERSONATION_TRIES - 1):
        done = cmd.run(impersonate, dry_answer="<a pull token>", quiet=True, check=False)
        if done.returncode == 0:
            return done.stdout.strip()
        time.sleep(IMPERSONATION_WAIT_S)
    return cmd.run(impersonate, quiet=True).stdout.strip()


def _acr(plan: Plan, registry: str, repository: str, cmd: Commands) -> tuple[str, str]:
    scope_map = _scope_map_name(repository)
    found = cmd.run(["az", "acr", "scope-map", "show", "--name", scope_map, "--registry",
                     registry, "--output", "none"], check=False)  # fmt: skip
    if found.returncode != 0 or cmd.dry_run:
        cmd.run(["az", "acr", "scope-map", "create", "--name", scope_map, "--registry", registry,
                 "--repository", repository, "content/read",
                 "--description", f"pull {repository} only (invoke train)",
                 "--output", "none"])  # fmt: skip
    _delete_expired(registry, cmd)
    name = f"{plan.run_id}{TOKEN_SUFFIX}"
    expiry = f"{plan.deadline_time.astimezone(datetime.UTC):%Y-%m-%dT%H:%M:%SZ}"
    made = cmd.run(["az", "acr", "token", "create", "--name", name, "--registry", registry,
                    "--scope-map", scope_map, "--expiration", expiry,
                    "--query", "credentials.passwords[0].value", "--output", "tsv"],
                   dry_answer="<a pull token>", quiet=True)  # fmt: skip
    value = made.stdout.strip()
    if not value:
        raise CloudError(f"az acr token create {name} gave no password")
    return name, value


def _scope_map_name(repository: str) -> str:
    """A scope map's name (5 to 50 letters, digits and dashes) for a repository."""
    wanted = re.sub(r"[^A-Za-z0-9-]", "-", repository).strip("-")[:36]
    return f"{wanted}-{hashlib.sha256(repository.encode()).hexdigest()[:6]}{TOKEN_SUFFIX}"


def _delete_expired(registry: str, cmd: Commands) -> None:
    query = "[?ends_with(name, '%s')].{name: name, expiry: credentials.passwords[0].expiry}"
    listed = cmd.run(["az", "acr", "token", "list", "--registry", registry,
                      "--query", query % TOKEN_SUFFIX, "--output", "json"],
                     dry_answer="[]", quiet=True)  # fmt: skip
    now = datetime.datetime.now(datetime.UTC)
    for entry in json.loads(listed.stdout or "[]"):
        expiry = entry.get("expiry")
        if expiry and datetime.datetime.fromisoformat(expiry) < now:
            cmd.run(["az", "acr", "token", "delete", "--name", entry["name"], "--registry",
                     registry, "--yes", "--output", "none"], check=False)  # fmt: skip
