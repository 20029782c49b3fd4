"""Re-read the facts of images/matrix.json from their sources: `invoke images.refresh` (online).

The CUDA stack of a framework release is in its Linux wheel's metadata (Requires-Dist), which pip
reads from the package index without downloading the wheel. The digest of a base image is what
Docker Hub answers for its tag. Parsing is separate from fetching, so the tests check it offline.
"""

from __future__ import annotations

import datetime
import json
import re
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from template_tools.images import MATRIX, cuda_of_tag

# The wheel a Linux x86_64 image installs; TensorFlow's are manylinux_2_27, torch's 2_28.
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux2014_x86_64")
INDEX_PYTHON = "3.11"
# The extra of TensorFlow that adds its CUDA wheels.
CUDA_EXTRA = "and-cuda"
REQUIREMENT = re.compile(
    r"^(?P<name>[A-Za-z0-9_.-]+)(?:\[[^\]]*\])?\s*(?P<spec>[^;]*?)\s*(?:;\s*(?P<marker>.*))?$"
)
CUDA_PACKAGE = re.compile(r"^(nvidia-[a-z0-9-]+|cuda-toolkit)$")
REGISTRY = "https://registry-1.docker.io/v2"
AUTH = "https://auth.docker.io/token?service=registry.docker.io&scope=repository:{repo}:pull"
MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
    ]
)


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def cuda_requirements(requires_dist: Iterable[str]) -> dict[str, str]:
    """CUDA-library requirements of a Linux wheel: normalised name -> exact version.

    Exact pins (torch: `nvidia-cudnn-cu13==9.20.0.48`) are taken as they are; ranges of the
    `and-cuda` extra (TensorFlow: `nvidia-cudnn-cu12>=9.3.0.75,<10.0`) give their lower bound,
    the release the framework was built against.
    """
    found = {}
    for line in requires_dist:
        match = REQUIREMENT.match(line.strip())
        if not match or not CUDA_PACKAGE.match(_normalise(match["name"])):
            continue
        marker = match["marker"] or ""
        if "extra" in marker and CUDA_EXTRA not in marker:
            continue
        if "Linux" not in marker and CUDA_EXTRA not in marker:
            continue
        pinned = re.search(r"(?:==|>=)\s*([0-9][0-9A-Za-z.]*)", match["spec"])
        if pinned:
            found[_normalise(match["name"])] = pinned[1]
    return found


def stack_of(pins: dict[str, str]) -> dict[str, Any]:
    """CUDA major.minor, cuDNN version and the pin list from cuda_requirements()."""
    if "cuda-toolkit" in pins:
        cuda = ".".join(pins["cuda-toolkit"].split(".")[:2])
    else:
        runtime = next(v for k, v in pins.items() if k.startswith("nvidia-cuda-runtime"))
        cuda = ".".join(runtime.split(".")[:2])
    cudnn = next(v for k, v in pins.items() if k.startswith("nvidia-cudnn"))
    return {
        "cuda": cuda,
        "cudnn": cudnn,
        "cuda_wheels": [f"{name}=={version}" for name, version in sorted(pins.items())],
    }


def wheel_metadata(requirement: str) -> dict[str, Any]:
    """The metadata pip reports for the Linux x86_64 wheel of `requirement` (online)."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        command = [
            *(sys.executable, "-m", "pip", "--isolated", "install", "--dry-run", "--quiet"),
            *("--no-deps", "--ignore-installed", "--only-binary=:all:", "--target", scratch),
            *("--python-version", INDEX_PYTHON, "--report", str(report)),
            *(arg for platform in PLATFORMS for arg in ("--platform", platform)),
            requirement,
        ]
        subprocess.run(command, check=True, capture_output=True, text=True, timeout=300)
        return json.loads(report.read_text(encoding="utf-8"))["install"][0]["metadata"]


def amd64_digest(tag: str) -> str:
    """The linux/amd64 manifest digest Docker Hub serves for `tag` (online)."""
    repository, reference = tag.split(":", 1)
    with urllib.request.urlopen(AUTH.format(repo=repository), timeout=30) as answer:
        token = json.load(answer)["token"]
    request = urllib.request.Request(
        f"{REGISTRY}/{repository}/manifests/{reference}",
        headers={"Authorization": f"Bearer {token}", "Accept": MANIFEST_TYPES},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        index = json.load(answer)
    return next(
        entry["digest"]
        for entry in index["manifests"]
        if entry["platform"]["os"] == "linux" and entry["platform"]["architecture"] == "amd64"
    )


def refresh_row(row: dict[str, Any], today: str, report: list[str]) -> dict[str, Any]:
    """`row` with its CUDA facts re-read from the index and its digest from the registry.

    What cannot be read (offline, a registry error) keeps its old value and goes into `report`;
    a CUDA release the base tag no longer matches is reported for a person to choose a new tag.
    """
    updated = json.loads(json.dumps(row))
    sources = updated["sources"]
    package = "tensorflow" if row["framework"] == "tensorflow" else row["package"]
    try:
        metadata = wheel_metadata(f"{package}=={row['version']}")
    except (subprocess.SubprocessError, OSError, KeyError, IndexError) as error:
        report.append(f"{row['id']}: wheel metadata not read ({error}); CUDA facts kept")
    else:
        updated |= stack_of(cuda_requirements(metadata.get("requires_dist", [])))
        for fact in ("cuda", "cudnn", "cuda_wheels"):
            sources[fact]["date"] = today
        if cuda_of_tag(updated["base_image"]) != updated["cuda"]:
            report.append(
                f"{row['id']}: the wheels now need CUDA {updated['cuda']} but the base is "
                f"{updated['base_image']}: choose a matching tag, then refresh again"
            )
    try:
        digest = amd64_digest(updated["base_image"])
    except (OSError, KeyError, StopIteration, ValueError) as error:
        report.append(f"{row['id']}: digest of {updated['base_image']} not read ({error}); kept")
        return updated
    if digest != updated.get("digest"):
        report.append(f"{row['id']}: digest {updated.get('digest')} -> {digest}")
    updated["digest"] = digest
    updated.pop("digest_missing", None)
    sources["digest"] = {
        "source": f"Docker Hub registry: linux/amd64 manifest of {updated['base_image']}",
        "date": today,
    }
    return updated


def refresh(path: Path = MATRIX) -> list[str]:
    """Refresh every row of the matrix at `path` in place; return what changed or failed."""
    data = json.loads(path.read_text(encoding="utf-8"))
    today = datetime.date.today().isoformat()
    report: list[str] = []
    data["rows"] = [refresh_row(row, today, report) for row in data["rows"]]
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return report
