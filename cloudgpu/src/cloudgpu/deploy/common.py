"""Managed endpoints (`invoke deploy`): what each cloud may serve a model on and its price
(endpoints.json), one deployment's facts, and what this machine remembers of the endpoints it
made: outputs/cloud/endpoints/<name>.json.

`invoke endpoints` lists the endpoints recorded here and asks each cloud for its state. Every
resource deploy makes carries the project's labels (invoke-project, invoke-endpoint=<name>):
`invoke endpoints --cloud=C` also asks cloud C for the project's endpoints made elsewhere (a
teammate's, or this machine's before its records were lost), each engine's `labelled`.
"""

from __future__ import annotations

import datetime
import json
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..commands import CloudError, Commands
from ..plan import LABEL_PREFIX, PlanError, label_value
from ..runs import RUNS

CATALOG = Path(__file__).parents[1] / "endpoints.json"
RECORDS = RUNS / "endpoints"
# SageMaker's EndpointName (botocore's model); Vertex AI and Azure ML names fit inside it.
NAME = re.compile(r"^[a-z](-?[a-z0-9])*$")
NAME_LENGTH = (3, 32)  # Azure ML's online endpoints: 3-32 characters


def catalog() -> dict[str, Any]:
    return json.loads(CATALOG.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Instance:
    """An instance type an endpoint runs on (a machine, and an accelerator where the service
    names them apart), and its price per hour (`price_note`: where that is only a bound)."""

    name: str
    usd_per_hour: float
    gpu: str = ""
    machine: str = ""
    accelerator: str = ""
    price_note: str = ""

    @property
    def flavour(self) -> str:
        return "gpu" if self.gpu else "cpu"


def instance(cloud: str, name: str = "", gpu: str = "") -> Instance:
    """The instance --instance NAME or --gpu GPU asks for (the cloud's default CPU instance
    when neither); PlanError naming what is offered otherwise."""
    offered = catalog()[cloud]
    instances = offered["instances"]
    if name and gpu:
        raise PlanError(f"--instance {name} and --gpu {gpu}: give one of them")
    if gpu:
        if gpu not in offered["gpus"]:
            raise PlanError(f"--gpu {gpu}: {offered['service']} GPUs here: "
                            f"{', '.join(sorted(offered['gpus']))}")  # fmt: skip
        name = offered["gpus"][gpu]
    name = name or offered["default"]
    if name not in instances:
        raise PlanError(f"--instance {name}: not an instance of {offered['service']} with a known "
                        f"price; choose one of {', '.join(instances)}")  # fmt: skip
    row = instances[name]
    return Instance(name, float(row["usd_per_hour"]), row.get("gpu", ""),
                    row.get("machine", name), row.get("accelerator", ""),
                    offered.get("price_note", ""))  # fmt: skip


def server_env(deployment: Deployment) -> dict[str, str]:
    """The variables every engine gives the server: the pinned model digest (a model replaced
    in the bucket after deploy is not loaded; serving/model.py checks it)."""
    return {"MODEL_SHA256": deployment.model_sha256} if deployment.model_sha256 else {}


def endpoints_prefix(settings: dict[str, Any]) -> str:
    """Where the project's endpoints keep their files: <bucket>/<project>/endpoints/ (the
    bucket named as such until ensure_bucket has found it)."""
    bucket = (settings.get("bucket") or "<the project's bucket>").rstrip("/")
    return f"{bucket}/{settings['project_name']}/endpoints/"


def samples_uri(settings: dict[str, Any], name: str) -> str:
    """Where endpoint `name`'s sampled predictions go: <bucket>/<project>/endpoints/<name>/samples
    (Azure ML names the same place by its blob URL)."""
    return f"{endpoints_prefix(settings)}{name}/samples"


@dataclass(frozen=True)
class Found:
    """An endpoint a cloud lists with the project's labels."""

    name: str
    instance: str  # the catalog's name for it where the catalog has it, else the cloud's type
    instances: int
    state: str


def ours(labels: dict[str, str], settings: dict[str, Any]) -> bool:
    """Whether a resource's labels (tags) are those deploy gives the project's endpoints."""
    project = label_value(settings.get("project_name", ""))
    return labels.get(f"{LABEL_PREFIX}-project") == project and f"{LABEL_PREFIX}-endpoint" in labels


def price_of(cloud: str, name: str) -> float | None:
    """USD/hour of one instance `name` of the cloud's endpoints; None where the catalog has none."""
    row = catalog()[cloud]["instances"].get(name)
    return float(row["usd_per_hour"]) if row else None


def catalog_name(cloud: str, machine: str, accelerator: str = "") -> str:
    """The catalog's name of the instance with that machine (and accelerator: NVIDIA_TESLA_T4
    as Vertex AI answers it, nvidia-tesla-t4 as gcloud takes it); the machine's own name where
    the catalog has none."""

    def plain(text: str) -> str:
        return text.lower().replace("_", "-")

    for name, row in catalog()[cloud]["instances"].items():
        if row.get("machine", name) == machine and plain(row.get("accelerator", "")) == plain(
            accelerator
        ):
            return name
    return machine


def check_rate(rate: str) -> float:
    """--sample-rate as a fraction from 0 to 1; PlanError otherwise."""
    try:
        value = float(rate)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:
        raise PlanError(f"--sample-rate {rate}: a fraction of the predictions, from 0 (none) to 1")
    return value


def check_name(name: str) -> str:
    """`name` if every cloud takes it as an endpoint's name; PlanError saying the rule if not."""
    shortest, longest = NAME_LENGTH
    if not NAME.fullmatch(name) or not shortest <= len(name) <= longest:
        raise PlanError(
            f"--name {name}: an endpoint's name is {shortest}-{longest} lowercase letters, "
            "digits and single hyphens, starting with a letter and not ending with a hyphen"
        )
    return name


def default_name(project: str, run: Path) -> str:
    """<project>-<run folder>, made to fit check_name (cut, and no double or end hyphens)."""
    words = re.sub(r"[^a-z0-9]+", "-", f"{project}-{run.resolve().name}".lower())
    name = re.sub(r"^[^a-z]+", "", words)[: NAME_LENGTH[1]].strip("-")
    return name if len(name) >= NAME_LENGTH[0] else "model"


@dataclass
class Deployment:
    """One endpoint to make: what it serves, where, on what, and what it costs."""

    name: str
    cloud: str
    region: str
    instance: Instance
    min_instances: int
    max_instances: int
    image: str
    model: str  # the model folder here
    run: str
    settings: dict[str, Any] = field(repr=False, default_factory=dict)
    sample_rate: float = 0.0  # the share of predictions written to the bucket
    sample_inputs: bool = False  # their inputs too
    model_sha256: str = ""  # the model folder's, pinned: the server loads no other (server_env)
    created: str = field(
        default_factory=lambda: datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    )

    def __post_init__(self) -> None:
        if self.min_instances < 1 or self.max_instances < self.min_instances:
            raise PlanError(f"--min {self.min_instances} --max {self.max_instances}: at least "
                            "one instance, and --max no lower than --min")  # fmt: skip

    @property
    def price(self) -> tuple[float, float]:
        """USD/hour at --min instances and at --max."""
        each = self.instance.usd_per_hour
        return round(each * self.min_instances, 4), round(each * self.max_instances, 4)

    @property
    def labels(self) -> dict[str, str]:
        return {
            f"{LABEL_PREFIX}-managed": "true",
            f"{LABEL_PREFIX}-endpoint": self.name,
            f"{LABEL_PREFIX}-project": label_value(self.settings.get("project_name", "")),
        }

    def summary(self, service: str, samples: str = "") -> list[tuple[str, str]]:
        """What deploy prints before it asks; `samples`: where the sampled predictions go."""
        low, high = self.price
        count = f"{self.min_instances}" + (
            f" to {self.max_instances} (scaled on requests per instance)"
            if self.max_instances > self.min_instances
            else ""
        )
        cost = f"${low:.4f}/h" + (f", up to ${high:.4f}/h" if high > low else "")
        note = f" ({self.instance.price_note})" if self.instance.price_note else ""
        return [
            ("endpoint", f"{self.name} ({service}, {self.cloud} {self.region})"),
            ("instance", f"{self.instance.name} at ${self.instance.usd_per_hour:.4f}/h each"),
            ("instances", count),
            (
                "price",
                f"{cost}{note}, billed every hour it exists, until `invoke undeploy {self.name}`",
            ),
            ("model", f"{self.model} (from run {self.run})"),
            ("image", self.image),
            *([("samples", self.samples_line(samples))] if self.sample_rate else []),
        ]

    def samples_line(self, where: str) -> str:
        kept = "predictions and their inputs" if self.sample_inputs else "predictions (no inputs)"
        return f"{self.sample_rate * 100:g}% of the {kept}, as JSON lines to {where}"


def delete(argv: list[str], gone: str, what: str, cmd: Commands) -> None:
    """Run a cloud's delete command; output matching the pattern `gone` (the cloud's words for
    "no such thing") is no error: deleting what is already gone succeeds."""
    done = cmd.run(argv, check=False)
    if done.returncode != 0 and not re.search(gone, done.stderr, re.IGNORECASE):
        raise CloudError(f"could not delete {what}: {done.stderr.strip().splitlines()[-1]}")


def save(deployment: Deployment, ids: dict[str, Any]) -> Path:
    record = {**asdict(deployment), **ids}
    record.pop("settings")
    path = RECORDS / f"{deployment.name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return path


def load(name: str) -> dict[str, Any] | None:
    path = RECORDS / f"{name}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def all_records() -> list[dict[str, Any]]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(RECORDS.glob("*.json"))]


def forget(name: str) -> None:
    (RECORDS / f"{name}.json").unlink(missing_ok=True)
    shutil.rmtree(RECORDS / name, ignore_errors=True)  # what was sent, where a service has files
