"""Each API's OpenAPI document lists exactly the routes its app serves, with the request schemas
its handlers validate with (the same objects), and is valid OpenAPI 3.1."""

from __future__ import annotations

import re

import httpx
import jsonschema
import pytest
from fastapi.routing import iter_route_contexts
from openapi_spec_validator import validate

from nefos.control.compute.rest import flavors, keypairs, microversion, servers
from nefos.openapi import query_parameters, to_openapi_31
from tests.noauth import ADMIN
from tests.schema import open_runtime


@pytest.fixture
async def apps(tmp_path):
    from nefos.control.compute.rest.app import create_app as compute_app
    from nefos.config import load_config
    from nefos.control.identity.rest import create_app as identity_app
    from nefos.control.image.rest import create_app as image_app
    from nefos.control.network.service import component as network_component
    rt = await open_runtime(load_config(state_dir=tmp_path, auth_strategy="noauth"))
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
    from nefos.control.image import schemas
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
    from nefos.control.network import attributes
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
    from nefos.control.compute.rest import console_output, server_actions
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=apps["/v2.1/openapi.json"]),
                                 base_url="http://nefos") as c:
        paths = (await c.get("/v2.1/openapi.json")).json()["paths"]
    body = paths["/v2.1/servers/{server_id}/action"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    actions = {name for schema in body["anyOf"] for name in schema["required"]}
    assert {"reboot", "rebuild", "resize", "createImage", "os-start", "unshelve", "evacuate"} <= actions
    assert "trigger_crash_dump" not in actions  # unsupported; not in 2.1
    assert to_openapi_31(console_output.SCHEMA) in body["anyOf"]
    assert body == to_openapi_31(server_actions.action_schema())


# Networking, Image and Identity APIs: success answers and list parameters ------------------------

def _answers_without_json(api: str, method: str, path: str, route) -> bool:
    """An operation answering no JSON body on success: a 204 (every DELETE; routes declaring 204),
    the healthcheck (text/plain), the image data and image tags."""
    if method == "delete" or route.status_code == 204 or path in (api, "/healthcheck"):
        return True
    return api == "/v2/openapi.json" and (path.endswith("/file") or "/tags/" in path)


async def _paths(apps, api: str) -> dict:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=apps[api]), base_url="http://nefos") as c:
        return (await c.get(api)).json()["paths"]


async def _check_every_json_answer_has_a_schema(apps, api: str) -> dict:
    paths = await _paths(apps, api)
    missing = []
    for route in iter_route_contexts(apps[api].routes):
        path = re.sub(r"{(\w+):\w+}", r"{\1}", route.path)
        for method in {m.lower() for m in route.methods or ()} - {"head"}:
            if _answers_without_json(api, method, path, route):
                continue
            answers = {status: r for status, r in paths[path][method]["responses"].items() if status[0] in "23"}
            if not any("content" in r for r in answers.values()):
                missing.append((method, path))
    assert missing == [], f"{api}: operations answering JSON without a response schema: {missing}"
    return paths


def _query_names(operation: dict) -> set[str]:
    return {p["name"] for p in operation.get("parameters", ()) if p["in"] == "query"}


async def test_network_answers_are_documented_and_lists_take_neutron_filters(apps):
    from nefos.control.network import attributes, rest, schemas
    paths = await _check_every_json_answer_has_a_schema(apps, "/v2.0/openapi.json")
    for collection, (member, _, _) in rest.COLLECTIONS.items():
        key = rest.BODY_KEYS.get(collection, collection)
        listed = paths[f"/v2.0/{collection}"]["get"]
        assert listed["parameters"] == query_parameters(schemas.list_query(member))
        names = _query_names(listed)
        assert names >= {"fields", "limit", "marker", "sort_key", "sort_dir", "page_reverse", "id", "project_id"}
        # exactly the attributes the list filters by: what compile_filters accepts, no more
        assert names - {"fields", "limit", "marker", "sort_key", "sort_dir", "page_reverse"} - attributes.TAG_FILTERS \
            == attributes.filterable(schemas.fields(member))
        page = listed["responses"]["200"]["content"]["application/json"]["schema"]
        assert page["properties"][key]["items"]["properties"].keys() == schemas.fields(member)
        shown = paths[f"/v2.0/{collection}/{{item_id}}"]["get"]
        assert _query_names(shown) == {"fields"}
        assert "200" in paths[f"/v2.0/{collection}/{{item_id}}"]["put"]["responses"]
        assert "201" in paths[f"/v2.0/{collection}"]["post"]["responses"]
    ports = paths["/v2.0/ports"]["get"]["parameters"]
    sort_keys = next(p for p in ports if p["name"] == "sort_key")["schema"]["items"]["enum"]
    assert "name" in sort_keys and "fixed_ips" not in sort_keys and "binding:profile" not in sort_keys
    assert not {"binding:profile", "created_at", "nefos:provisioning"} & _query_names(paths["/v2.0/ports"]["get"])
    admin_state = next(p for p in ports if p["name"] == "admin_state_up")
    assert admin_state["schema"] == {"type": "array", "items": {"type": "boolean"}} and admin_state["explode"]


def _conforms(paths: dict, method: str, path: str, response: httpx.Response) -> None:
    """``response`` is one the document allows: its status is documented with a schema it matches."""
    from jsonschema import Draft202012Validator
    documented = paths[path][method]["responses"]
    assert str(response.status_code) in documented, (method, path, response.status_code, response.text)
    schema = documented[str(response.status_code)]["content"]["application/json"]["schema"]
    errors = [e.message for e in Draft202012Validator(schema).iter_errors(response.json())]
    assert errors == [], (method, path, errors[:5])


async def test_network_answers_match_their_schemas(apps):
    from tests.noauth import ADMIN
    paths = await _paths(apps, "/v2.0/openapi.json")
    member = {**ADMIN, "X-Roles": "member,reader"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=apps["/v2.0/openapi.json"]),
                                 base_url="http://nefos") as c:
        async def call(method, path, documented_path=None, body=None, headers=ADMIN, **params):
            r = await c.request(method, path, json=body, headers=headers, params=params or None)
            _conforms(paths, method.lower(), documented_path or path, r)
            return r.json()
        net = (await call("POST", "/v2.0/networks", body={"network": {"name": "n"}}))["network"]
        await call("POST", "/v2.0/subnets", body={"subnet": {"network_id": net["id"], "ip_version": 4,
                                                             "cidr": "10.9.0.0/24"}})
        v6 = {"network_id": net["id"], "ip_version": 6, "cidr": "fd00::/64", "ipv6_ra_mode": "slaac",
              "ipv6_address_mode": "slaac", "host_routes": [{"destination": "fd01::/64", "nexthop": "fd00::5"}]}
        await call("POST", "/v2.0/subnets", body={"subnets": [v6]})
        port = (await call("POST", "/v2.0/ports", body={"port": {"network_id": net["id"]}}))["port"]
        await call("POST", "/v2.0/ports", body={"port": {"network_id": net["id"]}}, headers=member)
        group = (await call("POST", "/v2.0/security-groups", body={"security_group": {"name": "g"}}))
        await call("POST", "/v2.0/security-group-rules", body={"security_group_rule": {
            "security_group_id": group["security_group"]["id"], "direction": "ingress", "protocol": "tcp",
            "port_range_min": 22, "port_range_max": 22, "remote_ip_prefix": "10.0.0.0/8"}})
        for collection in ("networks", "subnets", "ports", "security-groups", "security-group-rules"):
            await call("GET", f"/v2.0/{collection}")
            await call("GET", f"/v2.0/{collection}", limit=1)
            await call("GET", f"/v2.0/{collection}", headers=member)
        await call("GET", f"/v2.0/ports/{port['id']}", "/v2.0/ports/{item_id}", fields="id")
        await call("PUT", f"/v2.0/ports/{port['id']}", "/v2.0/ports/{item_id}", body={"port": {"name": "p"}},
                   headers=member)
        await call("GET", "/")
        await call("GET", "/v2.0")
        await call("GET", "/v2.0/extensions")
        await call("GET", "/v2.0/extensions/quotas", "/v2.0/extensions/{alias}")
        project = ADMIN["X-Project-Id"]
        await call("PUT", f"/v2.0/quotas/{project}", "/v2.0/quotas/{project_id}", body={"quota": {"port": 77}})
        await call("GET", "/v2.0/quotas")
        await call("GET", f"/v2.0/quotas/{project}", "/v2.0/quotas/{project_id}")
        await call("GET", "/v2.0/quotas/tenant", "/v2.0/quotas/{project_id}")
        await call("GET", f"/v2.0/quotas/{project}/default", "/v2.0/quotas/{project_id}/default")
        await call("GET", f"/v2.0/quotas/{project}/details", "/v2.0/quotas/{project_id}/details")


async def test_image_answers_are_documented_and_the_list_takes_glance_filters(apps):
    from nefos.control.image import images, schemas
    from tests.noauth import ADMIN
    paths = await _check_every_json_answer_has_a_schema(apps, "/v2/openapi.json")
    listed = paths["/v2/images"]["get"]
    assert listed["parameters"] == query_parameters(images.LIST_QUERY)
    assert _query_names(listed) >= {"limit", "marker", "sort_key", "sort_dir", "sort", "name", "visibility",
                                    "status", "member_status", "owner", "tag", "os_hidden", "size_min",
                                    "created_at"}
    sort_key = next(p for p in listed["parameters"] if p["name"] == "sort_key")
    assert sort_key["schema"]["items"]["enum"] == sorted(images.SORT_KEYS) and sort_key["explode"]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=apps["/v2/openapi.json"]),
                                 base_url="http://nefos", headers=ADMIN) as c:
        made = await c.post("/v2/images", json={"name": "i", "disk_format": "raw", "container_format": "bare"})
        image = made.json()["id"]
        for method, path, documented in (
                ("GET", "/", "/"), ("GET", "/versions", "/versions"),
                ("GET", "/v2/schemas/image", "/v2/schemas/image"), ("GET", "/v2/schemas/images", "/v2/schemas/images"),
                ("GET", f"/v2/images/{image}/tasks", "/v2/images/{image_id}/tasks"),
                ("GET", "/v2/images?sort=name:asc,size&limit=1&visibility=all&tag=x", "/v2/images")):
            _conforms(paths, method.lower(), documented, await c.request(method, path))
    assert paths["/"]["get"]["responses"]["300"]["content"]["application/json"]["schema"] == \
        schemas.VERSIONS_DOCUMENT


# Lists that take no query parameter (Keystone defines none for them).
_IDENTITY_LISTS_WITHOUT_FILTERS = {"/v3/auth/catalog", "/v3/auth/projects", "/v3/auth/domains", "/v3/regions",
                                   "/v3/groups", "/v3/projects/{target_id}/users/{user_id}/roles",
                                   "/v3/domains/{target_id}/users/{user_id}/roles"}


async def test_identity_answers_are_documented_and_lists_take_keystone_filters(apps):
    from nefos.control.identity import request_input
    from nefos.control.identity.rest import catalog_resources, domains, grants, users
    paths = await _check_every_json_answer_has_a_schema(apps, "/v3/openapi.json")
    lists = set()
    for path, operations in paths.items():
        answer = operations.get("get", {}).get("responses", {}).get("200", {})
        schema = answer.get("content", {}).get("application/json", {}).get("schema", {})
        if schema.get("properties", {}).get("links", {}).get("required") == ["self", "previous", "next"]:
            lists.add(path)
            if path not in _IDENTITY_LISTS_WITHOUT_FILTERS:
                assert _query_names(operations["get"]), f"{path} lists without documenting its filters"
    assert lists >= {"/v3/domains", "/v3/projects", "/v3/users", "/v3/roles", "/v3/role_assignments",
                     "/v3/services", "/v3/endpoints", "/v3/users/{user_id}/projects"} | _IDENTITY_LISTS_WITHOUT_FILTERS
    for path, filters in (("/v3/domains", domains._DOMAIN_FILTERS), ("/v3/users", users._USER_FILTERS),
                          ("/v3/users/{user_id}/projects", users._USER_PROJECT_FILTERS)):
        assert paths[path]["get"]["parameters"][-len(filters):] == query_parameters(request_input.filter_query(filters))
    assert _query_names(paths["/v3/projects"]["get"]) == {"name", "domain_id", "enabled", "parent_id", "is_domain"}
    assert _query_names(paths["/v3/roles"]["get"]) == {"name", "domain_id"}
    assert _query_names(paths["/v3/endpoints"]["get"]) == set(catalog_resources._ENDPOINT_FILTERS)
    assert paths["/v3/role_assignments"]["get"]["parameters"] == query_parameters(grants.ROLE_ASSIGNMENT_QUERY)
    assert _query_names(paths["/v3/auth/tokens"]["get"]) == {"nocatalog", "allow_expired"}
    enabled = next(p for p in paths["/v3/users"]["get"]["parameters"] if p["name"] == "enabled")
    assert enabled["schema"] == {"type": "boolean"}


async def test_identity_answers_match_their_schemas(tmp_path):
    from nefos.config import load_config
    from nefos.control.identity.bootstrap import bootstrap
    from nefos.control.identity.rest import create_app
    rt = await open_runtime(load_config(state_dir=tmp_path, auth_strategy="keystone"))
    try:
        creds = await bootstrap(rt)
        app = create_app(rt)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://nefos") as c:
            paths = (await c.get("/v3/openapi.json")).json()["paths"]

            async def call(method, path, documented=None, token=None, body=None, headers=None, **params):
                r = await c.request(method, path, json=body, params=params or None,
                                    headers={**({"X-Auth-Token": token} if token else {}), **(headers or {})})
                _conforms(paths, method.lower(), documented or path, r)
                return r

            def password(user, scope):
                return {"auth": {"identity": {"methods": ["password"], "password": {"user": {
                    "name": user, "domain": {"id": "default"}, "password": creds[user]["password"]}}},
                    **({"scope": scope} if scope else {})}}
            issued = await call("POST", "/v3/auth/tokens", body=password("admin", {
                "project": {"name": "admin", "domain": {"id": "default"}}}))
            admin = issued.headers["x-subject-token"]
            unscoped = (await call("POST", "/v3/auth/tokens", nocatalog="1",
                                   body=password("demo", "unscoped"))).headers["x-subject-token"]
            domain_scoped = await c.post("/v3/auth/tokens", json=password("admin", {"domain": {"id": "default"}}))
            for subject in (admin, unscoped, domain_scoped.headers.get("x-subject-token", admin)):
                await call("GET", "/v3/auth/tokens", token=admin, headers={"X-Subject-Token": subject})
            await call("GET", "/v3/auth/tokens", token=admin, headers={"X-Subject-Token": admin}, nocatalog="1")
            await call("GET", "/")
            await call("GET", "/v3")
            for path in ("/v3/auth/catalog", "/v3/auth/projects", "/v3/auth/domains", "/v3/domains",
                         "/v3/projects", "/v3/users", "/v3/roles", "/v3/groups", "/v3/services",
                         "/v3/endpoints", "/v3/regions"):
                await call("GET", path, token=admin)
            await call("GET", "/v3/role_assignments", token=admin, include_names="", effective="")
            domain = (await call("POST", "/v3/domains", token=admin, body={"domain": {"name": "d"}})).json()["domain"]
            await call("PATCH", f"/v3/domains/{domain['id']}", "/v3/domains/{domain_id}", token=admin,
                       body={"domain": {"description": "x"}})
            project = (await call("POST", "/v3/projects", token=admin,
                                  body={"project": {"name": "p", "domain_id": domain["id"]}})).json()["project"]
            await call("GET", f"/v3/projects/{project['id']}", "/v3/projects/{project_id}", token=admin)
            user = (await call("POST", "/v3/users", token=admin, body={"user": {
                "name": "u", "default_project_id": project["id"], "description": "d", "email": "u@x"}})).json()["user"]
            await call("PATCH", f"/v3/users/{user['id']}", "/v3/users/{user_id}", token=admin,
                       body={"user": {"enabled": False}})
            await call("GET", f"/v3/users/{user['id']}/projects", "/v3/users/{user_id}/projects", token=admin)
            role = (await call("POST", "/v3/roles", token=admin, body={"role": {"name": "r"}})).json()["role"]
            await call("GET", f"/v3/roles/{role['id']}", "/v3/roles/{role_id}", token=admin)
            grant = f"/v3/projects/{project['id']}/users/{user['id']}/roles"
            await c.put(f"{grant}/{role['id']}", headers={"X-Auth-Token": admin})
            await call("GET", grant, "/v3/projects/{target_id}/users/{user_id}/roles", token=admin)
            service = (await call("GET", "/v3/services", token=admin)).json()["services"][0]
            await call("GET", f"/v3/services/{service['id']}", "/v3/services/{service_id}", token=admin)
            endpoint = (await call("GET", "/v3/endpoints", token=admin)).json()["endpoints"][0]
            await call("GET", f"/v3/endpoints/{endpoint['id']}", "/v3/endpoints/{endpoint_id}", token=admin)
            await call("GET", f"/v3/regions/{endpoint['region_id']}", "/v3/regions/{region_id}", token=admin)
    finally:
        await rt.close()
def _compute_operations(app):
    """(method, path, the endpoint's documentation marks) of every Compute operation."""
    for route in iter_route_contexts(app.routes):
        for method in sorted(set(route.methods or ()) - {"HEAD"}):
            yield method.lower(), re.sub(r"{(\w+):\w+}", r"{\1}", route.path), getattr(
                route.endpoint, "__openapi__", {})


async def test_every_compute_operation_documents_its_success_answers(apps):
    """Each operation says what each of its success statuses answers at 2.1: the JSON body's schema,
    one of the objects ``nefos.control.compute.rest.response_schemas`` defines (the document holds them unchanged),
    or no body; only the routes Nova removed (410 at every version) and the image proxy's blank id
    have no success at all."""
    from nefos.control.compute.rest import removed, response_schemas
    from nefos.openapi import DOCUMENT_SCHEMA
    app = apps["/v2.1/openapi.json"]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://nefos") as c:
        paths = (await c.get("/v2.1/openapi.json")).json()["paths"]
    defined = [v for v in vars(response_schemas).values() if isinstance(v, dict)] + [DOCUMENT_SCHEMA]
    never_succeed = {(m.lower(), p) for p, methods in removed.REMOVED_ROUTES for m in methods}
    never_succeed |= {("post", "/v2.1/os-fixed-ips/{id}/action"), ("post", "/v2.1/os-networks/{id}/action")}
    never_succeed.add(("delete", "/v2.1/images/"))  # a blank image id: always 404, as in Nova
    never_succeed.add(("get", "/v2.1/os-simple-tenant-usage/"))  # an empty tenant id: 404, as Nova
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
            by_action = [a[status] for a in spec["action_responses"].values() if a.get(status) is not None]
            if any(a is not schema for a in by_action):  # any action's body, for who reads no x-action-responses
                unique = [schema, *(a for i, a in enumerate(by_action) if a != schema and a not in by_action[:i])]
                assert documented["content"]["application/json"]["schema"] == {"anyOf": [
                    to_openapi_31(s) for s in unique]}, (method, path, status)
            else:
                media_type = spec.get("response_media_type", "application/json")
                assert documented["content"][media_type]["schema"] == to_openapi_31(schema)
            with_body.add((method, path))
    assert {("get", "/v2.1/servers/detail"), ("post", "/v2.1/servers"), ("get", "/v2.1/os-hypervisors/statistics"),
            ("get", "/v2.1/limits"), ("get", "/"), ("post", "/v2.1/servers/{server_id}/action")} <= with_body
    shown = paths["/v2.1/servers/{server_id}"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert shown == to_openapi_31(response_schemas.SERVER_SHOWN)
    action = paths["/v2.1/servers/{server_id}/action"]["post"]
    assert "content" not in action["responses"]["202"]  # most actions answer 202 without a body
    rebuilt = action["x-action-responses"]["rebuild"]["202"]["content"]["application/json"]["schema"]
    assert rebuilt == to_openapi_31(response_schemas.SERVER_REBUILT)
    # A 200 of the action endpoint is any of the actions' 200 answers (a rescue's adminPass, a console
    # output, a VNC console, an evacuation's adminPass), and nothing else.
    answered = action["responses"]["200"]["content"]["application/json"]["schema"]
    for body in ({"adminPass": "x"}, {"output": "boot log"}, {"console": {"type": "novnc", "url": "http://h/"}},
                 {"adminPass": None}):
        jsonschema.validate(body, answered)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"adminPass": "x", "output": "y", "extra": 1}, answered)


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
