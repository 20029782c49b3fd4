"""The names and answers this project was made with, for the tasks."""

PACKAGE = "{{ cookiecutter.package_name }}"  # python -m PACKAGE.train
IMAGE = "{{ cookiecutter.project_slug }}"  # the image's name
PYTHON_VERSION = "{{ cookiecutter.python_version }}"  # the images' Python, and the locks'
DEFAULT_CLOUD = "{{ cookiecutter.default_cloud }}"  # invoke train --cloud ... without a --cloud
DEFAULT_GPU = "{{ cookiecutter.default_gpu }}"  # and without a --gpu
DEFAULT_LOGGER = "{{ "wandb" if cookiecutter.tracking == "wandb" else "jsonl" }}"  # configs/train.yaml's
# The keys a logger reads from the environment: a cloud run has them only through [secrets].
LOGGER_KEYS: dict[str, tuple[str, ...]] = {{ '{"wandb": ("WANDB_API_KEY",)}' if cookiecutter.tracking == "wandb" else "{}" }}
