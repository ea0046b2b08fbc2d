"""The L3 agent with real namespaces: two "guests" (namespaces with veths on their network's
bridge, given their ports' fixed IPs), a router with an interface on their subnet and a gateway on
an external bridge this test makes (with a host address, as `nefos up` gives br-ex-nefos), a
floating IP associated to guest A: the host reaches A through it, and the guests reach the host
through SNAT; disassociated it leads nowhere; the router deleted, its namespace goes. The host's
default route and its firewall are left as they were."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import uuid

import pytest

from nefos.agents.l3_agent import L3Agent
from nefos.agents.router_ns import namespace
from tests.network.conftest import OTHER, Helpers, member
from tests.network.l3_helpers import put, remove_host_input_chain, router, tenant_network
from tests.noauth import ADMIN



@pytest.fixture(autouse=True)
def _root_and_nftables():
    """Namespaces and NAT need root and nft: scripts/install-test-deps.sh installs nftables (through
    scripts/setup-libvirt.sh); a machine without them fails here rather than skipping."""
    assert os.geteuid() == 0, "the L3 agent tests need root (namespaces, NAT)"
    assert shutil.which("nft"), "nft missing: run scripts/install-test-deps.sh (it installs nftables)"

ECHO = ("import socket,sys\n"
        "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind(('0.0.0.0', int(sys.argv[1]))); s.listen(8); print('ready', flush=True)\n"
        "while True:\n"
        "    c, peer = s.accept(); c.sendall(peer[0].encode()); c.close()\n")
CONNECT = ("import socket,sys\n"
           "c=socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5); c.close()\n")


def sh(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def host_state() -> dict:
    def out(*argv):
        r = subprocess.run(argv, capture_output=True, text=True)
        return r.stdout
    return {"default": out("ip", "route", "show", "default"),
            "forward": open("/proc/sys/net/ipv4/ip_forward").read(),
            "nat": "".join(line for line in out("iptables-save", "-t", "nat").splitlines(True)
                           if not line.startswith("#")),  # (its comments carry the time)
            "nft": out("nft", "list", "ruleset")}


@pytest.fixture
def lab():
    tag = uuid.uuid4().hex[:6]
    octet = int(tag[:2], 16) % 200 + 20
    ext_bridge, ext_net = f"brx{tag}", f"198.18.{octet}"
    made = {"netns": [], "links": [ext_bridge], "host_chains": []}
    sh("ip", "link", "add", ext_bridge, "type", "bridge")
    sh("ip", "addr", "add", f"{ext_net}.1/24", "dev", ext_bridge)
    sh("ip", "link", "set", ext_bridge, "up")
    yield {"tag": tag, "ext_bridge": ext_bridge, "ext_net": ext_net, "made": made}
    for link in made["links"]:
        subprocess.run(["ip", "link", "del", link], capture_output=True)
    for ns in made["netns"]:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    for bridge in made["host_chains"]:
        remove_host_input_chain(bridge)


def guest(lab, name: str, bridge: str, port: dict, prefix: int, gateway: str) -> str:
    ns, outer = f"nfl3-{name}-{lab['tag']}", f"vg{name}{lab['tag']}"
    sh("ip", "netns", "add", ns)
    lab["made"]["netns"].append(ns)
    lab["made"]["links"].append(outer)
    sh("ip", "link", "add", outer, "type", "veth", "peer", "name", "eth0", "netns", ns)
    sh("ip", "link", "set", outer, "master", bridge, "up")
    sh("ip", "-n", ns, "link", "set", "eth0", "address", port["mac_address"])
    sh("ip", "-n", ns, "addr", "add", f"{port['fixed_ips'][0]['ip_address']}/{prefix}", "dev", "eth0")
    for dev in ("lo", "eth0"):
        sh("ip", "-n", ns, "link", "set", dev, "up")
    sh("ip", "-n", ns, "route", "add", "default", "via", gateway)
    return ns


async def _connect(ns: str | None, host: str, port: int) -> bool:
    argv = ([] if ns is None else ["ip", "netns", "exec", ns]) + [sys.executable, "-c", CONNECT, host, str(port)]
    proc = await asyncio.create_subprocess_exec(*argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return await proc.wait() == 0


async def test_router_and_floating_ip_on_real_namespaces(rt, network, client, lab):
    h = Helpers(client)
    before = host_state()
    ext_net = lab["ext_net"]
    ext = await h.network("public", **{"router:external": True})
    await h.subnet(ext["id"], f"{ext_net}.0/24", enable_dhcp=False, gateway_ip=f"{ext_net}.1",
                   allocation_pools=[{"start": f"{ext_net}.10", "end": f"{ext_net}.250"}])
    net, sub = await tenant_network(h, "10.61.0.0/24")
    bridge = "brq" + net["id"][:11]
    lab["made"]["links"].append(bridge)
    ports = [await h.port(net["id"], headers=member()) for _ in range(2)]
    r = await router(h, external_gateway_info={"network_id": ext["id"]})
    gw_ip = r["external_gateway_info"]["external_fixed_ips"][0]["ip_address"]
    await put(h, f"/v2.0/routers/{r['id']}/add_router_interface", {"subnet_id": sub["id"]}, member())
    fip = (await h.post("/v2.0/floatingips", {"floatingip": {"floating_network_id": ext["id"], "port_id": ports[0]["id"]}},
                        member()))["floatingip"]["floating_ip_address"]

    agent = L3Agent(rt, host="l3-test", interval=3600, external_bridge=lab["ext_bridge"])
    await agent.start()
    lab["made"]["netns"].append(namespace(r["id"]))
    try:
        await agent.wait_for(lambda: agent.applied.get(r["id"], {}).get("floating_ips"))
        ga = guest(lab, "a", bridge, ports[0], 24, sub["gateway_ip"])
        gb = guest(lab, "b", bridge, ports[1], 24, sub["gateway_ip"])

        # the host reaches guest A through its floating IP (A sees the host's own address)
        echo = await asyncio.create_subprocess_exec("ip", "netns", "exec", ga, sys.executable, "-c", ECHO, "7007",
                                                    stdout=asyncio.subprocess.PIPE)
        try:
            assert (await asyncio.wait_for(echo.stdout.readline(), 10)).strip() == b"ready"
            reader, writer = await asyncio.wait_for(asyncio.open_connection(fip, 7007), 10)
            assert (await asyncio.wait_for(reader.read(100), 10)).decode() == f"{ext_net}.1"
            writer.close()

            # the guests reach the host: B (no floating IP) as the router's gateway IP, A as its floating IP
            seen: asyncio.Queue = asyncio.Queue()

            async def listener(rd, wr):
                seen.put_nowait(wr.get_extra_info("peername")[0])
                wr.close()
            server = await asyncio.start_server(listener, f"{ext_net}.1", 7008)
            async with server:
                assert await _connect(gb, f"{ext_net}.1", 7008)
                assert await asyncio.wait_for(seen.get(), 10) == gw_ip
                assert await _connect(ga, f"{ext_net}.1", 7008)
                assert await asyncio.wait_for(seen.get(), 10) == fip

                # disassociated: the floating IP leads nowhere, A goes out as the gateway IP
                fip_id = (await client.get("/v2.0/floatingips", headers=member())).json()["floatingips"][0]["id"]
                await put(h, f"/v2.0/floatingips/{fip_id}", {"floatingip": {"port_id": None}}, member())
                await agent.wait_for(lambda: not agent.applied[r["id"]]["floating_ips"])
                assert not await _connect(None, fip, 7007)
                assert await _connect(ga, f"{ext_net}.1", 7008)
                assert await asyncio.wait_for(seen.get(), 10) == gw_ip
        finally:
            echo.kill()
            await echo.wait()

        # the router deleted: its namespace goes
        await put(h, f"/v2.0/routers/{r['id']}/remove_router_interface", {"subnet_id": sub["id"]}, member())
        assert (await client.delete(f"/v2.0/routers/{r['id']}", headers=member())).status_code == 204
        await agent.wait_for(lambda: r["id"] not in agent.applied)
        assert not os.path.exists(f"/run/netns/{namespace(r['id'])}")
    finally:
        await agent.stop()
    after = host_state()
    assert after["default"] == before["default"] and after["forward"] == before["forward"]
    for text in (after["nat"], after["nft"]):
        assert ext_net not in text and "10.61.0." not in text  # no NAT of ours in the host's namespace
    assert after["nat"] == before["nat"]


async def test_the_public_network_is_made_once(rt, network, client, lab):
    from nefos.control.network.external import ensure_public_network
    rt.cfg.l3_external_bridge = bridge = f"brp{lab['tag']}"
    lab["made"]["links"].append(bridge)
    lab["made"]["host_chains"].append(bridge)
    rt.cfg.external_network_cidr, rt.cfg.external_network_gateway = f"{lab['ext_net']}.0/24", f"{lab['ext_net']}.1"
    before = host_state()
    first = await ensure_public_network(rt)
    again = await ensure_public_network(rt)
    assert first["id"] == again["id"] and first["router:external"] is True
    assert first["is_default"] is True and again["is_default"] is True  # auto-allocated topologies use it
    [sub] = (await client.get(f"/v2.0/subnets?network_id={first['id']}", headers=ADMIN)).json()["subnets"]
    assert sub["gateway_ip"] == f"{lab['ext_net']}.1" and sub["enable_dhcp"] is False
    assert sub["allocation_pools"] == [{"start": f"{lab['ext_net']}.10", "end": f"{lab['ext_net']}.250"}]
    assert f"{lab['ext_net']}.1/24" in sh("ip", "-o", "-4", "addr", "show", "dev", bridge)
    assert sh("ip", "-o", "link", "show", "master", bridge) == ""  # nothing enslaved, no uplink
    assert host_state()["default"] == before["default"]


async def test_a_port_naming_another_projects_router_gives_that_router_no_leg(rt, network, client, lab):
    """A port on another project's network that only claims to be the router's interface (an admin
    made it through the port API; a member may not): the router's namespace has its own interface
    and no address, route or device on that network."""
    h = Helpers(client)
    attacker = member(OTHER)
    victims_net, victims_sub = await tenant_network(h, "10.62.0.0/24")
    attackers_net, attackers_sub = await tenant_network(h, "10.63.0.0/24", headers=attacker)
    for net in (victims_net, attackers_net):
        lab["made"]["links"].append("brq" + net["id"][:11])
    r = await router(h)
    await put(h, f"/v2.0/routers/{r['id']}/add_router_interface", {"subnet_id": victims_sub["id"]}, member())
    look_alike = await h.port(attackers_net["id"], headers=ADMIN, project_id=OTHER,
                              device_owner="network:router_interface", device_id=r["id"],
                              fixed_ips=[{"subnet_id": attackers_sub["id"], "ip_address": attackers_sub["gateway_ip"]}])

    agent = L3Agent(rt, host="l3-test", interval=3600, external_bridge=lab["ext_bridge"])
    await agent.start()
    lab["made"]["netns"].append(namespace(r["id"]))
    try:
        await agent.wait_for(lambda: agent.applied.get(r["id"], {}).get("interfaces"))
        assert [i["network_id"] for i in agent.applied[r["id"]]["interfaces"]] == [victims_net["id"]]
        addresses = sh("ip", "-n", namespace(r["id"]), "-o", "-4", "addr", "show")
        routes = sh("ip", "-n", namespace(r["id"]), "-4", "route", "show")
        assert f"{victims_sub['gateway_ip']}/24" in addresses
        assert "10.63.0." not in addresses and "10.63.0." not in routes
        links = sh("ip", "-n", namespace(r["id"]), "-o", "link", "show")
        assert look_alike["id"][:11] not in links
        # nor its outer end on the attacker's bridge
        assert subprocess.run(["ip", "link", "show", "tap" + look_alike["id"][:11]],
                              capture_output=True).returncode != 0
    finally:
        await agent.stop()


UDP_LISTEN = ("import socket,sys\n"
              "s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('0.0.0.0', int(sys.argv[1])))\n"
              "print('ready', flush=True)\n"
              "while True:\n"
              "    data, peer = s.recvfrom(100); print(data.decode(), flush=True)\n")
UDP_SEND = ("import socket,sys\n"
            "s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(sys.argv[3].encode(), (sys.argv[1], int(sys.argv[2])))\n")


async def _send_udp(ns: str, host: str, port: int, payload: str) -> None:
    proc = await asyncio.create_subprocess_exec("ip", "netns", "exec", ns, sys.executable, "-c", UDP_SEND, host,
                                                str(port), payload)
    assert await proc.wait() == 0


async def test_another_projects_router_routes_nothing_to_a_routers_private_addresses(rt, network, client, lab):
    """Another project's router with an extra route to the victim's subnet through the victim's
    gateway address (its nexthop on the external subnet, which the extraroute API accepts, as
    Neutron's): the attacker's guest sends to the victim's private address and nothing arrives, the
    router forwarding through its gateway only to the external subnet's addresses; the same
    guest's datagram to the victim's floating IP arrives (the path is there)."""
    h = Helpers(client)
    attacker = member(OTHER)
    ext_net = lab["ext_net"]
    ext = await h.network("public", **{"router:external": True})
    await h.subnet(ext["id"], f"{ext_net}.0/24", enable_dhcp=False, gateway_ip=f"{ext_net}.1",
                   allocation_pools=[{"start": f"{ext_net}.10", "end": f"{ext_net}.250"}])
    victims_net, victims_sub = await tenant_network(h, "10.66.0.0/24")
    attackers_net, attackers_sub = await tenant_network(h, "10.67.0.0/24", headers=attacker)
    for net in (victims_net, attackers_net):
        lab["made"]["links"].append("brq" + net["id"][:11])
    victims_port = await h.port(victims_net["id"], headers=member())
    attackers_port = await h.port(attackers_net["id"], headers=attacker)
    routers = {}
    for who, headers, sub in (("victim", member(), victims_sub), ("attacker", attacker, attackers_sub)):
        routers[who] = await router(h, headers, external_gateway_info={"network_id": ext["id"]})
        await put(h, f"/v2.0/routers/{routers[who]['id']}/add_router_interface", {"subnet_id": sub["id"]}, headers)
    victims_gw = routers["victim"]["external_gateway_info"]["external_fixed_ips"][0]["ip_address"]
    fip = (await h.post("/v2.0/floatingips", {"floatingip": {"floating_network_id": ext["id"],
                                                             "port_id": victims_port["id"]}},
                        member()))["floatingip"]["floating_ip_address"]
    await put(h, f"/v2.0/routers/{routers['attacker']['id']}", {"router": {"routes": [
        {"destination": victims_sub["cidr"], "nexthop": victims_gw}]}}, attacker)

    agent = L3Agent(rt, host="l3-test", interval=3600, external_bridge=lab["ext_bridge"])
    await agent.start()
    lab["made"]["netns"] += [namespace(r["id"]) for r in routers.values()]
    try:
        await agent.wait_for(lambda: agent.applied.get(routers["victim"]["id"], {}).get("floating_ips")
                             and agent.applied.get(routers["attacker"]["id"], {}).get("routes"))
        victim = guest(lab, "v", "brq" + victims_net["id"][:11], victims_port, 24, victims_sub["gateway_ip"])
        thief = guest(lab, "t", "brq" + attackers_net["id"][:11], attackers_port, 24, attackers_sub["gateway_ip"])
        private = victims_port["fixed_ips"][0]["ip_address"]
        listener = await asyncio.create_subprocess_exec("ip", "netns", "exec", victim, sys.executable, "-c",
                                                        UDP_LISTEN, "7010", stdout=asyncio.subprocess.PIPE)
        try:
            assert (await asyncio.wait_for(listener.stdout.readline(), 10)).strip() == b"ready"
            for i in range(3):
                await _send_udp(thief, private, 7010, f"private-{i}")
            # the floating IP's datagrams take the same router path after them: once one arrives,
            # a private one sent before would have
            seen = []
            deadline = asyncio.get_running_loop().time() + 15
            while "floating" not in seen:
                assert asyncio.get_running_loop().time() < deadline, f"nothing through the floating IP: {seen}"
                await _send_udp(thief, fip, 7010, "floating")
                try:
                    line = await asyncio.wait_for(listener.stdout.readline(), 0.5)
                except asyncio.TimeoutError:
                    continue
                seen.append(line.decode().strip())
            assert not [s for s in seen if s.startswith("private")], seen
        finally:
            listener.kill()
            await listener.wait()
    finally:
        await agent.stop()
