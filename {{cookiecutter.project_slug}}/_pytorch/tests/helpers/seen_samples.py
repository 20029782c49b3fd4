"""Train as `python -m PACKAGE.train` does, and write the sample numbers this rank trained on,
epoch by epoch, to $SEEN_OUT/<rank>.json. For test_ddp.py, on shards whose one feature is each
sample's number (helpers/datasets.py):

    torchrun --nproc-per-node=2 tests/helpers/seen_samples.py data=shards data.source=...
"""

from __future__ import annotations

import json
import os
import runpy
from pathlib import Path

from {{ cookiecutter.package_name }}.training.loop import Trainer

PACKAGE = "{{ cookiecutter.package_name }}"


def main() -> None:
    seen: dict[int, list[int]] = {}
    real_step = Trainer._train_step

    def recording_step(self: Trainer, x, y, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.setdefault(self.progress.epoch, []).extend(int(v) for v in x[:, 0].tolist())
        return real_step(self, x, y, *args, **kwargs)

    Trainer._train_step = recording_step  # type: ignore[method-assign]
    runpy.run_module(f"{PACKAGE}.train", run_name="__main__")
    out = Path(os.environ["SEEN_OUT"]) / f"{os.environ['RANK']}.json"
    out.write_text(json.dumps(seen), encoding="utf-8")


if __name__ == "__main__":
    main()
