"""A multi-host Nefos on one machine: each compute host in a network namespace of its own.

```
 root namespace                                              RabbitMQ 127.0.0.1:5672 (vhost mh-<token>)
   control plane: api conductor scheduler network             PostgreSQL 127.0.0.1:5432 (database nefos_test_…,
   image identity metadata (127.0.0.1, each its own process)    the control plane's only)
   TcpForwarder: 172.31.X.1:<port> ──▶ 127.0.0.1:<port>       libvirtd + QEMU (guests' taps made here)
                 (RabbitMQ, the APIs, the metadata service)
   mh<token>br  172.31.X.1/24  (the underlay bridge: the hosts' veths only, no uplink)
     ├─ mh<token>v2 ══ ul0 172.31.X.2  ns mh<token>-<host 1>: nefos compute (libvirt) + nefos l2-agent
     ├─ mh<token>v3 ══ ul0 172.31.X.3  ns mh<token>-<host 2>: nefos compute (libvirt) + nefos l2-agent
     ├─ mh<token>v4 ══ ul0 172.31.X.4  ns mh<token>-<host 3>: nefos compute (fake driver, fake L2 agent)
     └─ mh<token>v5 ══ ul0 172.31.X.5  ns mh<token>-net:      nefos l2-agent + dhcp-agent (+ metadata proxy)
                                                                + l3-agent
```

The processes in a namespace (which have no database) reach the bus, the APIs and the metadata
service at the forwarders on 172.31.X.1, so pulling a namespace's cable (``partition``: ``ul0`` down) cuts that
host off everything, as on a real network. A libvirt host's guests run under the machine's
libvirtd, which makes their taps in the root namespace; the compute host moves each into its own
namespace (option ``libvirtd_netns``, ``nefos.host.virt.libvirt.tap_netns.move_taps_here``), where its L2
agent wires it into the network's bridge. Each L2 agent gets ``local_ip`` = its underlay address:
tenant networks (VXLAN) cross between the namespaces in tunnels between those addresses.

Everything is made under a run token and removed by ``stop()`` in reverse order, whatever failed:
processes, libvirt domains under the run's directory, namespaces (the agents' ``qdhcp-`` /
``qrouter-`` too), veths, the bridge, the database, the vhost, the directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from nefos.cmd.allinone import free_port
from nefos.http_client import verified_tls
from tests.backends import fresh_database
from tests.libvirt.conftest import shown_whole
from tests.multihost.underlay import TcpForwarder, Underlay, run
from tests.noauth import ADMIN

BIN = Path(sys.executable).parent
RABBIT_HOST, RABBIT_PORT = "127.0.0.1", 5672
API_PORTS = ("COMPUTE", "NETWORK", "IMAGE", "IDENTITY")
CONTROL_PLANE = ("identity", "image", "network", "scheduler", "conductor", "metadata", "api")


@dataclass
class Host:
    name: str
    driver: str  # "libvirt" or "fake"
    namespace: str = ""
    address: str = ""  # its underlay address (the L2 agent's local_ip)
    state: Path | None = None
    processes: list[str] = field(default_factory=list)


class Process:
    def __init__(self, label: str, argv: list[str], env: dict, log: Path):
        self.label, self.log_path = label, log
        self._log = open(log, "w")
        self.proc = subprocess.Popen(argv, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()

    def tail(self, chars: int = 3000) -> str:
        return f"--- {self.label}\n{self.log_path.read_text(errors='replace')[-chars:]}"


def _libvirtd_netns() -> str:
    """The network namespace file of the running libvirtd (where it makes guests' taps)."""
    for pidfile in ("/run/libvirtd.pid", "/var/run/libvirtd.pid"):
        with contextlib.suppress(OSError, ValueError):
            pid = int(Path(pidfile).read_text().strip())
            if Path(f"/proc/{pid}/ns/net").exists():
                return f"/proc/{pid}/ns/net"
    raise AssertionError("libvirtd's pid file names no running process")


def _rabbitmqctl(*args: str) -> None:
    run("rabbitmqctl", "-q", *args)


class MultiHostCloud:
    """``hosts``: [(name, driver)]; ``settings``: NEFOS_* options for every process (e.g.
    ``report_interval="1"``). ``network_node``: run the DHCP and L3 agents in a namespace of their
    own (real guests need it for their leases)."""

    def __init__(self, top: Path, hosts: list[tuple[str, str]], network_node: bool = True, **settings: str):
        self.top = top
        self.hosts = {name: Host(name, driver) for name, driver in hosts}
        self.network_node = network_node
        self.settings = {f"NEFOS_{k.upper()}": str(v) for k, v in settings.items()}
        self.processes: list[Process] = []
        self._cleanup = contextlib.ExitStack()
        self.compute: httpx.Client | None = None
        self.network: httpx.Client | None = None
        self.guest_image: dict | None = None
        self.networks: set[str] = set()

    # Start ---------------------------------------------------------------------------------
    def start(self) -> "MultiHostCloud":
        try:
            self._start()
        except BaseException:
            logs = self.logs()
            self.stop()
            raise AssertionError(f"the multi-host cloud did not start:\n{logs}") from None
        return self

    def _start(self) -> None:
        stack = self._cleanup
        stack.callback(shutil.rmtree, self.top, True)
        self.underlay = Underlay()
        stack.callback(self.underlay.remove)
        self.forwarder = TcpForwarder()
        stack.callback(self.forwarder.close)
        self.vhost = f"mh-{self.underlay.token}"
        _rabbitmqctl("add_vhost", self.vhost)
        stack.callback(_rabbitmqctl, "delete_vhost", self.vhost)
        _rabbitmqctl("set_permissions", "-p", self.vhost, "guest", ".*", ".*", ".*")
        db_url = stack.enter_context(fresh_database("postgresql"))
        stack.callback(self._remove_guests)
        stack.callback(self._remove_agent_namespaces)
        stack.callback(self._stop_processes)

        gw = self.underlay.gateway
        ports = {name: free_port() for name in API_PORTS}
        metadata_port = free_port()
        forwarded = {name: self.forwarder.forward(gw, port) for name, port in ports.items()}
        amqp = self.forwarder.forward(gw, RABBIT_PORT, RABBIT_HOST)
        metadata = self.forwarder.forward(gw, metadata_port)
        common = dict(os.environ, NEFOS_AUTH_STRATEGY="noauth",
                      NEFOS_METADATA_PROXY_SHARED_SECRET=f"mh-{self.underlay.token}-secret",
                      NEFOS_VIRT_TYPE="qemu", NEFOS_SHUTDOWN_TIMEOUT="5", NEFOS_VNC_ENABLED="false",
                      # a dozen processes on a PostgreSQL other test runs share (100 connections)
                      NEFOS_MAX_POOL_SIZE="2", NEFOS_MAX_OVERFLOW="2",
                      **self.settings)
        common.pop("OS_CLOUD", None)
        self.control_env = dict(common, NEFOS_DATABASE_URL=db_url,
                                NEFOS_BUS_URL=f"amqp://guest:guest@{RABBIT_HOST}:{RABBIT_PORT}/{self.vhost}",
                                NEFOS_HOST=f"mh{self.underlay.token}-control",
                                NEFOS_METADATA_LISTEN_PORT=str(metadata_port),
                                **{f"NEFOS_{n}_API_PORT": str(p) for n, p in ports.items()})
        # Compute hosts and agents have no database (they reach it through the conductor and the
        # network service, over the bus): none is forwarded to them.
        common.pop("NEFOS_DATABASE_URL", None)
        self.host_env = dict(common, NEFOS_BUS_URL=f"amqp://guest:guest@{gw}:{amqp}/{self.vhost}",
                             NEFOS_METADATA_HOST=gw, NEFOS_METADATA_LISTEN_PORT=str(metadata),
                             # The Image API as a host reaches it: through the forwarder, not the
                             # catalog's loopback address (Nova's [glance] api_servers).
                             NEFOS_API_SERVERS=f"http://{gw}:{forwarded['IMAGE']}",
                             **{f"NEFOS_{n}_API_PORT": str(p) for n, p in forwarded.items()})
        self.endpoints = {"compute": f"http://127.0.0.1:{ports['COMPUTE']}",
                          "network": f"http://127.0.0.1:{ports['NETWORK']}"}

        control = self.top / "control"
        control.mkdir(mode=0o700)
        subprocess.run([str(BIN / "nefos"), "db", "upgrade", "--state-dir", str(control)], env=self.control_env,
                       check=True, capture_output=True, timeout=120)
        if any(h.driver == "libvirt" for h in self.hosts.values()):
            self.guest_image = asyncio.run(self._register_guest_image(control, db_url))
        for service in CONTROL_PLANE:
            self._spawn(service, [service], self.control_env, control)
        self.compute = httpx.Client(verify=verified_tls(),
                                    base_url=self.endpoints["compute"], timeout=30, headers=ADMIN)
        self.network = httpx.Client(verify=verified_tls(),
                                    base_url=self.endpoints["network"], timeout=30, headers=ADMIN)
        stack.callback(self.compute.close)
        stack.callback(self.network.close)
        self._wait_control_plane()  # the agents' first reports need the network service listening
        for host in self.hosts.values():
            self._start_host(host)
        if self.network_node:
            self.network_ns, self.network_address = self.underlay.add_namespace("net")
            state = self.top / "net"
            state.mkdir(mode=0o700)
            self.network_host = f"mh{self.underlay.token}-net"
            env = dict(self.host_env, NEFOS_HOST=self.network_host, NEFOS_LOCAL_IP=self.network_address)
            # The network node's own L2 agent (as Neutron runs one beside its DHCP agent): it reports
            # the DHCP ports' taps and joins the node's bridges to the hosts' over VXLAN.
            for agent in ("l2-agent", "dhcp-agent", "l3-agent"):
                self._spawn(f"net:{agent}", [agent], env, state, self.network_ns)
        self._wait_ready()

    async def _register_guest_image(self, state: Path, db_url: str) -> dict:
        from nefos.config import load_config
        from nefos.control.image.guest_image import ensure_guest_image
        from nefos.service import Runtime
        rt = await Runtime.open(load_config(state_dir=state, database_url=db_url, bus_url="local://"))
        try:
            return await ensure_guest_image(rt)
        finally:
            await rt.close()

    def _start_host(self, host: Host) -> None:
        host.namespace, host.address = self.underlay.add_namespace(host.name)
        host.state = self.top / host.name
        host.state.mkdir(mode=0o700)
        env = dict(self.host_env, NEFOS_HOST=host.name, NEFOS_COMPUTE_DRIVER=host.driver,
                   NEFOS_LOCAL_IP=host.address)
        if host.driver == "libvirt":
            env["NEFOS_LIBVIRTD_NETNS"] = _libvirtd_netns()
        self._spawn(f"{host.name}:compute", ["compute", "--host", host.name], env, host.state, host.namespace)
        host.processes.append(f"{host.name}:compute")
        if host.driver == "libvirt":
            self._spawn(f"{host.name}:l2-agent", ["l2-agent", "--host", host.name], env, host.state,
                        host.namespace)
            host.processes.append(f"{host.name}:l2-agent")

    def _spawn(self, label: str, args: list[str], env: dict, state: Path, netns: str | None = None) -> None:
        argv = [str(BIN / "nefos"), *args, "--state-dir", str(state)]
        if netns:
            argv = ["ip", "netns", "exec", netns, *argv]
        self.processes.append(Process(label, argv, env, self.top / f"{label.replace(':', '-')}.log"))

    def _wait_control_plane(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            with contextlib.suppress(httpx.HTTPError):
                if self.network.get("/v2.0/networks").status_code == 200 and \
                        self.compute.get("/v2.1/os-services").status_code == 200:
                    return
            assert time.monotonic() < deadline, "the control plane did not answer within the deadline"
            time.sleep(0.3)

    def _wait_ready(self, timeout: float = 120) -> None:
        """Ready when the APIs answer and every compute host reported its node and is up."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
                nodes = self.compute.get("/v2.1/os-hypervisors").json()["hypervisors"]
                if {n["hypervisor_hostname"] for n in nodes} >= set(self.hosts) and \
                        set(self.up_hosts()) >= set(self.hosts):
                    self.network.get("/v2.0/networks").raise_for_status()
                    return
            assert time.monotonic() < deadline, "the hosts did not all report within the deadline"
            time.sleep(0.5)

    # Inspect -------------------------------------------------------------------------------
    def compute_services(self) -> dict[str, dict]:
        r = self.compute.get("/v2.1/os-services", params={"binary": "nova-compute"})
        r.raise_for_status()
        return {s["host"]: s for s in r.json()["services"]}

    def up_hosts(self) -> list[str]:
        return [h for h, s in self.compute_services().items() if s["state"] == "up"]

    def check_alive(self) -> None:
        dead = [p.label for p in self.processes if not p.alive()]
        assert not dead, f"{dead} exited:\n{self.logs()}"

    def logs(self, chars: int = 3000) -> str:
        out = []
        for p in self.processes:
            with contextlib.suppress(OSError):
                out.append(p.tail(chars))
        return "\n".join(out)

    # Faults (an evacuation test partitions a host, then evacuates its servers) ---------------
    def partition(self, host: str) -> None:
        """Pull the host's cable: its ``ul0`` down inside its namespace. Its processes keep
        running (its guests too) but reach neither the control plane nor the other hosts."""
        self.underlay.set_link(self.hosts[host].namespace, up=False)

    def heal(self, host: str) -> None:
        self.underlay.set_link(self.hosts[host].namespace, up=True)

    def fence(self, host: str) -> None:
        """Power the host off for good, as a fence would before an evacuation: its processes killed,
        its guests' domains destroyed and undefined. Every host shares the machine's libvirtd, so a
        guest evacuated to another host needs its old domain (same UUID) gone first."""
        from tests.libvirt.conftest import remove_domains_under
        for p in self.processes:
            if p.label.startswith(f"{host}:") and p.alive():
                p.proc.kill()
                p.proc.wait()
        remove_domains_under(self.hosts[host].state)

    def in_namespace(self, host: str, *argv: str) -> subprocess.CompletedProcess:
        return run("ip", "netns", "exec", self.hosts[host].namespace, *argv, check=False)

    # Servers -------------------------------------------------------------------------------
    def make_network(self, name: str, cidr: str) -> dict:
        """A tenant network (VXLAN: the L2 agents carry it between the namespaces) and its subnet."""
        r = self.network.post("/v2.0/networks", json={"network": {"name": name}})
        assert r.status_code == 201, r.text
        net = r.json()["network"]
        self.networks.add(net["id"])
        r = self.network.post("/v2.0/subnets", json={"subnet": {"network_id": net["id"], "cidr": cidr,
                                                                 "ip_version": 4}})
        assert r.status_code == 201, r.text
        return net

    def boot(self, name: str, network_id: str, host: str | None = None, **extra) -> str:
        """A server on ``network_id``; placed on ``host`` when given (``nova:<host>``, as admin)."""
        body = {"name": name, "imageRef": (self.guest_image or {}).get("image_id") or "nefos-tiny",
                "flavorRef": "1", "networks": extra.pop("networks", [{"uuid": network_id}]), **extra}
        if self.guest_image is None:
            from nefos.control.image.bootstrap import DEFAULT_IMAGE_ID
            body["imageRef"] = DEFAULT_IMAGE_ID
        if host:
            body["availability_zone"] = f"nova:{host}"
        r = self.compute.post("/v2.1/servers", json={"server": body})
        assert r.status_code == 202, r.text
        return r.json()["server"]["id"]

    def wait_server(self, server_id: str, status: str | None, timeout: float = 120) -> dict | None:
        deadline = time.monotonic() + timeout
        while True:
            r = self.compute.get(f"/v2.1/servers/{server_id}")
            if status is None and r.status_code == 404:
                return None
            assert r.status_code == 200, r.text
            server = r.json()["server"]
            if server["status"] == status and server["OS-EXT-STS:task_state"] is None:
                return server
            assert server["status"] != "ERROR" or status == "ERROR", server.get("fault")
            assert time.monotonic() < deadline, f"{server_id}: {server['status']} != {status}\n{self.logs()}"
            time.sleep(0.3)

    def console(self, server_id: str) -> str:
        r = self.compute.post(f"/v2.1/servers/{server_id}/action", json={"os-getConsoleOutput": {}})
        assert r.status_code == 200, r.text
        return r.json()["output"]

    def wait_console(self, server_id: str, text: str, timeout: float = 150) -> str:
        """The guest's console once it shows ``text`` (a TCG guest on a loaded machine may take a
        minute to boot)."""
        deadline = time.monotonic() + timeout
        while True:
            out = self.console(server_id)
            if shown_whole(out, text):
                return out
            assert time.monotonic() < deadline, (
                f"{text!r} not on the console of {server_id} within {timeout} s; it ends with:\n{out[-1500:]}\n"
                + "\n".join(p.tail(1500) for p in self.processes if "agent" in p.label))
            time.sleep(0.5)

    # Stop ----------------------------------------------------------------------------------
    def _stop_processes(self) -> None:
        for name in self.hosts:  # a partitioned host stops as cleanly as the others
            with contextlib.suppress(Exception):
                self.heal(name)
        for p in reversed(self.processes):
            if p.alive():
                p.proc.send_signal(signal.SIGTERM)
        for p in self.processes:
            p.stop()

    def _remove_guests(self) -> None:
        from tests.libvirt.conftest import remove_domains_under
        remove_domains_under(self.top)

    def _remove_agent_namespaces(self) -> None:
        # The DHCP and L3 agents remove theirs when they stop; what a killed agent left goes here.
        for net in self.networks:
            run("ip", "netns", "del", f"qdhcp-{net}", check=False)
        # The L2 agents' bridges and iptables chains live in the hosts' namespaces: gone with them.

    def stop(self) -> None:
        self._cleanup.close()
