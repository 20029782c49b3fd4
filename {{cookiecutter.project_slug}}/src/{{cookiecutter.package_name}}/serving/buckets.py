"""The buckets the server reads and writes, with the standard library alone (the serving image
has no cloud SDK):

    gs://BUCKET/PREFIX      Cloud Storage's JSON API, with the token of the machine's service
                            account from the metadata server (Vertex AI's containers have one)
    https://ACCOUNT.blob.core.windows.net/CONTAINER/PREFIX
                            Blob Storage's REST API, with the token of the endpoint's managed
                            identity from $MSI_ENDPOINT (Azure ML's containers have one;
                            $AZURE_CLIENT_ID picks a user-assigned identity)
    a folder                a plain copy

Vertex AI sets AIP_STORAGE_URI to a gs:// copy of the model and leaves the download to the
container (gcs_folder); sampled predictions go up with put(). GCE_METADATA_HOST and
STORAGE_EMULATOR_HOST point Google's APIs elsewhere (the Google libraries read the same
variables), an http:// blob URL and MSI_ENDPOINT Azure's: the tests' stand-ins.
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
AZURE_STORAGE = "https://storage.azure.com/"  # the resource a Blob Storage token is for
AZURE_TOKEN_API = "2017-09-01"  # the MSI_ENDPOINT protocol Azure ML's containers speak
BLOB_API = "2021-08-06"  # x-ms-version: bearer tokens need 2017-11-09 or later
SCHEMES = ("gs://", "https://", "http://")
TIMEOUT_S = 60


def _call(url: str, headers: dict[str, str], data: bytes | None = None, method: str = "GET",
          timeout: float = TIMEOUT_S) -> bytes:  # fmt: skip
    request = urllib.request.Request(url, data, headers, method=method)
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return answer.read()


def _google_token() -> str:
    host = os.environ.get("GCE_METADATA_HOST", "metadata.google.internal")
    answer = _call(METADATA.format(host=host), {"Metadata-Flavor": "Google"})
    return str(json.loads(answer)["access_token"])


def _azure_token() -> str:
    endpoint, secret = os.environ.get("MSI_ENDPOINT"), os.environ.get("MSI_SECRET")
    if not endpoint or not secret:
        raise OSError("no managed identity here: MSI_ENDPOINT and MSI_SECRET are not set")
    query = {"resource": AZURE_STORAGE, "api-version": AZURE_TOKEN_API}
    if os.environ.get("AZURE_CLIENT_ID"):
        query["clientid"] = os.environ["AZURE_CLIENT_ID"]
    answer = _call(f"{endpoint}?{urllib.parse.urlencode(query)}",
                   {"secret": secret, "Metadata": "true"})  # fmt: skip
    return str(json.loads(answer)["access_token"])


def _gcs(uri: str) -> tuple[str, str, str]:
    """(the API's base URL, the bucket, the prefix with a trailing slash or empty)."""
    bucket, _, prefix = uri.removeprefix("gs://").partition("/")
    prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
    return os.environ.get("STORAGE_EMULATOR_HOST", STORAGE).rstrip("/"), bucket, prefix


def check(uri: str) -> str:
    """`uri` where put() can write there; ValueError naming what it can write otherwise."""
    if "://" in uri and not uri.startswith(SCHEMES):
        raise ValueError(
            f"{uri}: the server writes to gs://BUCKET/PREFIX, "
            "https://ACCOUNT.blob.core.windows.net/CONTAINER/PREFIX or a folder"
        )
    return uri


def put(uri: str, name: str, data: bytes, timeout: float = TIMEOUT_S) -> None:
    """`data` as `name` under `uri` (see the module's list); OSError where it cannot."""
    if uri.startswith("gs://"):
        base, bucket, prefix = _gcs(uri)
        query = urllib.parse.urlencode({"uploadType": "media", "name": prefix + name})
        _call(f"{base}/upload/storage/v1/b/{urllib.parse.quote(bucket)}/o?{query}",
              {"Authorization": f"Bearer {_google_token()}",
               "Content-Type": "application/octet-stream"}, data, "POST", timeout)  # fmt: skip
    elif uri.startswith(SCHEMES):
        headers = {
            "Authorization": f"Bearer {_azure_token()}",
            "x-ms-blob-type": "BlockBlob",
            "x-ms-version": BLOB_API,
            "Content-Type": "application/octet-stream",
        }
        _call(f"{uri.rstrip('/')}/{urllib.parse.quote(name)}", headers, data, "PUT", timeout)
    else:
        folder = Path(uri)
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f".{name}.partial"
        partial.write_bytes(data)
        partial.replace(folder / name)


def gcs_folder(uri: str) -> Path:
    """Every object under gs://BUCKET/PREFIX, copied into a new local folder (the paths below
    the prefix kept); OSError where none is there or the bucket cannot be read."""
    base, bucket, prefix = _gcs(uri)
    headers = {"Authorization": f"Bearer {_google_token()}"}
    listing = f"{base}/storage/v1/b/{urllib.parse.quote(bucket)}/o"
    names: list[str] = []
    page: dict[str, Any] = {"prefix": prefix}
    while True:
        answer = json.loads(_call(f"{listing}?{urllib.parse.urlencode(page)}", headers))
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
            _call(f"{listing}/{urllib.parse.quote(name, safe='')}?alt=media", headers)
        )
    return folder
