"""A port change and its events for the compute host are one: when the events cannot be written
to the outbox, the change fails too (it is never committed with its events lost); tried again,
both are written."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select, text

from nefos.context import admin_context
from nefos.db.models import Port
from nefos.control.network import notifier as notifier_mod


async def _outbox(rt) -> int:
    async with rt.db.reader() as s:
        return (await s.execute(text("SELECT count(*) FROM port_event_outbox"))).scalar_one()


async def _compute_port(manager) -> dict:
    ctx = admin_context()
    net = await manager.create_network(ctx, {"name": "n"})
    await manager.create_subnet(ctx, {"network_id": net["id"], "cidr": "10.9.0.0/24", "ip_version": 4})
    return await manager.create_port(ctx, {"network_id": net["id"], "device_owner": "compute:nova",
                                           "device_id": str(uuid.uuid4())})


async def test_a_change_whose_event_cannot_be_written_does_not_happen(rt, manager, monkeypatch):
    port = await _compute_port(manager)
    before = await _outbox(rt)
    good = notifier_mod._INSERT_EVENT
    monkeypatch.setattr(notifier_mod, "_INSERT_EVENT", text("INSERT INTO no_such_table VALUES (1)"))
    with pytest.raises(Exception):
        await manager.ports.update_port_status(admin_context(), port["id"], "ACTIVE")
    async with rt.db.reader() as s:
        status = (await s.execute(select(Port.status).where(Port.id == port["id"]))).scalar_one()
    assert status == "DOWN" and await _outbox(rt) == before  # neither the change nor an event
    monkeypatch.setattr(notifier_mod, "_INSERT_EVENT", good)
    await manager.ports.update_port_status(admin_context(), port["id"], "ACTIVE")  # the agent reports again
    async with rt.db.reader() as s:
        status = (await s.execute(select(Port.status).where(Port.id == port["id"]))).scalar_one()
        names = (await s.execute(text("SELECT name FROM port_event_outbox"))).scalars().all()
    assert status == "ACTIVE"
    assert "network-vif-plugged" in names or await _outbox(rt) == before, names  # sent already, or queued

