"""The DHCP agent (Neutron's DHCP agent with the dnsmasq driver, reduced): one per network host.

For every network with an IPv4 subnet that has DHCP enabled, the agent keeps:

* a DHCP port on the network (``device_owner = network:dhcp``, ``device_id =
  dhcp-<host>-<network>``), created through the network service, which gives it
  an address on each subnet;
* a network namespace ``qdhcp-<network id>`` with a veth pair: ``ns-<port[:11]>``
  inside (the DHCP port's MAC and addresses), ``tap<port[:11]>`` outside, a port
  of the network's Linux bridge ``brq<network[:11]>`` (created when missing, as
  the compute side does);
* a ``dnsmasq`` in that namespace answering only for the ports it knows: one
  host entry per port (MAC -> fixed IP), static ranges, the subnet's gateway and
  DNS servers as options. Entries follow the ports: when a network's entries
  changed, the agent rewrites its hosts file and sends dnsmasq SIGHUP (it re-reads
  them without restarting).

When to look (Neutron's DHCP agent): the network service notifies the DHCP agents
(``network_changed`` on bus topic ``dhcp_agent``, fanout, see ``nefos.clients.network_agents``) after
a port, subnet or network change committed, and the agent syncs that network at
once. Notifications are coalesced: the networks notified while a sync runs are
synced together once it ends (several notifications for one network: one more
sync). Every ``dhcp_agent_sync_interval`` seconds (5 s) it still syncs every
network, the backstop for a notification lost (the service restarting, a bus
error) or a change the notifications do not cover.

dnsmasq drops root for its own user (``dnsmasq``, else ``nobody``, dnsmasq's compiled-in
default; never ``--user=root``): its directory and the hosts and options files it re-reads on SIGHUP are owned by root
and readable by that user's group alone (0750 / 0640). When that user cannot reach
``dhcp_confs`` (a private parent directory), the agent keeps the files under
``/run/nefos/dhcp`` instead and says so.

Isolated metadata (``enable_isolated_metadata``, on by default): each network's namespace also
holds ``169.254.169.254/32`` on the DHCP port's interface and a metadata proxy listening there
(``nefos.agents.metadata_proxy``, in this process), and dnsmasq gives the guests a host route to
it through the DHCP port's address (classless static routes, options 121 and 249, with the default
route via the subnet's gateway when it has one: a client that takes option 121 ignores the router
option, RFC 3442).

Networks that no longer need DHCP (deleted, DHCP disabled) lose their dnsmasq,
namespace, veth and DHCP port. ``stop()`` tears everything down.

Provisioning blocks (``nefos.control.network.provisioning``): while this agent is alive
(a heartbeat in ``network_agents`` every ``report_interval`` seconds) a new port
on a DHCP network waits for it before going ACTIVE. Once dnsmasq has re-read a
hosts file holding a port's entries (its ``read <hosts file>`` log line after
the SIGHUP or start, not just the signal sent), the agent acknowledges the ports
still blocked on DHCP in one ``dhcp_ready_on_ports`` call.
"""

from __future__ import annotations

import asyncio
import contextlib
import grp
import hashlib
import ipaddress
import logging
import os
import shutil
import signal
from dataclasses import dataclass, field
from pathlib import Path

from nefos import fileperms
from nefos.component import Component
from nefos.agents.agent_sync import SyncLoop
from nefos.agents.netns import dev_exists as _dev_exists, netns_exists as _netns_exists, run as _run
from nefos.clients.network_agents import (DHCP_AGENT, DHCP_AGENT_TOPIC, DhcpAgentEndpoint, DhcpPluginAPI,
                                      StateReportAPI, report_context)

LOG = logging.getLogger(__name__)

DHCP_OWNER = "network:dhcp"
LEASE_SECONDS = 86400
RELOAD_TIMEOUT = 5.0  # seconds dnsmasq has to say it re-read its hosts file
LOG_MAX_BYTES = 1024 * 1024  # dnsmasq's log per network, cut back to LOG_KEEP_BYTES past this
LOG_KEEP_BYTES = 64 * 1024
DNSMASQ_USERS = ("dnsmasq", "nobody")  # the first that exists; Debian's dnsmasq-base makes "dnsmasq"
RUNTIME_CONFS = Path("/run/nefos/dhcp")


def dnsmasq_account() -> tuple[str, int, int] | None:
    """(name, uid, gid) of the user dnsmasq drops to, or None when it keeps this process's user."""
    if os.geteuid() != 0:
        return None  # only root can switch users; dnsmasq keeps ours
    for name in DNSMASQ_USERS:
        found = fileperms.account(name)
        if found is not None:
            return (name, *found)
    return None


@dataclass
class NetworkState:
    network_id: str
    subnets: list[dict]  # dhcp-enabled IPv4 subnets: id, cidr, gateway_ip, dns_nameservers
    hosts: list[tuple[str, str]] = field(default_factory=list)  # (mac, ip), sorted
    entries: dict[str, set] = field(default_factory=dict)  # port id -> its (mac, ip) entries
    blocked: set[str] = field(default_factory=set)  # ports waiting for this agent (DHCP block)
    mtu: int | None = None  # the network's MTU (DHCP option 26)

    @classmethod
    def from_info(cls, info: dict) -> "NetworkState":
        """From the network service's ``get_active_networks_info``: every port's entries on the
        network's DHCP subnets but the DHCP ports'."""
        st = cls(info["network_id"], sorted(info["subnets"], key=lambda x: x["id"]), mtu=info.get("mtu"))
        dhcp_subnets = {sn["id"] for sn in st.subnets}
        blocked = set(info.get("blocked") or ())
        for port in info["ports"]:
            if port["device_owner"] == DHCP_OWNER:
                continue
            for fixed in port["fixed_ips"]:
                if fixed["subnet_id"] not in dhcp_subnets:
                    continue
                entry = (port["mac_address"].lower(), fixed["ip_address"])
                st.hosts.append(entry)
                st.entries.setdefault(port["id"], set()).add(entry)
                if port["id"] in blocked:
                    st.blocked.add(port["id"])
        st.hosts.sort()
        return st

    @property
    def namespace(self) -> str:
        return f"qdhcp-{self.network_id}"

    @property
    def bridge(self) -> str:
        return "brq" + self.network_id[:11]

    def digest(self) -> str:
        return hashlib.sha256(repr((self.subnets, self.hosts, self.mtu)).encode()).hexdigest()


class DhcpAgent(SyncLoop, Component):
    log = LOG

    def __init__(self, rt, host: str | None = None, interval: float | None = None):
        self.rt = rt
        self.host = host or rt.cfg.host
        self.name = f"dhcp-agent:{self.host}"
        self.interval = interval if interval is not None else getattr(rt.cfg, "dhcp_agent_sync_interval", 5.0)
        confs = getattr(rt.cfg, "dhcp_confs", "") or Path(rt.cfg.state_dir) / "dhcp"
        self.state_dir = Path(confs).resolve()  # each network's dnsmasq files, in <network id>/
        self.dnsmasq_user = dnsmasq_account()
        self._applied: dict[str, str] = {}  # network id -> digest of what dnsmasq serves
        self._procs: dict[str, asyncio.subprocess.Process] = {}
        self._ports: dict[str, dict] = {}  # network id -> its DHCP port
        self.synced = asyncio.Event()
        self._init_sync_loop()  # full_syncs (every network), network_syncs (some), for tests
        self.plugin = DhcpPluginAPI(rt.bus, self.host)
        self.state_reports = StateReportAPI(rt.bus, self.host)
        self.endpoint = DhcpAgentEndpoint(self)
        self.heartbeat_interval = min(float(getattr(rt.cfg, "report_interval", 10.0)), 10.0)
        self._last_heartbeat = 0.0
        self.isolated_metadata = bool(getattr(rt.cfg, "enable_isolated_metadata", True))
        from nefos.agents.metadata_proxy import MetadataProxies
        # (made here, with the shared secret: an empty secret file is refused at start)
        self.metadata_proxies = MetadataProxies(rt) if self.isolated_metadata else None

    # Lifecycle -----------------------------------------------------------------------------------
    async def start(self) -> None:
        missing = [b for b in ("dnsmasq", "ip") if shutil.which(b) is None]
        if missing:
            LOG.error("%s: %s not installed (apt-get install dnsmasq-base iproute2); no DHCP here",
                      self.name, ", ".join(missing))
            return
        self._choose_confs_dir()
        await self._heartbeat(started=True)  # from now on new ports on DHCP networks wait for us
        await self._serve_and_loop(DHCP_AGENT_TOPIC)
        LOG.info("%s started (dnsmasq per network; on the network service's notifications, all "
                 "networks every %.1f s)", self.name, self.interval)

    def _choose_confs_dir(self) -> None:
        """dhcp_confs when dnsmasq's user can reach it, else a directory of its own under /run."""
        gid = None
        if self.dnsmasq_user is not None:
            name, uid, gid = self.dnsmasq_user
            if not fileperms.reachable_by(self.state_dir, uid, {gid}):
                fallback = RUNTIME_CONFS / hashlib.sha256(str(self.state_dir).encode()).hexdigest()[:16]
                LOG.warning("%s: dnsmasq's user %s cannot reach %s (a parent directory is private); "
                            "its files go to %s", self.name, name, self.state_dir, fallback)
                self.state_dir = fallback
        fileperms.shared_dir(self.state_dir, gid)

    @property
    def _dnsmasq_gid(self) -> int | None:
        return self.dnsmasq_user[2] if self.dnsmasq_user is not None else None

    async def stop(self) -> None:
        await self._unserve_and_stop_loop()
        # (also the networks whose first set-up the cancel interrupted: plumbed, not yet applied)
        for network_id in set(self._applied) | set(self._procs) | set(self._ports):
            with contextlib.suppress(Exception):
                await self._teardown(network_id)
        if self.metadata_proxies is not None:
            await self.metadata_proxies.close()
        if RUNTIME_CONFS in self.state_dir.parents:
            with contextlib.suppress(OSError):
                self.state_dir.rmdir()  # the /run directory of its own, when nothing is left in it

    async def _heartbeat(self, started: bool = False) -> None:
        loop = asyncio.get_running_loop()
        if started or loop.time() - self._last_heartbeat >= self.heartbeat_interval:
            await self.state_reports.report_state(DHCP_AGENT, started=started)
            self._last_heartbeat = loop.time()

    def network_changed(self, network_id: str) -> None:
        """The network service says ``network_id`` changed: sync it as soon as the current sync
        (if any) ends; notifications meanwhile coalesce into that one sync."""
        self._mark_changed((network_id,))

    @property
    def network_syncs(self) -> int:
        return self.partial_syncs

    async def _before_pass(self) -> None:
        await self._heartbeat()

    def _longest_wait(self) -> float:
        return self.heartbeat_interval  # the heartbeat's due time

    # Sync ----------------------------------------------------------------------------------------
    async def _wanted(self, network_ids: set[str] | None = None) -> dict[str, NetworkState]:
        infos = await self.plugin.get_active_networks_info(None if network_ids is None else list(network_ids))
        return {info["network_id"]: NetworkState.from_info(info) for info in infos}

    async def sync(self, network_ids: set[str] | None = None) -> None:
        """Bring dnsmasq in line with the ports of ``network_ids`` (None: every network)."""
        wanted = await self._wanted(network_ids)
        for network_id in list(self._applied):
            if network_id not in wanted and (network_ids is None or network_id in network_ids):
                LOG.info("%s: network %s needs no DHCP any more", self.name, network_id)
                await self._teardown(network_id, delete_port=True)
        for network_id in wanted:
            self._bound_log(network_id)
        ready: list[str] = []
        for network_id, st in wanted.items():
            digest = st.digest()
            proc = self._procs.get(network_id)
            if not (self._applied.get(network_id) == digest and proc is not None and proc.returncode is None):
                try:
                    await self._apply(st)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    LOG.warning("%s: network %s: %s", self.name, network_id, exc)
                    continue
                self._applied[network_id] = digest
            if self.isolated_metadata and network_id not in self.metadata_proxies.proxies:
                await self._metadata_proxy(st)  # (again at the next sync when it failed)
            # dnsmasq serves exactly st.hosts now: the blocked ports whose entries are all there are ready
            served = set(st.hosts)
            ready += sorted(p for p in st.blocked if st.entries.get(p) and st.entries[p] <= served)
        if ready:
            await self._ready(ready)
        self.synced.set()

    def _bound_log(self, network_id: str) -> None:
        """Cut dnsmasq's log back to its last LOG_KEEP_BYTES once past LOG_MAX_BYTES: guests' DHCP
        requests are logged (errors even with --quiet-dhcp), so a guest must not grow it without
        bound. Between syncs only: _apply reads the log from an offset."""
        log = self._dir(network_id) / "dnsmasq.log"
        with contextlib.suppress(FileNotFoundError):
            if log.stat().st_size <= LOG_MAX_BYTES:
                return
            with open(log, "r+b") as f:
                f.seek(-LOG_KEEP_BYTES, os.SEEK_END)
                tail = f.read()
                f.seek(0)
                f.truncate()
                f.write(tail)  # dnsmasq appends (O_APPEND) after it

    async def _metadata_proxy(self, st: NetworkState) -> None:
        """The network's metadata proxy, in its namespace (plumbed by now); a failure is logged, not
        DHCP's: dnsmasq serves on."""
        try:
            await self.metadata_proxies.ensure(st.network_id, st.namespace)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            LOG.warning("%s: network %s: no metadata proxy: %s", self.name, st.network_id, exc)

    async def _ready(self, port_ids: list[str]) -> None:
        with report_context():
            LOG.info("%s: DHCP entries in place for port(s) %s: acknowledging", self.name, ", ".join(port_ids))
            await self.plugin.dhcp_ready_on_ports(port_ids)

    # One network ---------------------------------------------------------------------------------
    def _dir(self, network_id: str) -> Path:
        return self.state_dir / network_id

    async def _dhcp_port(self, st: NetworkState) -> dict:
        port = self._ports.get(st.network_id)
        if port is None:
            port = self._ports[st.network_id] = await self.plugin.get_dhcp_port(st.network_id)
            LOG.info("%s: DHCP port %s on network %s (%s)", self.name, port["id"], st.network_id,
                     ", ".join(ip["ip_address"] for ip in port.get("fixed_ips") or []))
        return port

    async def _plumb(self, st: NetworkState, port: dict) -> str:
        """Namespace, veth into the bridge, the DHCP port's addresses; returns the inner device."""
        from nefos.agents.ip_lib import ensure_bridge
        await ensure_bridge(st.bridge, st.mtu)
        outer, inner = "tap" + port["id"][:11], "ns-" + port["id"][:11]
        ns = st.namespace
        if not _netns_exists(ns):
            await _run("ip", "netns", "add", ns)
        await _run("ip", "-n", ns, "link", "set", "lo", "up")
        inner_there = (await _run("ip", "-n", ns, "link", "show", inner, check=False))[0] == 0
        if not inner_there:
            if _dev_exists(outer):
                await _run("ip", "link", "del", outer, check=False)
            await _run("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
            await _run("ip", "link", "set", inner, "netns", ns)
        await _run("ip", "link", "set", outer, "master", st.bridge)
        if st.mtu:  # the network's (less than the underlay's on a VXLAN network)
            await _run("ip", "link", "set", outer, "mtu", str(st.mtu))
            await _run("ip", "-n", ns, "link", "set", inner, "mtu", str(st.mtu))
        await _run("ip", "link", "set", outer, "up")
        await _run("ip", "-n", ns, "link", "set", inner, "address", port["mac_address"])
        subnets = {sn["id"]: sn for sn in st.subnets}
        for fixed in port.get("fixed_ips") or []:
            sn = subnets.get(fixed["subnet_id"])
            if sn is None:
                continue
            prefix = ipaddress.ip_network(sn["cidr"]).prefixlen
            await _run("ip", "-n", ns, "addr", "replace", f"{fixed['ip_address']}/{prefix}", "dev", inner)
        if self.isolated_metadata:
            from nefos.agents.metadata_proxy import METADATA_CIDR
            await _run("ip", "-n", ns, "addr", "replace", METADATA_CIDR, "dev", inner)
        await _run("ip", "-n", ns, "link", "set", inner, "up")
        return inner

    def _metadata_routes(self, sn: dict, port: dict) -> list[str]:
        """The classless static routes (options 121 and 249) of ``sn``'s guests: 169.254.169.254
        via the DHCP port's address on it, and the default route via the gateway (when any)."""
        from nefos.agents.metadata_proxy import METADATA_CIDR
        if not self.isolated_metadata:
            return []
        via = next((f["ip_address"] for f in port.get("fixed_ips") or [] if f["subnet_id"] == sn["id"]), None)
        if via is None:
            return []
        routes = [f"{METADATA_CIDR},{via}"]
        if sn["gateway_ip"]:
            routes.append(f"0.0.0.0/0,{sn['gateway_ip']}")
        tag = f"subnet-{sn['id']}"
        return [f"tag:{tag},option:classless-static-route,{','.join(routes)}",
                f"tag:{tag},249,{','.join(routes)}"]

    def _write_files(self, st: NetworkState, port: dict) -> None:
        d = fileperms.shared_dir(self._dir(st.network_id), self._dnsmasq_gid)
        hosts = "".join(f"{mac},host-{ip.replace('.', '-')},{ip}\n" for mac, ip in st.hosts)
        opts = []
        for sn in st.subnets:
            tag = f"subnet-{sn['id']}"
            if sn["gateway_ip"]:
                opts.append(f"tag:{tag},option:router,{sn['gateway_ip']}")
            else:
                opts.append(f"tag:{tag},option:router")
            if st.mtu:
                opts.append(f"tag:{tag},option:mtu,{st.mtu}")  # option 26: the guests' interface MTU
            if sn["dns_nameservers"]:
                opts.append(f"tag:{tag},option:dns-server,{','.join(sn['dns_nameservers'])}")
            opts += self._metadata_routes(sn, port)
        for name, text in (("host", hosts), ("opts", "\n".join(opts) + "\n")):
            tmp = d / f".{name}.tmp"
            tmp.write_text(text)
            fileperms.share_file(tmp, self._dnsmasq_gid)  # dnsmasq re-reads it as its own user
            os.replace(tmp, d / name)

    async def _apply(self, st: NetworkState) -> None:
        port = await self._dhcp_port(st)
        inner = await self._plumb(st, port)
        self._write_files(st, port)
        log = self._dir(st.network_id) / "dnsmasq.log"
        offset = log.stat().st_size if log.exists() else 0
        proc = self._procs.get(st.network_id)
        running = proc is not None and proc.returncode is None
        if running and self._ranges_of(st) == getattr(proc, "nefos_ranges", None):
            proc.send_signal(signal.SIGHUP)  # re-reads the hosts and options files
            await self._wait_read(st, offset, proc)
            LOG.info("%s: network %s: %d host entr%s (reloaded)", self.name, st.network_id, len(st.hosts),
                     "y" if len(st.hosts) == 1 else "ies")
            return
        if running:
            await self._kill(st.network_id)
        await self._spawn(st, inner)
        await self._wait_read(st, offset, self._procs[st.network_id])

    async def _wait_read(self, st: NetworkState, offset: int, proc) -> None:
        """Until dnsmasq logged that it (re-)read the hosts file written before ``offset``."""
        d = self._dir(st.network_id)
        needle = f"read {d / 'host'}".encode()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RELOAD_TIMEOUT
        delay = 0.002
        while True:
            with contextlib.suppress(OSError):
                with open(d / "dnsmasq.log", "rb") as f:
                    f.seek(offset)
                    if needle in f.read():
                        return
            if proc.returncode is not None:
                raise RuntimeError(f"dnsmasq exited ({proc.returncode}); see {d / 'dnsmasq.log'}")
            if loop.time() > deadline:
                raise RuntimeError(f"dnsmasq did not re-read {d / 'host'} within {RELOAD_TIMEOUT} s")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)

    @staticmethod
    def _ranges_of(st: NetworkState) -> tuple:
        return tuple((sn["id"], sn["cidr"]) for sn in st.subnets)

    async def _spawn(self, st: NetworkState, inner: str) -> None:
        d = self._dir(st.network_id)
        self._kill_stale(d / "pid")
        argv = ["ip", "netns", "exec", st.namespace, "dnsmasq", "--no-hosts", "--no-resolv",
                "--keep-in-foreground", "--port=0", "--except-interface=lo", "--bind-interfaces",
                f"--interface={inner}", f"--pid-file={d / 'pid'}", f"--dhcp-hostsfile={d / 'host'}",
                f"--dhcp-optsfile={d / 'opts'}", "--leasefile-ro", "--dhcp-authoritative",
                "--log-facility=-", "--quiet-dhcp6"]
        if self.dnsmasq_user is not None:
            argv += [f"--user={self.dnsmasq_user[0]}", f"--group={grp.getgrgid(self.dnsmasq_user[2]).gr_name}"]
        for sn in st.subnets:
            net = ipaddress.ip_network(sn["cidr"])
            argv.append(f"--dhcp-range=set:subnet-{sn['id']},{net.network_address},static,"
                        f"{net.netmask},{LEASE_SECONDS}s")
        log = open(fileperms.private_file(d / "dnsmasq.log"), "ab")  # dnsmasq writes it through our fd
        try:
            proc = await asyncio.create_subprocess_exec(*argv, stdout=log, stderr=log,
                                                        start_new_session=True)
        finally:
            log.close()
        proc.nefos_ranges = self._ranges_of(st)
        self._procs[st.network_id] = proc
        LOG.info("%s: dnsmasq for network %s in %s (pid %d, %d host entr%s)", self.name, st.network_id,
                 st.namespace, proc.pid, len(st.hosts), "y" if len(st.hosts) == 1 else "ies")

    @staticmethod
    def _kill_stale(pidfile: Path) -> None:
        """A dnsmasq left by an earlier agent process on this network."""
        with contextlib.suppress(OSError, ValueError):
            pid = int(pidfile.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"dnsmasq" in cmdline and str(pidfile).encode() in cmdline:
                os.kill(pid, signal.SIGTERM)

    async def _kill(self, network_id: str) -> None:
        proc = self._procs.pop(network_id, None)
        if proc is not None and proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 5)
            except asyncio.TimeoutError:
                proc.kill()
                await proc.wait()
        self._kill_stale(self._dir(network_id) / "pid")

    async def _teardown(self, network_id: str, delete_port: bool = False) -> None:
        await self._kill(network_id)
        if self.metadata_proxies is not None:
            await self.metadata_proxies.remove(network_id)  # its socket would keep the namespace alive
        self._applied.pop(network_id, None)
        port = self._ports.pop(network_id, None)
        ns = f"qdhcp-{network_id}"
        if _netns_exists(ns):
            await _run("ip", "netns", "del", ns, check=False)  # takes the inner veth end (and its peer)
        if port is not None:
            outer = "tap" + port["id"][:11]
            if _dev_exists(outer):
                await _run("ip", "link", "del", outer, check=False)
            if delete_port:
                with contextlib.suppress(Exception):
                    await self.plugin.release_dhcp_port(network_id)
        shutil.rmtree(self._dir(network_id), ignore_errors=True)

    # For tests and operators -----------------------------------------------------------------------
    def namespace_of(self, network_id: str) -> str:
        return f"qdhcp-{network_id}"


def component(rt, host: str | None = None) -> Component:
    return DhcpAgent(rt, host)
