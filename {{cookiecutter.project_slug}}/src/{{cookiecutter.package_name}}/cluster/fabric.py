"""The network between nodes: AWS's Elastic Fabric Adapter (EFA), where the machine has one.

NCCL reaches EFA only through a plugin, aws-ofi-nccl, over AWS's libfabric (the EFA installer
puts both under /opt/amazon); without them it talks between nodes over TCP sockets, which works,
at a fraction of the bandwidth (p4d.24xlarge has 400 Gbps of EFA, p5.48xlarge 3,200). This
project's images do not carry them: on such machines the launcher says so in one line, and where
they are there it sets what SageMaker's own training toolkit sets for EFA with GPUDirect RDMA
(aws/sagemaker-training-toolkit, commit 9a5ed9f of 2023-10-16), unless already set.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

RDMA_DEVICES = Path("/sys/class/infiniband")  # an EFA device's driver there is "efa"
PLUGIN_DIRS = ("/opt/amazon/ofi-nccl/lib", "/opt/aws-ofi-nccl/lib", "/opt/amazon/efa/lib")
EFA_ENV = {
    "FI_PROVIDER": "efa",  # libfabric's EFA provider, not a fallback one
    "FI_EFA_USE_DEVICE_RDMA": "1",  # GPU memory straight to the wire (p4d, p5)
    "RDMAV_FORK_SAFE": "1",  # data-loader workers fork after RDMA memory is registered
}


def efa_devices(root: Path = RDMA_DEVICES) -> list[str]:
    """The RDMA devices here whose kernel driver is EFA's."""
    if not root.is_dir():
        return []
    return sorted(
        device.name
        for device in root.iterdir()
        if (device / "device" / "driver").resolve().name == "efa"
    )


def nccl_plugin(environ: Mapping[str, str], dirs: Iterable[str] = PLUGIN_DIRS) -> str | None:
    """Where NCCL's network plugin (libnccl-net*.so) is, on the loader's path or AWS's."""
    searched = [*filter(None, environ.get("LD_LIBRARY_PATH", "").split(":")), *dirs]
    for folder in searched:
        found = sorted(Path(folder).glob("libnccl-net*.so*")) if Path(folder).is_dir() else []
        if found:
            return str(found[0])
    return None


def efa_settings(nodes: int, environ: Mapping[str, str], root: Path = RDMA_DEVICES) -> tuple:
    """(variables to set, one line to print or None) for a job of `nodes` machines."""
    devices = efa_devices(root) if nodes > 1 else []
    if not devices:
        return {}, None
    plugin = nccl_plugin(environ)
    if plugin is None:
        return {}, (
            f"launch: {len(devices)} EFA devices here but no aws-ofi-nccl plugin in the image: "
            "NCCL talks between nodes over TCP sockets (cloudgpu docs/clouds.md: EFA)"
        )
    chosen = {key: value for key, value in EFA_ENV.items() if key not in environ}
    shown = " ".join(f"{key}={value}" for key, value in chosen.items()) or "as set"
    return chosen, f"launch: NCCL over {len(devices)} EFA devices ({plugin}; {shown})"


def apply(nodes: int) -> None:
    """Set the EFA variables this node needs before the training processes start."""
    chosen, line = efa_settings(nodes, os.environ)
    os.environ.update(chosen)
    if line:
        print(line, flush=True)
