"""Provisioning blocks on every supported database: the L2 agent and the DHCP agent acknowledging
a port at the same moment never leave it short of ACTIVE (each acknowledgement commits, then
reads what is left), whatever the isolation level of the backend."""

from __future__ import annotations

import asyncio
import types

from nefos.config import Config
from nefos.context import admin_context
from nefos.control.network import provisioning
from nefos.control.network.manager import NetworkManager
from tests.db.test_backends import db, db_url, mysql_url, postgresql_url, sqlite_url  # noqa: F401  (fixtures)

HOST = "prov-host"


async def _ports(manager: NetworkManager, n: int) -> list[dict]:
    ctx = admin_context()
    net = await manager.create_network(ctx, {"name": "prov", "project_id": "p1"})
    await manager.create_subnet(ctx, {"network_id": net["id"], "cidr": "10.9.0.0/24", "ip_version": 4,
                                      "project_id": "p1"})
    return [await manager.create_port(ctx, {"network_id": net["id"], "project_id": "p1",
                                            "device_owner": "compute:nova", "device_id": f"vm-{i}",
                                            "binding:host_id": HOST}) for i in range(n)]


async def test_simultaneous_l2_and_dhcp_acknowledgements_activate_every_port(db):  # noqa: F811
    manager = NetworkManager(types.SimpleNamespace(db=db, cfg=Config()))
    await provisioning.heartbeat(db, provisioning.DHCP_AGENT, HOST, started=True)
    await provisioning.heartbeat(db, provisioning.DHCP_AGENT, HOST)  # again: an update, no new row
    ports = await _ports(manager, 6)
    for p in ports:
        assert p["nefos:provisioning"] == {"L2": "pending", "DHCP": "pending"}
        assert p["status"] == "DOWN"
    ids = [p["id"] for p in ports]
    ctx = admin_context()
    # Each port acknowledged by both components at once; the DHCP agent also in bulk.
    results = await asyncio.gather(
        *[provisioning.complete(manager.ports, ctx, [pid], provisioning.L2) for pid in ids],
        provisioning.complete(manager.ports, ctx, ids, provisioning.DHCP))
    activated = [pid for r in results for pid in r]
    assert sorted(set(activated)) == sorted(ids)
    for pid in ids:
        port = await manager.get_port(ctx, pid)
        assert port["status"] == "ACTIVE", port
        assert port["nefos:provisioning"] == {"L2": "satisfied", "DHCP": "satisfied"}

    # A DHCP acknowledgement alone never activates a port whose device was not reported up.
    (fresh,) = await _ports(manager, 1)
    assert await provisioning.complete(manager.ports, ctx, [fresh["id"]], provisioning.DHCP) == []
    assert (await manager.get_port(ctx, fresh["id"]))["status"] == "DOWN"
    # Re-blocking an existing row and acknowledging it again work as upserts.
    async with db.transaction() as s:
        await provisioning.block(s, fresh["id"], provisioning.DHCP, provisioning.L2)
    assert (await manager.get_port(ctx, fresh["id"]))["nefos:provisioning"] == {"L2": "pending", "DHCP": "pending"}
