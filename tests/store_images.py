"""A stand-in for the Image API client in tests of the host's image cache: the data comes straight
from an image store directory, unchecked (as if the Image API had been bypassed), so the cache's
own inspection is what is tested."""

from __future__ import annotations

import shutil
from pathlib import Path

from nefos import exceptions


class StoreImages:
    def __init__(self, root: Path):
        self.root = Path(root)

    async def download_verified(self, ctx, image_id: str, target: Path) -> dict:
        from nefos.control.image.store import ImageStore
        source = ImageStore(self.root).path(image_id)
        if not source.is_file():
            raise exceptions.ImageNotFound(image_id=image_id)
        shutil.copyfile(source, target)
        return {"id": image_id}
