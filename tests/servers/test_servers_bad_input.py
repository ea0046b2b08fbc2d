"""Bad requests to servers and server actions that only a running cloud can judge.

Unknown flavor, image, network, port, key pair or security group (400, as
Nova answers them), unknown server (404), a state that forbids the action
(409), policy (403) and quota (403): each case asserts the status, Nova's
error body key and a message naming what is wrong — and that nothing was
created. The validation-only cases are in ``tests/api/test_servers_bad_input.py``.
"""

from __future__ import annotations

import pytest
import pytest_asyncio

from tests.clouds import ADMIN, member, start_cloud, stop_cloud

pytestmark = pytest.mark.asyncio(loop_scope="module")

KEYS = {400: "badRequest", 403: "forbidden", 404: "itemNotFound", 409: "conflictingRequest"}
MISSING = "6f1d1f8e-7a43-4f7e-9a55-1d3c5e0c2b77"
A = "a" * 32  # a project with exactly one network
B = "b" * 32  # a project with two networks
V237 = {"OpenStack-API-Version": "compute 2.37"}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(tmp_path_factory):
    """A cloud with networks, a used port, an ACTIVE, a STOPPED and a locked server."""
    cloud = await start_cloud(tmp_path_factory.mktemp("bad-input"), fake_hosts=1)
    try:
        w = {"cloud": cloud, "missing": MISSING}
        net = await cloud.make_network(headers=member(A))
        w["net"] = net["id"]
        r = await cloud.network.post("/v2.0/networks", json={"network": {"name": "bare"}}, headers=member(A))
        w["bare_net"] = r.json()["network"]["id"]  # no subnet
        await cloud.make_network("b1", "10.1.0.0/24", headers=member(B))
        await cloud.make_network("b2", "10.2.0.0/24", headers=member(B))
        r = await cloud.network.post("/v2.0/ports", json={"port": {"network_id": net["id"],
                                                                   "device_id": "someone-else"}},
                                     headers=member(A))
        assert r.status_code == 201, r.text
        w["used_port"] = r.json()["port"]["id"]
        w["used_ip"] = r.json()["port"]["fixed_ips"][0]["ip_address"]
        w["image"] = await cloud.default_image()
        servers = {}
        for name in ("active", "stopped", "locked"):
            created = await cloud.boot(name=name, networks=[{"uuid": net["id"]}], headers=member(A))
            servers[name] = created["server"]["id"]
        for sid in servers.values():
            await cloud.wait_status(sid, "ACTIVE", headers=member(A))
        await cloud.action(servers["stopped"], {"os-stop": None}, headers=member(A))
        await cloud.wait_status(servers["stopped"], "SHUTOFF", headers=member(A))
        await cloud.action(servers["locked"], {"lock": None}, headers=ADMIN)
        w.update(servers)
        r = await cloud.compute.get(f"/v2.1/servers/{servers['active']}/os-instance-actions", headers=member(A))
        assert r.status_code == 200
        yield w
    finally:
        await stop_cloud(cloud)


def create(**fields):
    def body(w):
        server = {"name": "bad", "imageRef": w["image"], "flavorRef": "1",
                  "networks": [{"uuid": w["net"]}]}
        for key, value in fields.items():
            value = value(w) if callable(value) else value
            if value is ...:
                server.pop(key, None)
            else:
                server[key] = value
        return {"server": server}
    return body


def net(**entry):
    return lambda w: [{k: (v(w) if callable(v) else v) for k, v in entry.items()}]


def _(key):
    return lambda w: w[key]


M = member(A)
CASES = [
    # (id, method, path template, body or body(w), headers, status, words the message must contain)
    ("unknown-flavor", "post", "/v2.1/servers", create(flavorRef="999"), M, 400, ["Flavor", "999"]),
    ("unknown-image", "post", "/v2.1/servers", create(imageRef=MISSING), M, 400, ["image"]),
    ("unknown-network", "post", "/v2.1/servers", create(networks=net(uuid=MISSING)), M, 400,
     ["Network", MISSING]),
    ("unknown-port", "post", "/v2.1/servers", create(networks=net(port=MISSING)), M, 400, ["Port", MISSING]),
    ("port-in-use", "post", "/v2.1/servers", create(networks=net(port=_("used_port"))), M, 409,
     ["Port", "in use"]),
    ("fixed-ip-outside-subnets", "post", "/v2.1/servers",
     create(networks=net(uuid=_("net"), fixed_ip="192.168.77.7")), M, 400, ["192.168.77.7"]),
    ("fixed-ip-in-use", "post", "/v2.1/servers",
     create(networks=net(uuid=_("net"), fixed_ip=_("used_ip"))), M, 400, ["Fixed IP", "in use"]),
    ("network-without-subnet", "post", "/v2.1/servers", create(networks=net(uuid=_("bare_net"))), M, 400,
     ["Network", "subnet"]),
    ("auto-with-two-networks", "post", "/v2.1/servers", create(networks="auto"), {**member(B), **V237}, 409,
     ["Multiple possible networks"]),
    ("fixed-ip-with-max-count", "post", "/v2.1/servers",
     create(networks=net(uuid=_("net"), fixed_ip="10.0.0.200"), max_count=2), M, 400,
     ["max_count", "fixed_ip"]),
    ("port-with-max-count", "post", "/v2.1/servers", create(networks=net(port=_("used_port")), max_count=2),
     M, 400, ["port"]),
    ("unknown-key-name", "post", "/v2.1/servers", create(key_name="nokey"), M, 400, ["key_name"]),
    ("unknown-security-group", "post", "/v2.1/servers", create(security_groups=[{"name": "nosuchgroup"}]), M,
     400, ["Security group", "nosuchgroup"]),
    ("unknown-availability-zone", "post", "/v2.1/servers", create(availability_zone="atlantis"), M, 400,
     ["availability zone"]),
    ("zone-host-by-member", "post", "/v2.1/servers", create(availability_zone="nova:host-1"), M, 403,
     ["forced_host"]),
    ("zone-unknown-host-by-admin", "post", "/v2.1/servers", create(availability_zone="nova:host-99"), ADMIN,
     400, ["host-99"]),
    ("unknown-server-group", "post", "/v2.1/servers",
     lambda w: {**create()(w), "os:scheduler_hints": {"group": MISSING}}, M, 400, ["server group", MISSING]),
    ("quota-instances", "post", "/v2.1/servers", create(min_count=11, max_count=11), M, 403,
     ["Quota exceeded", "instances"]),
    ("quota-metadata-items", "post", "/v2.1/servers",
     create(metadata={f"k{i}": "v" for i in range(129)}), M, 403, ["Quota exceeded", "metadata_items"]),
    ("show-unknown", "get", "/v2.1/servers/{missing}", None, M, 404, ["Instance", MISSING]),
    ("show-other-project", "get", "/v2.1/servers/{active}", None, member(B), 404, ["could not be found"]),
    ("update-unknown", "put", "/v2.1/servers/{missing}", {"server": {"name": "x"}}, M, 404, ["Instance"]),
    ("delete-unknown", "delete", "/v2.1/servers/{missing}", None, M, 404, ["Instance"]),
    ("action-unknown-server", "post", "/v2.1/servers/{missing}/action", {"os-stop": None}, M, 404,
     ["Instance"]),
    ("metadata-unknown-server", "get", "/v2.1/servers/{missing}/metadata", None, M, 404, ["Instance"]),
    ("metadata-unknown-key", "get", "/v2.1/servers/{active}/metadata/nokey", None, M, 404, ["Metadata item"]),
    ("delete-unknown-metadata-key", "delete", "/v2.1/servers/{active}/metadata/nokey", None, M, 404,
     ["Metadata item"]),
    ("instance-actions-unknown-server", "get", "/v2.1/servers/{missing}/os-instance-actions", None, M, 404,
     ["Instance"]),
    ("instance-action-unknown-request", "get", "/v2.1/servers/{active}/os-instance-actions/req-nope", None, M,
     404, ["req-nope"]),
    ("start-active", "post", "/v2.1/servers/{active}/action", {"os-start": None}, M, 409,
     ["start", "vm_state active"]),
    ("resume-active", "post", "/v2.1/servers/{active}/action", {"resume": None}, M, 409, ["resume", "active"]),
    ("unpause-active", "post", "/v2.1/servers/{active}/action", {"unpause": None}, M, 409, ["unpause"]),
    ("pause-stopped", "post", "/v2.1/servers/{stopped}/action", {"pause": None}, M, 409,
     ["pause", "vm_state stopped"]),
    ("suspend-stopped", "post", "/v2.1/servers/{stopped}/action", {"suspend": None}, M, 409, ["suspend"]),
    ("soft-reboot-stopped", "post", "/v2.1/servers/{stopped}/action", {"reboot": {"type": "SOFT"}}, M, 409,
     ["reboot", "stopped"]),
    ("stop-stopped", "post", "/v2.1/servers/{stopped}/action", {"os-stop": None}, M, 409, ["stop"]),
    ("stop-locked-by-member", "post", "/v2.1/servers/{locked}/action", {"os-stop": None}, M, 409, ["locked"]),
    ("rescue-unknown-server", "post", "/v2.1/servers/{missing}/action", {"rescue": None}, M, 404, ["Instance"]),
    ("rescue-other-project", "post", "/v2.1/servers/{active}/action", {"rescue": None}, member(B), 404,
     ["could not be found"]),
    ("rescue-unknown-image", "post", "/v2.1/servers/{active}/action", {"rescue": {"rescue_image_ref": MISSING}},
     M, 400, ["rescue image", MISSING]),
    ("rescue-locked-by-member", "post", "/v2.1/servers/{locked}/action", {"rescue": None}, M, 409, ["locked"]),
    ("unrescue-active", "post", "/v2.1/servers/{active}/action", {"unrescue": None}, M, 409,
     ["unrescue", "vm_state active"]),
    ("unrescue-other-project", "post", "/v2.1/servers/{active}/action", {"unrescue": None}, member(B), 404,
     ["could not be found"]),
    ("quota-injected-files", "post", "/v2.1/servers",
     create(personality=[{"path": f"/f{i}", "contents": "eA=="} for i in range(6)]), M, 403,
     ["Personality file limit exceeded"]),
    ("delete-locked-by-member", "delete", "/v2.1/servers/{locked}", None, M, 409, ["locked"]),
    ("update-locked-by-member", "put", "/v2.1/servers/{locked}", {"server": {"name": "x"}}, M, 409, ["locked"]),
    ("unlock-admin-lock-by-member", "post", "/v2.1/servers/{locked}/action", {"unlock": None}, M, 403,
     ["unlock"]),
    ("list-unknown-marker", "get", "/v2.1/servers?marker={missing}", None, M, 400, ["marker", MISSING]),
    ("detail-unknown-marker", "get", "/v2.1/servers/detail?limit=1&marker=nope", None, M, 400, ["marker"]),
]


@pytest.mark.parametrize("method,path,body,headers,status,words", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
async def test_bad_server_request(world, method, path, body, headers, status, words):
    cloud = world["cloud"]
    before = await _snapshot(cloud)
    kwargs = {"headers": headers}
    if body is not None:
        kwargs["json"] = body(world) if callable(body) else body
    r = await cloud.compute.request(method.upper(), path.format(**world), **kwargs)
    assert r.status_code == status, r.text
    assert set(r.json()) == {KEYS[status]}, r.text
    fault = r.json()[KEYS[status]]
    assert fault["code"] == status
    for word in words:
        assert word in fault["message"], fault["message"]
    assert await _snapshot(cloud) == before  # nothing created, nothing consumed


async def _snapshot(cloud) -> dict:
    r = await cloud.compute.get("/v2.1/servers", params={"all_tenants": 1})
    usage = {p: await cloud.quota_usage(p) for p in (A, B)}
    ports = await cloud.ports()
    return {"servers": sorted(s["id"] for s in r.json()["servers"]), "usage": usage,
            "ports": sorted(p["id"] for p in ports)}


async def test_list_filters_that_match_nothing_are_not_errors(world):
    """Nova answers an unknown flavor or status filter with an empty list, not an error."""
    cloud = world["cloud"]
    for query in ({"flavor": "999"}, {"status": "NOSUCHSTATUS"}, {"image": MISSING}, {"name": "^zzz"}):
        for path in ("/v2.1/servers", "/v2.1/servers/detail"):
            r = await cloud.compute.get(path, params=query, headers=M)
            assert r.status_code == 200, (query, r.text)
            assert r.json()["servers"] == [], query
