"""Helpers shared by the image tests (imported as a plain module: tests/image is on sys.path)."""

from __future__ import annotations

import httpx

from nefos.config import load_config

PROJECT_A = "a" * 32
PROJECT_B = "b" * 32


def member(project: str = PROJECT_A, roles: str = "member,reader") -> dict:
    return {"X-Project-Id": project, "X-User-Id": "u" * 32, "X-Roles": roles}


ADMIN = {"X-Project-Id": "f" * 32, "X-Roles": "admin,member,reader"}
OCTET = {"Content-Type": "application/octet-stream"}
PATCH = {"Content-Type": "application/openstack-images-v2.1-json-patch"}


def config(tmp_path, **overrides):
    return load_config(**{"state_dir": tmp_path, "auth_strategy": "noauth", **overrides})


def client_for(app) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://image.test")


async def make_image(api, headers=None, **body) -> dict:
    body.setdefault("name", "img")
    body.setdefault("container_format", "bare")
    body.setdefault("disk_format", "raw")
    r = await api.post("/v2/images", json=body, headers=headers or member())
    assert r.status_code == 201, r.text
    return r.json()


async def upload(api, image_id, data: bytes, headers=None) -> httpx.Response:
    return await api.put(f"/v2/images/{image_id}/file", content=data,
                         headers={**(headers or member()), **OCTET})
