"""What the Docker tests need from this machine: a client with BuildKit, a stand-in base image,
the CPU torch wheel served to the builder, a local registry, and a way to read image layers.

Each helper returns None (or raises pytest.skip through the fixtures) with a plain reason when
the machine cannot provide it; nothing here is installed by the tests.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import http.server
import io
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import tarfile
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# NVIDIA's bases come from a registry; the tests build on this, made from Debian with debootstrap.
STAND_IN = "local/debian-py:bookworm"
STAND_IN_PYTHON = "python3.11"
STAND_IN_PACKAGES = "ca-certificates,python3,python3-venv,python3-pip"
# Package downloads from inside a container go through the host's TLS setup: the stand-in (and
# only the stand-in) gets the host's CA bundle.
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
CPU_TORCH_INDEX_HOST = "download.pytorch.org"


def run(*command: str, timeout: int = 600, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run a command, capture its output as text, never raise on a failure."""
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)


@functools.cache
def docker_client() -> str | None:
    """A docker client whose `build` runs BuildKit, talking to an engine that answers; or None.

    `DOCKER` wins; then `docker` when it has buildx; then Debian's 20.10 client, whose built-in
    BuildKit needs no buildx.
    """
    candidates = [os.environ["DOCKER"]] if "DOCKER" in os.environ else ["docker", "/usr/bin/docker"]
    for client in candidates:
        if not shutil.which(client) or run(client, "info", timeout=60).returncode != 0:
            continue
        if run(client, "buildx", "version", timeout=60).returncode == 0:
            return client
        # Before 23.0 the client ran BuildKit itself (DOCKER_BUILDKIT=1); later ones need buildx.
        version = run(client, "version", "--format", "{{.Client.Version}}").stdout
        if int(version.split(".")[0] or 0) < 23:
            return client
    return None


def image_exists(client: str, image: str) -> bool:
    return run(client, "image", "inspect", image).returncode == 0


def build_stand_in(client: str) -> str:
    """The stand-in base, made once per machine (about a minute) and kept by its tag; by one
    process at a time (.ci/run's setup and a test session may ask for it together)."""
    lock = Path(tempfile.gettempdir()) / "cloud-gpu-template-stand-in.lock"
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        return _build_stand_in(client)


def _build_stand_in(client: str) -> str:
    if image_exists(client, STAND_IN):
        return STAND_IN
    if not shutil.which("debootstrap"):
        raise RuntimeError("debootstrap is not installed (apt-get install debootstrap)")
    with tempfile.TemporaryDirectory() as scratch:
        rootfs = Path(scratch) / "rootfs"
        done = run(
            "debootstrap", "--variant=minbase", f"--include={STAND_IN_PACKAGES}",
            "bookworm", str(rootfs), timeout=900,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"debootstrap failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        if HOST_CA_BUNDLE.exists():
            shutil.copyfile(HOST_CA_BUNDLE, rootfs / "etc/ssl/certs/ca-certificates.crt")
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(
            [client, "import", "-", STAND_IN], stdin=tar.stdout, capture_output=True, timeout=600
        )
        tar.wait()
        if imported.returncode != 0:
            raise RuntimeError(f"docker import failed: {imported.stderr.decode()[-2000:]}")
    return STAND_IN


def bridge_gateway(client: str) -> str:
    """The host's address on Docker's default bridge: what a build container reaches it by."""
    done = run(client, "network", "inspect", "bridge")
    config = json.loads(done.stdout)[0]["IPAM"]["Config"][0]
    # Docker 20.10 leaves the gateway out of the default bridge: it is the subnet's first host.
    return config.get("Gateway") or str(ipaddress.ip_network(config["Subnet"])[1])


def resolves(host: str) -> bool:
    try:
        socket.getaddrinfo(host, 443)
    except OSError:
        return False
    return True


def pip_find_links() -> list[Path]:
    """The local folders pip on this machine is configured to find wheels in."""
    done = run("python3", "-m", "pip", "config", "list")
    values = [os.environ.get("PIP_FIND_LINKS", "")]
    values += [line.split("=", 1)[1].strip("'\"") for line in done.stdout.splitlines()
               if line.split("=", 1)[0].endswith("find-links")]  # fmt: skip
    return [Path(v) for value in values for v in value.split() if v and Path(v).is_dir()]


def wheel_folder(wheel_glob: str) -> Path | None:
    """The first of pip's find-links folders that holds a wheel matching `wheel_glob`."""
    return next((f for f in pip_find_links() if any(f.glob(wheel_glob))), None)


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves files without a log line per request."""

    def log_message(self, *_args: object) -> None:
        pass


@contextlib.contextmanager
def torch_find_links(client: str) -> Iterator[str | None]:
    """`--find-links` for a CPU image build: "" where PyTorch's index resolves; else the wheel
    folder pip on this machine uses, served where the build container reaches it (for the
    block); None where neither is there."""
    if resolves(CPU_TORCH_INDEX_HOST):
        yield ""
        return
    from template_tools import frameworks

    torch = frameworks()["pytorch"]["version"]
    folder = wheel_folder(f"torch-{torch}+cpu-cp311-*.whl")
    if folder is None:
        yield None
        return
    with serve_folder(folder, bridge_gateway(client)) as url:
        yield url


@contextlib.contextmanager
def serve_folder(folder: Path, address: str) -> Iterator[str]:
    """Serve `folder` read-only over HTTP on `address`; yield its URL. Stopped on exit."""
    handler = functools.partial(QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer((address, 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{address}:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def local_registry(workdir: Path) -> Iterator[str]:
    """Debian's docker-registry on a free loopback port; yield `localhost:PORT`."""
    port = free_port()
    config = workdir / "config.yml"
    config.write_text(
        "version: 0.1\n"
        f"storage: {{filesystem: {{rootdirectory: {workdir / 'data'}}}}}\n"
        f"http: {{addr: 127.0.0.1:{port}}}\n"
    )
    log = (workdir / "registry.log").open("w")
    server = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=log, stderr=log)
    try:
        for _ in range(100):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            server.poll()
            if server.returncode is not None:
                raise RuntimeError(
                    f"docker-registry exited: {(workdir / 'registry.log').read_text()}"
                )
            threading.Event().wait(0.1)
        yield f"localhost:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def layer_digests(client: str, image: str) -> list[str]:
    """The image's layers (diff IDs), base first."""
    done = run(client, "image", "inspect", image)
    return json.loads(done.stdout)[0]["RootFS"]["Layers"]


@dataclass
class ImageScan:
    """What `docker save` of an image holds: each layer's entries (base first) and the names of
    the files, in a layer or beside the layers, that hold one of the needles looked for."""

    layers: list[dict[str, tuple]]
    holding: list[str]


def _is_tar(head: bytes) -> bool:
    """A tar stream starts with a ustar header, or (an empty layer) with a zero block."""
    return head[257:262] == b"ustar" or (len(head) == 512 and not head.strip(b"\0"))


def _entry(member: tarfile.TarInfo, data: bytes) -> tuple:
    """(type, mode, uid, gid, link, size, sha256): an entry as the comparison sees it, its
    modification time left out (BuildKit of Docker 20.10 cannot fix it)."""
    digest = hashlib.sha256(data).hexdigest() if member.isfile() else ""
    return (member.type, member.mode, member.uid, member.gid, member.linkname, member.size, digest)


def scan_image(client: str, image: str, needles: tuple[bytes, ...] = ()) -> ImageScan:
    """`docker save` of `image` read as it streams, once: every layer's entries and where the
    needles are. Nothing is written to disk (an image is gigabytes)."""
    saving = subprocess.Popen([client, "save", image], stdout=subprocess.PIPE)
    assert saving.stdout is not None
    layers: dict[str, dict[str, tuple]] = {}
    holding: list[str] = []
    manifest: list[dict[str, Any]] = []
    with tarfile.open(fileobj=saving.stdout, mode="r|") as outer:
        for member in outer:
            handle = outer.extractfile(member) if member.isfile() else None
            if handle is None:
                continue
            stream = io.BufferedReader(handle, buffer_size=1 << 20)  # type: ignore[type-var]
            if not _is_tar(stream.peek(512)[:512]):
                data = stream.read()
                holding += [member.name for needle in needles if needle in data]
                if member.name == "manifest.json":
                    manifest = json.loads(data)
                continue
            entries = layers[member.name] = {}
            with tarfile.open(fileobj=stream, mode="r|") as layer:
                for entry in layer:
                    file = layer.extractfile(entry) if entry.isfile() else None
                    data = file.read() if file else b""
                    entries[entry.name] = _entry(entry, data)
                    holding += [f"{member.name}:{entry.name}" for n in needles if n in data]
    if saving.wait() != 0:
        raise RuntimeError(f"docker save {image} failed")
    return ImageScan([layers[name] for name in manifest[0]["Layers"]], holding)
