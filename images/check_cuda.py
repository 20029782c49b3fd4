"""The base image's last build step: stop if the framework was built for another CUDA than the
matrix row's. Run inside the image: `python check_cuda.py pytorch 13.0`."""

from __future__ import annotations

import os
import sys


def built_cuda(framework: str) -> str | None:
    """The CUDA release the installed framework was built for; None for a CPU-only build."""
    if framework == "pytorch":
        import torch

        return torch.version.cuda  # "13.0"
    if framework == "tensorflow":
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # no start-up log wall in the build
        import tensorflow as tf

        return tf.sysconfig.get_build_info().get("cuda_version")  # "12.5.1"
    raise SystemExit(f"unknown framework {framework!r}: pytorch or tensorflow")


def same_release(built: str | None, cuda: str) -> bool:
    """True when `built` (13.0, or 12.5.1 with the patch) has the matrix's major.minor `cuda`."""
    return built is not None and built.split(".")[:2] == cuda.split(".")


def main(framework: str, cuda: str) -> None:
    built = built_cuda(framework)
    if not same_release(built, cuda):
        raise SystemExit(
            f"{framework} is built for CUDA {built or 'none (a CPU build)'}, the matrix says {cuda}"
        )
    print(f"{framework}: built for CUDA {built}, as the matrix says")


if __name__ == "__main__":
    main(*sys.argv[1:])
