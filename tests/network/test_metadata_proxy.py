"""The isolated-metadata proxy (``nefos.agents.metadata_proxy``).

Unit level: a proxy served on a loopback socket in front of a fake metadata service (the
identification headers it adds and drops, unknown sources, garbage), and the identification of a
source address through the network service's ports. Then the real thing in a namespace: a DHCP
agent (real dnsmasq) beside a cloud on the fake driver with its metadata service; a test namespace
plugged into the network's bridge, with a booted server's MAC, takes its lease with busybox's
udhcpc (which must get the route to 169.254.169.254) and fetches the server's metadata through the
proxy in the DHCP namespace. Root, iproute2, dnsmasq-base and busybox needed (scripts/setup-libvirt.sh).
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import uuid

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from nefos.context import admin_context
from nefos.clients import metadata as identification
from nefos.agents import metadata_proxy as mp
from nefos.http_client import verified_tls
from tests.network.conftest import PROJECT

SECRET = "s3cret"
INSTANCE = "11111111-2222-4333-8444-555555555555"
TENANT = "t" * 32


class FakeService:
    """The metadata service as a recorder: answers with what it was sent."""

    def __init__(self):
        self.seen: list[Request] = []

        async def serve(request: Request):
            self.seen.append(request)
            if request.url.path == "/big":
                return Response(b"x" * (mp.MAX_RESPONSE_BYTES + 1))
            return JSONResponse({"path": request.url.path, "query": request.url.query,
                                 "method": request.method, "body": (await request.body()).decode(),
                                 "headers": [[k, v] for k, v in request.headers.items()]})
        self.app = Starlette(routes=[Route("/{path:path}", serve, methods=["GET", "HEAD", "POST"])])


async def serve_on_loopback(proxy: mp.NetworkProxy) -> int:
    """Serve ``proxy`` on 127.0.0.1 (a free port, returned)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # as the proxy listens in a namespace
    sock.setblocking(False)
    await proxy.serve(sock)
    return sock.getsockname()[1]


@pytest.fixture
async def proxied():
    """A proxy on 127.0.0.1 (any port) that knows 127.0.0.1 as INSTANCE of TENANT."""
    service = FakeService()
    lookups = []

    async def lookup(network_id, ip):
        lookups.append((network_id, ip))
        return (INSTANCE, TENANT) if ip == "127.0.0.1" else None

    upstream = httpx.AsyncClient(transport=httpx.ASGITransport(app=service.app), base_url="http://metadata")
    proxy = mp.NetworkProxy("net-1", upstream, SECRET, lookup)
    port = await serve_on_loopback(proxy)
    async with httpx.AsyncClient(verify=verified_tls(), base_url=f"http://127.0.0.1:{port}", trust_env=False) as client:
        yield {"client": client, "service": service, "port": port, "lookups": lookups, "proxy": proxy}
    await proxy.close()
    await upstream.aclose()


async def raw(port: int, data: bytes) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    try:
        await writer.drain()
        writer.write_eof()  # all sent: an incomplete request stays incomplete
    except ConnectionError:
        pass  # answered and closed before it read everything: the answer is still there
    answer = await asyncio.wait_for(reader.read(), 20)
    writer.close()
    status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0
    return status, answer


async def test_the_instance_is_signed_for_and_the_guest_s_own_identification_is_dropped(proxied):
    client = proxied["client"]
    forged = {"X-Instance-ID": "66666666-7777-4888-9999-000000000000", "X-Tenant-ID": "evil",
              "X-Instance-ID-Signature": "0" * 64, "x-instance-id-signature": "1" * 64,
              "X-Forwarded-For": "10.0.0.99", "X-Neutron-Network-ID": "other", "User-Agent": "cloud-init"}
    r = await client.get("/openstack/latest/meta_data.json?x=1&y=%2F", headers=forged)
    assert r.status_code == 200, r.text
    seen = r.json()
    assert seen["path"] == "/openstack/latest/meta_data.json" and seen["query"] == "x=1&y=%2F"
    headers: dict[str, list[str]] = {}
    for k, v in seen["headers"]:
        headers.setdefault(k.lower(), []).append(v)
    assert headers["x-instance-id"] == [INSTANCE]
    assert headers["x-tenant-id"] == [TENANT]
    assert headers["x-instance-id-signature"] == [identification.sign(SECRET, INSTANCE)]
    assert headers["x-forwarded-for"] == ["127.0.0.1"]
    assert "x-neutron-network-id" not in headers
    assert headers["user-agent"] == ["cloud-init"]  # the rest goes on
    assert proxied["lookups"] == [("net-1", "127.0.0.1")]
    # The service's own check accepts what the proxy signed.
    class H(dict):
        def getlist(self, name):
            return headers.get(name.lower(), [])

        def get(self, name, default=None):
            return (headers.get(name.lower()) or [default])[0]
    assert identification.signed_instance(H(), SECRET) == (INSTANCE, TENANT)

    r = await client.head("/openstack/latest/meta_data.json")
    assert r.status_code == 200 and r.content == b""
    assert proxied["service"].seen[-1].method == "HEAD"


async def test_an_unknown_source_is_404_and_nothing_is_forwarded(proxied):
    async def nobody(network_id, ip):
        return None
    proxied["proxy"].lookup = nobody
    r = await proxied["client"].get("/openstack/latest/meta_data.json", headers={"X-Instance-ID": INSTANCE})
    assert r.status_code == 404
    assert proxied["service"].seen == []


@pytest.mark.parametrize("data, status", [
    (b"garbage\r\n\r\n", 400),
    (b"GET /a HTTP/1.1\r\nHost: x\r\n", 400),  # never completed
    (b"GET /a HTTP/9.9\r\n\r\n", 400),
    (b"GET a HTTP/1.1\r\n\r\n", 400),
    (b"GET http://elsewhere/ HTTP/1.1\r\n\r\n", 400),
    (b"GET /\xff\xfe HTTP/1.1\r\n\r\n", 400),
    (b"GET /a b HTTP/1.1\r\n\r\n", 400),
    (b"GET /a HTTP/1.1\r\nno colon\r\n\r\n", 400),
    (b"GET /a HTTP/1.1\r\n folded: x\r\n\r\n", 400),
    (b"GET /a HTTP/1.1\r\nX: \x00\r\n\r\n", 400),
    (b"GET /a HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
    (b"GET /a HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400),
    (b"GET /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    (b"GET /a HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n", 413),
    (b"GET /a HTTP/1.1\r\n" + b"X-A: " + b"a" * (mp.MAX_HEAD_BYTES + 10) + b"\r\n\r\n", 431),
    (b"GET /a HTTP/1.1\r\n" + b"X: y\r\n" * (mp.MAX_HEADERS + 1) + b"\r\n", 431),
    (b"PUT /a HTTP/1.1\r\nContent-Length: 2\r\n\r\nab", 405),
    (b"POST /a HTTP/1.1\r\nContent-Length: 5000\r\n\r\n" + b"a" * 5000, 413),
    (b"DELETE /a HTTP/1.1\r\n\r\n", 405),
])
async def test_garbage_is_a_4xx_never_a_500(proxied, data, status):
    got, answer = await raw(proxied["port"], data)
    assert got == status, answer
    assert proxied["service"].seen == []


async def test_a_small_body_is_dropped_and_the_upstream_s_failures_are_502(proxied):
    got, answer = await raw(proxied["port"], b"GET /ok HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc")
    assert got == 200 and json.loads(answer.split(b"\r\n\r\n", 1)[1])["path"] == "/ok"
    assert (await proxied["client"].get("/big")).status_code == 502

    async def broken(network_id, ip):
        raise RuntimeError("bus down")
    proxied["proxy"].lookup = broken
    assert (await proxied["client"].get("/x")).status_code == 502


async def test_a_post_is_forwarded_with_its_body_and_a_get_s_body_is_not(proxied):
    """The guest posts its encrypted password (openstack/<version>/password) through the proxy."""
    got, answer = await raw(proxied["port"], b"POST /openstack/latest/password HTTP/1.1\r\n"
                                             b"Content-Length: 6\r\n\r\ns3cret")
    sent = json.loads(answer.split(b"\r\n\r\n", 1)[1])
    assert got == 200 and (sent["method"], sent["body"]) == ("POST", "s3cret"), answer
    assert dict(sent["headers"])["x-instance-id"] == INSTANCE
    got, answer = await raw(proxied["port"], b"GET /x HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc")
    assert got == 200 and json.loads(answer.split(b"\r\n\r\n", 1)[1])["body"] == ""


async def test_an_unreachable_service_is_502():
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))  # bound, never listening: connections refused
    upstream = httpx.AsyncClient(verify=verified_tls(),
                                 base_url=f"http://127.0.0.1:{dead.getsockname()[1]}", trust_env=False)

    async def lookup(network_id, ip):
        return INSTANCE, TENANT
    proxy = mp.NetworkProxy("n", upstream, SECRET, lookup)
    port = await serve_on_loopback(proxy)
    try:
        status, _ = await raw(port, b"GET /openstack HTTP/1.1\r\n\r\n")
        assert status == 502
    finally:
        await proxy.close()
        await upstream.aclose()
        dead.close()


async def test_the_source_is_identified_through_the_network_s_ports(rt, manager):
    ctx = admin_context()
    net = await manager.create_network(ctx, {"name": "a", "project_id": PROJECT})
    other = await manager.create_network(ctx, {"name": "b", "project_id": PROJECT})
    for n in (net, other):
        await manager.create_subnet(ctx, {"network_id": n["id"], "cidr": "10.66.0.0/24", "ip_version": 4})
    vm = str(uuid.uuid4())
    port = await manager.create_port(ctx, {"network_id": net["id"], "device_id": vm, "device_owner": "compute:nova",
                                           "project_id": PROJECT, "fixed_ips": [{"ip_address": "10.66.0.10"}]})
    await manager.create_port(ctx, {"network_id": net["id"], "device_id": "dhcp-x", "device_owner": "network:dhcp",
                                    "fixed_ips": [{"ip_address": "10.66.0.2"}]})
    await manager.create_port(ctx, {"network_id": net["id"], "fixed_ips": [{"ip_address": "10.66.0.11"}]})
    lookup = mp.port_lookup(rt)
    assert await lookup(net["id"], "10.66.0.10") == (vm, PROJECT)
    assert port["fixed_ips"][0]["ip_address"] == "10.66.0.10"
    assert await lookup(other["id"], "10.66.0.10") is None  # the same address on another network
    assert await lookup(net["id"], "10.66.0.99") is None  # nobody's
    assert await lookup(net["id"], "10.66.0.2") is None  # the DHCP port: no instance
    assert await lookup(net["id"], "10.66.0.11") is None  # a port of no device


# The real thing, in namespaces --------------------------------------------------------------------
UDHCPC_SCRIPT = """#!/bin/sh
[ "$1" = bound ] || exit 0
echo "ip=$ip mask=$mask router=$router staticroutes=$staticroutes" > "$NEFOS_LEASE"
"""


async def run(*argv: str, check: bool = True) -> tuple[int, str]:
    """A command, off the event loop's back (the proxy answers on this loop meanwhile)."""
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    if check:
        assert proc.returncode == 0, (argv, out, err)
    return proc.returncode, out.decode() + err.decode()


FETCH = """
import http.client, json, sys
c = http.client.HTTPConnection("169.254.169.254", 80, timeout=20)
c.request("GET", sys.argv[1], headers={k: v for k, v in (h.split("=", 1) for h in sys.argv[2:])})
r = c.getresponse()
print(json.dumps({"status": r.status, "body": r.read().decode(errors="replace")}))
"""


async def fetch(ns: str, path: str, **headers) -> dict:
    _, out = await run("ip", "netns", "exec", ns, sys.executable, "-c", FETCH, path,
                       *(f"{k.replace('_', '-')}={v}" for k, v in headers.items()))
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture
async def dhcp_cloud(tmp_path):
    from nefos.agents.dhcp_agent import DhcpAgent
    from tests.metadata.conftest import read_secret
    from tests.clouds import start_cloud, stop_cloud
    harness = await start_cloud(tmp_path, fake_hosts=1)
    harness.dhcp = DhcpAgent(harness.rt, "dhcp-md-test", interval=60.0)
    await harness.dhcp.start()
    harness.secret = read_secret(tmp_path)
    harness.links, harness.namespaces = [], []
    yield harness
    try:
        await harness.dhcp.stop()
        await stop_cloud(harness)
    finally:
        for link in harness.links:
            subprocess.run(["ip", "link", "del", link], capture_output=True)
        for ns in harness.namespaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


async def test_a_guest_address_on_the_network_gets_its_route_and_its_metadata(dhcp_cloud, tmp_path):
    cloud = dhcp_cloud
    net = await cloud.make_network(name="iso-net", cidr="10.78.0.0/24")
    cloud.links.append("brq" + net["id"][:11])
    created = await cloud.boot(name="iso-vm", networks=[{"uuid": net["id"]}])
    other = await cloud.boot(name="iso-other", networks=[{"uuid": net["id"]}])
    server = await cloud.wait_status(created["server"]["id"], "ACTIVE")
    await cloud.wait_status(other["server"]["id"], "ACTIVE")
    (port,) = await cloud.ports(device_id=server["id"])
    ip = port["fixed_ips"][0]["ip_address"]
    (dhcp_port,) = await cloud.ports(network_id=net["id"], device_owner="network:dhcp")
    dhcp_ip = dhcp_port["fixed_ips"][0]["ip_address"]

    # dnsmasq's options: the host route to the metadata address via the DHCP port, and the default
    # route beside it (options 121 and 249).
    opts = (cloud.dhcp.state_dir / net["id"] / "opts").read_text().splitlines()
    routes = f"169.254.169.254/32,{dhcp_ip},0.0.0.0/0,10.78.0.1"
    subnet_tag = f"tag:subnet-{port['fixed_ips'][0]['subnet_id']}"
    assert f"{subnet_tag},option:classless-static-route,{routes}" in opts
    assert f"{subnet_tag},249,{routes}" in opts
    _, addrs = await run("ip", "-n", f"qdhcp-{net['id']}", "-o", "addr", "show")
    assert "169.254.169.254/32" in addrs

    # A "guest": a namespace with the server's MAC on a veth into the network's bridge.
    tag = uuid.uuid4().hex[:6]
    ns, outer, inner = f"nfmd-{tag}", f"mdo{tag}", f"mdi{tag}"
    cloud.namespaces.append(ns)
    cloud.links.append(outer)
    await run("ip", "netns", "add", ns)
    await run("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
    await run("ip", "link", "set", outer, "master", "brq" + net["id"][:11])
    await run("ip", "link", "set", outer, "up")
    await run("ip", "link", "set", inner, "netns", ns)
    await run("ip", "-n", ns, "link", "set", inner, "address", port["mac_address"])
    await run("ip", "-n", ns, "link", "set", inner, "up")

    # Its DHCP lease (busybox udhcpc, asking for option 121) holds the route.
    script = tmp_path / "udhcpc.script"
    script.write_text(UDHCPC_SCRIPT)
    script.chmod(0o755)
    lease = tmp_path / "lease"
    rc, out = await run("env", f"NEFOS_LEASE={lease}", "ip", "netns", "exec", ns, "busybox", "udhcpc", "-i", inner,
                        "-n", "-q", "-f", "-t", "5", "-T", "1", "-O", "staticroutes", "-s", str(script), check=False)
    assert rc == 0 and lease.exists(), out
    got = dict(kv.split("=", 1) for kv in lease.read_text().split(" ", 3))
    assert got["ip"] == ip and got["router"] == "10.78.0.1"
    assert got["staticroutes"].split() == ["169.254.169.254/32", dhcp_ip, "0.0.0.0/0", "10.78.0.1"]
    await run("ip", "-n", ns, "addr", "add", f"{got['ip']}/24", "dev", inner)
    await run("ip", "-n", ns, "route", "add", "169.254.169.254/32", "via", dhcp_ip)

    # Through the proxy in the DHCP namespace to the metadata service: this server's metadata,
    # whatever identification the guest claims.
    r = await fetch(ns, "/openstack/latest/meta_data.json", X_Instance_ID=other["server"]["id"],
                    X_Tenant_ID=server["tenant_id"],
                    X_Instance_ID_Signature=identification.sign("guess", other["server"]["id"]))
    assert r["status"] == 200, r
    md = json.loads(r["body"])
    assert md["uuid"] == server["id"] and md["name"] == "iso-vm" and md["project_id"] == server["tenant_id"]
    r = await fetch(ns, "/latest/meta-data/local-ipv4")
    assert (r["status"], r["body"]) == (200, ip)

    # Another address on the network (no instance's) gets 404.
    await run("ip", "-n", ns, "addr", "flush", "dev", inner)
    await run("ip", "-n", ns, "addr", "add", "10.78.0.200/24", "dev", inner)
    await run("ip", "-n", ns, "route", "add", "169.254.169.254/32", "via", dhcp_ip)
    r = await fetch(ns, "/openstack/latest/meta_data.json")
    assert r["status"] == 404, r

    # The network gone: its proxy and namespace go with it.
    for sid in (server["id"], other["server"]["id"]):
        r = await cloud.compute.delete(f"/v2.1/servers/{sid}")
        assert r.status_code == 204
        await cloud.wait_gone(sid)
    r = await cloud.network.delete(f"/v2.0/networks/{net['id']}")
    assert r.status_code == 204, r.text
    await cloud.dhcp.sync({net["id"]})
    assert net["id"] not in cloud.dhcp.metadata_proxies.proxies
    rc, _ = await run("ip", "netns", "pids", f"qdhcp-{net['id']}", check=False)
    assert rc != 0


async def test_the_routes_dnsmasq_gives(rt):
    from nefos.agents.dhcp_agent import DhcpAgent
    agent = DhcpAgent(rt, "routes-test")
    port = {"fixed_ips": [{"subnet_id": "a", "ip_address": "10.1.0.2"}, {"subnet_id": "b", "ip_address": "10.2.0.3"}]}
    with_gateway = {"id": "a", "gateway_ip": "10.1.0.1"}
    without = {"id": "b", "gateway_ip": None}
    assert agent._metadata_routes(with_gateway, port) == [
        "tag:subnet-a,option:classless-static-route,169.254.169.254/32,10.1.0.2,0.0.0.0/0,10.1.0.1",
        "tag:subnet-a,249,169.254.169.254/32,10.1.0.2,0.0.0.0/0,10.1.0.1"]
    assert agent._metadata_routes(without, port) == [  # no gateway: no default route to give
        "tag:subnet-b,option:classless-static-route,169.254.169.254/32,10.2.0.3",
        "tag:subnet-b,249,169.254.169.254/32,10.2.0.3"]
    assert agent._metadata_routes({"id": "c", "gateway_ip": "10.3.0.1"}, port) == []  # no DHCP address there
    agent.isolated_metadata = False
    assert agent._metadata_routes(with_gateway, port) == []
