"""The metadata service as a component (``nefos metadata``; in ``nefos up`` too).

It binds ``metadata_listen`` (empty: ``bind_host``, as every other API) on
``metadata_listen_port`` (8775, Nova's). It registers no service row: like Nova's
nova-api-metadata it is not a service of the Compute API's os-services list.
"""

from __future__ import annotations

from nefos.control.metadata.app import create_app
from nefos.service import Component


class MetadataComponent(Component):
    name = "metadata-api"

    def __init__(self, rt):
        self.rt = rt
        self.app = create_app(rt)
        self.port = rt.cfg.metadata_listen_port
        self.bind = rt.cfg.metadata_listen or None


def component(rt) -> Component:
    return MetadataComponent(rt)
