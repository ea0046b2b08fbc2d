"""Request bodies over max_request_body_size (114 688 bytes, Nova's and Keystone's default) are
refused with 413 by every API of a `nefos up` with the shipped defaults, before authentication
and before the body is read whole; image data, streamed to the store, has its own cap."""

from __future__ import annotations

import json

import httpx

from nefos.config import Config

from .helpers import Tenancy

LIMIT = Config().max_request_body_size
BIG = json.dumps({"server": {"name": "x" * (LIMIT + 1)}}).encode()

ROUTES = [("compute", "POST", "/servers"), ("compute", "PUT", "/servers/abc/metadata"),
          ("network", "POST", "/v2.0/networks"), ("network", "PUT", "/v2.0/ports/abc"),
          ("image", "POST", "/v2/images"), ("identity", "POST", "/projects")]


def _assert_too_large(r: httpx.Response, service: str) -> None:
    assert r.status_code == 413, (service, str(r.request.url), r.status_code, r.text[:200])
    body = r.json()
    if service == "compute":
        assert body["overLimit"]["code"] == 413, body
    elif service == "network":
        assert "NeutronError" in body, body
    elif service == "image":
        assert body["code"].startswith("413"), body
    else:
        assert body["error"]["code"] == 413, body


def test_the_default_is_novas():
    assert LIMIT == 114688


def test_every_api_refuses_a_body_over_the_limit(tenancy: Tenancy):
    for token in (tenancy.a.token, "", "garbage"):  # authenticated or not
        for service, method, path in ROUTES:
            r = tenancy.a.request(method, service, path, token=token, content=BIG,
                                  headers={"Content-Type": "application/json"})
            _assert_too_large(r, service)


def test_the_unauthenticated_token_route_refuses_it_too(tenancy: Tenancy):
    r = tenancy.a.http.post(tenancy.auth_url + "/auth/tokens", content=BIG,
                            headers={"Content-Type": "application/json"})
    _assert_too_large(r, "identity")


def test_a_body_at_the_limit_is_read(tenancy: Tenancy):
    name = "n" * 200
    body = json.dumps({"network": {"name": name, "description": ""}}).encode()
    body = body[:-2] + b" " * (LIMIT - len(body)) + body[-2:]  # padded with JSON whitespace
    assert len(body) == LIMIT
    r = tenancy.a.request("POST", "network", "/v2.0/networks", content=body,
                          headers={"Content-Type": "application/json"})
    assert r.status_code == 400 or r.status_code == 201, r.text  # read and judged, not refused
    assert r.status_code != 413


def test_image_data_is_not_bounded_by_it(tenancy: Tenancy):
    r = tenancy.a.post("image", "/v2/images", {"name": "big", "disk_format": "raw", "container_format": "bare"})
    assert r.status_code == 201, r.text
    image = r.json()["id"]
    data = b"\0" * (LIMIT * 3)
    r = tenancy.a.request("PUT", "image", f"/v2/images/{image}/file", content=data,
                          headers={"Content-Type": "application/octet-stream"})
    assert r.status_code == 204, r.text
    assert tenancy.a.get("image", f"/v2/images/{image}").json()["size"] == len(data)
    assert tenancy.a.delete("image", f"/v2/images/{image}").status_code == 204
