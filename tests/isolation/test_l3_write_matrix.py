"""Every port and router write of ``l3_write_matrix.py`` (a member's ``create_port``,
``update_port`` and ``add_router_interface`` with each device_owner, device_id and fixed_ips, on
its own network, another project's shared one, the external one and another project's private
one) gets, from a running Networking API, the answer the matrix's rules give; each allowed write
is undone before the next, so every case starts from the same state. docs/policy.md shows the same
matrix."""

from __future__ import annotations

import httpx
import pytest

from nefos.config import load_config
from nefos.control.network.service import component

from tests.isolation import l3_write_matrix as matrix
from tests.isolation import policy_matrix
from tests.noauth import ADMIN
from tests.schema import open_runtime

CALLER_PROJECT, OTHER_PROJECT = "c" * 32, "v" * 32
CALLER = {"X-Project-Id": CALLER_PROJECT, "X-User-Id": "u" * 32, "X-Roles": "member,reader"}
OTHERS = {"X-Project-Id": OTHER_PROJECT, "X-User-Id": "w" * 32, "X-Roles": "member,reader"}
CIDRS = {"own": "10.81.0", "shared": "10.82.0", "external": "172.26.0", "private": "10.84.0"}


def test_docs_show_the_matrix():
    text = policy_matrix.DOCS_FILE.read_text()
    assert policy_matrix.current_docs_section(text, matrix.BEGIN, matrix.END) == matrix.render(), (
        "docs/policy.md's port and router write matrix is stale: run python tests/isolation/policy_matrix.py")


@pytest.fixture
async def api(tmp_path):
    rt = await open_runtime(load_config(state_dir=tmp_path, auth_strategy="noauth"))
    network = component(rt)
    await network.start()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=network.app),
                                     base_url="http://neutron:9696") as client:
            yield client
    finally:
        await network.stop()
        await rt.close()


async def _ok(client, method: str, path: str, body=None, headers=ADMIN) -> dict:
    r = await client.request(method, path, json=body, headers=headers)
    assert r.status_code < 300, (method, path, r.status_code, r.text)
    return r.json() if r.content else {}


async def _world(client) -> dict:
    """The caller's network, another project's shared one, the admin's external one and another
    project's private one (each with a subnet), and a router of the caller's and of the other project."""
    await _ok(client, "PUT", f"/v2.0/quotas/{CALLER_PROJECT}", {"quota": {"port": -1}})
    specs = {"own": ({}, CALLER), "shared": ({"shared": True, "project_id": OTHER_PROJECT}, ADMIN),
             "external": ({"router:external": True}, ADMIN), "private": ({}, OTHERS)}
    world: dict = {"networks": {}, "subnets": {}}
    for kind, (extra, headers) in specs.items():
        net = (await _ok(client, "POST", "/v2.0/networks", {"network": {"name": kind, **extra}}, headers))["network"]
        subnet_body = {"network_id": net["id"], "cidr": f"{CIDRS[kind]}.0/24", "ip_version": 4,
                       "enable_dhcp": kind != "external"}
        if kind == "shared":
            subnet_body["project_id"] = OTHER_PROJECT
        world["networks"][kind] = net["id"]
        world["subnets"][kind] = (await _ok(client, "POST", "/v2.0/subnets", {"subnet": subnet_body}, headers))["subnet"]
    world["routers"] = {
        "own router": (await _ok(client, "POST", "/v2.0/routers", {"router": {"name": "own"}}, CALLER))["router"]["id"],
        "another project's router": (await _ok(client, "POST", "/v2.0/routers", {"router": {"name": "other"}},
                                               OTHERS))["router"]["id"]}
    return world


def _fixed_ips(world: dict, case: matrix.Case) -> list[dict] | None:
    subnet = world["subnets"][case.network]
    if case.fixed_ips == "a free address":
        return [{"subnet_id": subnet["id"], "ip_address": f"{CIDRS[case.network]}.200"}]
    if case.fixed_ips == "the subnet's gateway":
        return [{"subnet_id": subnet["id"], "ip_address": subnet["gateway_ip"]}]
    return None


def _port_body(world: dict, case: matrix.Case) -> dict:
    body: dict = {}
    if case.owner != "none":
        body["device_owner"] = case.owner
    if case.device_id != "none":
        body["device_id"] = world["routers"][case.device_id]
    fixed = _fixed_ips(world, case)
    if fixed is not None:
        body["fixed_ips"] = fixed
    return body


async def _callers_port(client, world: dict, case: matrix.Case, fixed_ips: list[dict] | None,
                        project: str = CALLER_PROJECT) -> str:
    """A plain port of the caller's (or ``project``'s) on the case's network (the admin makes it:
    the caller may not on every network)."""
    body = {"network_id": world["networks"][case.network], "project_id": project}
    if fixed_ips is not None:
        body["fixed_ips"] = fixed_ips
    return (await _ok(client, "POST", "/v2.0/ports", {"port": body}))["port"]["id"]


async def _run(client, world: dict, case: matrix.Case) -> httpx.Response:
    """Send the case as the caller; undo what it made or changed."""
    if case.operation == "create_port":
        body = {"network_id": world["networks"][case.network], **_port_body(world, case)}
        r = await client.post("/v2.0/ports", json={"port": body}, headers=CALLER)
        if r.status_code == 201:
            await _ok(client, "DELETE", f"/v2.0/ports/{r.json()['port']['id']}")
        return r
    if case.operation == "update_port" and case.port == "router interface":
        path, info = f"/v2.0/routers/{world['routers']['own router']}", {"subnet_id": world["subnets"]["own"]["id"]}
        port = (await _ok(client, "PUT", f"{path}/add_router_interface", info, CALLER))["port_id"]
        r = await client.put(f"/v2.0/ports/{port}", json={"port": _port_body(world, case)}, headers=CALLER)
        await _ok(client, "PUT", f"{path}/remove_router_interface", {"port_id": port}, CALLER)
        return r
    if case.operation == "update_port":
        port = await _callers_port(client, world, case, None,
                                   OTHER_PROJECT if case.port == "another project's" else CALLER_PROJECT)
        r = await client.put(f"/v2.0/ports/{port}", json={"port": _port_body(world, case)}, headers=CALLER)
        await _ok(client, "DELETE", f"/v2.0/ports/{port}")
        return r
    path = f"/v2.0/routers/{world['routers'][case.router]}"
    if case.operation == "add_router_interface by subnet":
        info = {"subnet_id": world["subnets"][case.network]["id"]}
        r = await client.put(f"{path}/add_router_interface", json=info, headers=CALLER)
        if r.status_code == 200:
            await _ok(client, "PUT", f"{path}/remove_router_interface", info, CALLER)
        return r
    port = await _callers_port(client, world, case, _fixed_ips(world, case))
    r = await client.put(f"{path}/add_router_interface", json={"port_id": port}, headers=CALLER)
    if r.status_code == 200:
        await _ok(client, "PUT", f"{path}/remove_router_interface", {"port_id": port}, CALLER)
    else:
        await _ok(client, "DELETE", f"/v2.0/ports/{port}")
    return r


async def test_every_port_and_router_write_gets_the_answer_of_the_rules(api):
    world = await _world(api)
    wrong = []
    for case in matrix.cases():
        status, error, rule = matrix.expected(case)
        r = await _run(api, world, case)
        got_error = r.json().get("NeutronError", {}).get("type") if r.status_code >= 400 else None
        if r.status_code != status or (error is not None and got_error != error):
            wrong.append(f"{case}: expected {status} {error or ''} ({rule}), got {r.status_code} {r.text[:200]}")
    assert not wrong, f"{len(wrong)} of {len(matrix.cases())} cases:\n" + "\n".join(wrong)
