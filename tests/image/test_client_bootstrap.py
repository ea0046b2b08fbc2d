"""The in-process ImageAPI, the default image and the image service component."""

import asyncio
import hashlib
import os

import pytest
from image_helpers import ADMIN, PATCH, PROJECT_A, PROJECT_B, client_for, config, make_image, member, upload
from sqlalchemy import select

from nefos import exceptions
from nefos.context import RequestContext
from nefos.db.models import Service as ServiceRow
from nefos.control.image.bootstrap import DEFAULT_IMAGE_NAME, default_image_bytes, ensure_default_image
from nefos.control.image.client import ImageAPI
from nefos.control.image.rest import create_app
from nefos.control.image.service import component
from nefos.service import Component
from tests.schema import open_runtime


def ctx_for(project: str) -> RequestContext:
    return RequestContext(project_id=project, user_id="u" * 32, roles=["member", "reader"], is_admin=False)


async def test_image_api_get_and_path(rt, api):
    image = await make_image(api, name="for-compute", os_distro="debian", min_ram=128, visibility="private")
    images = ImageAPI(rt)
    got = await images.get(ctx_for(PROJECT_A), image["id"])
    assert got["id"] == image["id"] and got["status"] == "queued" and got["min_ram"] == 128
    assert got["properties"] == {"os_distro": "debian"}
    assert got["os_distro"] == "debian"
    with pytest.raises(exceptions.ImageNotFound):
        await images.get(ctx_for(PROJECT_B), image["id"])
    with pytest.raises(exceptions.ImageNotFound):
        await images.get(ctx_for(PROJECT_A), "00000000-0000-4000-8000-000000000000")
    with pytest.raises(exceptions.ImageNotFound):
        await images.get(ctx_for(PROJECT_A), "not-an-id")
    with pytest.raises(exceptions.ImageUnacceptable):
        await images.path(image["id"])

    await upload(api, image["id"], b"disk bytes")
    path = await images.path(image["id"])
    with open(path, "rb") as fh:
        assert fh.read() == b"disk bytes"
    assert path.startswith(str(rt.cfg.state_dir))

    await api.delete(f"/v2/images/{image['id']}", headers=member())
    assert not os.path.exists(path)
    with pytest.raises(exceptions.ImageNotFound):
        await images.get(ctx_for(PROJECT_A), image["id"])
    with pytest.raises(exceptions.ImageNotFound):
        await images.path(image["id"])


async def test_default_image_is_idempotent_and_survives_restart(tmp_path):
    rt = await open_runtime(config(tmp_path))
    try:
        first = await ensure_default_image(rt)
        assert await ensure_default_image(rt) == first
        got = await ImageAPI(rt).get(ctx_for(PROJECT_B), first)
        data = default_image_bytes()
        assert got["name"] == DEFAULT_IMAGE_NAME and got["status"] == "active"
        assert got["visibility"] == "public" and got["disk_format"] == "raw"
        assert got["container_format"] == "bare"
        assert got["size"] == len(data) and 1024 < len(data) < 1024 * 1024
        assert got["checksum"] == hashlib.md5(data).hexdigest()
        path = await ImageAPI(rt).path(first)
        async with client_for(create_app(rt)) as api:
            r = await api.get("/v2/images", params={"name": DEFAULT_IMAGE_NAME}, headers=member())
            assert [i["id"] for i in r.json()["images"]] == [first]
            # Only an admin may change it.
            r = await api.delete(f"/v2/images/{first}", headers=member())
            assert r.status_code == 403
    finally:
        await rt.close()

    os.unlink(path)  # a fresh store beside the same database
    rt = await open_runtime(config(tmp_path))
    try:
        assert await ensure_default_image(rt) == first
        with open(await ImageAPI(rt).path(first), "rb") as fh:
            assert fh.read() == default_image_bytes()
        # Deleted by an operator: it comes back, same id, on the next start.
        async with client_for(create_app(rt)) as api:
            assert (await api.delete(f"/v2/images/{first}", headers=ADMIN)).status_code == 204
        assert await ensure_default_image(rt) == first
        assert (await ImageAPI(rt).get(ctx_for(PROJECT_A), first))["status"] == "active"
    finally:
        await rt.close()


async def test_concurrent_default_image(rt):
    ids = await asyncio.gather(*[ensure_default_image(rt) for _ in range(5)])
    assert len(set(ids)) == 1
    assert (await ImageAPI(rt).get(ctx_for(PROJECT_A), ids[0]))["status"] == "active"


async def test_component_registers_service_and_default_image(rt):
    comp = component(rt)
    assert isinstance(comp, Component)
    assert comp.port == rt.cfg.image_api_port and comp.app is not None
    await comp.start()
    try:
        async with rt.db.reader() as s:
            rows = (await s.execute(select(ServiceRow).where(ServiceRow.binary == "nefos-image"))).scalars().all()
        assert [(r.host, r.topic) for r in rows] == [(rt.cfg.host, None)]
        async with client_for(comp.app) as api:
            r = await api.get(f"/v2/images/{comp.default_image_id}", headers=member())
            assert r.status_code == 200 and r.json()["status"] == "active"
    finally:
        await comp.stop()


async def test_concurrent_uploads_one_wins(api):
    image = await make_image(api)
    results = await asyncio.gather(*[upload(api, image["id"], bytes([i]) * 100000) for i in range(4)])
    codes = sorted(r.status_code for r in results)
    assert codes == [204, 409, 409, 409]
    r = await api.get(f"/v2/images/{image['id']}/file", headers=member())
    assert len(set(r.content)) == 1 and len(r.content) == 100000


async def test_delete_during_upload(rt, api):
    image = await make_image(api)
    started, release = asyncio.Event(), asyncio.Event()

    async def slow():
        yield b"a" * 1000
        started.set()
        await release.wait()
        yield b"b" * 1000

    from nefos.control.image import images as image_ops
    task = asyncio.create_task(image_ops.upload(rt, ctx_for(PROJECT_A), image["id"], slow()))
    await started.wait()
    shown = (await api.get(f"/v2/images/{image['id']}", headers=member())).json()
    assert shown["status"] == "saving"
    assert (await api.delete(f"/v2/images/{image['id']}", headers=member())).status_code == 204
    release.set()
    with pytest.raises(exceptions.ImageConflict):
        await task
    assert list((rt.cfg.state_dir / "images").iterdir()) == []


async def test_patch_owner_only_by_admin(api):
    image = await make_image(api)
    url = f"/v2/images/{image['id']}"
    op = [{"op": "replace", "path": "/owner", "value": PROJECT_B}]
    assert (await api.patch(url, json=op, headers={**member(), **PATCH})).status_code == 403
    r = await api.patch(url, json=op, headers={**ADMIN, **PATCH})
    assert r.status_code == 200 and r.json()["owner"] == PROJECT_B
    assert (await api.get(url, headers=member(PROJECT_A))).status_code == 404
    assert (await api.get(url, headers=member(PROJECT_B))).status_code == 200


async def test_a_default_image_upload_the_database_cut_off_is_done_again_at_once(rt, monkeypatch, caplog):
    """The database goes away just as the start-up upload would mark the image active (and is still
    away for the upload's own putting back): the image is left ``saving``. The next attempt of the
    start-up work uploads it again at once, rather than leaving it saving for ``STALE_SAVING``
    (five minutes in which nothing can boot from it)."""
    from sqlalchemy.exc import DisconnectionError

    from nefos.control.image import bootstrap, images
    real = images.transition
    cut = {"saving->active": 1, "saving->queued": 1}

    async def flaky(rt_, image_id, old, new, **values):
        if cut.get(f"{old}->{new}", 0) > 0:
            cut[f"{old}->{new}"] -= 1
            raise DisconnectionError("server closed the connection unexpectedly")
        return await real(rt_, image_id, old, new, **values)

    monkeypatch.setattr(images, "transition", flaky)
    image_id = await bootstrap.ensure_default_image_at_start(rt)
    assert cut == {"saving->active": 0, "saving->queued": 0}
    got = await ImageAPI(rt).get(ctx_for(PROJECT_A), image_id)
    assert got["status"] == "active" and got["checksum"] == hashlib.md5(default_image_bytes()).hexdigest()
    assert "left saving by this service's upload" in caplog.text
