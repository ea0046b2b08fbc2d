"""Each API's OpenAPI document lists exactly the routes its app serves, with the request schemas
its handlers validate with (the same objects), and is valid OpenAPI 3.1."""

from __future__ import annotations

import re

import httpx
import pytest
from fastapi.routing import iter_route_contexts
from openapi_spec_validator import validate

from nefos.api import flavors, keypairs, microversion, servers
from nefos.openapi import query_parameters, to_openapi_31
from tests.noauth import ADMIN


@pytest.fixture
async def apps(tmp_path):
    from nefos.api.app import create_app as compute_app
    from nefos.config import load_config
    from nefos.identity.rest import create_app as identity_app
    from nefos.image.rest import create_app as image_app
    from nefos.network.service import component as network_component
    from nefos.service import Runtime
    rt = await Runtime.open(load_config(state_dir=tmp_path, auth_strategy="noauth"), migrate=True)
    network = network_component(rt)
    yield {"/v2.1/openapi.json": compute_app(rt, compute_api=None), "/v2.0/openapi.json": network.app,
           "/v2/openapi.json": image_app(rt), "/v3/openapi.json": identity_app(rt)}
    await rt.close()


def _served(app) -> set[tuple[str, str]]:
    return {(m.lower(), re.sub(r"{(\w+):\w+}", r"{\1}", r.path))
            for r in iter_route_contexts(app.routes) for m in (r.methods or ()) if m != "HEAD"}


async def test_every_route_is_documented_and_the_documents_are_valid(apps):
    for path, app in apps.items():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://nefos") as c:
            r = await c.get(path)  # no token: public, like the version documents
        assert r.status_code == 200, (path, r.text)
        document = r.json()
        validate(document)
        documented = {(m, p) for p, ops in document["paths"].items() for m in ops}
        assert documented == _served(app), path


async def test_request_bodies_are_the_schemas_the_handlers_validate_with(apps):
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=apps["/v2.1/openapi.json"]),
                                 base_url="http://nefos", headers=ADMIN) as c:
        paths = (await c.get("/v2.1/openapi.json")).json()["paths"]
    body = paths["/v2.1/servers"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == to_openapi_31(servers.create_schema(microversion.MIN))
    body = paths["/v2.1/os-keypairs"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == to_openapi_31(keypairs._create_schema(microversion.MIN))
    parameters = paths["/v2.1/flavors/detail"]["get"]["parameters"]
    assert parameters == query_parameters(flavors.LIST_QUERY)
    assert {p["name"] for p in parameters} >= {"limit", "marker", "minRam", "minDisk", "is_public", "sort_key"}


def test_draft4_bounds_become_openapi_31_ones():
    assert to_openapi_31({"type": "number", "minimum": 0, "exclusiveMinimum": True, "id": "x"}) == {
        "type": "number", "exclusiveMinimum": 0}
    assert to_openapi_31({"maximum": 5, "exclusiveMaximum": False}) == {"maximum": 5}


async def test_image_responses_are_the_schemas_the_image_api_publishes(apps):
    from nefos.image import schemas
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=apps["/v2/openapi.json"]),
                                 base_url="http://nefos") as c:
        paths = (await c.get("/v2/openapi.json")).json()["paths"]
        published = (await c.get("/v2/schemas/image", headers=ADMIN)).json()
    image = to_openapi_31(schemas.image_schema())
    assert image == to_openapi_31(published)
    for method, path, status in (("post", "/v2/images", "201"), ("get", "/v2/images/{image_id}", "200"),
                                 ("patch", "/v2/images/{image_id}", "200")):
        assert paths[path][method]["responses"][status]["content"]["application/json"]["schema"] == image
    listed = paths["/v2/images"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert listed == to_openapi_31(schemas.images_schema())


async def test_network_bodies_are_the_attributes_the_api_validates(apps):
    from nefos.network import attributes
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=apps["/v2.0/openapi.json"]),
                                 base_url="http://nefos") as c:
        paths = (await c.get("/v2.0/openapi.json")).json()["paths"]
    create = paths["/v2.0/ports"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert create == to_openapi_31(attributes.request_schema("port", create=True))
    port = create["properties"]["port"]
    assert port["required"] == ["network_id"] and "id" not in port["properties"]
    assert port["properties"]["binding:vnic_type"]["enum"] == list(attributes.VNIC_TYPES)
    update = paths["/v2.0/subnets/{item_id}"]["put"]["requestBody"]["content"]["application/json"]["schema"]
    assert "cidr" not in update["properties"]["subnet"]["properties"]  # not updatable
    assert "required" not in update["properties"]["subnet"]


async def test_server_action_body_is_every_action_the_handler_validates(apps):
    from nefos.api import console_output, server_actions
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=apps["/v2.1/openapi.json"]),
                                 base_url="http://nefos") as c:
        paths = (await c.get("/v2.1/openapi.json")).json()["paths"]
    body = paths["/v2.1/servers/{server_id}/action"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    actions = {name for schema in body["anyOf"] for name in schema["required"]}
    assert {"reboot", "rebuild", "resize", "createImage", "os-start", "unshelve"} <= actions
    assert "evacuate" not in actions and "trigger_crash_dump" not in actions  # unsupported; not in 2.1
    assert to_openapi_31(console_output.SCHEMA) in body["anyOf"]
    assert body == to_openapi_31(server_actions.action_schema())


def _compute_operations(app):
    """(method, path, the endpoint's documentation marks) of every Compute operation."""
    for route in iter_route_contexts(app.routes):
        for method in sorted(set(route.methods or ()) - {"HEAD"}):
            yield method.lower(), re.sub(r"{(\w+):\w+}", r"{\1}", route.path), getattr(
                route.endpoint, "__openapi__", {})


async def test_every_compute_operation_documents_its_success_answers(apps):
    """Each operation says what each of its success statuses answers at 2.1: the JSON body's schema,
    one of the objects ``nefos.api.response_schemas`` defines (the document holds them unchanged),
    or no body; only the routes Nova removed (410 at every version) have no success at all."""
    from nefos.api import removed, response_schemas
    from nefos.openapi import DOCUMENT_SCHEMA
    app = apps["/v2.1/openapi.json"]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://nefos") as c:
        paths = (await c.get("/v2.1/openapi.json")).json()["paths"]
    defined = [v for v in vars(response_schemas).values() if isinstance(v, dict)] + [DOCUMENT_SCHEMA]
    never_succeed = {(m.lower(), p) for p, methods in removed.REMOVED_ROUTES for m in methods}
    never_succeed.add(("post", "/v2.1/os-fixed-ips/{id}/action"))
    with_body = set()
    for method, path, spec in _compute_operations(app):
        responses = paths[path][method]["responses"]
        assert spec.get("responses") is not None and "2XX" not in responses, f"{method} {path}: no success answers"
        successes = {int(s) for s in responses if s.isdigit() and 200 <= int(s) < 300}
        assert successes == set(spec["responses"]), (method, path)
        assert bool(successes) == ((method, path) not in never_succeed), (method, path)
        for status, schema in spec["responses"].items():
            documented = responses[str(status)]
            if schema is None:
                assert "content" not in documented, (method, path, status)
                continue
            assert any(schema is d for d in defined), f"{method} {path} {status}: not a response_schemas object"
            assert documented["content"]["application/json"]["schema"] == to_openapi_31(schema)
            with_body.add((method, path))
    assert {("get", "/v2.1/servers/detail"), ("post", "/v2.1/servers"), ("get", "/v2.1/os-hypervisors/statistics"),
            ("get", "/v2.1/limits"), ("get", "/"), ("post", "/v2.1/servers/{server_id}/action")} <= with_body
    shown = paths["/v2.1/servers/{server_id}"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert shown == to_openapi_31(response_schemas.SERVER_SHOWN)
    action = paths["/v2.1/servers/{server_id}/action"]["post"]
    assert "content" not in action["responses"]["202"]  # most actions answer 202 without a body
    rebuilt = action["x-action-responses"]["rebuild"]["202"]["content"]["application/json"]["schema"]
    assert rebuilt == to_openapi_31(response_schemas.SERVER_REBUILT)


async def test_the_server_lists_document_the_query_the_handler_validates_with(apps):
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=apps["/v2.1/openapi.json"]),
                                 base_url="http://nefos") as c:
        paths = (await c.get("/v2.1/openapi.json")).json()["paths"]
    for path in ("/v2.1/servers", "/v2.1/servers/detail"):
        parameters = paths[path]["get"]["parameters"]
        assert parameters == query_parameters(servers.LIST_QUERY), path
        by_name = {p["name"]: p for p in parameters}
        assert {"limit", "marker", "sort_key", "sort_dir", "changes-since", "all_tenants", "name", "status",
                "ip", "ip6", "host"} <= set(by_name)
        assert "changes-before" not in by_name and "tags" not in by_name and "locked" not in by_name  # not in 2.1
        assert "metadata" not in by_name  # a filter on a joined table: always refused
        assert "display_name" in by_name["sort_key"]["schema"]["items"]["enum"]
    validated = servers._LIST_QUERY_CHECKS["2.1"]["properties"]
    assert validated and all(validated[name] is servers.LIST_QUERY["properties"][name] for name in validated)
    limits = paths["/v2.1/limits"]["get"]["parameters"]
    assert [p["name"] for p in limits] == ["tenant_id"]
