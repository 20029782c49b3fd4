"""parliament and cloudsplaining, the IAM linters, on the policies the project writes. They live
beside the clouds' SDKs in the venv CLOUD_SDK_PYTHON names (pip install parliament cloudsplaining);
the tests that use them are marked needs("iam-linters")."""

from __future__ import annotations

import functools
import json
import subprocess
from pathlib import Path
from typing import Any

from .sdks import PYTHON

# One JSON line per finding: {"linter", "issue", "severity" (lower case), "actions"}.
LINT = """
import json, sys
from pathlib import Path
import parliament
from cloudsplaining.command.scan_policy_file import scan_policy

community = Path(parliament.__file__).parent / "community_auditors" / "config_override.yaml"
parliament.override_config(str(community))
text = open(sys.argv[1]).read()
for finding in parliament.analyze_policy_string(text, include_community_auditors=True).findings:
    parliament.enhance_finding(finding)
    actions = (finding.location or {}).get("actions", [])
    print(json.dumps({"linter": "parliament", "issue": finding.issue,
                      "severity": finding.severity.lower(), "actions": sorted(actions)}))
for issue, result in scan_policy(json.loads(text)).items():
    if isinstance(result, dict) and result.get("findings"):
        print(json.dumps({"linter": "cloudsplaining", "issue": issue,
                          "severity": result["severity"].lower(),
                          "actions": sorted(a.lower() for a in result["findings"])}))
"""


@functools.cache
def available() -> bool:
    """Whether CLOUD_SDK_PYTHON has both linters."""
    if not PYTHON:
        return False
    done = subprocess.run([PYTHON, "-c", "import parliament, cloudsplaining"], capture_output=True)
    return done.returncode == 0


def lint(policy: dict[str, Any], folder: Path) -> list[dict[str, Any]]:
    """What both linters find in `policy` (written to `folder` for them)."""
    path = folder / "policy.json"
    path.write_text(json.dumps(policy, indent=2))
    done = subprocess.run(
        [PYTHON, "-c", LINT, str(path)], capture_output=True, text=True, timeout=120, check=True
    )
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
