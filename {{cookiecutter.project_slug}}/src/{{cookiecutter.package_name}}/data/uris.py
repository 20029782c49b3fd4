"""Paths and bucket URIs (`file://`, `s3://`, `gs://`, `az://` through fsspec), read with one
line naming the package a bucket needs when it is missing."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from .splits import DataError

# The bucket clients log every credential lookup at INFO; their warnings still show.
for _client in ("botocore", "aiobotocore", "s3fs", "gcsfs", "adlfs", "azure"):
    logging.getLogger(_client).setLevel(logging.WARNING)


# Which pip package gives fsspec each bucket scheme, for the error message when it is missing.
FSSPEC_BACKENDS = {"s3": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs"}


def is_local(uri: str) -> bool:
    return "://" not in uri or uri.startswith("file://")


def local_path(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))


def join(root: str, name: str) -> str:
    return f"{root.rstrip('/')}/{name}"


def open_uri(uri: str, mode: str = "rb") -> Any:
    """fsspec's open; a missing bucket backend is named with the pip package that gives it."""
    import fsspec

    try:
        return fsspec.open(uri, mode)
    except ImportError as err:
        scheme = uri.split("://", 1)[0]
        package = FSSPEC_BACKENDS.get(scheme, "the fsspec backend for it")
        raise DataError(f"reading {uri!r} needs {package}: pip install {package}") from err
    except ValueError as err:  # fsspec: "Protocol not known"
        raise DataError(f"cannot read {uri!r}: {err}") from err


def read_bytes(uri: str) -> bytes:
    """The whole file at `uri`."""
    try:
        with open_uri(uri) as handle:
            return handle.read()
    except FileNotFoundError as err:
        raise DataError(f"data source not found: {uri!r}") from err
