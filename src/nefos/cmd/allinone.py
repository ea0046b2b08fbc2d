"""Running components: every service in one process (``nefos up``) or one per process.

``Cloud`` starts the given components on one Runtime, serves each one's HTTP
app with uvicorn on its port, and stops them in reverse order.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import random
import socket
from pathlib import Path

import uvicorn

from nefos import http_server, metrics
from nefos.config import Config, check_serving
from nefos.service import Component, Runtime

LOG = logging.getLogger(__name__)


# The ports handed out lately: not handed out again while their servers may still be starting. A
# bounded memory, so a long test session that starts thousands of servers never runs out.
_handed_out: collections.deque[int] = collections.deque(maxlen=1000)


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, for a server that starts a moment later.

    It is drawn from below the kernel's ephemeral range: a port the kernel handed out for
    ``bind(0)`` goes back to the pool that outgoing connections draw from, and one of them
    (to the database, the broker, libvirt) could take it before the server binds it.
    """
    low = _ephemeral_range_start()
    start, stop = _worker_slice(max(1024, low - 12000), low)
    for _ in range(1000):
        port = random.randrange(start, stop)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        _handed_out.append(port)
        return port
    raise RuntimeError(f"no free port below {low} on {host}")


def _worker_slice(start: int, stop: int) -> tuple[int, int]:
    """The part of [start, stop) this process draws from. Test processes that pytest-xdist runs
    side by side (``PYTEST_XDIST_WORKER`` gw0, gw1, ... of ``PYTEST_XDIST_WORKER_COUNT``, inherited
    by what they spawn) each get a slice of their own, so two of them never pick the same port in
    the moment between the pick and the bind."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and worker[2:].isdigit() and count.isdigit() and int(count) > 1):
        return start, stop
    index, count = int(worker[2:]) % int(count), int(count)
    width = (stop - start) // count
    return start + index * width, start + (index + 1) * width


def _ephemeral_range_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


class Cloud:
    def __init__(self, rt: Runtime, components: list[Component]):
        self.rt = rt
        self.components = components
        self._servers: list[tuple[uvicorn.Server, asyncio.Task]] = []
        self._started: list[Component] = []

    async def start(self) -> None:
        if any(c.app is not None and c.port for c in self.components):
            check_serving(self.rt.cfg)
            if self.rt.cfg.auth_strategy == "noauth":
                LOG.warning("*** auth_strategy = noauth: NO AUTHENTICATION. Every request is trusted "
                            "to be who its X-Project-Id / X-Roles headers claim (admin included), on "
                            "%s. For development only. ***", self.rt.cfg.bind_host)
        listeners = sum(1 for c in self.components if c.app is not None and c.port) + bool(self.rt.cfg.metrics_port)
        limits = http_server.ConnectionLimits.of(self.rt.cfg, listeners)
        try:
            for component in self.components:
                await component.start()
                self._started.append(component)
                if component.app is not None and component.port:
                    await self._serve(component, limits)
            if self.rt.cfg.metrics_port:
                await self._serve(metrics.operator_component(self.rt.cfg), limits)
        except BaseException:
            # A cloud that could not start leaves nothing running behind it (servers, loops,
            # bus consumers): stop what did start, then report why.
            await self.stop()
            raise

    async def _serve(self, component: Component, limits: http_server.ConnectionLimits) -> None:
        # Idle keep-alive connections are kept 75 s (uvicorn's default is 5 s, the same as httpx's
        # client-side expiry: a client reusing a connection just as the server drops it got a
        # ReadError; seen with 200 creates at once). uvicorn's limit_concurrency stays unset: it
        # answers 503 only to a complete request, and the listener's maxconn (http_server) already
        # bounds every connection, idle ones included.
        bind = component.bind or self.rt.cfg.bind_host
        config = uvicorn.Config(component.app, host=bind, port=component.port,
                                http=http_server.protocol_for(component.app, limits),
                                log_level="warning", access_log=False, lifespan="off",
                                timeout_graceful_shutdown=5, timeout_keep_alive=75)
        server = uvicorn.Server(config)
        server.install_signal_handlers = lambda: None  # the CLI owns signals
        where = f"{bind}:{component.port}"
        task = asyncio.create_task(_serve(server, f"{component.name} could not serve on {where}"),
                                   name=f"http:{component.name}")
        self._servers.append((server, task))
        while not server.started:
            if task.done():
                task.result()  # raises why it could not serve
                raise RuntimeError(f"{component.name} stopped serving on {where} as it started")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        for component in self._started:
            component.closing()
        for server, _task in self._servers:
            server.should_exit = True
        await asyncio.gather(*(t for _s, t in self._servers), return_exceptions=True)
        self._servers.clear()
        for component in reversed(self._started):
            try:
                await component.stop()
            except Exception:
                LOG.exception("stopping %s failed", component.name)
        self._started.clear()

    def endpoints(self) -> dict[str, str]:
        host = self.rt.cfg.bind_host
        cfg = self.rt.cfg
        found = {
            "identity": f"http://{host}:{cfg.identity_api_port}/v3",
            "compute": f"http://{host}:{cfg.compute_api_port}/v2.1",
            "network": f"http://{host}:{cfg.network_api_port}",
            "image": f"http://{host}:{cfg.image_api_port}",
            "metadata": f"http://{cfg.metadata_listen or host}:{cfg.metadata_listen_port}",
        }
        if "osapi_compute" not in cfg.enabled_apis:
            del found["compute"]
        if "metadata" not in cfg.enabled_apis:
            del found["metadata"]
        if cfg.dashboard_enabled:
            from nefos.control.dashboard.service import url as dashboard_url
            found["dashboard"] = dashboard_url(cfg)
        if cfg.vnc_enabled:
            from nefos.host.compute.consoles import novncproxy_base_url
            found["consoles"] = novncproxy_base_url(cfg)
        if cfg.metrics_port:
            found["metrics"] = f"http://{cfg.metrics_bind}:{cfg.metrics_port}/metrics"
        return found


async def _serve(server: uvicorn.Server, failure: str) -> None:
    # uvicorn calls sys.exit when it cannot bind; a SystemExit leaving a task escapes the event
    # loop itself, so it becomes an ordinary error here.
    try:
        await server.serve()
    except SystemExit:
        raise RuntimeError(failure) from None


def all_in_one_components(rt: Runtime, fake_hosts: int = 1) -> list[Component]:
    """Every service of the cloud, in dependency order."""
    from nefos.control.compute.rest.service import component as api_component
    from nefos.host.compute.service import component as compute_component
    from nefos.control.conductor.service import component as conductor_component
    from nefos.control.identity.service import component as identity_component
    from nefos.control.image.service import component as image_component
    from nefos.control.metadata.service import component as metadata_component
    from nefos.control.network.service import component as network_component
    from nefos.control.scheduler.service import component as scheduler_component

    components = [identity_component(rt), image_component(rt), network_component(rt),
                  scheduler_component(rt), conductor_component(rt)]
    if rt.cfg.compute_driver == "libvirt":
        # Real guests: the host's L2 agent (taps over netlink -> ports ACTIVE/DOWN), DHCP on
        # their networks (dnsmasq per network) and routers / floating IPs (namespaces on br-ex-nefos).
        from nefos.agents.dhcp_agent import component as dhcp_agent_component
        from nefos.agents.l2_agent import component as l2_agent_component
        from nefos.agents.l3_agent import component as l3_agent_component
        components += [l2_agent_component(rt), dhcp_agent_component(rt), l3_agent_component(rt)]
    if fake_hosts == 1:
        components.append(compute_component(rt, rt.cfg.host))
    else:
        components += [compute_component(rt, f"{rt.cfg.host}-{i + 1}") for i in range(fake_hosts)]
    if "metadata" in rt.cfg.enabled_apis:  # Nova's enabled_apis: without it, config drives only
        components.append(metadata_component(rt))
    if rt.cfg.vnc_enabled:  # Nova's [vnc] enabled: the console proxy beside the hosts
        from nefos.control.console.service import component as novncproxy_component
        components.append(novncproxy_component(rt))
    if rt.cfg.dashboard_enabled:  # the web console: a client of the APIs, like the CLIs
        from nefos.control.dashboard.service import component as dashboard_component
        components.append(dashboard_component(rt))
    if "osapi_compute" in rt.cfg.enabled_apis:
        components.append(api_component(rt))  # last: every other service is up once it answers
    return components


async def open_cloud(cfg: Config, fake_hosts: int = 1) -> Cloud:
    rt = await Runtime.open(cfg, migrate=True)
    return await run_components(rt, all_in_one_components(rt, fake_hosts))


async def run_components(rt: Runtime, components: list[Component]) -> Cloud:
    """Start ``components`` on ``rt``; if they cannot all start, nothing is left running."""
    cloud = Cloud(rt, components)
    try:
        await cloud.start()  # stops what it started if it fails
    except BaseException:
        await rt.close()
        raise
    return cloud


def state_path(cfg: Config, name: str) -> Path:
    return Path(cfg.state_dir) / name
