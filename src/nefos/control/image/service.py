"""The image service process: the Image API and the default image."""

from __future__ import annotations

import logging

from nefos.control.image.bootstrap import ensure_default_image_at_start
from nefos.control.image.rest import create_app
from nefos.service import Component, Service

LOG = logging.getLogger(__name__)


class ImageComponent(Component):
    name = "image"

    def __init__(self, rt):
        self.rt = rt
        self.app = create_app(rt)
        self.port = rt.cfg.image_api_port
        self.service = Service(rt, "nefos-image", None, rt.cfg.host)
        self.default_image_id: str | None = None

    async def start(self) -> None:
        await self.service.start()
        self.default_image_id = await ensure_default_image_at_start(self.rt)
        LOG.info("default image %s is ready", self.default_image_id)

    async def stop(self) -> None:
        await self.service.stop()


def component(rt) -> Component:
    return ImageComponent(rt)
