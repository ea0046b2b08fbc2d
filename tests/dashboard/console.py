"""What the console's tests share: a cloud with Keystone sign-in and its console, a second project
with a member of its own, a browser-less client signed in through the sign-in form, and a live
event stream opened as a page opens it."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time

import httpx

from nefos.control.identity.bootstrap import bootstrap
from nefos.http_client import verified_tls
from tests.clouds import start_cloud


async def console_cloud(tmp_path, **overrides):
    harness = await start_cloud(tmp_path, fake_hosts=1, auth_strategy="keystone", **overrides)
    harness.accounts = await bootstrap(harness.rt)
    harness.console = f"http://127.0.0.1:{harness.rt.cfg.dashboard_port}"
    return harness


def csrf_of(html: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', html).group(1)


def client_of(cloud, **kwargs) -> httpx.AsyncClient:
    """A browser-less client of the console; like a browser it says where its forms come from."""
    kwargs.setdefault("timeout", 30)
    return httpx.AsyncClient(verify=verified_tls(), base_url=cloud.console, headers={"Origin": cloud.console}, **kwargs)


async def sign_in(client: httpx.AsyncClient, account: dict) -> httpx.Response:
    """The sign-in form filled in and posted, as a browser does: the form first, then the post."""
    form = (await client.get("/login")).text
    return await client.post("/login", data={"username": account["username"], "password": account["password"],
                                             "project": account.get("project_name", ""), "csrf": csrf_of(form)})


async def signed_in(cloud, who: str | dict = "demo", **kwargs) -> httpx.AsyncClient:
    account = cloud.accounts[who] if isinstance(who, str) else who
    client = client_of(cloud, **kwargs)
    r = await sign_in(client, account)
    assert r.status_code == 303 and r.headers["location"] == "/servers", r.text
    return client


@contextlib.asynccontextmanager
async def identity_as(cloud, account: dict):
    """The Identity API (``/v3``), with a token of ``account``'s (its ``X-Auth-Token`` header)."""
    base = f"http://127.0.0.1:{cloud.rt.cfg.identity_api_port}/v3"
    async with httpx.AsyncClient(verify=verified_tls(), base_url=base, timeout=30) as identity:
        r = await identity.post("/auth/tokens", json={"auth": {"identity": {"methods": ["password"], "password": {
            "user": {"name": account["username"], "password": account["password"], "domain": {"name": "Default"}}}},
            "scope": {"project": {"name": account["project_name"], "domain": {"name": "Default"}}}}})
        assert r.status_code == 201, r.text
        identity.headers["X-Auth-Token"] = r.headers["x-subject-token"]
        yield identity


def identity_as_admin(cloud):
    return identity_as(cloud, cloud.accounts["admin"])


async def second_member(cloud, name: str = "other") -> dict:
    """A member of a project of its own, made through the Identity API by the admin."""
    async with identity_as_admin(cloud) as identity:
        r = await identity.post("/projects", json={"project": {"name": f"{name}-project"}})
        assert r.status_code == 201, r.text
        project = r.json()["project"]
        password = f"{name}-password-0123456789"
        r = await identity.post("/users", json={"user": {
            "name": name, "password": password, "default_project_id": project["id"]}})
        assert r.status_code == 201, r.text
        user = r.json()["user"]
        roles = (await identity.get("/roles", params={"name": "member"})).json()["roles"]
        r = await identity.put(f"/projects/{project['id']}/users/{user['id']}/roles/{roles[0]['id']}")
        assert r.status_code == 204, r.text
    return {"username": name, "password": password, "project_name": project["name"], "user_id": user["id"],
            "project_id": project["id"]}


class Stream:
    """``GET /events`` as the page's EventSource opens it; a 200 is read up to its first message, the
    Compute API's ``stream.connected``: the relay then holds its connection to the API. The reader
    is kept: a reader collected as garbage would close the stream."""

    def __init__(self, response: httpx.Response):
        self.response = response
        self.status_code = response.status_code
        self.headers = response.headers
        self.lines = response.aiter_lines()

    async def aclose(self) -> None:
        await self.lines.aclose()
        await self.response.aclose()


async def open_stream(client: httpx.AsyncClient, path: str = "/events", **params) -> Stream:
    stream = Stream(await client.send(client.build_request("GET", path, params=params), stream=True))
    if stream.status_code == 200:
        while await anext(stream.lines) != "event: stream.connected":
            pass
    return stream


async def stream_once_there_is_room(client: httpx.AsyncClient, within: float = 10.0, **kwargs) -> Stream:
    """A stream opened as soon as the budgets it counts against have room: a closed stream's place
    comes back once the server has seen it closed."""
    deadline = time.monotonic() + within
    while (stream := await open_stream(client, **kwargs)).status_code != 200:
        await stream.aclose()
        assert time.monotonic() < deadline, f"no room for a stream within {within} s"
        await asyncio.sleep(0.1)
    return stream
