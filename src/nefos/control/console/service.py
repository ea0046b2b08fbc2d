"""The console proxy as a component (``nefos novncproxy``; in ``nefos up`` when vnc_enabled).

It binds ``novncproxy_host`` (empty: ``bind_host``) on ``novncproxy_port`` (6080, Nova's). Like
Nova's nova-novncproxy it registers no service row; any number of them may run behind the URL
``novncproxy_base_url`` names, since a token is checked against the shared database.
"""

from __future__ import annotations

import importlib.util
import logging

from nefos.control.console.proxy import NoVNCProxy
from nefos.service import Component

LOG = logging.getLogger(__name__)


class NoVNCProxyComponent(Component):
    name = "novncproxy"

    def __init__(self, rt):
        self.rt = rt
        self.app = NoVNCProxy(rt)
        self.port = rt.cfg.novncproxy_port
        self.bind = rt.cfg.novncproxy_host or None

    async def start(self) -> None:
        # uvicorn serves websockets with one of these; without either it refuses every upgrade.
        if not any(importlib.util.find_spec(name) for name in ("websockets", "wsproto")):
            LOG.error("the console proxy cannot serve websockets: install the websockets package")


def component(rt) -> Component:
    return NoVNCProxyComponent(rt)
