"""Provisioning blocks (Neutron's ``provisioning_blocks``): a port goes ACTIVE only when every
component it needs has acknowledged it.

Components:

* ``L2`` — the L2 agent of the port's host reported the device up
  (``update_device_up``); needed by every bound port. A device reported down, or a
  port bound to another host, needs it again.
* ``DHCP`` — the DHCP agent confirmed dnsmasq re-read a hosts file holding the
  port's entry (``dhcp_ready_on_ports``). Needed when the port has an address on
  a DHCP-enabled IPv4 subnet of an administratively up network (what the DHCP agent
  serves), is not itself a ``network:*`` port, and a DHCP
  agent is alive (heartbeat within ``service_down_time``): with no DHCP agent
  running (the fake driver's all-in-one) nobody could ever acknowledge it, as
  Neutron adds no DHCP block for a network no DHCP agent hosts. A changed MAC or
  address needs it again.

Each component is one row of ``port_provisioning`` (``satisfied`` False: a block),
so the port records which components were satisfied and when; admins see them
as the port's ``nefos:provisioning`` attribute. An acknowledgement is committed
in its own transaction and the remaining blocks are read after the commit, so
two components acknowledging at the same time cannot both miss that nothing is
left (at worst both set ACTIVE, which is idempotent).
"""

from __future__ import annotations

import datetime as dt
import logging

from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from nefos.db.models import IPAllocation, Network, NetworkAgent, PortProvisioning, Subnet, utcnow

LOG = logging.getLogger(__name__)

L2 = "L2"
DHCP = "DHCP"
DHCP_AGENT = "DHCP agent"
ATTRIBUTE = "nefos:provisioning"


# Agents' liveness ----------------------------------------------------------------------------------

async def heartbeat(db, agent_type: str, host: str, *, started: bool = False) -> None:
    """Record that ``agent_type`` on ``host`` is alive (agents call it every few seconds)."""
    now = utcnow()
    async with db.transaction() as s:
        values = {"heartbeat_at": now}
        if started:
            values["started_at"] = now
        done = await s.execute(update(NetworkAgent).where(NetworkAgent.agent_type == agent_type,
                                                          NetworkAgent.host == host).values(**values))
        if done.rowcount == 0:
            await s.execute(insert(NetworkAgent).values(agent_type=agent_type, host=host, started_at=now,
                                                        heartbeat_at=now))


async def agents_alive(s, cfg, agent_type: str) -> bool:
    since = utcnow() - dt.timedelta(seconds=cfg.service_down_time)
    return (await s.execute(select(NetworkAgent.id).where(
        NetworkAgent.agent_type == agent_type, NetworkAgent.heartbeat_at >= since).limit(1))).first() is not None


# Blocks ----------------------------------------------------------------------------------------------

async def _needs_dhcp(s, cfg, port_id: str, device_owner: str) -> bool:
    if (device_owner or "").startswith("network:"):
        return False
    on_dhcp_subnet = (await s.execute(select(IPAllocation.ip_address).join(
        Subnet, Subnet.id == IPAllocation.subnet_id).join(Network, Network.id == Subnet.network_id).where(
        IPAllocation.port_id == port_id, Subnet.enable_dhcp.is_(True), Subnet.ip_version == 4,
        Network.admin_state_up.is_(True)).limit(1))).first() is not None
    return on_dhcp_subnet and await agents_alive(s, cfg, DHCP_AGENT)


async def _set(s, port_id: str, component: str, satisfied: bool, now) -> None:
    """The (port, component) row says ``satisfied``, whether it existed or not."""
    where = (PortProvisioning.port_id == port_id, PortProvisioning.component == component)
    done = await s.execute(update(PortProvisioning).where(*where).values(satisfied=satisfied, updated_at=now)
                           .execution_options(synchronize_session=False))
    if done.rowcount:
        return
    try:
        async with s.begin_nested():
            await s.execute(insert(PortProvisioning).values(port_id=port_id, component=component,
                                                            satisfied=satisfied, updated_at=now))
    except IntegrityError:  # a concurrent writer inserted it first
        await s.execute(update(PortProvisioning).where(*where).values(satisfied=satisfied, updated_at=now)
                        .execution_options(synchronize_session=False))


async def block(s, port_id: str, *components: str) -> None:
    """(Re)add blocks of ``components`` on ``port_id`` (inside the port's transaction)."""
    now = utcnow()
    for component in components:
        await _set(s, port_id, component, False, now)
    if components:
        LOG.debug("port %s: provisioning blocked on %s", port_id, ", ".join(components))


async def port_created(s, cfg, port_id: str, host: str, device_owner: str) -> None:
    """The blocks of a new port: L2 when it is bound, DHCP when a DHCP agent must serve it."""
    components = [L2] if host else []
    if await _needs_dhcp(s, cfg, port_id, device_owner):
        components.append(DHCP)
    await block(s, port_id, *components)


async def port_updated(s, cfg, port_id: str, *, host_changed: bool, host: str, addresses_changed: bool,
                       device_owner: str) -> None:
    """A new binding needs the new host's L2 agent; a new MAC or address needs the DHCP agent."""
    components = []
    if host_changed and host:
        components.append(L2)
    if addresses_changed and await _needs_dhcp(s, cfg, port_id, device_owner):
        components.append(DHCP)
    await block(s, port_id, *components)


async def port_deleted(s, port_id: str) -> None:
    await s.execute(delete(PortProvisioning).where(PortProvisioning.port_id == port_id))


async def views(s, port_ids: list[str]) -> dict[str, dict]:
    """port id -> {component: "satisfied" | "pending"} (the admin attribute)."""
    out: dict[str, dict] = {}
    if not port_ids:
        return out
    for pid, component, satisfied in (await s.execute(select(
            PortProvisioning.port_id, PortProvisioning.component, PortProvisioning.satisfied)
            .where(PortProvisioning.port_id.in_(port_ids)))).all():
        out.setdefault(pid, {})[component] = "satisfied" if satisfied else "pending"
    return out


# Acknowledgements --------------------------------------------------------------------------------------

async def complete(manager, ctx, port_ids: list[str], component: str) -> list[str]:
    """``component`` acknowledged ``port_ids``; the ports with no block left (and up to the L2
    agent) go ACTIVE. Returns the ids of the ports that went ACTIVE now."""
    if not port_ids:
        return []
    rt = manager.rt
    now = utcnow()
    async with rt.db.transaction() as s:
        known = set((await s.execute(select(PortProvisioning.port_id).where(
            PortProvisioning.port_id.in_(port_ids), PortProvisioning.component == component))).scalars())
        if known:
            await s.execute(update(PortProvisioning).where(
                PortProvisioning.port_id.in_(list(known)), PortProvisioning.component == component)
                .values(satisfied=True, updated_at=now).execution_options(synchronize_session=False))
        if component == L2:  # a device up is recorded even when nothing asked for it
            for pid in set(port_ids) - known:
                await _set(s, pid, L2, True, now)
    # Committed: what is left is read afresh (a concurrent acknowledgement is visible now).
    async with rt.db.reader() as s:
        rows = (await s.execute(select(PortProvisioning.port_id, PortProvisioning.component,
                                       PortProvisioning.satisfied)
                                .where(PortProvisioning.port_id.in_(port_ids)))).all()
    state: dict[str, dict[str, bool]] = {}
    for pid, comp, satisfied in rows:
        state.setdefault(pid, {})[comp] = bool(satisfied)
    activated = []
    for pid in port_ids:
        comps = state.get(pid, {})
        pending = sorted(c for c, ok in comps.items() if not ok)
        if pending:
            LOG.info("port %s: %s acknowledged; still waiting for %s", pid, component, ", ".join(pending))
            continue
        if not comps.get(L2):
            LOG.debug("port %s: %s acknowledged; no device reported up yet", pid, component)
            continue  # e.g. DHCP ready for a port whose device is not plugged
        if await _activate(manager, ctx, pid, component, sorted(comps)):
            activated.append(pid)
    return activated


async def _activate(manager, ctx, port_id: str, component: str, components: list[str]) -> bool:
    from nefos import exceptions

    def activatable(row) -> bool:
        return row.status != "ACTIVE" and bool(row.admin_state_up) and bool(row.binding_host_id)

    try:
        port = await manager.update_port_status(ctx.elevated(), port_id, "ACTIVE", only_if=activatable)
    except exceptions.PortNotFound:
        return False
    if port is None:
        return False
    LOG.info("port %s: provisioning complete (%s satisfied, %s last): -> ACTIVE", port_id,
             ", ".join(components), component)
    return True
