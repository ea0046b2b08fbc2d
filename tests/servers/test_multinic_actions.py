"""Nova's multinic server actions (``addFixedIp`` / ``removeFixedIp``, 2.1 to 2.43) through the whole
cloud (fake driver): an address more on the server's port on that network, then that address off it,
its other address kept; the server's addresses follow (the port's ``network-changed``); Nova's
answers for the errors; the policy; 404 from 2.44."""

from __future__ import annotations

from tests.compute.conftest import eventually
from tests.clouds import ADMIN, member
from tests.servers.test_floating_ip_actions import OTHER, READER, _action, _server, cloud  # noqa: F401


async def _addresses(cloud, sid: str) -> list[str]:
    server = await cloud.server(sid, member())
    return sorted(a["addr"] for addrs in server["addresses"].values() for a in addrs)


async def test_add_then_remove_a_fixed_ip(cloud):
    net = await cloud.make_network("private", "10.0.0.0/24", headers=member())
    sid, first = await _server(cloud, net)
    await _action(cloud, sid, {"addFixedIp": {"networkId": net["id"]}}, 202)
    (port,) = await cloud.ports(device_id=sid)
    held = [f["ip_address"] for f in port["fixed_ips"]]
    assert len(held) == 2 and held[0] == first, port["fixed_ips"]  # one port, one address more
    (added,) = set(held) - {first}

    async def shown(expected):
        return await _addresses(cloud, sid) == sorted(expected)
    await eventually(lambda: shown([first, added]))

    await _action(cloud, sid, {"removeFixedIp": {"address": added}}, 202)
    (port,) = await cloud.ports(device_id=sid)
    assert [f["ip_address"] for f in port["fixed_ips"]] == [first]
    await eventually(lambda: shown([first]))


async def test_errors_policy_and_versions(cloud):
    net = await cloud.make_network("private", "10.0.0.0/24", headers=member())
    other_net = await cloud.make_network("other", "10.9.0.0/24", headers=member())
    sid, first = await _server(cloud, net)
    # No port on that network / an address the server does not hold: 400, nothing changed.
    await _action(cloud, sid, {"addFixedIp": {"networkId": other_net["id"]}}, 400)
    await _action(cloud, sid, {"removeFixedIp": {"address": "10.0.0.250"}}, 400)
    (port,) = await cloud.ports(device_id=sid)
    assert [f["ip_address"] for f in port["fixed_ips"]] == [first]
    # Malformed bodies: 400 before anything else.
    await _action(cloud, sid, {"addFixedIp": {}}, 400)
    await _action(cloud, sid, {"removeFixedIp": {"address": "not-an-ip"}}, 400)
    # Policy: a reader may not, another project does not see the server; a locked server is 409.
    await _action(cloud, sid, {"addFixedIp": {"networkId": net["id"]}}, 403, headers=READER)
    await _action(cloud, sid, {"addFixedIp": {"networkId": net["id"]}}, 404, headers=OTHER)
    await _action(cloud, sid, {"lock": None}, 202)
    await _action(cloud, sid, {"addFixedIp": {"networkId": net["id"]}}, 409)
    await _action(cloud, sid, {"addFixedIp": {"networkId": net["id"]}}, 202, headers=ADMIN)  # admin: lock override
    await _action(cloud, sid, {"unlock": None}, 202)
    # Gone from 2.44, as Nova.
    await _action(cloud, sid, {"removeFixedIp": {"address": first}}, 404, version="2.44")
