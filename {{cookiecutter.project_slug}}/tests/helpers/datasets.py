"""Small datasets for the shard tests, whose samples say who they are."""

from __future__ import annotations

from pathlib import Path

import numpy as np

SPLIT = {"val_fraction": 0.15, "test_fraction": 0.15, "split_seed": 1234}


def numbered_shards(folder: Path, samples: int = 203, per_shard: int = 7) -> Path:
    """Prepared shards of `samples` samples whose one feature is their number (labels 0, 1, 2),
    `per_shard` to a shard."""
    from {{ cookiecutter.package_name }}.data.shards.writer import prepare

    source = folder / "numbered.npz"
    x = np.arange(samples, dtype=np.float32).reshape(samples, 1)
    np.savez(source, x=x, y=np.arange(samples) % 3)
    dest = folder / "numbered"
    prepare(str(source), str(dest), shard_mb=per_shard * 4 / 1e6, **SPLIT)  # 4 bytes each
    return dest


def numbers(batches: object) -> list[int]:
    """The sample numbers in a sequence of (x, y) batches, in order."""
    return [int(v) for x, _ in batches for v in np.asarray(x)[:, 0]]  # type: ignore[attr-defined]
