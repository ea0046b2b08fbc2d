"""Hosts in namespaces for the agents' tests: each "host" is a network namespace with an underlay
veth (``ul0``, its address on a test bridge in an underlay namespace of its own) and runs
``nefos l2-agent`` in it as a process of its own, over RabbitMQ, with no database URL; "guests" are
namespaces whose veth's other end is named like a port's tap in the host's namespace.

A host's namespace has no route out; its agent reaches the broker at its own 127.0.0.1:5672, a
relay (``BusRelay``, a thread of the test process) carrying each connection to the machine's
loopback broker: no address, route or bridge joins the namespaces to the machine.

Nothing here touches the machine's own namespace: every link is made in, or moved into, a
namespace the fixture made, and every namespace goes at the end (its links, bridges, VXLAN devices
and the agent's firewall chains with it)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from nefos.config import load_config
from nefos.agents.metadata_proxy import listen_in_namespace
from nefos.control.network.service import component
from nefos.service import Runtime
from tests.relay import Relay

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
RABBIT_URL = os.environ.get("NEFOS_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
UNDERLAY = "10.251.{tag}.{n}"


def sh(*argv: str, check: bool = True) -> str:
    return subprocess.run(argv, check=check, capture_output=True, text=True).stdout


def in_ns(ns: str, *argv: str, check: bool = True) -> str:
    return sh("ip", "netns", "exec", ns, *argv, check=check)


class BusRelay(Relay):
    """Listens on 127.0.0.1:5672 inside namespaces; each connection is carried to the broker on the
    machine's loopback."""

    def __init__(self, upstream_port: int = 5672):
        super().__init__(lambda: asyncio.open_connection("127.0.0.1", upstream_port), name="bus-relay")
        self.upstream_port = upstream_port

    async def add(self, netns: str) -> None:
        sock = await listen_in_namespace(netns, "127.0.0.1", self.upstream_port)
        self.call(self.serve(asyncio.start_server, sock=sock), timeout=10)


class Lab:
    """The underlay and the hosts of one test; ``cloud`` is the network service (this process)."""

    def __init__(self, tmp: Path):
        self.tag = uuid.uuid4().hex[:6]
        self.tmp = tmp
        self.namespaces: list[str] = []
        self.procs: list[tuple[subprocess.Popen, object]] = []
        self.underlay = f"nfvx-u-{self.tag}"
        self.exchange = f"nefos-vx-{self.tag}"
        self.net_octet = str(int(self.tag[:2], 16))  # the underlay's /24: 10.251.<this>.0
        self._netns(self.underlay)
        in_ns(self.underlay, "ip", "link", "add", "ul", "type", "bridge")
        in_ns(self.underlay, "ip", "link", "set", "ul", "up")
        self.hosts: dict[str, dict] = {}
        self.rt = None
        self.network = None
        self.relay = BusRelay(int(RABBIT_URL.rsplit(":", 1)[1].split("/")[0]))

    def _netns(self, name: str) -> str:
        sh("ip", "netns", "add", name)
        self.namespaces.append(name)
        in_ns(name, "ip", "link", "set", "lo", "up")
        return name

    async def start_cloud(self):
        cfg = load_config(state_dir=self.tmp / "server", auth_strategy="noauth", bus_url=RABBIT_URL,
                          control_exchange=self.exchange)
        self.rt = await Runtime.open(cfg, migrate=True)
        self.network = component(self.rt)
        await self.network.start()
        return self.network.manager

    async def host(self, n: int, *, vxlan: bool = True, dhcp: bool = False) -> dict:
        """Host ``n``: its namespace with the underlay address 10.251.<lab>.<n>, and its L2 agent
        (``local_ip`` that address when ``vxlan``, none otherwise: the shipped default); with
        ``dhcp`` a DHCP agent too (a network node)."""
        ns = self._netns(f"nfvx-h{n}-{self.tag}")
        ip = UNDERLAY.format(tag=self.net_octet, n=n)
        sh("ip", "-n", self.underlay, "link", "add", f"h{n}", "type", "veth", "peer", "name", "ul0", "netns", ns)
        in_ns(self.underlay, "ip", "link", "set", f"h{n}", "master", "ul", "up")
        in_ns(ns, "ip", "addr", "add", f"{ip}/24", "dev", "ul0")
        in_ns(ns, "ip", "link", "set", "ul0", "up")
        await self.relay.add(ns)
        name = f"vx-h{n}-{self.tag}"
        state = self.tmp / f"h{n}"
        state.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("NEFOS_")}
        env.update(NEFOS_BUS_URL=RABBIT_URL, NEFOS_CONTROL_EXCHANGE=self.exchange, NEFOS_REPORT_INTERVAL="2",
                   PYTHONPATH=f"{ROOT / 'src'}:{ROOT}")
        if vxlan:
            env["NEFOS_LOCAL_IP"] = ip
        procs = []
        for agent in ("l2-agent", "dhcp-agent") if dhcp else ("l2-agent",):
            log = open(state / f"{agent}.log", "w")
            proc = subprocess.Popen(["ip", "netns", "exec", ns, str(BIN / "nefos"), agent, "--host", name,
                                     "--state-dir", str(state)], env=env, stdout=log, stderr=subprocess.STDOUT)
            self.procs.append((proc, log))
            procs.append(proc)
        self.hosts[name] = h = {"ns": ns, "ip": ip, "name": name, "state": state, "proc": procs[0], "procs": procs}
        return h

    def guest(self, host: dict, port: dict, prefix: int | None = 24) -> str:
        """A guest namespace for ``port`` on ``host``: its veth's host end is the port's tap; the
        port's address on it (``prefix`` None: none, the guest asks DHCP)."""
        ns = self._netns(f"nfvx-g{len(self.namespaces)}-{self.tag}")
        tap = "tap" + port["id"][:11]
        # made in the host's namespace (its agent sees the tap appear), the guest's end in the guest's
        sh("ip", "-n", host["ns"], "link", "add", tap, "type", "veth", "peer", "name", "eth0", "netns", ns)
        in_ns(ns, "ip", "link", "set", "eth0", "address", port["mac_address"])
        in_ns(ns, "ip", "link", "set", "eth0", "mtu", "1450")
        if prefix is not None:
            in_ns(ns, "ip", "addr", "add", f"{port['fixed_ips'][0]['ip_address']}/{prefix}", "dev", "eth0")
        in_ns(ns, "ip", "link", "set", "eth0", "up")
        in_ns(host["ns"], "ip", "link", "set", tap, "up")
        return ns

    def logs(self) -> str:
        return "\n".join(f"--- {h['name']} {log.name}\n{log.read_text()[-4000:]}"
                          for h in self.hosts.values() for log in sorted(h["state"].glob("*.log")))

    def check_alive(self) -> None:
        dead = [h["name"] for h in self.hosts.values() for p in h["procs"] if p.poll() is not None]
        assert not dead, f"{dead} exited:\n{self.logs()}"

    async def close(self) -> None:
        for proc, _log in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc, log in self.procs:
            try:
                await asyncio.to_thread(proc.wait, 20)
            except subprocess.TimeoutExpired:
                proc.kill()
            log.close()
        if self.network is not None:
            await self.network.stop()
        if self.rt is not None:
            await self.rt.close()
        self.relay.close()
        for ns in reversed(self.namespaces):
            with contextlib.suppress(Exception):
                sh("ip", "netns", "del", ns, check=False)


async def until(predicate, what: str, lab: Lab | None = None, timeout: float = 30.0):
    """``predicate()`` (sync or async) until truthy; its value."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if lab is not None:
            lab.check_alive()
        assert loop.time() < deadline, f"{what}: not within {timeout} s" + (f"\n{lab.logs()}" if lab else "")
        await asyncio.sleep(0.1)
