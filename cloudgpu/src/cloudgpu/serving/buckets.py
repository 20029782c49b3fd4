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
container (gcs_folder); sampled predictions go up with put().

A token goes only to the storage services' own hosts, over https, and never on: a redirect is
an error (urllib would follow it with the Authorization header). The tests' stand-ins are
reached by GCE_METADATA_HOST (the metadata server's, as Google's libraries read it; it is sent
no token) and MSI_ENDPOINT (Azure ML sets it), and by $BUCKETS_TEST_LOOPBACK: an
http://127.0.0.1:PORT that takes both storage services' place, for tests only, and refused
where it is not a loopback address.
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
BLOB_HOSTS = (".blob.core.windows.net", ".blob.core.usgovcloudapi.net",
              ".blob.core.chinacloudapi.cn")  # fmt: skip
TEST_LOOPBACK = "BUCKETS_TEST_LOOPBACK"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
WRITES_TO = ("the server writes to gs://BUCKET/PREFIX, "
             "https://ACCOUNT.blob.core.windows.net/CONTAINER/PREFIX or a folder")  # fmt: skip
TIMEOUT_S = 60


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the 3xx is raised as an HTTPError: the token goes nowhere else


_OPENER = urllib.request.build_opener(_NoRedirects)


def _call(url: str, headers: dict[str, str], data: bytes | None = None, method: str = "GET",
          timeout: float = TIMEOUT_S) -> bytes:  # fmt: skip
    request = urllib.request.Request(url, data, headers, method=method)
    with _OPENER.open(request, timeout=timeout) as answer:
        return bytes(answer.read())


def _test_loopback() -> str:
    """$BUCKETS_TEST_LOOPBACK (the tests' stand-in for the storage services), or ''."""
    url = os.environ.get(TEST_LOOPBACK, "").rstrip("/")
    if url and urllib.parse.urlsplit(url).hostname not in LOOPBACK_HOSTS:
        raise ValueError(f"${TEST_LOOPBACK} {url}: a stand-in on this machine only, for tests")
    return url


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
    return _test_loopback() or STORAGE, bucket, prefix


def check(uri: str) -> str:
    """`uri` where put() can write there; ValueError naming what it can write otherwise."""
    if "://" not in uri or uri.startswith("gs://"):
        return uri
    parts, loopback = urllib.parse.urlsplit(uri), _test_loopback()
    blob = parts.scheme == "https" and (parts.hostname or "").endswith(BLOB_HOSTS)
    if not (blob and not parts.username) and not (loopback and uri.startswith(loopback + "/")):
        raise ValueError(f"{uri}: {WRITES_TO}")
    return uri


def put(uri: str, name: str, data: bytes, timeout: float = TIMEOUT_S) -> None:
    """`data` as `name` under `uri` (see the module's list); OSError where it cannot."""
    if uri.startswith("gs://"):
        base, bucket, prefix = _gcs(uri)
        query = urllib.parse.urlencode({"uploadType": "media", "name": prefix + name})
        _call(f"{base}/upload/storage/v1/b/{urllib.parse.quote(bucket)}/o?{query}",
              {"Authorization": f"Bearer {_google_token()}",
               "Content-Type": "application/octet-stream"}, data, "POST", timeout)  # fmt: skip
    elif "://" in uri:
        url = f"{check(uri).rstrip('/')}/{urllib.parse.quote(name)}"  # before a token is had
        headers = {
            "Authorization": f"Bearer {_azure_token()}",
            "x-ms-blob-type": "BlockBlob",
            "x-ms-version": BLOB_API,
            "Content-Type": "application/octet-stream",
        }
        _call(url, headers, data, "PUT", timeout)
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
