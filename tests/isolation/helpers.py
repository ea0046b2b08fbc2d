"""Helpers for the isolation suite: a real `nefos up` process (auth_strategy=keystone), users and
projects made through its identity API, and per-user API clients holding real tokens."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml

from nefos.cmd.allinone import free_port
from nefos.http_client import verified_tls

BIN = Path(sys.executable).parent


class Api:
    """One user's token and the catalog it came with; requests go to ``service`` + path."""

    def __init__(self, auth_url: str, token: str, catalog: dict[str, str], user_id: str,
                 project_id: str | None):
        self.auth_url = auth_url
        self.token = token
        self.catalog = catalog
        self.user_id = user_id
        self.project_id = project_id
        self.http = httpx.Client(timeout=60, verify=verified_tls())

    def url(self, service: str, path: str) -> str:
        base = self.auth_url if service == "identity" else self.catalog[service]
        return base.rstrip("/") + path

    def request(self, method: str, service: str, path: str, *, token: str | None = None,
                headers: dict | None = None, **kw) -> httpx.Response:
        h = {"X-Auth-Token": token if token is not None else self.token, **(headers or {})}
        return self.http.request(method, self.url(service, path), headers=h, **kw)

    def get(self, service, path, **kw):
        return self.request("GET", service, path, **kw)

    def post(self, service, path, body=None, **kw):
        return self.request("POST", service, path, json=body, **kw)

    def put(self, service, path, body=None, **kw):
        return self.request("PUT", service, path, json=body, **kw)

    def patch(self, service, path, body=None, **kw):
        return self.request("PATCH", service, path, json=body, **kw)

    def delete(self, service, path, **kw):
        return self.request("DELETE", service, path, **kw)


def password_body(user: str, password: str, project: str | None = None, domain: str = "Default") -> dict:
    body = {"auth": {"identity": {"methods": ["password"], "password": {
        "user": {"name": user, "domain": {"name": domain}, "password": password}}}}}
    if project:
        body["auth"]["scope"] = {"project": {"name": project, "domain": {"name": domain}}}
    return body


def login(auth_url: str, user: str, password: str, project: str | None) -> Api:
    r = httpx.post(f"{auth_url}/auth/tokens", json=password_body(user, password, project), timeout=60,
                   verify=verified_tls())
    assert r.status_code == 201, r.text
    tok = r.json()["token"]
    catalog = {svc["type"]: next(e["url"] for e in svc["endpoints"] if e["interface"] == "public")
               for svc in tok.get("catalog", [])}
    return Api(auth_url, r.headers["x-subject-token"], catalog, tok["user"]["id"],
               tok.get("project", {}).get("id"))


def start_nefos(state: Path, extra_env: dict | None = None, fake_hosts: int = 1,
                driver: str = "fake", bin_dir: Path = BIN) -> tuple[subprocess.Popen, dict]:
    """``nefos up`` from ``bin_dir`` (another virtualenv's: without this tree on PYTHONPATH)."""
    env = dict(os.environ)
    if bin_dir != BIN:
        env.pop("PYTHONPATH", None)
    for name in ("COMPUTE", "NETWORK", "IMAGE", "IDENTITY"):
        env[f"NEFOS_{name}_API_PORT"] = str(free_port())
    env["NEFOS_METADATA_LISTEN_PORT"] = str(free_port())  # module fixtures start before tests/conftest's
    env["NEFOS_NOVNCPROXY_PORT"] = str(free_port())
    env["NEFOS_DASHBOARD_PORT"] = str(free_port())
    env["NEFOS_AUTH_STRATEGY"] = "keystone"
    env.update(extra_env or {})
    env.pop("OS_CLOUD", None)
    log = open(state / "nefos-up.log", "w")
    hosts = ["--fake-hosts", str(fake_hosts)] if driver == "fake" else []  # fake hosts are the fake driver's
    proc = subprocess.Popen([str(bin_dir / "nefos"), "up", "--state-dir", str(state), "--driver", driver, *hosts],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    clouds = state / "clouds.yaml"
    deadline = time.monotonic() + 90
    while not clouds.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("nefos up did not start:\n" + (state / "nefos-up.log").read_text())
        time.sleep(0.2)
    time.sleep(0.3)
    return proc, yaml.safe_load(clouds.read_text())["clouds"]


def stop_nefos(proc: subprocess.Popen, state: Path) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        assert proc.wait(timeout=30) == 0, (state / "nefos-up.log").read_text()[-5000:]
    finally:
        if proc.poll() is None:
            proc.kill()


@dataclass
class Tenancy:
    """admin; project A: a (member), a_reader (reader); project B: b (member)."""
    admin: Api
    a: Api
    a_reader: Api
    b: Api
    a_project: str
    b_project: str
    auth_url: str
    state: Path
    passwords: dict


def _id(r: httpx.Response, key: str) -> str:
    assert r.status_code in (200, 201), r.text
    return r.json()[key]["id"]


def make_tenancy(clouds: dict, state: Path) -> Tenancy:
    admin_cloud = clouds["nefos-admin"]["auth"]
    auth_url = admin_cloud["auth_url"].rstrip("/")
    admin = login(auth_url, admin_cloud["username"], admin_cloud["password"], admin_cloud["project_name"])
    roles = {r["name"]: r["id"] for r in admin.get("identity", "/roles").json()["roles"]}
    suffix = uuid.uuid4().hex[:6]
    projects = {}
    for name in ("A", "B"):
        projects[name] = _id(admin.post("identity", "/projects", {"project": {
            "name": f"iso-{name}-{suffix}", "domain_id": "default"}}), "project")
    passwords = {}
    apis = {}
    for user, project, role in (("a", "A", "member"), ("a_reader", "A", "reader"), ("b", "B", "member")):
        pw = uuid.uuid4().hex
        name = f"iso-{user}-{suffix}"
        uid = _id(admin.post("identity", "/users", {"user": {"name": name, "password": pw,
                                                             "domain_id": "default"}}), "user")
        r = admin.put("identity", f"/projects/{projects[project]}/users/{uid}/roles/{roles[role]}")
        assert r.status_code == 204, r.text
        passwords[user] = (name, pw, f"iso-{project}-{suffix}")
        apis[user] = login(auth_url, name, pw, f"iso-{project}-{suffix}")
    return Tenancy(admin=admin, a=apis["a"], a_reader=apis["a_reader"], b=apis["b"],
                   a_project=projects["A"], b_project=projects["B"], auth_url=auth_url, state=state,
                   passwords=passwords)


# Resource helpers (through the APIs only) ---------------------------------------------------------

def wait_server(api: Api, server_id: str, status: str = "ACTIVE", timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        r = api.get("compute", f"/servers/{server_id}")
        assert r.status_code == 200, r.text
        server = r.json()["server"]
        if server["status"] == status and not server.get("OS-EXT-STS:task_state"):
            return server
        assert server["status"] != "ERROR" or status == "ERROR", server
        assert time.monotonic() < deadline, f"server {server_id} is {server['status']}"
        time.sleep(0.2)


def image_id(api: Api, name: str = "nefos-tiny") -> str:
    r = api.get("image", "/v2/images", params={"name": name})
    assert r.status_code == 200, r.text
    return r.json()["images"][0]["id"]
