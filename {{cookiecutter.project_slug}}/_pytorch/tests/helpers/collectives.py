"""Train as `python -m PACKAGE.train` does, under torch's profiler, and write how many collective
operations of each kind this rank ran to $COLLECTIVES_OUT/<rank>.json. For test_ddp.py:

    torchrun --nproc-per-node=2 tests/helpers/collectives.py debug=short ...
"""

from __future__ import annotations

import json
import os
import runpy
from collections import Counter
from pathlib import Path

from torch.profiler import ProfilerActivity, profile

PACKAGE = "{{ cookiecutter.package_name }}"


def main() -> None:
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        # As `python -m`: Hydra finds configs/ from the module it runs as __main__.
        runpy.run_module(f"{PACKAGE}.train", run_name="__main__")
    # gloo names each collective it runs, the gradient all-reduces of DDP's C++ reducer too.
    counts = Counter(
        event.name.removeprefix("gloo:")
        for event in profiler.events()
        if event.name.startswith("gloo:")
    )
    out = Path(os.environ["COLLECTIVES_OUT"]) / f"{os.environ['RANK']}.json"
    out.write_text(json.dumps(counts), encoding="utf-8")


if __name__ == "__main__":
    main()
