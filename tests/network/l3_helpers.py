"""What the router and floating IP API tests share: an external network, a tenant network with a
router between them (made through the Networking API)."""

from __future__ import annotations

from tests.network.conftest import Helpers, member
from tests.noauth import ADMIN


async def external_network(h: Helpers, cidr: str = "172.24.4.0/24") -> tuple[dict, dict]:
    net = await h.network("public", **{"router:external": True})
    base = cidr.rsplit(".", 1)[0]
    sub = await h.subnet(net["id"], cidr, enable_dhcp=False, gateway_ip=f"{base}.1",
                         allocation_pools=[{"start": f"{base}.10", "end": f"{base}.250"}])
    return net, sub


async def tenant_network(h: Helpers, cidr: str = "10.0.0.0/24", headers=None) -> tuple[dict, dict]:
    headers = headers or member()
    net = await h.network("private", headers=headers)
    return net, await h.subnet(net["id"], cidr, headers=headers)


async def router(h: Helpers, headers=None, **body) -> dict:
    return (await h.post("/v2.0/routers", {"router": {"name": "r", **body}}, headers or member()))["router"]


async def put(h: Helpers, path: str, body: dict, headers=None, expect: int = 200) -> dict:
    r = await h.client.put(path, json=body, headers=headers or ADMIN)
    assert r.status_code == expect, r.text
    return r.json()


def remove_host_input_chain(bridge: str) -> None:
    """Take away what ``external.close_host_to_bridge`` put in the host's filter table for a test's
    own bridge."""
    import subprocess

    from nefos.control.network.external import host_input_chain
    chain = host_input_chain(bridge)
    while subprocess.run(["iptables", "-D", "INPUT", "-i", bridge, "-j", chain], capture_output=True).returncode == 0:
        pass
    subprocess.run(["iptables", "-F", chain], capture_output=True)
    subprocess.run(["iptables", "-X", chain], capture_output=True)
