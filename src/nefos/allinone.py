"""Running components: every service in one process (``nefos up``) or one per process.

``Cloud`` starts the given components on one Runtime, serves each one's HTTP
app with uvicorn on its port, and stops them in reverse order.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path

import uvicorn

from nefos.config import Config, check_serving
from nefos.service import Component, Runtime

LOG = logging.getLogger(__name__)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


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
        for component in self.components:
            await component.start()
            self._started.append(component)
            if component.app is not None and component.port:
                await self._serve(component)

    async def _serve(self, component: Component) -> None:
        # Idle keep-alive connections are kept 75 s (uvicorn's default is 5 s, the same as httpx's
        # client-side expiry: a client reusing a connection just as the server drops it got a
        # ReadError; seen with 200 creates at once).
        config = uvicorn.Config(component.app, host=self.rt.cfg.bind_host, port=component.port,
                                log_level="warning", access_log=False, lifespan="off",
                                timeout_graceful_shutdown=5, timeout_keep_alive=75)
        server = uvicorn.Server(config)
        server.install_signal_handlers = lambda: None  # the CLI owns signals
        task = asyncio.create_task(server.serve(), name=f"http:{component.name}")
        self._servers.append((server, task))
        while not server.started:
            if task.done():
                task.result()  # raises the bind error
                raise RuntimeError(f"{component.name} could not serve on port {component.port}")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
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
        return {
            "identity": f"http://{host}:{cfg.identity_api_port}/v3",
            "compute": f"http://{host}:{cfg.compute_api_port}/v2.1",
            "network": f"http://{host}:{cfg.network_api_port}",
            "image": f"http://{host}:{cfg.image_api_port}",
        }


def all_in_one_components(rt: Runtime, fake_hosts: int = 1) -> list[Component]:
    """Every service of the cloud, in dependency order."""
    from nefos.api.service import component as api_component
    from nefos.compute.service import component as compute_component
    from nefos.conductor.service import component as conductor_component
    from nefos.identity.service import component as identity_component
    from nefos.image.service import component as image_component
    from nefos.network.service import component as network_component
    from nefos.scheduler.service import component as scheduler_component

    components = [identity_component(rt), image_component(rt), network_component(rt),
                  scheduler_component(rt), conductor_component(rt)]
    if rt.cfg.compute_driver == "libvirt":
        # Real guests: the host's L2 agent (taps over netlink -> ports ACTIVE/DOWN) and DHCP on
        # their networks (dnsmasq per network).
        from nefos.network.dhcp_agent import component as dhcp_agent_component
        from nefos.network.l2_agent import component as l2_agent_component
        components += [l2_agent_component(rt), dhcp_agent_component(rt)]
    if fake_hosts == 1:
        components.append(compute_component(rt, rt.cfg.host))
    else:
        components += [compute_component(rt, f"{rt.cfg.host}-{i + 1}") for i in range(fake_hosts)]
    components.append(api_component(rt))
    return components


async def open_cloud(cfg: Config, fake_hosts: int = 1) -> Cloud:
    rt = await Runtime.open(cfg, migrate=True)
    cloud = Cloud(rt, all_in_one_components(rt, fake_hosts))
    try:
        await cloud.start()
    except BaseException:
        await cloud.stop()
        await rt.close()
        raise
    return cloud


def state_path(cfg: Config, name: str) -> Path:
    return Path(cfg.state_dir) / name
