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
left (at worst both set ACTIVE, which is idempotent). Where write transactions
run one at a time (SQLite) the L2 acknowledgement reads what is left, and
activates the port, in its own transaction: no other acknowledgement can commit
in between, so the same holds with one transaction fewer.
"""

from __future__ import annotations

import datetime as dt
import logging

from sqlalchemy import bindparam, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from nefos.db.models import IPAllocation, Network, NetworkAgent, PortProvisioning, Subnet, utcnow
from nefos.db.session import savepoint

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


_AGENTS = NetworkAgent.__table__
_PP = PortProvisioning.__table__
_AGENT_ALIVE = select(_AGENTS.c.id).where(_AGENTS.c.agent_type == bindparam("b_type"),
                                          _AGENTS.c.heartbeat_at >= bindparam("b_since")).limit(1)
_PP_KEY = (_PP.c.port_id == bindparam("b_port"), _PP.c.component == bindparam("b_component"))
_SET = update(_PP).where(*_PP_KEY).values(satisfied=bindparam("b_satisfied"), updated_at=bindparam("b_now"))
_INSERT = insert(_PP)
_STATE = select(_PP.c.port_id, _PP.c.component, _PP.c.satisfied).where(
    _PP.c.port_id.in_(bindparam("b_ids", expanding=True)))
_KNOWN = select(_PP.c.port_id).where(_PP.c.port_id.in_(bindparam("b_ids", expanding=True)),
                                     _PP.c.component == bindparam("b_component"))
_SATISFY = update(_PP).where(_PP.c.port_id.in_(bindparam("b_ids", expanding=True)),
                             _PP.c.component == bindparam("b_component")).values(
    satisfied=True, updated_at=bindparam("b_now"))


async def agents_alive(s, cfg, agent_type: str) -> bool:
    since = utcnow() - dt.timedelta(seconds=cfg.service_down_time)
    return (await s.execute(_AGENT_ALIVE, {"b_type": agent_type, "b_since": since})).first() is not None


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
    params = {"b_port": port_id, "b_component": component, "b_satisfied": satisfied, "b_now": now}
    done = await s.execute(_SET, params)
    if done.rowcount:
        return
    try:
        async with savepoint(s):
            await s.execute(_INSERT, {"port_id": port_id, "component": component, "satisfied": satisfied,
                                      "updated_at": now})
    except IntegrityError:  # a concurrent writer inserted it first
        await s.execute(_SET, params)


async def block(s, port_id: str, *components: str) -> None:
    """(Re)add blocks of ``components`` on ``port_id`` (inside the port's transaction)."""
    now = utcnow()
    for component in components:
        await _set(s, port_id, component, False, now)
    if components:
        LOG.debug("port %s: provisioning blocked on %s", port_id, ", ".join(components))


async def port_created(s, cfg, port_id: str, host: str, device_owner: str, *,
                       on_dhcp_subnet: bool | None = None) -> list[str]:
    """The blocks of a new port: L2 when it is bound, DHCP when a DHCP agent must serve it.
    ``on_dhcp_subnet``: whether the port has an address on a DHCP-enabled IPv4 subnet of an
    administratively up network, when the caller knows (else read). Returns the components."""
    components = [L2] if host else []
    if on_dhcp_subnet is None:
        needs_dhcp = await _needs_dhcp(s, cfg, port_id, device_owner)
    else:
        needs_dhcp = (on_dhcp_subnet and not (device_owner or "").startswith("network:")
                      and await agents_alive(s, cfg, DHCP_AGENT))
    if needs_dhcp:
        components.append(DHCP)
    if components:
        # A new port has no rows yet (nothing else knows its id before this transaction commits).
        now = utcnow()
        await s.execute(_INSERT, [{"port_id": port_id, "component": c, "satisfied": False, "updated_at": now}
                                  for c in components])
        LOG.debug("port %s: provisioning blocked on %s", port_id, ", ".join(components))
    return components


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
    for pid, component, satisfied in (await s.execute(_STATE, {"b_ids": list(port_ids)})).all():
        out.setdefault(pid, {})[component] = "satisfied" if satisfied else "pending"
    return out


# Acknowledgements --------------------------------------------------------------------------------------

async def complete(ports, ctx, port_ids: list[str], component: str) -> list[str]:
    """``component`` acknowledged ``port_ids``; the ports with no block left (and up to the L2
    agent) go ACTIVE. Returns the ids of the ports that went ACTIVE now."""
    if not port_ids:
        return []
    async with ports.store.db.transaction() as s:
        await acknowledge(s, port_ids, component)
    return await settle(ports, ctx, port_ids, component)


async def acknowledge(s, port_ids: list[str], component: str) -> None:
    """Inside a transaction of its own (``settle`` once it committed): ``component`` acknowledged
    ``port_ids``."""
    now = utcnow()
    unique = list(dict.fromkeys(port_ids))
    done = await s.execute(_SATISFY, {"b_ids": unique, "b_component": component, "b_now": now})
    if component == L2 and done.rowcount != len(unique):  # a device up is recorded even when nothing asked for it
        known = set((await s.execute(_KNOWN, {"b_ids": unique, "b_component": component})).scalars())
        for pid in unique:
            if pid not in known:
                await _set(s, pid, L2, True, now)


async def settle(ports, ctx, port_ids: list[str], component: str) -> list[str]:
    """After ``component``'s acknowledgement committed: what is left is read afresh (a concurrent
    acknowledgement is visible now) and the ports with nothing left go ACTIVE; the ids of those."""
    if len(port_ids) == 1:  # the blocks read in the transaction that activates the port
        return [port_ids[0]] if await _activate(ports, ctx, port_ids[0], component) else []
    async with ports.store.reader() as s:
        rows = (await s.execute(_STATE, {"b_ids": list(port_ids)})).all()
    state: dict[str, dict[str, bool]] = {}
    for pid, comp, satisfied in rows:
        state.setdefault(pid, {})[comp] = bool(satisfied)
    activated = []
    for pid in port_ids:
        if _ready(pid, component, state.get(pid, {})) and await _activate(ports, ctx, pid, component):
            activated.append(pid)
    return activated


def _ready(port_id: str, component: str, comps: dict[str, bool]) -> bool:
    pending = sorted(c for c, ok in comps.items() if not ok)
    if pending:
        LOG.info("port %s: %s acknowledged; still waiting for %s", port_id, component, ", ".join(pending))
        return False
    if not comps.get(L2):
        LOG.debug("port %s: %s acknowledged; no device reported up yet", port_id, component)
        return False  # e.g. DHCP ready for a port whose device is not plugged
    return True


def writers_serialized(db) -> bool:
    """Whether write transactions run one at a time (SQLite: ``Database.transaction`` queues them
    and the file has one writer): then an acknowledgement and the read of what is left may share
    the acknowledging transaction, as no other acknowledgement can commit between them."""
    return bool(getattr(db, "is_sqlite", False))


def _decider(port_id: str, component: str):
    """The ``decide`` of ``Ports.change_port_status`` that activates a port: ACTIVE if
    nothing blocks it (and L2 acknowledged it) and it is up and bound, else no change."""
    def decide(row, blocks: dict[str, bool]) -> str | None:
        if not _ready(port_id, component, blocks):
            return None
        if row.status != "ACTIVE" and bool(row.admin_state_up) and bool(row.binding_host_id):
            decide.components = sorted(blocks)
            return "ACTIVE"
        return None
    decide.components = []
    return decide


def _activated(port_id: str, component: str, decide) -> None:
    LOG.info("port %s: provisioning complete (%s satisfied, %s last): -> ACTIVE", port_id,
             ", ".join(decide.components), component)


async def _activate(ports, ctx, port_id: str, component: str) -> bool:
    """ACTIVE if nothing blocks ``port_id`` (its blocks read again in the transaction that sets
    it, after the acknowledgement committed) and it is up and bound."""
    from nefos import exceptions

    decide = _decider(port_id, component)
    try:
        port = await ports.change_port_status(ctx.elevated(), port_id, decide)
    except exceptions.PortNotFound:
        return False
    if port is None:
        return False
    _activated(port_id, component, decide)
    return True


async def device_up(ports, ctx, port_id: str, accept):
    """The L2 agent reported the device of ``port_id`` up: if ``accept(row)`` (the port's row read
    in the acknowledging transaction: e.g. bound to the reporting host), L2 acknowledged and the
    port ACTIVE when nothing else blocks it (as ``complete``). With serialized writers the
    activation shares the acknowledging transaction. Returns the row, None when there is no port."""
    admin = ctx.elevated()
    serialized = writers_serialized(ports.store.db)
    decide = _decider(str(port_id), L2)
    doc = None
    async with ports.store.transaction() as s:
        row = await ports.port_by_id(s, port_id)
        if row is None or not accept(row):
            return row
        await acknowledge(s, [row.id], L2)
        if serialized:
            doc, previous = await ports.set_port_status_in(s, admin, row, decide)
    if not serialized:
        await settle(ports, ctx, [row.id], L2)
    elif doc is not None:
        await ports.tell_port_status(admin, doc, previous)
        _activated(row.id, L2, decide)
    return row
