"""Where and how this process runs: devices, the tf.distribute strategy, seeds and determinism.

One process trains on one device, or on several devices of this machine with MirroredStrategy
(`invoke train --gpus N` sets NUM_REPLICAS), or as one worker of a multi-worker job described by
TF_CONFIG (MultiWorkerMirroredStrategy).
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from ..config.schema import Device, Precision

log = logging.getLogger(__name__)

# Replicas of MirroredStrategy in this process: the first N GPUs, or N logical CPU devices.
THREADS_ENV = "TF_NUM_INTRAOP_THREADS"
REPLICAS_ENV = "NUM_REPLICAS"
# The longest path `broadcast` sends, in bytes.
MAX_BROADCAST_BYTES = 4096


@dataclass(frozen=True)
class Runtime:
    """This process's place in the job: its strategy and, with several workers, its index."""

    strategy: tf.distribute.Strategy
    device: str  # "cpu" or "gpu"
    rank: int = 0
    world_size: int = 1  # worker processes

    @property
    def is_main(self) -> bool:
        """Only the main process logs, writes checkpoints and writes outputs."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """More than one worker process."""
        return self.world_size > 1

    @property
    def replicas(self) -> int:
        """Devices that train in sync, over all workers."""
        return self.strategy.num_replicas_in_sync


def gpu_count() -> int:
    """The GPUs TensorFlow sees (CUDA_VISIBLE_DEVICES applied)."""
    return len(tf.config.list_physical_devices("GPU"))


def share_gpus() -> None:
    """Memory on each GPU taken as needed, not all of it at the start (TensorFlow's default),
    so that a second process (an evaluation, a notebook) can use the same GPU."""
    for gpu in tf.config.list_physical_devices("GPU"):
        tf.config.experimental.set_memory_growth(gpu, True)


def use_tf32(device: str, on: bool) -> bool:
    """`trainer.tf32`: fp32 matmuls and convolutions in TensorFloat-32 on GPUs from Ampere on
    (TensorFlow's default; off computes them in full fp32). Whether it is on for this device."""
    tf.config.experimental.enable_tensor_float_32_execution(on)
    return on and device == "gpu"


def pick_device(choice: str | Device) -> str:
    """`auto` prefers a GPU (CUDA, or Apple's through tensorflow-metal), then the CPU."""
    name = Device(choice).value
    has_gpu = bool(tf.config.list_physical_devices("GPU"))
    if name == "auto":
        return "gpu" if has_gpu else "cpu"
    if name in ("cuda", "mps"):
        if not has_gpu:
            raise ValueError(f"trainer.device={name} but TensorFlow sees no GPU")
        return "gpu"
    tf.config.set_visible_devices([], "GPU")  # trainer.device=cpu: keep ops off any GPU
    return "cpu"


def dtype_policy(choice: str | Precision, device: str) -> str:
    """The Keras dtype policy for `trainer.precision`."""
    precision = Precision(choice).value
    if precision == "mixed":
        precision = "bf16" if device == "cpu" or _gpus_have_bf16() else "fp16"
    return {"fp32": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}[precision]


def _gpus_have_bf16() -> bool:
    """bfloat16 tensor cores: NVIDIA compute capability 8.0 (Ampere) and later."""
    gpus = tf.config.list_physical_devices("GPU")
    details = [tf.config.experimental.get_device_details(gpu) for gpu in gpus]
    return all(detail.get("compute_capability", (0, 0)) >= (8, 0) for detail in details)


def _tf_config() -> dict:
    return json.loads(os.environ.get("TF_CONFIG") or "{}")


def _workers(tf_config: dict) -> int:
    cluster = tf_config.get("cluster", {})
    return len(cluster.get("chief", [])) + len(cluster.get("worker", []))


def process_rank() -> int:
    """This process's index in a multi-worker job (0: the chief), from TF_CONFIG alone."""
    tf_config = _tf_config()
    if _workers(tf_config) <= 1:
        return 0
    task = tf_config["task"]
    if task["type"] == "chief":
        return 0
    return int(task["index"]) + bool(tf_config["cluster"].get("chief"))


def _local_devices(device: str, replicas: int) -> list[str]:
    """The devices MirroredStrategy spreads over: `replicas` GPUs, or as many logical CPUs."""
    if device == "cpu" and replicas > 1:
        # One physical CPU split into logical devices, each a replica with its own batch share.
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * replicas
        )
    found = [d.name for d in tf.config.list_logical_devices(device.upper())]
    if replicas > len(found):
        raise ValueError(f"{REPLICAS_ENV}={replicas} but only {len(found)} {device} devices")
    return found[: replicas or len(found)]


def start(device: str) -> Runtime:
    """Pick the strategy: multi-worker from TF_CONFIG, several local devices, or the default."""
    # TensorFlow logs every collective it sets up at INFO; our own lines say what matters.
    logging.getLogger("tensorflow").setLevel(logging.WARNING)
    share_gpus()  # before anything touches a GPU
    pin_threads()  # before the first operator starts TensorFlow's thread pools
    chosen = pick_device(device)
    workers = _workers(_tf_config())
    if workers > 1:
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        _work_around_keras_multi_worker()
        rank = process_rank()
        runtime = Runtime(strategy, chosen, rank, workers)
        log.info(
            "MultiWorkerMirroredStrategy: worker %d of %d, %d replicas on %s",
            rank, runtime.world_size, runtime.replicas, chosen,
        )  # fmt: skip
        return runtime
    devices = _local_devices(chosen, int(os.environ.get(REPLICAS_ENV, "0")))
    if len(devices) > 1:
        strategy = tf.distribute.MirroredStrategy(devices)
        log.info("MirroredStrategy over %d devices: %s", len(devices), ", ".join(devices))
    else:
        strategy = tf.distribute.get_strategy()  # the default: one device, no copies
    return Runtime(strategy, chosen)


def pin_threads() -> None:
    """TF_NUM_INTRAOP_THREADS (a cloud CPU run sets it to the machine's physical cores) as the
    intra-op pool's size, set where TensorFlow reports it back (threads())."""
    wanted = os.environ.get(THREADS_ENV, "")
    # Once set, a second job in this process (crossval's next fold) finds it set already.
    pool = tf.config.threading
    if wanted.isdigit() and 0 < int(wanted) != pool.get_intra_op_parallelism_threads():
        pool.set_intra_op_parallelism_threads(int(wanted))


def threads() -> int:
    """The intra-op threads TensorFlow runs operators on (0 in its config: one a core)."""
    return tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count() or 1


def _work_around_keras_multi_worker() -> None:
    """Keras 3's fit fails under MultiWorkerMirroredStrategy (tensorflow/tensorflow#72388): it
    averages each step's scalar logs along an axis they lack. Average the scalars as they are.
    (It also reduces a distributed batch to build the model: place_model sees to that.)"""
    from keras.src.backend.tensorflow import trainer

    original = trainer.reduce_per_replica

    def reduce_per_replica(values: Any, strategy: Any, reduction: str) -> Any:
        if reduction in ("auto", "mean") and trainer._collective_all_reduce_multi_worker(strategy):
            return tf.nest.map_structure(lambda v: strategy.reduce("MEAN", v, axis=None), values)
        return original(values, strategy, reduction)

    trainer.reduce_per_replica = reduce_per_replica


def place_model(model: keras.Model, runtime: Runtime) -> None:
    """In a multi-worker job, have `fit` build the model on first use under the strategy's scope,
    rather than from one distributed batch reduced on its own strategy (tensorflow#72388)."""
    if runtime.distributed:
        model._distribute_strategy = None


def stop(runtime: Runtime) -> None:
    """Nothing to tear down: TensorFlow ends its workers' collectives when the process exits."""
    del runtime


def seed_everything(seed: int, deterministic: bool) -> None:
    """Seed Python, NumPy and TensorFlow; in deterministic mode also pin kernels with a choice."""
    keras.utils.set_random_seed(seed)
    if deterministic:
        tf.config.experimental.enable_op_determinism()


def _sum_over_workers(values: np.ndarray, runtime: Runtime) -> np.ndarray:
    """Each worker's `values` from its first replica, summed over all workers."""
    return _compiled_sum(runtime)(tf.constant(values)).numpy()


@functools.cache
def _compiled_sum(runtime: Runtime) -> Callable[[tf.Tensor], tf.Tensor]:
    """The all-reduce behind `_sum_over_workers`, traced once per shape: run eagerly, it takes
    milliseconds, too slow for the stop check after every step."""
    strategy = runtime.strategy
    replicas_per_worker = runtime.replicas // runtime.world_size

    @tf.function
    def total(values: tf.Tensor) -> tf.Tensor:
        def first_replica_only() -> tf.Tensor:
            context = tf.distribute.get_replica_context()
            local = context.replica_id_in_sync_group % replicas_per_worker
            return tf.where(local == 0, values, tf.zeros_like(values))

        return strategy.reduce("SUM", strategy.run(first_replica_only), axis=None)

    return total


def broadcast(path: str | Path | None, runtime: Runtime) -> Path | None:
    """Worker 0's path (or None) on every worker: the run directory, the checkpoint to resume."""
    if not runtime.distributed:
        return None if path is None else Path(path)
    encoded = np.zeros(MAX_BROADCAST_BYTES, np.int32)
    if runtime.is_main:
        raw = json.dumps(None if path is None else str(path)).encode()
        encoded[: len(raw)] = np.frombuffer(raw, np.uint8)
    received = _sum_over_workers(encoded, runtime).astype(np.uint8)
    text = json.loads(received.tobytes().rstrip(b"\0").decode())
    return None if text is None else Path(text)


def any_rank(flag: bool, runtime: Runtime) -> bool:
    """True on every worker if it is true on any worker (so all workers stop at the same step)."""
    if not runtime.distributed:
        return flag
    return bool(_sum_over_workers(np.array([int(flag)], np.int32), runtime)[0])
