"""A loopback stand-in for Google's Compute Engine, Cloud Storage and Vertex AI APIs, and for the
IAM calls a first run makes (service accounts, custom roles, the IAM policies of a project, bucket,
repository and secret) and the access token of an impersonated account, for the real `gcloud`.

It keeps instances, custom jobs, accounts, roles, policies and Vertex AI's models and endpoints
in memory, serves a folder's files as Cloud Storage objects (and takes uploads into it) and a
token as the metadata server does, answers create, get, list, delete and cancel as the APIs do
(with operations that are done at once), and records every request, so a test reads the exact
body gcloud sent. It proves what gcloud sends for our flags, not what Google accepts.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit


@dataclass
class Recorded:
    method: str
    path: str
    body: Any


@dataclass
class GoogleApi:
    url: str
    requests: list[Recorded] = field(default_factory=list)
    instances: dict[str, dict[str, Any]] = field(default_factory=dict)
    quotas: list[dict[str, Any]] = field(default_factory=list)  # what regions.get answers
    exhausted: set[str] = field(default_factory=set)  # zones that have no capacity
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)  # Vertex AI custom jobs by id
    accounts: dict[str, dict[str, Any]] = field(default_factory=dict)  # service accounts by email
    roles: dict[str, dict[str, Any]] = field(default_factory=dict)  # custom roles by name
    policies: dict[str, dict[str, Any]] = field(default_factory=dict)  # IAM policy by resource
    firewalls: dict[str, dict[str, Any]] = field(default_factory=dict)  # firewall rules by name
    project_number: str = "123456789012"  # every project's, as projects.get answers
    bucket_owner: str = ""  # the projectNumber buckets.get answers: the project's when empty
    storage: Path | None = None  # objects: <storage>/<bucket>/<name>, read by objects.list/get
    models: dict[str, dict[str, Any]] = field(default_factory=dict)  # Vertex AI models by id
    endpoints: dict[str, dict[str, Any]] = field(default_factory=dict)  # Vertex AI endpoints
    serving_quota: bool = True  # False: deployModel is refused as a project with no quota is
    # True: deployModel deploys, yet fails (as a lost answer): the first this API is sent with a
    # 503, which gcloud retries (2 s later: it retries a 429 or 5xx five times over a minute),
    # later ones with a 409, which it does not.
    deploy_fails: bool = False
    # True: undeployModel is refused (a 400, which gcloud does not retry) and undeploys nothing.
    undeploy_fails: bool = False

    def bodies(self, method: str, pattern: str) -> list[Any]:
        return [r.body for r in self.requests if r.method == method and re.search(pattern, r.path)]


def _handler(api: GoogleApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # quiet
            pass

        def _answer(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _operation(self, zone: str, target: str, kind: str = "insert") -> dict[str, Any]:
            """An operation, done, in `zone` (projects/P/zones/Z) or projects/P/global."""
            name = f"op-{len(api.requests)}"
            return {
                "kind": "compute#operation",
                "name": name,
                "operationType": kind,
                "status": "DONE",
                "progress": 100,
                **({"zone": f"{api.url}/compute/v1/{zone}"} if "/zones/" in zone else {}),
                "targetLink": target,
                "insertTime": "2026-12-01T00:00:00.000-00:00",
                "selfLink": f"{api.url}/compute/v1/{zone}/operations/{name}",
            }

        def _route(self, method: str) -> None:
            path, query = urlsplit(self.path).path, dict(parse_qsl(urlsplit(self.path).query))
            length = int(self.headers.get("Content-Length") or 0)
            if m := re.fullmatch(r"/upload/storage/v1/b/([^/]+)/o", path):
                return self._upload(m[1], query, self.rfile.read(length))
            body: Any = json.loads(self.rfile.read(length) or b"null") if length else None
            api.requests.append(Recorded(method, path, body))
            if path.endswith("/instance/service-accounts/default/token"):  # the metadata server
                token = {"access_token": "stand-in-token", "expires_in": 3600}
                return self._answer(200, {**token, "token_type": "Bearer"})
            if m := re.search(r"/storage/v1/b/([^/]+)/o(?:/([^/]+))?$", path):
                return self._objects(m[1], unquote(m[2] or ""), query)
            if re.search(r"/locations/[^/]+/(models|endpoints)", path):
                return self._vertex_serving(method, path, body, query)
            if m := re.search(r"^/iamcredentials/v1/projects/-/serviceAccounts/([^/:]+)"
                              r":generateAccessToken$", path):  # fmt: skip
                return self._impersonate(unquote(m[1]))
            if path.startswith("/iam/") or "IamPolicy" in path or path.endswith("/iam"):
                return self._iam(method, path, body)
            if m := re.search(r"^/resourcemanager/v\d/projects/([^/:]+)$", path):
                return self._answer(200, {"projectId": m[1], "projectNumber": api.project_number})
            zone = re.search(r"/(projects/[^/]+/zones/[^/]+)/", path + "/")
            if "/customJobs" in path:
                self._custom_job(method, path, body)
            elif m := re.search(r"/projects/([^/]+)/zones/([^/]+)$", path):
                region = m[2].rsplit("-", 1)[0]
                self._answer(
                    200,
                    {
                        "kind": "compute#zone",
                        "name": m[2],
                        "status": "UP",
                        "region": f"{api.url}/compute/v1/projects/{m[1]}/regions/{region}",
                        "selfLink": f"{api.url}{path}",
                    },
                )
            elif m := re.search(r"/projects/[^/]+/regions/([^/]+)$", path):
                self._answer(200, {"kind": "compute#region", "name": m[1], "quotas": api.quotas})
            elif m := re.search(r"/global/images/family/([^/]+)$", path):
                self._answer(
                    200, {"name": f"{m[1]}-v1", "family": m[1], "selfLink": f"{api.url}{path}"}
                )
            elif (
                method == "POST"
                and path.endswith("/instances")
                and zone
                and (zone[1].rsplit("/", 1)[-1] in api.exhausted)
            ):
                where = zone[1]
                self._answer(
                    503,
                    {
                        "error": {
                            "code": 503,
                            "message": (
                                f"The zone '{where}' does not have enough resources "
                                "available to fulfill the request.  Try a different zone, "
                                "or try again later."
                            ),
                            "errors": [
                                {
                                    "reason": "ZONE_RESOURCE_POOL_EXHAUSTED",
                                    "domain": "global",
                                    "message": f"The zone '{where}' does not have enough resources",
                                }
                            ],
                        }
                    },
                )
            elif method == "POST" and path.endswith("/instances") and zone:
                name = body["name"]
                api.instances[name] = {
                    **body,
                    "kind": "compute#instance",
                    "status": "RUNNING",
                    "zone": f"{api.url}/compute/v1/{zone[1]}",
                    "selfLink": f"{api.url}{path}/{name}",
                    "creationTimestamp": "2026-12-01T00:00:00.000-00:00",
                }
                self._answer(200, self._operation(zone[1], f"{api.url}{path}/{name}"))
            elif m := re.search(r"/(projects/[^/]+/global)/firewalls(?:/([^/]+))?$", path):
                if method == "POST":
                    api.firewalls[body["name"]] = body
                    self._answer(200, self._operation(m[1], f"{api.url}{path}/{body['name']}"))
                else:
                    found = api.firewalls.get(m[2] or "")
                    self._answer(200 if found else 404, found or {"error": {"code": 404}})
            elif m := re.search(r"/(projects/[^/]+/global)/operations/[^/]+(/wait)?$", path):
                self._answer(200, self._operation(m[1], ""))
            elif re.search(r"/operations/[^/]+(/wait)?$", path) and zone:
                self._answer(200, self._operation(zone[1], ""))
            elif method == "GET" and (m := re.search(r"/instances/([^/]+)$", path)):
                found = api.instances.get(m[1])
                self._answer(200 if found else 404, found or {"error": {"code": 404}})
            elif method == "DELETE" and (m := re.search(r"/instances/([^/]+)$", path)) and zone:
                api.instances.pop(m[1], None)
                self._answer(200, self._operation(zone[1], f"{api.url}{path}", "delete"))
            elif method == "GET" and path.endswith("/aggregated/instances"):
                by_zone: dict[str, Any] = {}
                for instance in api.instances.values():
                    key = "zones/" + instance["zone"].rsplit("/", 1)[-1]
                    by_zone.setdefault(key, {"instances": []})["instances"].append(instance)
                self._answer(200, {"items": by_zone})
            elif method == "GET" and path.endswith("/instances") and zone:
                self._answer(200, {"items": list(api.instances.values())})
            elif m := re.search(r"/storage/v1/b/([^/]+)$", path):
                owner = api.bucket_owner or api.project_number
                self._answer(200, {"name": m[1], "kind": "storage#bucket", "location": "US",
                                   "projectNumber": owner})  # fmt: skip
            else:
                self._answer(404, {"error": {"code": 404, "message": f"no stand-in for {path}"}})

        def _iam(self, method: str, path: str, body: Any) -> None:
            """Service accounts and custom roles (get, create), and IAM policies (get, set) of any
            resource: `...:getIamPolicy`/`:setIamPolicy`, or Cloud Storage's `/b/NAME/iam`."""
            if m := re.search(r"^(.*?)(:getIamPolicy|:setIamPolicy|/iam)$", path):
                resource = m[1]
                if m[2] == ":setIamPolicy" or method == "PUT":
                    api.policies[resource] = body.get("policy", body)
                empty = {"bindings": [], "etag": "BwAAAAAAAAA=", "version": 1}
                self._answer(200, api.policies.get(resource, empty))
            elif m := re.search(r"/v1/projects/([^/]+)/serviceAccounts(?:/([^/]+))?$", path):
                if method == "POST":
                    email = f"{body['accountId']}@{m[1]}.iam.gserviceaccount.com"
                    api.accounts[email] = {"email": email, **body.get("serviceAccount", {})}
                    self._answer(200, api.accounts[email])
                else:
                    found = api.accounts.get(m[2] or "")
                    self._answer(200 if found else 404, found or {"error": {"code": 404}})
            elif m := re.search(r"/v1/(projects/[^/]+)/roles(?:/([^/]+))?$", path):
                if method == "POST":
                    name = f"{m[1]}/roles/{body['roleId']}"
                    api.roles[name] = {"name": name, **body["role"]}
                    self._answer(200, api.roles[name])
                else:
                    found = api.roles.get(f"{m[1]}/roles/{m[2]}")
                    self._answer(200 if found else 404, found or {"error": {"code": 404}})
            elif path.endswith("permissions:queryTestablePermissions"):
                self._answer(200, {"permissions": []})
            else:
                self._answer(404, {"error": {"code": 404, "message": f"no stand-in for {path}"}})

        def _impersonate(self, email: str) -> None:
            """IAM Credentials' generateAccessToken: a token of the account, given where some
            member holds Token Creator on it (the stand-in knows no caller)."""
            granted = [b for resource, policy in api.policies.items()
                       if resource.endswith(f"/serviceAccounts/{email}")
                       for b in policy.get("bindings", [])
                       if b["role"] == "roles/iam.serviceAccountTokenCreator"]  # fmt: skip
            if email not in api.accounts or not granted:
                denied = {"code": 403, "status": "PERMISSION_DENIED", "message": "no token"}
                return self._answer(403, {"error": denied})
            token = {"accessToken": f"impersonated-{email}", "expireTime": "2026-12-01T01:00:00Z"}
            self._answer(200, token)

        def _custom_job(self, method: str, path: str, body: Any) -> None:
            """Vertex AI: POST .../customJobs, GET .../customJobs/ID, POST ...ID:cancel."""
            where = re.search(r"/v1/(projects/[^/]+/locations/[^/]+)/customJobs", path)
            if method == "POST" and path.endswith("/customJobs") and where:
                job_id = str(1000 + len(api.jobs))
                api.jobs[job_id] = {
                    **body,
                    "name": f"{where[1]}/customJobs/{job_id}",
                    "state": "JOB_STATE_PENDING",
                    "createTime": "2026-12-01T00:00:00Z",
                }
                self._answer(200, api.jobs[job_id])
            elif method == "POST" and (m := re.search(r"/customJobs/([^/:]+):cancel$", path)):
                if m[1] in api.jobs:
                    api.jobs[m[1]]["state"] = "JOB_STATE_CANCELLING"
                self._answer(200 if m[1] in api.jobs else 404, {})
            elif method == "GET" and (m := re.search(r"/customJobs/([^/:]+)$", path)):
                found = api.jobs.get(m[1])
                self._answer(200 if found else 404, found or {"error": {"code": 404}})
            else:
                self._answer(404, {"error": {"code": 404, "message": f"no stand-in for {path}"}})

        def _objects(self, bucket: str, name: str, query: dict[str, str]) -> None:
            """objects.list (by prefix) and objects.get (?alt=media) over api.storage."""
            root = (api.storage or Path("/nonexistent")) / bucket
            if not name:
                prefix = query.get("prefix", "")
                files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else []
                names = [p.relative_to(root).as_posix() for p in files]
                items = [{"name": n, "bucket": bucket} for n in names if n.startswith(prefix)]
                return self._answer(200, {"kind": "storage#objects", "items": items})
            path = root / name
            if not path.is_file():
                return self._answer(404, {"error": {"code": 404, "message": f"no {name}"}})
            data = path.read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _upload(self, bucket: str, query: dict[str, str], data: bytes) -> None:
            """objects.insert (uploadType=media) into api.storage; recorded with its token."""
            token = self.headers.get("Authorization", "")
            api.requests.append(Recorded("POST", f"/upload/{bucket}/{query.get('name')}",
                                         {"authorization": token, "size": len(data)}))  # fmt: skip
            if api.storage is None or query.get("uploadType") != "media" or not query.get("name"):
                return self._answer(400, {"error": {"code": 400, "message": "bad upload"}})
            if token != "Bearer stand-in-token":
                return self._answer(401, {"error": {"code": 401, "message": "no token"}})
            target = api.storage / bucket / query["name"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            self._answer(200, {"bucket": bucket, "name": query["name"], "size": str(len(data))})

        def _lro(self, resource: str, kind: str, response: dict[str, Any]) -> None:
            """A Vertex AI long-running operation, done at once."""
            name = f"{resource}/operations/{len(api.requests)}"
            typed = {"@type": f"type.googleapis.com/google.cloud.aiplatform.v1.{kind}", **response}
            self._answer(200, {"name": name, "done": True, "response": typed})

        def _vertex_serving(self, method: str, path: str, body: Any, query: dict[str, str]) -> None:
            """Vertex AI models (upload, get, delete) and endpoints (create, get, list, delete,
            deployModel, undeployModel, predict). An endpoint with a deployed model cannot be
            deleted, nor a model that is deployed, as on Google's API."""
            parent = re.search(r"(projects/[^/]+/locations/[^/]+)", path)[1]  # type: ignore[index]
            found = re.search(r"/(models|endpoints)(?::upload|/([^/:]+))?(?::(\w+))?$", path)
            kind, item, verb = (found[1], found[2], found[3]) if found else ("", None, None)
            store = api.models if kind == "models" else api.endpoints
            missing = {"error": {"code": 404, "status": "NOT_FOUND", "message": f"{path}: none"}}
            if kind == "models" and path.endswith(":upload"):
                model_id = body.get("modelId") or str(len(api.models) + 1)
                name = f"{parent}/models/{model_id}"
                store[model_id] = {
                    **body["model"],
                    "name": name,
                    "versionId": "1",
                    "supportedDeploymentResourcesTypes": ["DEDICATED_RESOURCES"],
                }
                return self._lro(
                    name, "UploadModelResponse", {"model": name, "modelVersionId": "1"}
                )
            if kind == "endpoints" and item is None and method == "POST":
                endpoint_id = query.get("endpointId") or str(len(api.endpoints) + 1)
                name = f"{parent}/endpoints/{endpoint_id}"
                store[endpoint_id] = {
                    **body,
                    "name": name,
                    "deployedModels": [],
                    "trafficSplit": {},
                }
                return self._lro(name, "Endpoint", store[endpoint_id])
            if item is None:
                return self._answer(200, {kind: list(store.values())})
            if item not in store:
                return self._answer(404, missing)
            entry: dict[str, Any] = store[item]
            if method == "GET":
                return self._answer(200, entry)
            if method == "DELETE":
                deployed = [m for e in api.endpoints.values() for m in e["deployedModels"]]
                in_use = entry.get("deployedModels") or [
                    m for m in deployed if m["model"] == entry["name"]
                ]
                if in_use:
                    refusal = {"code": 400, "status": "FAILED_PRECONDITION",
                               "message": f"{entry['name']} has deployed models"}  # fmt: skip
                    return self._answer(400, {"error": refusal})
                del store[item]
                return self._lro(entry["name"], "DeleteOperationMetadata", {})
            if verb == "deployModel" and not api.serving_quota:
                refusal = {
                    "code": 429,
                    "status": "RESOURCE_EXHAUSTED",
                    "message": "Quota exceeded for aiplatform.googleapis.com/"
                    "custom_model_serving_cpus",
                }
                return self._answer(429, {"error": refusal})
            if verb == "deployModel":
                model = {**body["deployedModel"], "id": str(1000 + len(api.requests))}
                entry["deployedModels"].append(model)
                entry["trafficSplit"] = {model["id"]: 100}
                if api.deploy_fails:
                    if len(api.bodies("POST", r":deployModel$")) == 1:  # this one is recorded
                        return self._answer(503, {"error": {"code": 503, "message": "unavailable"}})
                    return self._answer(409, {"error": {"code": 409, "status": "ABORTED",
                                                        "message": "aborted"}})  # fmt: skip
                return self._lro(entry["name"], "DeployModelResponse", {"deployedModel": model})
            if verb == "undeployModel" and api.undeploy_fails:
                refusal = {"code": 400, "status": "FAILED_PRECONDITION", "message": "refused"}
                return self._answer(400, {"error": refusal})
            if verb == "undeployModel":
                entry["deployedModels"] = [
                    m for m in entry["deployedModels"] if m["id"] != body["deployedModelId"]
                ]
                entry["trafficSplit"] = {}
                return self._lro(entry["name"], "UndeployModelResponse", {})
            if verb == "predict":
                ids = [m["id"] for m in entry["deployedModels"]]
                answer = {"predictions": [{"class": "0"} for _ in body["instances"]]}
                return self._answer(200, {**answer, "deployedModelId": ids[0] if ids else ""})
            return self._answer(404, missing)

        def do_GET(self) -> None:
            self._route("GET")

        def do_POST(self) -> None:
            self._route("POST")

        def do_DELETE(self) -> None:
            self._route("DELETE")

        def do_PUT(self) -> None:
            self._route("PUT")

    return Handler


def gcloud_env(api: GoogleApi, folder: Path) -> dict[str, str]:
    """What points the real gcloud at the stand-in: its own config in `folder`, a dummy token,
    every API it calls overridden, no prompts."""
    (folder / "token").write_text("dummy-token\n")
    return {
        "CLOUDSDK_CONFIG": str(folder / "gcloud"),
        "CLOUDSDK_AUTH_ACCESS_TOKEN_FILE": str(folder / "token"),
        "CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE": f"{api.url}/compute/v1/",
        "CLOUDSDK_API_ENDPOINT_OVERRIDES_STORAGE": f"{api.url}/storage/v1/",
        "CLOUDSDK_API_ENDPOINT_OVERRIDES_AIPLATFORM": f"{api.url}/",
        "CLOUDSDK_API_ENDPOINT_OVERRIDES_IAM": f"{api.url}/iam/",
        "CLOUDSDK_API_ENDPOINT_OVERRIDES_IAMCREDENTIALS": f"{api.url}/iamcredentials/",
        "CLOUDSDK_API_ENDPOINT_OVERRIDES_CLOUDRESOURCEMANAGER": f"{api.url}/resourcemanager/",
        "CLOUDSDK_API_ENDPOINT_OVERRIDES_ARTIFACTREGISTRY": f"{api.url}/artifactregistry/",
        "CLOUDSDK_API_ENDPOINT_OVERRIDES_SECRETMANAGER": f"{api.url}/secretmanager/",
        "CLOUDSDK_CORE_DISABLE_PROMPTS": "1",
    }


@contextlib.contextmanager
def serve() -> Iterator[GoogleApi]:
    """The stand-in on a free loopback port, for the length of the block."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(GoogleApi("")))
    api = GoogleApi(f"http://127.0.0.1:{server.server_address[1]}")
    server.RequestHandlerClass = _handler(api)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()
