"""The project's tasks: `invoke --list`, `invoke <task> --help`.

Hydra overrides go after `--`: `invoke train -- model=cnn trainer.max_epochs=5`.
Tasks import only the standard library, so `invoke --list` stays instant; the heavy imports
happen in the processes they start.

    run.py      setup, train, evaluate, crossval, sweep
    dev.py      test, lint, format
    image.py    the training image: image.build, .push, .run, .shell, .lock
    framework.py   what differs between frameworks (install, multi-device launch, index)
"""

from invoke import Collection

from . import dev, image, run
from .args import check_command_line

namespace = Collection()
for module in (run, dev):
    for task in Collection.from_module(module).tasks.values():
        namespace.add_task(task)
namespace.add_collection(Collection.from_module(image, name="image"))
# The image's everyday tasks keep their short names too: invoke build, invoke push, ...
for name in ("build", "push", "run", "shell", "lock"):
    namespace.add_task(getattr(image, name), name=name)

check_command_line(namespace)
