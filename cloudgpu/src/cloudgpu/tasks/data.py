"""Datasets: `invoke data.prepare SRC DEST` makes shards for data=shards; `invoke data.push PATH
--cloud C` uploads a dataset to the project's bucket and prints the data.source= to train on."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from invoke import Context, Exit, task

from cloudgpu import PROVIDERS, settings
from cloudgpu.commands import CloudError, Commands

from .project import DEFAULT_CLOUD, IMAGE, PACKAGE

# A prepared dataset's index (data/shards/index.py of the package), which data.push uploads last.
INDEX = "index.json"


@task(
    positional=["src", "dest"],
    auto_shortflags=False,  # -h stays --help's (invoke would give it to --shard-size)
    help={
        "src": "a .npz (x, y), a .csv (a header detected, missing cells filled, numbers "
        "standardized, text columns one-hot) or a folder "
        "of images, one "
        "sub-folder per class",
        "dest": "a new folder, or an s3://, gs://, az:// prefix",
        "shard_size": "megabytes per shard (default 64)",
        "image_size": "WxH: resize every image to it (needed when their sizes differ)",
        "label": "a .csv's label column, by name or number (default: the last)",
        "header": "yes or no: whether a .csv's first row names its columns (default: detected)",
        "missing": "a .csv's missing cells: fill (train median, own category) or drop the rows",
        "scaling": "a .csv's numbers: standard, minmax or none (train split's statistics)",
        "invalid": "a text or infinity among numbers: refuse, or missing",
    },
)
def prepare(
    c: Context,
    src: str,
    dest: str,
    shard_size: str = "64",
    image_size: str = "",
    label: str = "",
    header: str = "",
    missing: str = "",
    scaling: str = "",
    invalid: str = "",
) -> None:
    """Shards of SRC at DEST (invoke data.prepare SRC DEST), with an index and a sha256 each."""
    flags = ["--shard-size", shard_size] + (["--image-size", image_size] if image_size else [])
    flags += (["--label", label] if label else []) + (["--header", header] if header else [])
    for name, value in (("missing", missing), ("scaling", scaling), ("invalid", invalid)):
        flags += [f"--{name}", value] if value else []
    command = [sys.executable, "-m", f"{PACKAGE}.prepare", src, dest, *flags]
    c.run(shlex.join(command), pty=False)


@task(
    positional=["path"],
    help={
        "path": "a file or folder of data (a .npz, a .csv, a prepared dataset)",
        "cloud": f"whose bucket: aws, gcp, azure or local (default {DEFAULT_CLOUD})",
        "dry_run": "print the commands instead of running them",
    },
)
def push(c: Context, path: str, cloud: str = DEFAULT_CLOUD, dry_run: bool = False) -> None:
    """Upload a dataset to <bucket>/<project>/data/<name>; prints the data.source= to use."""
    source = Path(path)
    if not source.exists():
        raise Exit(f"error: {path}: no such file or folder", code=2)
    if cloud not in PROVIDERS:
        raise Exit(f"error: --cloud {cloud!r}: choose one of {', '.join(PROVIDERS)}", code=2)
    provider, options = PROVIDERS[cloud], settings.load(cloud, IMAGE)
    cmd = Commands(dry_run=dry_run)
    index = source / INDEX
    try:
        target = f"{provider.ensure_bucket(options, cmd)}/{IMAGE}/data/{source.name}"
        if index.is_file():
            # The index last, as data.prepare writes it: a reader that finds it finds every shard.
            with _without(source, INDEX) as shards:
                provider.copy_up(shards, target, options, cmd)
            provider.copy_up(str(index), f"{target}/{INDEX}", options, cmd)
        else:
            provider.copy_up(str(source), target, options, cmd)
    except CloudError as error:
        raise Exit(f"error: {error}", code=1) from None
    kind = "shards" if index.is_file() else "files"
    print(
        f"uploaded {path} to {target}\ntrain on it: invoke train --cloud={cloud} -- data={kind} "
        f"data.source={target}"
    )


@contextlib.contextmanager
def _without(folder: Path, name: str) -> Iterator[str]:
    """A view of `folder` less its file `name`: hard links (a copy across devices) in a temporary
    folder beside it, so that uploading it copies no data locally."""
    with tempfile.TemporaryDirectory(prefix=".push-", dir=folder.parent) as view:
        for path in folder.rglob("*"):
            if path.is_file() and path.relative_to(folder).as_posix() != name:
                link = Path(view) / path.relative_to(folder)
                link.parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.link(path, link)
                except OSError:
                    shutil.copy2(path, link)
        yield view
