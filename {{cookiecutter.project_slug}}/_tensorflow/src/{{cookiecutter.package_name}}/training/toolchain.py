"""What XLA (trainer.compile: Keras' jit_compile) needs from the machine, checked before a run
makes anything (config/resources.py). On the CPU nothing: XLA compiles with the LLVM inside
TensorFlow, no compiler or header of the machine's. On a GPU it assembles its kernels with CUDA's
ptxas and links NVIDIA's libdevice, which tensorflow[and-cuda] brings as the nvidia-cuda-nvcc-cu12
wheel (requirements/gpu.txt); without them the first compiled step ends the run in a traceback.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path


def nvcc_folder() -> Path | None:
    """The nvidia-cuda-nvcc wheel's folder (site-packages/nvidia/cuda_nvcc), where installed."""
    try:
        spec = importlib.util.find_spec("nvidia.cuda_nvcc")
    except ModuleNotFoundError:  # no nvidia-* wheel at all
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def compile_problem(on_gpu: bool) -> str | None:
    """Why XLA cannot compile here, in one line ending in what to do; None when it can."""
    if not on_gpu:
        return None
    folder = nvcc_folder()
    if folder and (folder / "bin/ptxas").is_file() and any(folder.glob("nvvm/libdevice/*.bc")):
        return None
    if shutil.which("ptxas") and "--xla_gpu_cuda_data_dir" in os.environ.get("XLA_FLAGS", ""):
        return None  # a CUDA toolkit of the machine's, named to XLA
    return (
        "XLA on a GPU needs CUDA's ptxas and libdevice (the nvidia-cuda-nvcc-cu12 wheel of "
        "requirements/gpu.txt), and neither is installed here; install the GPU lock "
        "(pip install -r requirements/gpu.txt) or train uncompiled (trainer.compile=false)"
    )
