"""cloudgpu: training runs on cloud GPUs and CPU machines, started from the machine a project
lives on, and the model server its endpoints run. The standard library (and PyYAML, for the
services' job files) on the user's machine. A project's images hold it (in_image.py) for
serving/ alone (numpy, prometheus-client and uvicorn: the extra "serve"), which the project's
serve.py and export.py import. A project pins it by exact version and acts through its
invoke tasks; the project itself is found as project.py says.

    catalog.json catalog.py   the GPUs each cloud offers, their prices, VM images and drivers
    machines.json machines.py the CPU machines, their prices and CPUs; --cpus, --machine lookups
    project.py                the project acted on: its cloud.toml, image.json, outputs/cloud/
    settings.py               where runs go (cloud.toml: project, region, bucket, identity)
                              beside the CLIs' own settings
    plan.py                   one run, the same for every cloud: machine, image@digest, caps
    summary.py                a plan in words: the rows shown before anything is paid for
    runs.py commands.py       runs this machine started; running the CLIs, and their errors
    providers/                each cloud through its own CLI (aws, gcp, azure; local: this
                              machine's Docker): registry, bucket, identity, a VM
    vm/                       what a VM runs: startup.sh (and startup.py, its values), the
                              exporters of --monitor, and invoke monitor --run's tunnels to them
    jobs/                     several nodes: a plan as a job of SageMaker, Vertex AI, Azure ML or
                              SkyPilot (engines.py picks one; common.py is what they share)
    endpoints.json deploy/    a trained model on a managed endpoint (invoke deploy): the
                              instances and their prices; a SageMaker real-time endpoint
    serving/                  the model server of the serving image: every endpoint's routes,
                              batching, metrics, drift, samples (model.py: the project's part)
    in_image.py               this package's files as `invoke build` stages them for an image
    pins.py                   how a project's pyproject.toml pins a release
"""

from types import ModuleType

from .providers import aws, azure, gcp, local

__version__ = "0.1.0"  # the release (pyproject.toml reads it); CHANGELOG.md: what each changed

PROVIDERS: dict[str, ModuleType] = {"aws": aws, "gcp": gcp, "azure": azure, "local": local}
CLIS = {"aws": "aws", "gcp": "gcloud", "azure": "az", "local": "docker"}
