"""The Compute API contract, checked on every response a test cloud's client gets.

``check(response)`` validates a servers / server actions / server metadata /
os-instance-actions response against Tempest's schema for the microversion it
echoes (``tests.schemas.assert_schema``), every success answer at 2.1 (what a
request without a version header gets) against the Compute API's own OpenAPI
document (the schema its operation documents for the status, or no body), an
error against Nova's error body (``{"<kind>": {"code": N, "message": "..."}}``),
and every response's request id and version headers. The harness of
``tests/clouds.py`` runs it as an httpx response hook, so each test that drives
servers also checks the contract.
"""

from __future__ import annotations

import functools
import json
import re

import jsonschema
from fastapi.routing import iter_route_contexts
from starlette.routing import Match

from tests.schemas import assert_schema, validator_for

_ID = r"[^/]+"
# (method, path regex, status) -> Tempest schema name; None: no Tempest schema (checked by hand).
ROUTES: list[tuple[str, re.Pattern, dict[int, str | None]]] = [(m, re.compile(f"^/v2.1{p}$"), s) for m, p, s in [
    ("POST", "/servers", {202: "servers.create_server_with_admin_pass"}),
    ("GET", "/servers", {200: "servers.list_servers"}),
    ("GET", "/servers/detail", {200: "servers.list_servers_detail"}),
    ("GET", f"/servers/{_ID}", {200: "servers.get_server"}),
    ("PUT", f"/servers/{_ID}", {200: "servers.update_server"}),
    ("DELETE", f"/servers/{_ID}", {204: "servers.delete_server"}),
    ("POST", f"/servers/{_ID}/action", {202: "servers.server_actions_common_schema",
                                         200: "servers.get_console_output",  # os-getConsoleOutput
                                         204: "servers.server_actions_confirm_resize"}),
    ("GET", f"/servers/{_ID}/metadata", {200: "servers.list_server_metadata"}),
    ("POST", f"/servers/{_ID}/metadata", {200: "servers.update_server_metadata"}),
    ("PUT", f"/servers/{_ID}/metadata", {200: "servers.set_server_metadata"}),
    ("GET", f"/servers/{_ID}/metadata/{_ID}", {200: "servers.set_show_server_metadata_item"}),
    ("PUT", f"/servers/{_ID}/metadata/{_ID}", {200: "servers.set_show_server_metadata_item"}),
    ("DELETE", f"/servers/{_ID}/metadata/{_ID}", {204: "servers.delete_server_metadata_item"}),
    ("POST", f"/servers/{_ID}/remote-consoles", {200: "servers.get_remote_consoles"}),
    ("GET", f"/servers/{_ID}/os-instance-actions", {200: "servers.list_instance_actions"}),
    ("GET", f"/servers/{_ID}/os-instance-actions/{_ID}", {200: "servers.show_instance_action"}),
    ("GET", "/images", {200: "images.list_images"}),
    ("GET", "/images/detail", {200: "images.list_images_details"}),
    ("GET", f"/images/{_ID}", {200: "images.get_image"}),
    ("DELETE", f"/images/{_ID}", {204: "images.delete"}),
    ("GET", f"/images/{_ID}/metadata", {200: "images.image_metadata"}),
    ("POST", f"/images/{_ID}/metadata", {200: "images.image_metadata"}),
    ("PUT", f"/images/{_ID}/metadata", {200: "images.image_metadata"}),
    ("GET", f"/images/{_ID}/metadata/{_ID}", {200: "images.image_meta_item"}),
    ("PUT", f"/images/{_ID}/metadata/{_ID}", {200: "images.image_meta_item"}),
    ("DELETE", f"/images/{_ID}/metadata/{_ID}", {204: "images.delete"}),
]]

ERROR_KEYS = {400: "badRequest", 401: "unauthorized", 403: "forbidden", 404: "itemNotFound",
              405: "badMethod", 409: "conflictingRequest", 413: "overLimit",
              415: "badMediaType", 429: "overLimit", 500: "computeFault", 501: "notImplemented",
              503: "serviceUnavailable"}

RESERVATION = {"status_code": [202], "response_body": {
    "type": "object", "properties": {"reservation_id": {"type": "string", "pattern": "^r-"}},
    "required": ["reservation_id"], "additionalProperties": False}}

IMAGE_CREATED = {"status_code": [202], "response_body": {
    "type": "object", "properties": {"image_id": {"type": "string", "format": "uuid"}},
    "required": ["image_id"], "additionalProperties": False}}


def schema_for(method: str, path: str, status: int) -> str | None | bool:
    """The schema name, None when the route is known but has no schema for it, False when unknown.

    Routes are tried in order, so ``/servers/detail`` is the list, not a server's id.
    """
    for m, pattern, by_status in ROUTES:
        if m == method and pattern.match(path):
            return by_status.get(status)
    return False


@functools.cache
def _compute_api_document() -> tuple[object, dict]:
    """The Compute app's routes (no cloud behind them: only matched) and its OpenAPI document."""
    from nefos.control.compute.rest.app import NOVA_ERROR_SCHEMA, create_app
    from nefos.openapi import document
    app = create_app(None, None)
    return app, document(app, title="Nefos Compute API", version="2.1", error_schema=NOVA_ERROR_SCHEMA)


def operation_path(method: str, path: str) -> str | None:
    """The document's path of the Compute operation serving ``method path`` (None: no route)."""
    app, _doc = _compute_api_document()
    scope = {"type": "http", "method": method, "path": path, "root_path": ""}
    for context in iter_route_contexts(app.routes):
        match, _ = context.route.matches(scope)
        if match == Match.FULL:
            return re.sub(r"{(\w+):\w+}", r"{\1}", context.path)
    return None


def documented_success(method: str, path: str, status: int, action: str | None = None) -> dict | None:
    """The OpenAPI response object the Compute document gives ``method path`` for ``status`` (an
    action's own answer when the document has one), None when the path is no route of the API."""
    template = operation_path(method, path)
    if template is None:
        return None
    operation = _compute_api_document()[1]["paths"][template][method.lower()]
    by_action = operation.get("x-action-responses", {}).get(action or "", {})
    responses = {**operation["responses"], **by_action}
    assert str(status) in responses, f"{method} {path} answered {status}, not documented"
    return responses[str(status)]


def operations_with_bodies() -> set[tuple[str, str]]:
    """(method, path) of every Compute operation documenting a success answer with a body."""
    return {(method.upper(), path) for path, operations in _compute_api_document()[1]["paths"].items()
            for method, operation in operations.items()
            for status, response in operation["responses"].items()
            if status.startswith("2") and "content" in response}


def check_documented_success(response) -> None:
    """A 2xx answer at 2.1 matches its operation's documented response: its schema, or no body."""
    request = response.request
    action = None
    if request.method == "POST" and request.url.path.endswith("/action") and request.content:
        body = json.loads(request.content)
        action = next(iter(body), None) if isinstance(body, dict) else None
    documented = documented_success(request.method, request.url.path, response.status_code, action)
    if documented is None:
        return
    content = documented.get("content", {}).get("application/json")
    other_types = set(documented.get("content", {})) - {"application/json"}
    if other_types:  # a stream (text/event-stream): its media type, as documented
        assert response.headers.get("content-type", "").split(";")[0] in other_types, response.headers
        return
    if content is None:
        assert not response.content, f"{request.method} {request.url.path}: a body where none is documented"
        return
    assert response.headers.get("content-type", "").startswith("application/json"), response.headers
    validator = validator_for(content["schema"], jsonschema.Draft202012Validator,
                              jsonschema.Draft202012Validator.FORMAT_CHECKER)
    errors = sorted(validator.iter_errors(response.json()), key=lambda e: list(e.absolute_path))
    assert not errors, (f"{request.method} {request.url.path} {response.status_code}: "
                        + "; ".join(f"{list(e.absolute_path)}: {e.message}" for e in errors[:5]))


def check(response) -> None:
    request = response.request
    path = request.url.path
    if path == "/" and response.status_code < 300:
        check_documented_success(response)
    if not (path.startswith("/v2.1/") or path == "/v2.1"):
        return
    assert response.headers.get("x-openstack-request-id", "").startswith("req-"), response.headers
    version = response.headers.get("openstack-api-version", "")
    if response.status_code != 406:
        assert version.startswith("compute "), response.headers
        assert response.headers.get("x-openstack-nova-api-version") == version.split()[1]
    if response.status_code >= 400:
        body = response.json()
        key = ERROR_KEYS.get(response.status_code, "computeFault")
        assert list(body) == [key], (response.status_code, body)
        assert body[key]["code"] == response.status_code and body[key]["message"], body
        return
    if 200 <= response.status_code < 300 and version == "compute 2.1":
        check_documented_success(response)
    name = schema_for(request.method, path, response.status_code)
    if name is False:
        return  # not a servers route: flavors, os-services, ... are checked by their own suites
    if request.method == "POST" and path == "/v2.1/servers" and "reservation_id" in response.json():
        assert_schema(RESERVATION, response)
        return
    # Tempest picks the schema with adminPass by enable_instance_password, the cloud's option.
    if request.method == "POST" and path == "/v2.1/servers" and response.status_code == 202 and \
            "adminPass" not in response.json()["server"]:
        assert_schema("servers.create_server", response)
        return
    if request.method == "POST" and path.endswith("/action") and response.status_code == 200 and \
            next(iter(json.loads(request.content or b"{}")), None) == "evacuate":
        if not response.content:
            assert_schema("servers.evacuate_server", response)
        elif response.json().get("adminPass") is not None:  # null: onSharedStorage without a password, as Nova
            assert_schema("servers.evacuate_server_with_admin_pass", response)
        return
    if request.method == "POST" and path.endswith("/action") and response.content:
        action = next(iter(json.loads(request.content or b"{}")), None)
        if action in ("createImage", "createBackup"):
            assert_schema(IMAGE_CREATED, response)  # Tempest's v2_45 images.create_image
            return
        if action == "rebuild":
            with_password = "adminPass" in response.json()["server"]
            assert_schema("servers.rebuild_server_with_admin_pass" if with_password else "servers.rebuild_server",
                          response)
            return
        if action == "rescue":
            with_password = "adminPass" in response.json()
            assert_schema("servers.rescue_server_with_admin_pass" if with_password else "servers.rescue_server",
                          response)
            return
        if action == "os-getVNCConsole":
            assert_schema("servers.get_vnc_console", response)
            return
    assert name is not None, f"{request.method} {path} answered {response.status_code}"
    assert_schema(name, response)


async def response_hook(response) -> None:
    await response.aread()
    check(response)
