"""The Linux bridge L2 agent (Neutron's linuxbridge agent, reduced): one per compute host.

It watches the host's network devices over rtnetlink (``RTMGRP_LINK``: a raw
``AF_NETLINK`` socket read on the event loop; no polling). The agent is the one
who wires a VIF: libvirt makes a guest's tap (``tap<port id[:11]>``,
``<interface type='ethernet'>``) and attaches it to nothing, so until the agent
acts the guest's NIC reaches nothing (no DHCP, no address: the Linux bridge
counterpart of OVS's dead VLAN). For each new tap it finds the port (bound to
this host, id starting with the device's suffix) and, over the L2 agent
protocol (``nefos.clients.network_agents``), asks ``get_device_details`` (the port's
network); then it makes sure the security-group chains cover the port, creates
the network's bridge (``brq<network id[:11]>``) when missing, enslaves the tap
to it and reports ``update_device_up`` (the port goes ACTIVE, the server gets
``network-vif-plugged``). A tap already in its network's bridge (a domain
defined with ``<interface type='bridge'>``, or wired by hand) is only reported.
When the device disappears: ``update_device_down`` (``network-vif-unplugged``).

A port whose ``admin_state_up`` is false carries nothing (Neutron's linuxbridge agent): the agent
sets its tap down (``ip link set <tap> down``: the bridge port is disabled, no frame crosses it
either way) and reports ``update_device_down`` (the port DOWN). The network service tells the agents
when a port's ``admin_state_up`` changes (``port_update`` on ``q-agent-notifier``, served by every
L2 agent); the agent then looks at the device again as it does at its start: down again if still
down, else back into its bridge, up, and reported up (the port ACTIVE). Every
``ADMIN_STATE_SYNC_INTERVAL`` seconds it also compares its taps with their ports'
``admin_state_up`` (``get_devices_admin_state``), the backstop for a ``port_update`` lost.
It removes the bridges it has seen in use once their network is gone and
nothing is plugged into them (every ``BRIDGE_GC_INTERVAL`` seconds; bridges of
other clouds on the same machine are never its business).

Security groups are enforced on the taps of the ports bound to this host
(``nefos.agents.firewall``: iptables on bridged traffic); the agent re-reads
the ports, groups and rules every ``SG_SYNC_INTERVAL`` seconds and rewrites the
chains when they changed, so rules added or removed through the API take
effect on running guests. The chains stay when the agent stops (a stopped
agent must not open the guests up); ``remove_firewall()`` takes them away.

Reports are made one at a time, in order, with retries. ``stop()`` and
``start()`` act out an agent that is down: while the agent is stopped nothing
is wired nor reported (a new guest's tap stays on no bridge, its port DOWN, its
DHCP client gets no answer); when it starts it resynchronises with the taps
present now (wiring those on no bridge). Every report is logged with the request id of the
report (one grep follows a device from the agent to the compute host).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import struct
from pathlib import Path

from tenacity import RetryCallState, retry_if_exception_type, wait_fixed

from nefos.component import Component
from nefos.agents.firewall import Firewall, PortFilter
from nefos.agents.ip_lib import (bridge_exists, device_exists, enslave, ensure_bridge, link_is_up,
                                         set_link_up)
from nefos.clients.network_agents import (L2_AGENT, L2_AGENT_TOPIC, L2AgentEndpoint, L2PluginAPI,
                                      SecurityGroupPluginAPI, StateReportAPI, TAP_PREFIX, report_context)
from nefos.service import PeriodicTask
from nefos.waiting import cancel_and_wait, event_set_within, retrying

LOG = logging.getLogger(__name__)

NETLINK_ROUTE = 0
RTMGRP_LINK = 1
RTM_NEWLINK, RTM_DELLINK = 16, 17
IFLA_IFNAME, IFLA_MASTER = 3, 10
_NLMSG_HDR = struct.Struct("=LHHLL")
_IFINFO = struct.Struct("=BxHiII")
_RTA = struct.Struct("=HH")
RETRY_DELAY = 1.0
BRIDGE_PREFIX = "brq"
BRIDGE_GC_INTERVAL = 5.0
SG_SYNC_INTERVAL = 0.5
ADMIN_STATE_SYNC_INTERVAL = 2.0  # taps vs their ports' admin_state_up (the backstop for a port_update lost)
FDB_SYNC_INTERVAL = 5.0  # every VXLAN network's entries again (the backstop for a lost fdb_changed)
BRIDGE_NF = "/proc/sys/net/bridge/bridge-nf-call-iptables"
BRIDGE_NF6 = "/proc/sys/net/bridge/bridge-nf-call-ip6tables"


def parse_link_messages(data: bytes) -> list[tuple[int, str, int | None]]:
    """(message type, interface name, master ifindex) of each RTM_NEWLINK / RTM_DELLINK in ``data``."""
    out = []
    pos = 0
    while pos + _NLMSG_HDR.size <= len(data):
        length, mtype, _flags, _seq, _pid = _NLMSG_HDR.unpack_from(data, pos)
        if length < _NLMSG_HDR.size:
            break
        if mtype in (RTM_NEWLINK, RTM_DELLINK):
            body = pos + _NLMSG_HDR.size
            attr = body + _IFINFO.size
            name, master = None, None
            end = pos + length
            while attr + _RTA.size <= end:
                alen, atype = _RTA.unpack_from(data, attr)
                if alen < _RTA.size:
                    break
                payload = data[attr + _RTA.size:attr + alen]
                if atype == IFLA_IFNAME:
                    name = payload.split(b"\0", 1)[0].decode(errors="replace")
                elif atype == IFLA_MASTER and len(payload) >= 4:
                    master = struct.unpack_from("=I", payload)[0] or None
                attr += (alen + 3) & ~3
            if name:
                out.append((mtype, name, master))
        pos += (length + 3) & ~3
    return out


def _master(name: str) -> str | None:
    """The bridge device ``name`` is a port of, if any."""
    if not Path(f"/sys/class/net/{name}/brport").exists():
        return None
    try:
        return os.path.basename(os.readlink(f"/sys/class/net/{name}/master"))
    except OSError:
        return None


async def _unplug(tap: str) -> None:
    proc = await asyncio.create_subprocess_exec("ip", "link", "set", tap, "nomaster",
                                                stderr=asyncio.subprocess.DEVNULL)
    await proc.wait()
    LOG.warning("%s: its port is gone; unplugged and fenced", tap)


def _taps() -> set[str]:
    """Every ``tap*`` device of the host, wired or not."""
    try:
        names = os.listdir("/sys/class/net")
    except OSError:
        return set()
    return {n for n in names if n.startswith(TAP_PREFIX)}


class L2Agent(Component):
    def __init__(self, rt, host: str | None = None):
        self.rt = rt
        self.host = host or rt.cfg.host
        self.name = f"l2-agent:{self.host}"
        self.agent_id = f"linuxbridge-agent-{self.host}"
        self.plugin = L2PluginAPI(rt.bus, self.host, self.agent_id)
        self.sg_plugin = SecurityGroupPluginAPI(rt.bus, self.host)
        self.running = False
        self.devices: dict[str, str] = {}  # tap name -> port id, reported up
        self._seen: set[str] = set()  # taps present now (as netlink told us)
        self._queue: asyncio.Queue | None = None
        self._worker: asyncio.Task | None = None
        self._sock: socket.socket | None = None
        self._busy = False
        self._gc: asyncio.Task | None = None
        self.bridges: set[str] = set()  # bridges our devices were plugged into
        self.firewall = Firewall(f"{Path(rt.cfg.state_dir).resolve()}:{self.host}")
        self._sg: asyncio.Task | None = None
        self._sg_lock = asyncio.Lock()  # the periodic sync and a wiring's sync never interleave
        self._fenced: set[str] = set()  # taps cut off (their port is gone), for as long as they exist
        self._taken_down: set[str] = set()  # taps set down because their port is administratively down
        self._admin: asyncio.Task | None = None
        # VXLAN ([vxlan] local_ip): this host's tunnels to the others (nefos.agents.vxlan)
        self.local_ip = getattr(rt.cfg, "local_ip", "") or None
        self.state_reports = StateReportAPI(rt.bus, self.host)
        self.endpoint = L2AgentEndpoint(self)
        self.vnis: dict[str, int] = {}  # network id -> VNI of the VXLAN device made for it here
        self._fdb: asyncio.Task | None = None
        self._fdb_dirty: set[str] = set()
        self._fdb_kick = asyncio.Event()
        self._fdb_full = True
        self._serving = False

    # Lifecycle -----------------------------------------------------------------------------------
    async def start(self) -> None:
        if self.running:
            return
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
        sock.bind((0, RTMGRP_LINK))
        sock.setblocking(False)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
        self._sock = sock
        self._queue = asyncio.Queue()
        self.running = True
        asyncio.get_running_loop().add_reader(sock.fileno(), self._readable)
        self._worker = asyncio.create_task(self._work(), name=self.name)
        self._gc = self._periodic("bridges", BRIDGE_GC_INTERVAL, self.remove_unused_bridges)
        self._admin = self._periodic("admin-state", ADMIN_STATE_SYNC_INTERVAL, self.check_admin_state)
        if await self._bridge_netfilter():
            self._sg = self._periodic("security-groups", SG_SYNC_INTERVAL, self.sync_security_groups,
                                      initial_delay=0)
        await self.rt.bus.serve(L2_AGENT_TOPIC, self.endpoint, host=self.host)  # port_update, fdb_changed
        self._serving = True
        if self.local_ip:
            await self.state_reports.report_state(L2_AGENT, started=True, tunneling_ip=self.local_ip)
            self._fdb_full = True
            self._fdb = asyncio.create_task(self._fdb_loop(), name=f"{self.name}:fdb")
        await self._resync()
        LOG.info("%s started (%d VIF(s) plugged%s)", self.name, len(self._seen),
                 f"; VXLAN from {self.local_ip}" if self.local_ip else "; no VXLAN: this host's networks stay on it")

    def _periodic(self, what: str, interval: float, fn, initial_delay: float | None = None) -> asyncio.Task:
        """``fn`` every ``interval`` seconds until the agent stops; a failed pass is logged."""
        task = PeriodicTask(f"{self.name}:{what}", interval, fn, initial_delay)
        return asyncio.create_task(task.run_forever(), name=task.name)

    async def stop(self) -> None:
        self.running = False
        if self._sock is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None
        if self._serving:
            self._serving = False
            with contextlib.suppress(Exception):
                await self.rt.bus.unserve(self.endpoint)
        await cancel_and_wait(self._worker, self._gc, self._sg, self._fdb, self._admin)
        self._worker = self._gc = self._sg = self._fdb = self._admin = None
        self._queue = None
        LOG.info("%s stopped", self.name)

    async def idle(self, timeout: float = 10.0) -> None:
        """Wait until every report queued so far was made (tests)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self._queue is not None and (self._queue.qsize() or self._busy):
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"{self.name} still busy")
            await asyncio.sleep(0.01)

    async def _resync(self) -> None:
        """The taps present now vs what we reported, plus this host's ports still ACTIVE without a tap."""
        plugged = _taps()
        self._seen = set(plugged)
        for tap in sorted(plugged):
            self._enqueue("up", tap)
        for tap in sorted(set(self.devices) - plugged):
            self._enqueue("down", tap)
        for port_id in await self.plugin.get_devices_on_host():
            tap = TAP_PREFIX + port_id[:11]
            if tap not in plugged:
                self.devices.setdefault(tap, port_id)
                self._enqueue("down", tap)

    # Security groups ---------------------------------------------------------------------------------
    async def _bridge_netfilter(self) -> bool:
        """Bridged traffic must go through iptables and ip6tables (br_netfilter) for security groups
        to apply."""
        if not Path(BRIDGE_NF).exists():
            proc = await asyncio.create_subprocess_exec("modprobe", "br_netfilter",
                                                        stderr=asyncio.subprocess.DEVNULL)
            await proc.wait()
        try:
            for switch in (BRIDGE_NF, BRIDGE_NF6):
                if Path(switch).read_text().strip() != "1":
                    Path(switch).write_text("1\n")
        except OSError as exc:
            LOG.error("%s: bridged traffic does not go through iptables (%s): security groups are NOT "
                      "enforced on this host", self.name, exc)
            return False
        return True

    async def sync_security_groups(self) -> bool:
        async with self._sg_lock:
            present = _taps()
            candidates = sorted(t for t in present if t in self.devices or t in self._fenced)
            others = sorted(present - set(candidates))
            if others:  # taps in one of this cloud's bridges
                ours = {BRIDGE_PREFIX + n[:11] for n in await self.plugin.get_network_ids()}
                candidates = sorted(candidates + [t for t in others if _master(t) in ours])
            # the ports (a guest's, a DHCP server's, ...) these taps belong to
            existing = set(await self.plugin.get_known_devices(candidates)) if candidates else set()
            # A tap this agent wired (or that sits in one of this cloud's bridges) whose port is
            # gone (its server was deleted while this host was down): cut off at once, so its
            # address can safely be someone else's. Other taps are not this cloud's.
            fenced = tuple(t for t in candidates if t not in existing)
            self._fenced = set(fenced)
            filters = [PortFilter.from_dict(d) for d in await self.sg_plugin.security_group_info_for_host()]
            changed = await self.firewall.apply(filters, fenced)
            for tap in fenced:
                if changed and _master(tap) is not None:
                    await _unplug(tap)
            return changed

    async def remove_firewall(self) -> None:
        await self.firewall.remove()

    # Administrative state ----------------------------------------------------------------------------
    def port_updated(self, port_id: str) -> None:
        """The network service says ``port_id``'s ``admin_state_up`` changed: look at its device
        again (in order with the other reports), if it is on this host."""
        tap = TAP_PREFIX + port_id[:11]
        if tap in self._seen:
            self._enqueue("up", tap)

    async def check_admin_state(self) -> list[str]:
        """Taps whose state disagrees with their port's ``admin_state_up`` (up while the port is
        down, or taken down while it is up again) are looked at again; returns them."""
        present = sorted(self._seen)
        if not present:
            return []
        by_tap = {TAP_PREFIX + pid[:11]: up for pid, up in (await self.plugin.get_devices_admin_state()).items()}
        stale = [tap for tap in present if tap in by_tap and (
            (not by_tap[tap] and link_is_up(tap)) or (by_tap[tap] and tap in self._taken_down))]
        for tap in stale:
            LOG.warning("%s: %s is %s but its port is administratively %s: applying it", self.name, tap,
                        "up" if link_is_up(tap) else "down", "up" if by_tap[tap] else "down")
            self._enqueue("up", tap)
        return stale

    # VXLAN and L2 population ----------------------------------------------------------------------
    def fdb_changed(self, network_ids: list[str] | None) -> None:
        """The network service says these networks' forwarding entries changed (None: every network's)."""
        if network_ids is None:
            self._fdb_full = True
        else:
            self._fdb_dirty.update(network_ids)
        self._fdb_kick.set()

    async def _fdb_loop(self) -> None:
        loop = asyncio.get_running_loop()
        next_full = loop.time()
        last_report = loop.time()
        report_every = min(float(getattr(self.rt.cfg, "report_interval", 10.0)), 10.0)
        while True:
            try:
                if loop.time() - last_report >= report_every:
                    last_report = loop.time()
                    await self.state_reports.report_state(L2_AGENT, tunneling_ip=self.local_ip)
                if self._fdb_full or loop.time() >= next_full:
                    self._fdb_full = False
                    self._fdb_dirty.clear()
                    self._fdb_kick.clear()
                    next_full = loop.time() + FDB_SYNC_INTERVAL
                    await self.sync_fdb()
                elif self._fdb_dirty:
                    ids, self._fdb_dirty = self._fdb_dirty, set()
                    self._fdb_kick.clear()
                    await self.sync_fdb(ids)
            except asyncio.CancelledError:
                raise
            except Exception:
                LOG.exception("%s: VXLAN forwarding entries sync failed", self.name)
                self._fdb_full = True
                await asyncio.sleep(RETRY_DELAY)
            if self._fdb_dirty or self._fdb_full:
                continue
            await event_set_within(self._fdb_kick, max(0.0, min(next_full, last_report + report_every) - loop.time()))

    async def sync_fdb(self, network_ids: set[str] | None = None) -> None:
        """This host's VXLAN devices and their entries as the network service says (L2 population):
        a device for each VXLAN network with ports here whose bridge exists, none for the others."""
        from nefos.agents import vxlan
        info = await self.plugin.get_fdb_entries(None if network_ids is None else sorted(network_ids))
        for network_id, net in sorted(info.items()):
            bridge = BRIDGE_PREFIX + network_id[:11]
            if not bridge_exists(bridge):
                continue  # nothing of it wired here (yet)
            vni = net["segmentation_id"]
            await vxlan.ensure_device(vni, bridge, self.local_ip, net["mtu"])
            self.vnis[network_id] = vni
            await vxlan.set_entries(vni, net["vteps"])
        for network_id, vni in list(self.vnis.items()):
            if (network_ids is None or network_id in network_ids) and network_id not in info:
                await vxlan.remove_device(vni)  # no port of it here any more: no traffic of it either
                del self.vnis[network_id]
        if network_ids is None:  # devices an earlier run left in this cloud's bridges
            ours = {BRIDGE_PREFIX + n[:11] for n in await self.plugin.get_network_ids()}
            wanted = set(self.vnis.values())
            for vni, master in (await vxlan.devices()).items():
                if vni not in wanted and (master in ours or not master):
                    await vxlan.remove_device(vni)

    # Bridges -------------------------------------------------------------------------------------
    async def remove_unused_bridges(self) -> list[str]:
        """Delete our empty bridges whose network no longer exists."""
        for name in list(self.bridges):
            if not Path(f"/sys/class/net/{name}").exists():
                self.bridges.discard(name)
        empty = [n for n in self.bridges if Path(f"/sys/class/net/{n}/bridge").is_dir()
                 and not any(Path(f"/sys/class/net/{n}/brif").iterdir())]
        if not empty:
            return []
        alive = {BRIDGE_PREFIX + n[:11] for n in await self.plugin.get_network_ids()}
        removed = []
        for name in empty:
            if name in alive:
                continue
            proc = await asyncio.create_subprocess_exec("ip", "link", "del", name,
                                                        stderr=asyncio.subprocess.DEVNULL)
            if await proc.wait() == 0:
                self.bridges.discard(name)
                removed.append(name)
                LOG.info("%s: removed bridge %s (its network is gone)", self.name, name)
        return removed

    # netlink ---------------------------------------------------------------------------------------
    def _readable(self) -> None:
        sock = self._sock
        if sock is None:
            return
        while True:
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                return
            except OSError as exc:  # ENOBUFS: events were lost; look at everything again
                LOG.warning("%s: netlink: %s; resynchronising", self.name, exc)
                asyncio.get_running_loop().create_task(self._resync())
                return
            for mtype, name, _ in parse_link_messages(data):
                if not name.startswith(TAP_PREFIX):
                    continue
                if mtype == RTM_NEWLINK and name not in self._seen:  # a new tap: wire it
                    self._seen.add(name)
                    self._enqueue("up", name)
                elif mtype == RTM_DELLINK and name in self._seen:
                    self._seen.discard(name)
                    self._taken_down.discard(name)
                    self._enqueue("down", name)

    def _enqueue(self, kind: str, tap: str) -> None:
        if self.running and self._queue is not None:
            self._queue.put_nowait((kind, tap))

    # Reports -----------------------------------------------------------------------------------------
    async def _work(self) -> None:
        queue = self._queue
        while True:
            kind, tap = await queue.get()
            self._busy = True
            try:
                def log_retry(state: RetryCallState) -> None:
                    LOG.warning("%s: reporting %s %s failed (%s); retrying", self.name, tap, kind,
                                state.outcome.exception())
                async for attempt in retrying(retry=retry_if_exception_type(Exception), wait=wait_fixed(RETRY_DELAY),
                                              before_sleep=log_retry):
                    with attempt:
                        await self._report(kind, tap)
            finally:
                self._busy = False

    async def _wire(self, tap: str, bridge: str, details: dict | None = None) -> bool:
        """Security groups for the tap's port, then the tap into ``bridge`` (created when missing) and up;
        on a VXLAN network (with ``local_ip``) the bridge's VXLAN device too, and the tap at the
        network's MTU. False when the tap is gone."""
        details = details or {}
        tunnelled = bool(self.local_ip) and details.get("network_type") == "vxlan" and details.get("segmentation_id")
        mtu = details.get("mtu") if tunnelled else None
        if self._sg is not None:
            await self.sync_security_groups()  # the port's chains exist before its first packet crosses
        if tunnelled:
            from nefos.agents import vxlan
            await ensure_bridge(bridge, mtu)
            await vxlan.ensure_device(details["segmentation_id"], bridge, self.local_ip, mtu)
            self.vnis[details["network_id"]] = details["segmentation_id"]
            self.fdb_changed([details["network_id"]])
        if _master(tap) != bridge:
            await ensure_bridge(bridge, mtu)
            rc, err = await enslave(tap, bridge, mtu)
            if rc != 0:
                if not device_exists(tap) or tap not in self._seen:
                    return False
                raise RuntimeError(f"cannot put {tap} into {bridge}: {err}")
            LOG.info("%s: %s wired into %s", self.name, tap, bridge)
        elif not link_is_up(tap):  # taken down while its port was administratively down
            rc, err = await set_link_up(tap, True)
            if rc != 0:
                if not device_exists(tap) or tap not in self._seen:
                    return False
                raise RuntimeError(f"cannot bring {tap} up: {err}")
        self.bridges.add(bridge)
        self._taken_down.discard(tap)
        return True

    async def _report(self, kind: str, tap: str) -> None:
        with report_context():
            if kind == "up":
                if tap not in self._seen:
                    return  # gone again before we got to it
                details = await self.plugin.get_device_details(self.devices.get(tap) or tap)
                if "port_id" not in details:
                    LOG.debug("%s: %s is no port bound here", self.name, tap)
                    return
                port_id = details["port_id"]
                if not details.get("admin_state_up", True):
                    await self._take_down(tap, port_id)
                    return
                LOG.info("%s: device %s (port %s) appeared: wiring it", self.name, tap, port_id)
                if not await self._wire(tap, BRIDGE_PREFIX + details["network_id"][:11], details):
                    return  # gone meanwhile
                await self.plugin.update_device_up(port_id)
                self.devices[tap] = port_id
                LOG.info("%s: device %s (port %s) up", self.name, tap, port_id)
            else:
                port_id = self.devices.pop(tap, None)
                if port_id is None:
                    return
                await self.plugin.update_device_down(port_id)
                LOG.info("%s: device %s (port %s) down", self.name, tap, port_id)

    async def _take_down(self, tap: str, port_id: str) -> None:
        """The port is administratively down: its tap down (no frame in or out), the port DOWN."""
        if link_is_up(tap):
            rc, err = await set_link_up(tap, False)
            if rc != 0 and device_exists(tap):
                raise RuntimeError(f"cannot take {tap} down: {err}")
        self.devices.pop(tap, None)
        self._taken_down.add(tap)
        await self.plugin.update_device_down(port_id)
        LOG.info("%s: device %s (port %s) administratively down: taken down", self.name, tap, port_id)


def component(rt, host: str | None = None) -> Component:
    return L2Agent(rt, host)
