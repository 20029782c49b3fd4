"""Every task, under the names `invoke --list` shows; a project's tasks.py declares them."""

from invoke import Collection

from . import (
    data,
    dev,
    endpoints,
    estimate,
    gpu_check,
    image,
    monitor,
    offers,
    remote,
    run,
    serving,
    upgrade,
)
from .args import check_command_line

namespace = Collection()
# invoke build, invoke status, ...
for module in (run, serving, dev, monitor, image, remote, offers, estimate, gpu_check, endpoints,
               upgrade):  # fmt: skip
    for task in Collection.from_module(module).tasks.values():
        namespace.add_task(task)
namespace.add_collection(Collection.from_module(data, name="data"))  # invoke data.prepare

check_command_line(namespace)
