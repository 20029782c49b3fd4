"""Training runs on cloud GPUs, started from this machine: the standard library (and PyYAML, for
the services' job files), never copied into the image (.dockerignore), never imported by src/.

    catalog.json catalog.py   the GPUs each cloud offers, their prices, VM images and drivers
    cloud.toml settings.py    where runs go (project, region, bucket, identity) beside the CLIs'
    plan.py                   one run, the same for every cloud: machine, image@digest, caps
    aws.py gcp.py azure.py    a plan as the cloud's own CLI commands; local.py, this machine's
    startup.sh startup.py     the one script every run starts with, and its values
    runs.py commands.py       runs this machine started; running the CLIs, and their errors
    jobs.py sagemaker.py vertex.py azureml.py skypilot.py
                              several nodes: a plan as a job of a training service
    exporters.json .py tunnels.py
                              --monitor: the exporters a VM runs; invoke monitor --run's tunnels
"""

from types import ModuleType

from . import aws, azure, gcp, local

PROVIDERS: dict[str, ModuleType] = {"aws": aws, "gcp": gcp, "azure": azure, "local": local}
CLIS = {"aws": "aws", "gcp": "gcloud", "azure": "az", "local": "docker"}
