"""The compute host's Image API client (nefos.clients.image): who it asks as, and the errors.

The user's operations go with the token the request came with (Nova passes the user's context to
glance); the host's own with the service user's token; a user token refused mid-operation is
retried once as the service user. Errors are the in-process client's exception classes."""

from __future__ import annotations

import json

import httpx
import pytest

from nefos import exceptions
from nefos.config import load_config
from nefos.context import RequestContext
from nefos.clients.image import ImageHTTPClient

SERVICE_TOKEN = "service-token"


def _client(tmp_path, handler, **cfg) -> tuple[ImageHTTPClient, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v3/auth/tokens":
            body = json.loads(request.content)
            assert body["auth"]["identity"]["password"]["user"]["name"] == "nefos"
            return httpx.Response(201, headers={"X-Subject-Token": SERVICE_TOKEN},
                                  json={"token": {"expires_at": "2999-01-01T00:00:00Z", "catalog": []}})
        seen.append(request)
        return handler(request)

    settings = {"auth_strategy": "keystone", "service_password": "pw",
                "api_servers": "http://images.example:9292", **cfg}
    config = load_config(state_dir=str(tmp_path), **settings)
    return ImageHTTPClient(config, transport=httpx.MockTransport(handle)), seen


def _image(status="active") -> dict:
    return {"id": "img-1", "status": status, "name": "x", "size": 3, "instance_uuid": "u-1"}


async def test_user_operations_carry_the_users_token_and_the_hosts_own_the_service_users(tmp_path):
    client, seen = _client(tmp_path, lambda r: httpx.Response(200, json=_image()))
    user = RequestContext(project_id="p", user_id="u", roles=["member"], is_admin=False, auth_token="user-token")
    image = await client.get(user, "img-1")
    assert image["properties"] == {"instance_uuid": "u-1"}
    await client.get(None, "img-1")
    assert [r.headers["x-auth-token"] for r in seen] == ["user-token", SERVICE_TOKEN]
    assert all(str(r.url).startswith("http://images.example:9292/v2/images/img-1") for r in seen)
    await client.close()


async def test_a_refused_user_token_is_retried_once_as_the_service_user(tmp_path):
    client, seen = _client(tmp_path, lambda r: httpx.Response(
        401 if r.headers["x-auth-token"] == "expired" else 204))
    user = RequestContext(project_id="p", user_id="u", roles=["member"], is_admin=False, auth_token="expired")
    await client.delete(user, "img-1")
    assert [r.headers["x-auth-token"] for r in seen] == ["expired", SERVICE_TOKEN]
    await client.close()


@pytest.mark.parametrize("status,body,error", [
    (404, {"message": "no such image"}, exceptions.ImageNotFound),
    (403, {"message": "Image img-1 is protected and cannot be deleted."}, exceptions.ImageProtected),
    (403, {"message": "not yours"}, exceptions.ImageForbidden),
    (409, {"message": "busy"}, exceptions.ImageConflict),
    (400, {"message": "bad filter"}, exceptions.Invalid),
    (503, {"message": "down"}, exceptions.ServiceUnavailable),
])
async def test_errors_are_the_in_process_clients(tmp_path, status, body, error):
    client, _seen = _client(tmp_path, lambda r: httpx.Response(status, json=body))
    with pytest.raises(error):
        await client.delete(None, "img-1", missing_ok=False)
    await client.close()


async def test_noauth_sends_the_callers_identity(tmp_path):
    client, seen = _client(tmp_path, lambda r: httpx.Response(200, json={"images": []}), auth_strategy="noauth")
    ctx = RequestContext(project_id="p", user_id="u", roles=["member"], is_admin=False)
    await client.list_backups(ctx.elevated(), "u-1", "daily")
    await client.list_backups(None, "u-1", "daily")
    assert [(r.headers["x-project-id"], r.headers["x-roles"]) for r in seen] == [
        ("p", "member,admin"), ("service", "service,admin")]
    await client.close()


def test_the_token_travels_with_the_context_but_is_never_shown():
    ctx = RequestContext(auth_token="secret")
    assert RequestContext.from_dict(ctx.to_dict()).auth_token == "secret"
    assert "secret" not in repr(ctx)


def _serving(data: bytes, **image):
    import hashlib

    doc = {"id": "img-1", "status": "active", "size": len(data), "os_hash_algo": "sha512",
           "os_hash_value": hashlib.sha512(data).hexdigest(), **image}

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/file"):
            return httpx.Response(200, content=data)
        return httpx.Response(200, json=doc)
    return handle


async def test_a_download_is_checked_against_the_images_hash(tmp_path):
    client, _seen = _client(tmp_path, _serving(b"disk" * 1000))
    target = tmp_path / "base"
    await client.download_verified(None, "img-1", target)
    assert target.read_bytes() == b"disk" * 1000
    await client.close()


@pytest.mark.parametrize("image,reason", [
    ({"os_hash_value": "0" * 128}, "does not match its sha512 hash"),
    ({"size": 5}, "bytes arrived"),
    ({"status": "queued"}, "image is queued"),
    ({"os_hash_algo": "nosuchhash"}, "unknown hash algorithm"),
])
async def test_a_download_that_is_not_the_image_is_refused(tmp_path, image, reason):
    client, _seen = _client(tmp_path, _serving(b"disk" * 1000, **image))
    with pytest.raises(exceptions.ImageUnacceptable) as caught:
        await client.download_verified(None, "img-1", tmp_path / "base")
    assert reason in str(caught.value)
    await client.close()
