"""openstacksdk against the Image API on a real uvicorn server (no identity: keystoneauth noauth).

The SDK is synchronous, so it runs in a worker thread while the server runs
in the test's event loop.
"""

import asyncio
import hashlib

import openstack.connection
import pytest
import uvicorn
from openstack import exceptions as sdk_exceptions
from image_helpers import PROJECT_A
from keystoneauth1 import noauth
from keystoneauth1 import session as ks_session

from nefos.control.image.bootstrap import ensure_default_image
from nefos.cmd.allinone import free_port
from nefos.control.image.rest import create_app

# Deprecations inside the SDK itself, not in how this test calls it.
pytestmark = [pytest.mark.filterwarnings("ignore::openstack.warnings.RemovedInSDK50Warning"),
              pytest.mark.filterwarnings("ignore::openstack.warnings.RemovedInSDK60Warning")]


async def _serve(app):
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="off"))
    task = asyncio.create_task(server.serve())
    for _ in range(200):
        if server.started:
            break
        await asyncio.sleep(0.02)
    assert server.started
    return server, task, f"http://127.0.0.1:{port}"


def _connection(endpoint: str, headers: dict) -> openstack.connection.Connection:
    session = ks_session.Session(auth=noauth.NoAuth(), additional_headers=headers)
    return openstack.connection.Connection(session=session, image_endpoint_override=endpoint,
                                           region_name="RegionOne")


def _sdk_session(endpoint: str, default_id: str) -> dict:
    member = _connection(endpoint, {"X-Project-Id": PROJECT_A, "X-Roles": "member,reader"})
    data = b"sdk-image-bytes" * 4096
    image = member.image.create_image("sdk-image", data=data, disk_format="raw",
                                      container_format="bare", allow_duplicates=True,
                                      tags=["from-sdk"], hw_disk_bus="virtio", nefos_flavour="tiny",
                                      wait=True)
    shown = member.image.get_image(image.id)
    found = member.image.find_image("sdk-image", ignore_missing=False)
    more = [member.image.create_image(f"sdk-extra-{i}", disk_format="raw", container_format="bare",
                                      allow_duplicates=True) for i in range(3)]
    listed = [i.name for i in member.image.images(limit=2, sort_key="name", sort_dir="asc")]
    downloaded = member.image.download_image(image).content
    member.image.update_image(image, name="sdk-renamed", min_ram=32)
    member.image.add_tag(image, "second")
    member.image.remove_tag(image, "from-sdk")
    updated = member.image.get_image(image.id)
    default = member.image.find_image("nefos-tiny", ignore_missing=False)
    for extra in more:
        member.image.delete_image(extra)
    member.image.delete_image(image)
    try:
        member.image.find_image(image.id, ignore_missing=False)
        gone = False
    except sdk_exceptions.NotFoundException:
        gone = True
    return {"shown": shown, "found": found, "listed": listed, "downloaded": downloaded, "data": data,
            "updated": updated, "default": default, "gone": gone, "default_id": default_id}


async def test_openstacksdk_image_lifecycle(rt):
    default_id = await ensure_default_image(rt)
    server, task, endpoint = await _serve(create_app(rt))
    try:
        out = await asyncio.to_thread(_sdk_session, endpoint, default_id)
    finally:
        server.should_exit = True
        await task
    data = out["data"]
    shown = out["shown"]
    assert shown.status == "active"
    assert shown.size == len(data) and shown.checksum == hashlib.md5(data).hexdigest()
    assert shown.hash_algo == "sha512" and shown.hash_value == hashlib.sha512(data).hexdigest()
    assert shown.hw_disk_bus == "virtio" and shown.properties["nefos_flavour"] == "tiny"
    assert shown.owner == PROJECT_A and shown.tags == ["from-sdk"]
    assert out["found"].id == shown.id
    assert out["listed"] == sorted(["nefos-tiny", "sdk-image", "sdk-extra-0", "sdk-extra-1", "sdk-extra-2"])
    assert out["downloaded"] == data
    assert out["updated"].name == "sdk-renamed" and out["updated"].min_ram == 32
    assert out["updated"].tags == ["second"]
    assert out["default"].id == default_id and out["default"].visibility == "public"
    assert out["gone"] is True
