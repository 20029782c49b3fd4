"""Datasets to the project's bucket: invoke data.push PATH --cloud C prints the data.source= to
train on it."""

from __future__ import annotations

from pathlib import Path

from invoke import Context, Exit, task

from cloud import PROVIDERS, settings
from cloud.commands import CloudError, Commands

from .project import DEFAULT_CLOUD, IMAGE


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
    try:
        target = f"{provider.ensure_bucket(options, cmd)}/{IMAGE}/data/{source.name}"
        provider.copy_up(str(source), target, options, cmd)
    except CloudError as error:
        raise Exit(f"error: {error}", code=1) from None
    print(
        f"uploaded {path} to {target}\ntrain on it: invoke train --cloud={cloud} -- data=files "
        f"data.source={target}"
    )
