"""The machine-local underlay of the multi-host harness: a Linux bridge with an address in the root
namespace, a network namespace per host with a veth into the bridge, and TCP forwarders that make
the control plane's loopback-only services reachable from the namespaces.

Every device and namespace is named with a run token (``mh<token>...``) and recorded as it is
made, so ``remove()`` takes away exactly what this run made, even after a failure half-way. The
bridge holds only the hosts' veths: no physical interface, no route or NAT out of the machine.
"""

from __future__ import annotations

import asyncio
import ipaddress
import subprocess
import threading
import uuid


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=60)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)}: rc {proc.returncode}: {proc.stderr.strip()}")
    return proc


def _free_underlay_subnet() -> ipaddress.IPv4Network:
    """A 172.31.X.0/24 no interface or route of the machine overlaps."""
    used = run("ip", "-4", "-o", "route", "show", "table", "all").stdout + run("ip", "-4", "-o", "addr").stdout
    taken = set()
    for word in used.split():
        try:
            taken.add(ipaddress.ip_network(word, strict=False))
        except ValueError:
            continue
    start = uuid.uuid4().int % 200
    for i in range(200):
        net = ipaddress.ip_network(f"172.31.{(start + i) % 200 + 20}.0/24")
        if not any(net.overlaps(t) for t in taken if t.prefixlen > 0):
            return net
    raise AssertionError("no free 172.31.X.0/24 for the underlay")


class TcpForwarder:
    """Asyncio TCP forwarders in a thread of their own: each listens on (underlay address, a free
    port) in the root namespace and carries every connection to a loopback port there."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self._servers: list[asyncio.base_events.Server] = []
        self._thread = threading.Thread(target=self.loop.run_forever, name="mh-forwarder", daemon=True)
        self._thread.start()

    def forward(self, listen_host: str, target_port: int, target_host: str = "127.0.0.1",
                listen_port: int = 0) -> int:
        """Listen on ``listen_host`` (``listen_port``, default a free one; returned) and relay to
        ``target_host:target_port``."""
        async def handle(reader, writer):
            try:
                up_reader, up_writer = await asyncio.open_connection(target_host, target_port)
            except OSError:
                writer.close()
                return

            async def pipe(src, dst):
                try:
                    while data := await src.read(65536):
                        dst.write(data)
                        await dst.drain()
                except (OSError, asyncio.CancelledError):
                    pass
                finally:
                    dst.close()
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

        async def start():
            server = await asyncio.start_server(handle, listen_host, listen_port)
            self._servers.append(server)
            return server.sockets[0].getsockname()[1]
        return asyncio.run_coroutine_threadsafe(start(), self.loop).result(timeout=10)

    def close(self) -> None:
        async def stop():
            for server in self._servers:
                server.close()
            for task in [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]:
                task.cancel()
        try:
            asyncio.run_coroutine_threadsafe(stop(), self.loop).result(timeout=10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)


class Underlay:
    """The bridge ``mh<token>br`` with the root namespace's address ``.1`` of a free 172.31.X.0/24,
    and the namespaces plugged into it."""

    def __init__(self):
        self.token = uuid.uuid4().hex[:6]
        self.subnet = _free_underlay_subnet()
        self.gateway = str(self.subnet.network_address + 1)  # the root namespace's side
        self.bridge = f"mh{self.token}br"
        self.namespaces: dict[str, tuple[str, str]] = {}  # namespace -> (root-side veth, its address)
        self._made_bridge = False
        try:
            run("ip", "link", "add", self.bridge, "type", "bridge")
            self._made_bridge = True
            run("ip", "addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge)
            run("ip", "link", "set", self.bridge, "up")
        except BaseException:
            self.remove()
            raise

    def add_namespace(self, role: str) -> tuple[str, str]:
        """A namespace ``mh<token>-<role>`` with ``lo`` up and ``ul0`` (a veth whose peer is in the
        bridge) holding the next underlay address; returns (namespace, address)."""
        index = len(self.namespaces) + 2
        ns = f"mh{self.token}-{role}"
        outside = f"mh{self.token}v{index}"
        address = str(self.subnet.network_address + index)
        run("ip", "netns", "add", ns)
        self.namespaces[ns] = (outside, address)
        run("ip", "link", "add", outside, "type", "veth", "peer", "name", "ul0", "netns", ns)
        run("ip", "link", "set", outside, "master", self.bridge, "up")
        run("ip", "-n", ns, "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", "ul0")
        run("ip", "-n", ns, "link", "set", "ul0", "up")
        run("ip", "-n", ns, "link", "set", "lo", "up")
        return ns, address

    def set_link(self, ns: str, up: bool) -> None:
        """The namespace's underlay link (``ul0``, inside it) up or down: down cuts the host off
        the control plane and the other hosts, as a pulled cable."""
        run("ip", "-n", ns, "link", "set", "ul0", "up" if up else "down")

    def remove(self) -> None:
        for ns, (outside, _address) in list(self.namespaces.items()):
            run("ip", "link", "del", outside, check=False)
            run("ip", "netns", "del", ns, check=False)
            self.namespaces.pop(ns, None)
        if self._made_bridge:
            run("ip", "link", "del", self.bridge, check=False)
            self._made_bridge = False
