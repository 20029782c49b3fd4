"""Running the clouds' own CLIs: every command printed in a dry run, run for real otherwise, and
their failures turned into one or two lines that say what to do.

Nothing here knows a cloud's API; aws.py, gcp.py and azure.py build the command lines.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

INSTALL = {
    "aws": "pip install awscli (or the AWS CLI v2: https://aws.amazon.com/cli/)",
    "gcloud": "install the Google Cloud CLI: https://cloud.google.com/sdk/docs/install",
    "az": "pip install azure-cli (or https://learn.microsoft.com/cli/azure/install-azure-cli)",
    "docker": "install Docker (https://docs.docker.com/engine/install/)",
    "sky": "pip install 'skypilot[aws,gcp,azure]' and run sky check (https://docs.skypilot.co)",
}
LOGIN = {
    "aws": "aws configure (or aws sso login)",
    "gcloud": "gcloud auth login && gcloud config set project PROJECT",
    "az": "az login",
}
# (pattern in a CLI's error output, what it means and what to try), in the clouds' own words.
FAILURES = [
    (
        r"Unable to locate credentials|ExpiredToken|Token has expired|InvalidClientTokenId",
        "not logged in to AWS: {login}",
    ),
    (
        r"You do not currently have an active account selected|Reauthentication required",
        "not logged in to Google Cloud: {login}",
    ),
    (r"Please run 'az login'|AADSTS700082", "not logged in to Azure: {login}"),
    (
        r"'ml' is misspelled or not recognized",
        "the az CLI has no ml extension (Azure ML jobs): az extension add -n ml",
    ),
    (
        r"VcpuLimitExceeded|MaxSpotInstanceCountExceeded|QUOTA_EXCEEDED|QuotaExceeded|"
        r"ResourceLimitExceeded|RESOURCE_EXHAUSTED|"
        r"exceeding approved .* quota",
        "quota: the cloud says {quoted}; raise the quota named there (the cloud console's "
        "Quotas page) or choose a smaller GPU",
    ),
    (
        r"InsufficientInstanceCapacity|ZONE_RESOURCE_POOL_EXHAUSTED|SkuNotAvailable|"
        r"AllocationFailed|ZonalAllocationFailed|no Spot capacity|"
        r"does not have enough resources available|do not have sufficient .* capacity",
        "capacity: the cloud says {quoted}",
    ),
]


class CloudError(RuntimeError):
    """A cloud command failed; the message says why in a line or two."""


class Capacity(CloudError):
    """The cloud has no capacity for the machine here now: another zone may."""


@dataclass
class Commands:
    """Runs command lines, or in a dry run prints them (with `secrets` masked) and runs nothing.

    `reads` are commands that only read (a describe, a list): a dry run prints them too, and
    answers them with `dry_answer` so the plan can go on.
    """

    dry_run: bool = False
    verbose: bool = True  # say each command on stderr before running it
    secrets: list[str] = field(default_factory=list)
    printed: list[str] = field(default_factory=list)

    def show(self, argv: Sequence[str]) -> str:
        line = shlex.join(argv)
        for secret in self.secrets:
            if secret:
                line = line.replace(secret, "****")
        return line

    def run(
        self,
        argv: Sequence[str],
        *,
        input: str | None = None,
        check: bool = True,
        dry_answer: str = "",
        quiet: bool = False,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run `argv`, capturing its output; CloudError with the cloud's reason when it fails.
        `env`: variables added to the command's environment (a secret it reads by name)."""
        if self.dry_run:
            self.printed.append(self.show(argv))
            print(f"$ {self.printed[-1]}")
            return subprocess.CompletedProcess(list(argv), 0, dry_answer, "")
        program = argv[0]
        if shutil.which(program) is None:
            raise CloudError(f"{program} not found: {INSTALL.get(program, f'install {program}')}")
        if self.verbose and not quiet:
            print(f"$ {self.show(argv)}", file=sys.stderr)
        done = subprocess.run(list(argv), input=input, capture_output=True, text=True,
                              env={**os.environ, **env} if env else None)  # fmt: skip
        if check and done.returncode != 0:
            raise explain(program, done.stderr or done.stdout, self.show(argv))
        return done


def explain(program: str, output: str, command: str) -> CloudError:
    """The CloudError for a failed command: its meaning where known, else its own last lines."""
    lines = [line.strip() for line in output.strip().splitlines() if line.strip()]
    quoted = next((line for line in lines if re.search("|".join(p for p, _ in FAILURES), line)), "")
    for pattern, meaning in FAILURES:
        if re.search(pattern, output):
            text = meaning.format(login=LOGIN.get(program, ""), quoted=quoted or lines[-1])
            error = Capacity if text.startswith("capacity") else CloudError
            return error(text)
    tail = "; ".join(lines[-2:]) or "no output"
    return CloudError(f"{command.split()[0]} failed: {tail}")
