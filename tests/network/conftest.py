"""The network service over a fresh Runtime (temp SQLite, noauth): its REST app through httpx
and its manager served on the in-process bus for the compute-side client."""

from __future__ import annotations

import dataclasses

import httpx
import pytest

from nefos.agents.l2_agent import L2Agent
from nefos.bus import interfaces
from nefos.bus.versioning import VersionCaps
from nefos.config import load_config
from nefos.context import RequestContext
from nefos.clients.network import NetworkAPI
from nefos.control.network.service import component

from tests.network.wire import wire  # noqa: F401  (the firewall tests' bridged wire)
from tests.noauth import ADMIN  # noqa: E402  (the default clients send it)
from tests.schema import open_runtime
PROJECT = "p" * 32
OTHER = "o" * 32
USER = "u" * 32


def member(project: str = PROJECT, user: str = USER) -> dict:
    return {"X-Project-Id": project, "X-User-Id": user, "X-Roles": "member,reader"}


def member_ctx(project: str = PROJECT) -> RequestContext:
    return RequestContext(project_id=project, user_id=USER, roles=["member", "reader"], is_admin=False)


@pytest.fixture
async def rt(tmp_path):
    runtime = await open_runtime(load_config(state_dir=tmp_path, auth_strategy="noauth"))
    yield runtime
    await runtime.close()


@pytest.fixture
async def network(rt):
    comp = component(rt)
    await comp.start()
    yield comp
    await comp.stop()


@pytest.fixture
async def agent(request, rt, network):
    """An L2 agent on this host for the module's ``HOST``, over the network service; its firewall
    rules removed after."""
    l2 = L2Agent(rt, request.module.HOST)
    await l2.start()
    yield l2
    await l2.stop()
    await l2.remove_firewall()


@pytest.fixture
def manager(network):
    return network.manager


@pytest.fixture
async def client(network):
    transport = httpx.ASGITransport(app=network.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://neutron:9696", headers=ADMIN) as c:
        yield c


@pytest.fixture
def api(rt, network):
    return NetworkAPI(rt)


@pytest.fixture(params=["current", "pinned", "older"])
def peer(request, rt, manager, monkeypatch):
    """The network service as the compute-side client finds it: serving the current version,
    pinned to 1.0 by ``[upgrade_levels] network``, or not upgraded yet (it serves 1.0 only)."""
    if request.param == "pinned":
        monkeypatch.setattr(rt.bus, "version_caps", VersionCaps({"network": "1.0"}))
    elif request.param == "older":
        methods = {m: v for m, v in interfaces.NETWORK.methods.items() if v == "1.0"}
        monkeypatch.setattr(manager, "rpc_interface",
                            dataclasses.replace(interfaces.NETWORK, version="1.0", methods=methods, args={}))
    return request.param


@pytest.fixture
def calls(api, monkeypatch):
    """The methods the compute-side client sends, in order."""
    sent: list[str] = []
    real_call = api.client.call

    async def recording_call(ctx, method, **kwargs):
        sent.append(method)
        return await real_call(ctx, method, **kwargs)
    monkeypatch.setattr(api.client, "call", recording_call)
    return sent


class Helpers:
    def __init__(self, client: httpx.AsyncClient):
        self.client = client

    async def post(self, path: str, body: dict, headers=None, expect: int = 201) -> dict:
        r = await self.client.post(path, json=body, headers=headers or ADMIN)
        assert r.status_code == expect, r.text
        return r.json()

    async def network(self, name="net", headers=None, **extra) -> dict:
        return (await self.post("/v2.0/networks", {"network": {"name": name, **extra}}, headers))["network"]

    async def subnet(self, network_id: str, cidr="10.0.0.0/24", headers=None, **extra) -> dict:
        body = {"network_id": network_id, "cidr": cidr, "ip_version": 6 if ":" in cidr else 4, **extra}
        return (await self.post("/v2.0/subnets", {"subnet": body}, headers))["subnet"]

    async def port(self, network_id: str, headers=None, **extra) -> dict:
        return (await self.post("/v2.0/ports", {"port": {"network_id": network_id, **extra}}, headers))["port"]


@pytest.fixture
def h(client):
    return Helpers(client)
