"""Azure Blob Storage through `az storage blob` (signed in, no keys): a run's files to the
project's container and back (azure.py's read_text, copy_up and copy_down)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..commands import Commands


def read_text(uri: str, settings: dict[str, Any], cmd: Commands) -> str | None:
    container, _, blob = uri.removeprefix("az://").partition("/")
    done = cmd.run(
        [
            "az",
            "storage",
            "blob",
            "download",
            "--auth-mode",
            "login",
            "--account-name",
            settings["storage_account"],
            "--container-name",
            container,
            "--name",
            blob,
            "--file",
            "/dev/stdout",
            "--no-progress",
            "--only-show-errors",
        ],
        check=False,
        quiet=True,
    )
    return done.stdout if done.returncode == 0 else None


def copy_up(local: str, uri: str, settings: dict[str, Any], cmd: Commands) -> None:
    """A file, or a folder's files, to the container."""
    container, _, prefix = uri.removeprefix("az://").partition("/")
    account = ["--auth-mode", "login", "--account-name", settings["storage_account"]]
    if Path(local).is_dir():
        cmd.run(
            [
                "az",
                "storage",
                "blob",
                "upload-batch",
                *account,
                "--destination",
                container,
                "--destination-path",
                prefix,
                "--source",
                local,
                "--overwrite",
            ]
        )
    else:
        cmd.run(
            [
                "az",
                "storage",
                "blob",
                "upload",
                *account,
                "--container-name",
                container,
                "--name",
                prefix,
                "--file",
                local,
                "--overwrite",
            ]
        )


def copy_down(uri: str, local: str, settings: dict[str, Any], cmd: Commands) -> None:
    """A folder of the container, here: download-batch keeps each blob's path, so the files
    land below a scratch folder first, then move into `local`."""
    container, _, prefix = uri.removeprefix("az://").partition("/")
    account = ["--auth-mode", "login", "--account-name", settings["storage_account"]]
    Path(local).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=Path(local).parent) as scratch:
        cmd.run(["az", "storage", "blob", "download-batch", *account, "--source", container,
                 "--pattern", f"{prefix.strip('/')}/*", "--destination", scratch,
                 "--overwrite"])  # fmt: skip
        if not cmd.dry_run:
            shutil.copytree(Path(scratch) / prefix.strip("/"), local, dirs_exist_ok=True)
