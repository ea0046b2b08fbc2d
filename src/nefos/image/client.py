"""In-process access to images for the other services (compute API, virt drivers).

Every service shares the database, so this reads image rows directly rather
than calling the Image API over HTTP.
"""

from __future__ import annotations

from nefos import exceptions
from nefos.context import RequestContext
from nefos.image import images


class ImageAPI:
    def __init__(self, rt):
        self.rt = rt

    async def get(self, ctx: RequestContext, image_id: str) -> dict:
        """The image as the Image API shows it, plus ``properties`` (the extra properties).

        Raises ``ImageNotFound`` when the image is missing, deleted or not visible to ``ctx``.
        """
        row = await images.get(self.rt, ctx, image_id)
        doc = images.view(row)
        doc["properties"] = dict(row.properties or {})
        return doc

    async def path(self, image_id: str) -> str:
        """The local file holding the image's data.

        Raises ``ImageNotFound`` when the image is missing or deleted and
        ``ImageUnacceptable`` when it has no data (not ``active``).
        """
        async with self.rt.db.reader() as s:
            row = await images._load(s, image_id)
        if row is None or row.status == "deleted":
            raise exceptions.ImageNotFound(image_id=image_id)
        if row.status != "active" or not row.location:
            raise exceptions.ImageUnacceptable(image_id=image_id,
                                               reason=f"image is {row.status}, it has no data")
        path = images.store_for(self.rt).path(image_id)
        if not path.is_file():
            raise exceptions.ImageUnacceptable(image_id=image_id,
                                               reason=f"its data is missing from the store ({path})")
        return str(path)
