"""Train as `python -m PACKAGE.train` does, counting how often Keras copied a step's logs (its
loss and metrics, tensors) to the host: each copy waits for the step to finish. Writes the count
to $HOST_READS. For test_loop.py:

    python tests/helpers/host_reads.py debug=short ...
"""

from __future__ import annotations

import os
import runpy
from pathlib import Path
from typing import Any

from keras.src import backend
from keras.src.utils import python_utils  # Keras's callback list converts logs through here

PACKAGE = "{{ cookiecutter.package_name }}"
reads = 0
convert = python_utils.pythonify_logs


def counted(logs: Any) -> Any:
    global reads
    if logs and any(backend.is_tensor(value) for value in logs.values()):
        reads += 1
    return convert(logs)


if __name__ == "__main__":
    python_utils.pythonify_logs = counted
    try:
        runpy.run_module(f"{PACKAGE}.train", run_name="__main__")
    finally:
        Path(os.environ["HOST_READS"]).write_text(str(reads), encoding="utf-8")
