"""The model folder where an endpoint gives a bucket URI instead of a path: Vertex AI sets
AIP_STORAGE_URI to a gs:// copy of the model's artifacts and leaves the download to the
container. Copied here with the standard library (Cloud Storage's JSON API, the token of the
VM's service account from the metadata server), so the serving image needs no cloud SDK.

GCE_METADATA_HOST and STORAGE_EMULATOR_HOST point both elsewhere (the Google libraries read
the same variables): the tests' stand-ins.
"""

from __future__ import annotations

import json
import os
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

METADATA = "http://{host}/computeMetadata/v1/instance/service-accounts/default/token"
STORAGE = "https://storage.googleapis.com"
TIMEOUT_S = 60


def _get(url: str, headers: dict[str, str]) -> bytes:
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
        return answer.read()


def _token() -> str:
    host = os.environ.get("GCE_METADATA_HOST", "metadata.google.internal")
    answer = _get(METADATA.format(host=host), {"Metadata-Flavor": "Google"})
    return str(json.loads(answer)["access_token"])


def gcs_folder(uri: str) -> Path:
    """Every object under gs://BUCKET/PREFIX, copied into a new local folder (the paths below
    the prefix kept); OSError where none is there or the bucket cannot be read."""
    bucket, _, prefix = uri.removeprefix("gs://").partition("/")
    prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
    base = os.environ.get("STORAGE_EMULATOR_HOST", STORAGE).rstrip("/")
    headers = {"Authorization": f"Bearer {_token()}"}
    listing = f"{base}/storage/v1/b/{urllib.parse.quote(bucket)}/o"
    names: list[str] = []
    page: dict[str, Any] = {"prefix": prefix}
    while True:
        answer = json.loads(_get(f"{listing}?{urllib.parse.urlencode(page)}", headers))
        names += [
            item["name"] for item in answer.get("items", []) if not item["name"].endswith("/")
        ]
        if not answer.get("nextPageToken"):
            break
        page["pageToken"] = answer["nextPageToken"]
    if not names:
        raise OSError(f"{uri}: no objects there")
    folder = Path(tempfile.mkdtemp(prefix="model-"))
    for name in names:
        target = (folder / name[len(prefix) :]).resolve()
        if not target.is_relative_to(folder.resolve()):  # a name with ../ in it
            raise OSError(f"{uri}: object {name!r} would land outside the model folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(
            _get(f"{listing}/{urllib.parse.quote(name, safe='')}?alt=media", headers)
        )
    return folder
