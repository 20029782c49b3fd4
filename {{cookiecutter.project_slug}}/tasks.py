"""The project's tasks: `invoke --list`, `invoke <task> --help`; Hydra overrides go after `--`
(`invoke train -- model=cnn trainer.max_epochs=5`).

They are the cloudgpu package's (pinned in pyproject.toml, which also holds what they know of
this project: [tool.cloudgpu]). A task of your own goes here:

    @task
    def hello(c):
        c.run("echo hello")

    namespace.add_task(hello)
"""

import os
from pathlib import Path

# The package acts on this project, wherever invoke started.
os.environ["CLOUDGPU_PROJECT"] = str(Path(__file__).resolve().parent)

from cloudgpu.tasks.namespace import namespace

__all__ = ["namespace"]
