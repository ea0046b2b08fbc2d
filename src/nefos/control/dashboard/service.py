"""The web console as a component (``nefos dashboard``; in ``nefos up`` when dashboard_enabled). It
binds ``dashboard_host`` (empty: ``bind_host``) on ``dashboard_port`` and reaches the cloud only
through its public APIs, signing users in with the identity service: no database, no bus."""

from __future__ import annotations

import asyncio

from nefos.control.dashboard.app import create_app
from nefos.service import Component


class DashboardComponent(Component):
    name = "dashboard"

    def __init__(self, rt):
        from nefos.clients.identity.catalog import identity_base_url
        self.rt = rt
        self.app = create_app(rt.cfg, identity_base_url(rt.cfg))
        self.app.state.stopping = asyncio.Event()
        self.port = rt.cfg.dashboard_port
        self.bind = rt.cfg.dashboard_host or None

    def closing(self) -> None:
        self.app.state.stopping.set()

    async def start(self) -> None:
        from pathlib import Path

        from nefos import fileperms
        fileperms.write_private(Path(self.rt.cfg.state_dir) / URL_FILE, url(self.rt.cfg) + "\n")

    async def stop(self) -> None:
        await self.app.state.http.aclose()
        await self.app.state.relay_http.aclose()


def component(rt) -> Component:
    return DashboardComponent(rt)


URL_FILE = "dashboard_url"  # in the state directory: where the running console is (nefos status)


def url(cfg) -> str:
    """Where users open the console."""
    from nefos.clients.identity.catalog import client_host
    host = cfg.dashboard_host if cfg.dashboard_host not in ("", "0.0.0.0", "::") else client_host(cfg)
    return f"http://{host}:{cfg.dashboard_port}/"


def running_url(cfg) -> str:
    """The URL the console that runs with this state directory said it serves at (else this
    configuration's)."""
    from pathlib import Path
    try:
        return (Path(cfg.state_dir) / URL_FILE).read_text().strip() or url(cfg)
    except OSError:
        return url(cfg)
