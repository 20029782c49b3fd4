"""A trained run on a managed endpoint: invoke deploy, endpoints, predict, undeploy.

`invoke deploy --run RUN --cloud=aws` exports the run where it has no model/ yet, builds and
pushes the serving image (`invoke build --serve`), packs the model for the service, shows the
price per hour and asks, then makes the endpoint (cloudgpu/deploy/ does the work) and waits until
it serves. An endpoint bills every hour it exists: `invoke endpoints` lists them with their
price, `invoke undeploy NAME` deletes everything deploy made.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from invoke import Context, Exit, task

from cloudgpu import PROVIDERS, settings
from cloudgpu.commands import CloudError, Commands
from cloudgpu.deploy import ENGINES, common
from cloudgpu.plan import PlanError
from cloudgpu.serving.model import folder_sha256

from .args import whole_number
from .image import push_to
from .project import IMAGE
from .remote import table
from .serving import model_folder

CLOUDS = tuple(ENGINES)  # where a model can be deployed so far


def _engine(cloud: str) -> Any:
    if cloud not in ENGINES:
        raise Exit(f"error: --cloud {cloud or '(none)'}: deploy to {', '.join(CLOUDS)}", 2)
    return ENGINES[cloud]


def confirm(deployment: common.Deployment, yes: bool) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        raise Exit("error: an endpoint costs money every hour: add --yes to make it without a "
                   "terminal", 2)  # fmt: skip
    low, _ = deployment.price
    answer = input(f"Make it, at ${low:.4f}/h until undeployed? [y/N] ").strip().lower()
    if answer not in ("y", "yes"):
        raise Exit("not deployed", 1)


@task(
    help={
        "run": "a trained run's folder (exported first where it has no model/)",
        "cloud": "where: aws (SageMaker), gcp (Vertex AI) or azure (Azure ML)",
        "instance": "the instance type (cloudgpu/endpoints.json lists them with their prices)",
        "gpu": "a GPU instance instead (aws: t4, a10g, l4; gcp, azure: t4)",
        "min": "instances at least (and at start)",
        "max": "instances at most: above --min, scaled on requests per instance",
        "image": "a serving image by digest (REF@sha256:...) instead of building and pushing one",
        "name": "the endpoint's name (default: <project>-<run folder>)",
        "sample_rate": "this share of predictions to <bucket>/<project>/endpoints/NAME/samples",
        "sample_inputs": "with their inputs (live data may be personal: off by default)",
        "dry_run": "print every cloud command instead of running it",
        "yes": "make it without asking (the price is still printed)",
    }
)
def deploy(
    c: Context,
    run: str = "",
    cloud: str = "",
    instance: str = "",
    gpu: str = "",
    min: str = "1",
    max: str = "1",
    image: str = "",
    name: str = "",
    sample_rate: str = "0",
    sample_inputs: bool = False,
    dry_run: bool = False,
    yes: bool = False,
) -> None:
    """Deploy a trained run's model on a managed endpoint: invoke deploy --run RUN --cloud=aws."""
    engine = _engine(cloud)
    if image and "@sha256:" not in image:
        raise Exit(f"error: --image {image}: give it by digest (REF@sha256:...)", 2)
    cmd = Commands(dry_run=dry_run)
    options = settings.load(cloud, IMAGE)
    if dry_run:
        options, _ = settings.with_placeholders(cloud, options)
    try:
        chosen = common.instance(cloud, instance, gpu)
        model = model_folder(c, run, dry_run)
        deployment = common.Deployment(
            name=common.check_name(name or common.default_name(options["project_name"], Path(run))),
            cloud=cloud, region=options.get("region") or options["location"], instance=chosen,
            min_instances=whole_number("--min", min, 1),
            max_instances=whole_number("--max", max, 1),
            image=image or f"{IMAGE}:serve-{chosen.flavour} of this commit, built and pushed",
            model=str(model), run=str(run), settings=options,
            sample_rate=common.check_rate(sample_rate), sample_inputs=sample_inputs,
            model_sha256=_pinned(model),
        )  # fmt: skip
        if sample_inputs and not deployment.sample_rate:
            raise PlanError("--sample-inputs: give --sample-rate too (the share kept)")
        engine.check(deployment)
        if not dry_run and engine.describe(options, deployment.name, cmd)["state"] != "gone":
            raise PlanError(f"endpoint {deployment.name} exists on {cloud}: invoke undeploy "
                            f"{deployment.name} first, or choose another --name")  # fmt: skip
    except PlanError as error:
        raise Exit(f"error: {error}", 2) from None
    except CloudError as error:  # the CLI is missing, or not logged in
        raise Exit(f"error: {error}", 1) from None
    samples = engine.samples_uri(options, deployment.name)
    for key, value in deployment.summary(engine.SERVICE, samples):
        print(f"  {key:<9}  {value}")
    if not dry_run:
        confirm(deployment, yes)
    try:
        _make(c, engine, deployment, image, cmd)
    except CloudError as error:
        raise Exit(f"error: {error}", 1) from None


def _pinned(model: Path) -> str:
    """The model folder's sha256, which the server checks before it loads the cloud's copy."""
    if not model.is_dir():  # a dry run's, not made yet
        return ""
    return folder_sha256(model)


def _make(c: Context, engine: Any, deployment: common.Deployment, image: str,
          cmd: Commands) -> None:  # fmt: skip
    """Push the image, upload the model, make the endpoint; record it."""
    options, name = deployment.settings, deployment.name
    deployment.image = image or push_to(c, deployment.cloud, deployment.instance.flavour == "cpu",
                                        cmd, serve=True)  # fmt: skip
    if engine.BUCKET:
        options["bucket"] = PROVIDERS[deployment.cloud].ensure_bucket(options, cmd)
    engine.upload(options, name, deployment.model, cmd)
    try:
        ids = engine.create(deployment, cmd)
    except BaseException:  # nothing of a deploy that did not finish stays, its archive neither
        engine.remove(options, name, ["archive"], cmd)
        raise
    if cmd.dry_run:
        return
    common.save(deployment, {**ids, "bucket": options.get("bucket", "")})
    print(f"endpoint {name} serves: invoke predict --endpoint {name} FILE.json; "
          f"invoke undeploy {name} deletes it")  # fmt: skip


def _settings_of(record: dict[str, Any]) -> dict[str, Any]:
    """The cloud settings of a recorded endpoint: today's, in the region and bucket it used."""
    options = settings.load(record["cloud"], IMAGE)
    return {**options, "region": record["region"], "bucket": record.get("bucket", "")}


def _record(name: str | None, usage: str, elsewhere: str = "") -> dict[str, Any]:
    """The record of endpoint `name`; Exit naming those made here (and `elsewhere`) if none."""
    known = ", ".join(r["name"] for r in common.all_records()) or "none yet"
    if not name:
        raise Exit(f"error: {usage} (endpoints made here: {known})", 2)
    record = common.load(name)
    if record is None:
        raise Exit(f"error: no endpoint {name!r} made here (made here: {known}){elsewhere}", 2)
    return record


@task(help={"cloud": "only this cloud's; and ask it for the project's made elsewhere"})
def endpoints(c: Context, cloud: str = "") -> None:
    """The endpoints deployed from here: where, on what, their state and price per hour.

    With --cloud, also the project's made elsewhere."""
    if cloud:
        _engine(cloud)  # a cloud deploy does not know: one line, exit 2
    rows = [["NAME", "CLOUD", "INSTANCE", "COUNT", "STATE", "USD/H", "RUN", "CREATED"]]
    total = 0.0
    records = [r for r in common.all_records() if not cloud or r["cloud"] == cloud]
    for record in records:
        options = _settings_of(record)
        try:
            state = ENGINES[record["cloud"]].describe(options, record["name"], Commands())
        except CloudError as error:
            state = {"state": f"unknown ({error})", "instances": 0}
        hourly = record["instance"]["usd_per_hour"] * state["instances"]
        total += hourly
        rows.append([record["name"], record["cloud"], record["instance"]["name"],
                     str(state["instances"]), state["state"], f"{hourly:.4f}", record["run"],
                     record["created"]])  # fmt: skip
    recorded = {r["name"] for r in records}
    elsewhere = _made_elsewhere(cloud, recorded)
    for found in elsewhere or []:
        each = common.price_of(cloud, found.instance)
        hourly = (each or 0.0) * found.instances
        total += hourly
        price = f"{hourly:.4f}" if each is not None else "?"
        rows.append([found.name, cloud, found.instance, str(found.instances), found.state,
                     price, "(made elsewhere)", "-"])  # fmt: skip
    if len(rows) == 1:
        asked = f" nor found on {cloud}" if elsewhere is not None else ""
        asked = asked if cloud else " (--cloud=aws also asks AWS)"
        print(f"no endpoints deployed from here{asked}: invoke deploy --run RUN --cloud=aws")
        return
    table(rows)
    unknown = any(row[5] == "?" for row in rows)
    more = ", and more: '?' is a price the catalog lacks" if unknown else ""
    print(f"billed now: ${total:.4f}/h{more}")


def _made_elsewhere(cloud: str, recorded: set[str]) -> list[common.Found] | None:
    """The project's endpoints on `cloud` that no record here names; None where it was not
    asked: without --cloud, or a cloud that cannot be asked (no CLI, not logged in: one line)."""
    if not cloud:
        return None
    try:
        found = ENGINES[cloud].labelled(settings.load(cloud, IMAGE), Commands())
    except CloudError as error:
        print(f"{cloud} not asked for the project's other endpoints: {error}", file=sys.stderr)
        return None
    return [f for f in found if f.name not in recorded]


@task(
    help={"endpoint": "an endpoint's name (invoke endpoints)",
          "file": 'a JSON file: an object whose "instances" is a list of inputs'},
    positional=["file"],
)  # fmt: skip
# None, not "": invoke fills a positional argument only while it is None.
def predict(c: Context, endpoint: str = "", file: str | None = None) -> None:
    """Send a JSON file of inputs to an endpoint and print its predictions.
    invoke predict --endpoint NAME FILE."""
    record = _record(endpoint, "invoke predict needs --endpoint NAME and a JSON FILE")
    if not file:
        raise Exit("error: invoke predict needs a JSON FILE after --endpoint NAME", 2)
    try:
        body = json.loads(Path(file).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise Exit(f"error: --file {file}: not a readable JSON file ({error})", 2) from None
    if not isinstance(body, dict) or not isinstance(body.get("instances"), list):
        raise Exit(f'error: --file {file}: give a JSON object whose "instances" is a list', 2)
    options = _settings_of(record)
    with tempfile.TemporaryDirectory() as scratch:
        answer = Path(scratch) / "answer.json"
        try:
            ENGINES[record["cloud"]].predict(options, endpoint, file, str(answer), Commands())
        except CloudError as error:
            raise Exit(f"error: {error}", 1) from None
        print(answer.read_text(encoding="utf-8"))


@task(
    help={
        "name": "the endpoint (invoke endpoints)",
        "cloud": "where, for one made elsewhere (invoke endpoints --cloud lists them)",
        "dry_run": "print the commands only",
    },
    positional=["name"],
)
def undeploy(c: Context, name: str | None = None, cloud: str = "", dry_run: bool = False) -> None:
    """Delete an endpoint and all deploy made for it: config, model, scaling, archive.

    invoke undeploy NAME (--cloud=C for one of the project's made elsewhere)."""
    cmd = Commands(dry_run=dry_run)
    if name and cloud and common.load(name) is None:
        engine, options = _engine(cloud), _made_elsewhere_settings(cloud, name, cmd)
        record: dict[str, Any] = {"name": name}
    else:
        record = _record(name, "invoke undeploy needs the endpoint's NAME",
                         "; --cloud=C undeploys one of the project's made elsewhere")  # fmt: skip
        engine, options = ENGINES[record["cloud"]], _settings_of(record)
    made = record["name"]
    try:
        engine.remove(options, made, engine.PARTS, cmd)
    except CloudError as error:
        raise Exit(f"error: {error}", 1) from None
    if not dry_run:
        common.forget(made)
        print(f"undeployed {made}: nothing of it is billed any more")
        if record.get("sample_rate"):
            kept = engine.samples_uri(options, made)
            print(f"its sampled predictions stay in {kept} (storage is billed per GB-month)")


def _made_elsewhere_settings(cloud: str, name: str, cmd: Commands) -> dict[str, Any]:
    """The cloud settings to undeploy `name`, an endpoint with no record here, once the cloud
    lists it as the project's (Exit naming the project's endpoints there otherwise)."""
    options = settings.load(cloud, IMAGE)
    try:
        found = [f.name for f in ENGINES[cloud].labelled(options, Commands())]
        if name not in found:
            theirs = ", ".join(found) or "none"
            raise Exit(f"error: no endpoint {name!r} of this project on {cloud} (its endpoints "
                       f"there: {theirs})", 2)  # fmt: skip
        if ENGINES[cloud].BUCKET:  # where its model's copy is
            options["bucket"] = PROVIDERS[cloud].ensure_bucket(options, cmd)
    except CloudError as error:
        raise Exit(f"error: {error}", 1) from None
    return options
