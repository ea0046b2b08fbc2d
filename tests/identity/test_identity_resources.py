"""Domains, projects, users, roles and grants over HTTP, and who may change them."""

from __future__ import annotations

from identity_helpers import auth, get_token, password_auth, project_scope


async def test_member_cannot_create_user_admin_can(api, admin_token, demo_token):
    body = {"user": {"name": "alice", "password": "alice-pw"}}
    r = await api.post("/v3/users", json=body, headers=auth(demo_token))
    assert r.status_code == 403
    assert r.json()["error"]["title"] == "Forbidden"
    r = await api.post("/v3/users", json=body, headers=auth(admin_token))
    assert r.status_code == 201, r.text
    user = r.json()["user"]
    assert user["name"] == "alice" and user["domain_id"] == "default" and user["enabled"] is True
    assert "password" not in user and "password_hash" not in user
    r = await api.post("/v3/users", json=body, headers=auth(admin_token))
    assert r.status_code == 409
    r = await api.post("/v3/users", json=body)
    assert r.status_code == 401


async def test_member_forbidden_on_every_write(api, demo_token, creds):
    user, project = creds["demo"]["user_id"], creds["demo"]["project_id"]
    h = auth(demo_token)
    for method, path, body in (
        ("POST", "/v3/projects", {"project": {"name": "p"}}),
        ("PATCH", f"/v3/projects/{project}", {"project": {"description": "x"}}),
        ("DELETE", f"/v3/projects/{project}", None),
        ("POST", "/v3/domains", {"domain": {"name": "d"}}),
        ("POST", "/v3/roles", {"role": {"name": "r"}}),
        ("PATCH", f"/v3/users/{user}", {"user": {"enabled": True}}),
        ("DELETE", f"/v3/users/{user}", None),
        ("PUT", f"/v3/projects/{project}/users/{user}/roles/{'0' * 32}", None),
        ("GET", "/v3/users", None),
        ("GET", "/v3/role_assignments", None),
    ):
        r = await api.request(method, path, json=body, headers=h)
        assert r.status_code == 403, (method, path, r.text)
    # A member may read itself and its project.
    assert (await api.get(f"/v3/users/{user}", headers=h)).status_code == 200
    assert (await api.get(f"/v3/projects/{project}", headers=h)).status_code == 200
    r = await api.get(f"/v3/users/{user}/projects", headers=h)
    assert [p["name"] for p in r.json()["projects"]] == ["demo"]
    r = await api.get(f"/v3/role_assignments?user.id={user}", headers=h)
    assert r.status_code == 200 and len(r.json()["role_assignments"]) == 2


async def test_project_user_role_lifecycle(api, admin_token):
    h = auth(admin_token)
    r = await api.post("/v3/projects", json={"project": {"name": "web", "description": "d", "tags": ["a"]}},
                       headers=h)
    assert r.status_code == 201, r.text
    project = r.json()["project"]
    assert project["domain_id"] == "default" and project["parent_id"] == "default"
    assert project["is_domain"] is False and project["tags"] == ["a"]
    assert (await api.post("/v3/projects", json={"project": {"name": "web"}}, headers=h)).status_code == 409
    r = await api.get("/v3/projects?name=web", headers=h)
    assert [p["id"] for p in r.json()["projects"]] == [project["id"]]

    r = await api.post("/v3/roles", json={"role": {"name": "observer"}}, headers=h)
    assert r.status_code == 201
    role = r.json()["role"]
    r = await api.post("/v3/users", json={"user": {"name": "bob", "password": "bob-pw",
                                                   "default_project_id": project["id"],
                                                   "email": "bob@example.org"}}, headers=h)
    assert r.status_code == 201
    user = r.json()["user"]
    assert user["email"] == "bob@example.org" and user["default_project_id"] == project["id"]

    # No role yet: bob cannot scope to the project.
    r = await api.post("/v3/auth/tokens", json=password_auth("bob", "bob-pw", scope=project_scope("web")))
    assert r.status_code == 401
    grant = f"/v3/projects/{project['id']}/users/{user['id']}/roles/{role['id']}"
    assert (await api.head(grant, headers=h)).status_code == 404
    assert (await api.put(grant, headers=h)).status_code == 204
    assert (await api.put(grant, headers=h)).status_code == 204  # idempotent
    assert (await api.head(grant, headers=h)).status_code == 204
    r = await api.get(f"/v3/projects/{project['id']}/users/{user['id']}/roles", headers=h)
    assert [x["name"] for x in r.json()["roles"]] == ["observer"]
    token = await get_token(api, "bob", "bob-pw", "web")
    r = await api.get("/v3/auth/tokens", headers=auth(token, **{"X-Subject-Token": token}))
    assert [x["name"] for x in r.json()["token"]["roles"]] == ["observer"]

    r = await api.get(f"/v3/role_assignments?scope.project.id={project['id']}&include_names", headers=h)
    (ra,) = r.json()["role_assignments"]
    assert ra["role"] == {"id": role["id"], "name": "observer"}
    assert ra["user"]["name"] == "bob" and ra["scope"]["project"]["name"] == "web"
    assert ra["links"]["assignment"].endswith(grant)

    # Unknown parts of a grant are 404.
    for bad in (f"/v3/projects/{'0' * 32}/users/{user['id']}/roles/{role['id']}",
                f"/v3/projects/{project['id']}/users/{'0' * 32}/roles/{role['id']}",
                f"/v3/projects/{project['id']}/users/{user['id']}/roles/{'0' * 32}"):
        assert (await api.put(bad, headers=h)).status_code == 404

    # Disabling the project ends its tokens; deleting it removes the grants.
    r = await api.patch(f"/v3/projects/{project['id']}", json={"project": {"enabled": False}}, headers=h)
    assert r.status_code == 200 and r.json()["project"]["enabled"] is False
    assert (await api.get("/v3/auth/projects", headers=auth(token))).status_code == 401
    assert (await api.delete(f"/v3/projects/{project['id']}", headers=h)).status_code == 204
    assert (await api.get(f"/v3/projects/{project['id']}", headers=h)).status_code == 404
    r = await api.get(f"/v3/role_assignments?user.id={user['id']}", headers=h)
    assert r.json()["role_assignments"] == []
    assert (await api.delete(f"/v3/roles/{role['id']}", headers=h)).status_code == 204
    assert (await api.delete(f"/v3/users/{user['id']}", headers=h)).status_code == 204
    assert (await api.get(f"/v3/users/{user['id']}", headers=h)).status_code == 404


async def test_domains_and_domain_scope(api, admin_token, creds):
    h = auth(admin_token)
    r = await api.post("/v3/domains", json={"domain": {"name": "Acme"}}, headers=h)
    assert r.status_code == 201
    domain = r.json()["domain"]
    r = await api.post("/v3/users", json={"user": {"name": "admin", "password": "pw2", "domain_id": domain["id"]}},
                       headers=h)
    assert r.status_code == 201  # names are unique per domain
    acme_admin = r.json()["user"]
    roles = {x["name"]: x["id"] for x in (await api.get("/v3/roles", headers=h)).json()["roles"]}
    r = await api.put(f"/v3/domains/{domain['id']}/users/{acme_admin['id']}/roles/{roles['admin']}", headers=h)
    assert r.status_code == 204
    r = await api.post("/v3/auth/tokens", json=password_auth(
        "admin", "pw2", domain={"name": "Acme"}, scope={"domain": {"name": "Acme"}}))
    assert r.status_code == 201, r.text
    body = r.json()["token"]
    assert body["domain"] == {"id": domain["id"], "name": "Acme"} and "project" not in body
    assert body["user"]["domain"]["name"] == "Acme"

    # A projects created with a domain-scoped token lands in that domain.
    r = await api.post("/v3/projects", json={"project": {"name": "rocket"}},
                       headers=auth(r.headers["x-subject-token"]))
    assert r.status_code == 201 and r.json()["project"]["domain_id"] == domain["id"]

    assert (await api.delete(f"/v3/domains/{domain['id']}", headers=h)).status_code == 403  # still enabled
    r = await api.patch(f"/v3/domains/{domain['id']}", json={"domain": {"enabled": False}}, headers=h)
    assert r.status_code == 200
    r = await api.post("/v3/auth/tokens", json=password_auth("admin", "pw2", domain={"name": "Acme"}))
    assert r.status_code == 401
    assert (await api.delete(f"/v3/domains/{domain['id']}", headers=h)).status_code == 204
    r = await api.get(f"/v3/users?domain_id={domain['id']}", headers=h)
    assert r.json()["users"] == []


async def test_bad_resource_bodies_are_400(api, admin_token):
    h = auth(admin_token)
    for path, body in (
        ("/v3/users", {"user": {}}),
        ("/v3/users", {"user": {"name": ""}}),
        ("/v3/users", {"user": {"name": "x", "enabled": "yes"}}),
        ("/v3/users", {"user": {"name": "x", "domain_id": "nope"}}),
        ("/v3/users", {"user": {"name": "x", "password": 12}}),
        ("/v3/users", {"name": "x"}),
        ("/v3/projects", {"project": {"name": "x", "parent_id": "nope"}}),
        ("/v3/projects", {"project": {"name": "x", "tags": "a"}}),
        ("/v3/roles", {"role": {"name": None}}),
        ("/v3/domains", {"domain": {"name": "x" * 300}}),
    ):
        r = await api.post(path, json=body, headers=h)
        assert r.status_code == 400, (path, body, r.text)
        assert r.json()["error"]["title"] == "Bad Request"
    r = await api.post("/v3/users", content=b"[", headers={**h, "Content-Type": "application/json"})
    assert r.status_code == 400


async def test_bootstrap_is_idempotent(rt, api, creds, admin_token):
    from nefos.control.identity.bootstrap import bootstrap, clouds_yaml
    again = await bootstrap(rt)
    assert again == creds
    r = await api.get("/v3/users", headers=auth(admin_token))  # the admin token survived
    assert sorted(u["name"] for u in r.json()["users"]) == ["admin", "demo", "nefos"]
    r = await api.get("/v3/projects", headers=auth(admin_token))
    assert sorted(p["name"] for p in r.json()["projects"]) == ["admin", "demo", "service"]
    service = await get_token(api, "nefos", creds["service"]["password"], "service")
    r = await api.get("/v3/auth/tokens", headers=auth(service, **{"X-Subject-Token": admin_token}))
    assert r.status_code == 200
    assert {x["name"] for x in r.json()["token"]["roles"]} >= {"admin"}
    clouds = clouds_yaml(rt, creds)["clouds"]
    assert set(clouds) == {"nefos", "nefos-admin", "nefos-service"}
    assert clouds["nefos"]["auth"]["username"] == "demo"
    assert clouds["nefos-admin"]["auth"]["auth_url"] == f"http://127.0.0.1:{rt.cfg.identity_api_port}/v3"
    assert clouds["nefos-service"]["auth"]["project_name"] == "service"
    assert clouds["nefos"]["region_name"] == "RegionOne" and clouds["nefos"]["identity_api_version"] == 3


async def test_services_endpoints_and_regions_are_listed_shown_and_filtered(api, admin_token, demo_token):
    h = auth(admin_token)
    r = await api.get("/v3/services", headers=h)
    assert r.status_code == 200, r.text
    services = r.json()["services"]
    compute = next(s for s in services if s["type"] == "compute")
    assert compute["links"]["self"].endswith(f"/v3/services/{compute['id']}")
    r = await api.get("/v3/services", params={"type": "compute"}, headers=h)
    assert [s["id"] for s in r.json()["services"]] == [compute["id"]]
    r = await api.get(f"/v3/services/{compute['id']}", headers=h)
    assert r.status_code == 200 and r.json()["service"] == compute
    r = await api.get("/v3/services/nope", headers=h)
    assert r.status_code == 404 and r.json()["error"]["message"] == "Could not find service: nope."

    r = await api.get("/v3/endpoints", params={"service_id": compute["id"], "interface": "public"}, headers=h)
    (endpoint,) = r.json()["endpoints"]
    assert endpoint["service_id"] == compute["id"] and endpoint["interface"] == "public"
    r = await api.get(f"/v3/endpoints/{endpoint['id']}", headers=h)
    assert r.status_code == 200 and r.json()["endpoint"] == endpoint
    r = await api.get("/v3/endpoints/nope", headers=h)
    assert r.status_code == 404 and r.json()["error"]["message"] == "Could not find endpoint: nope."

    r = await api.get("/v3/regions", headers=h)
    (region,) = r.json()["regions"]
    assert (await api.get(f"/v3/regions/{region['id']}", headers=h)).json()["region"] == region
    assert (await api.get("/v3/regions/elsewhere", headers=h)).status_code == 404
    # Services and endpoints are the admin's to read.
    assert (await api.get("/v3/services", headers=auth(demo_token))).status_code == 403
    assert (await api.get("/v3/endpoints", headers=auth(demo_token))).status_code == 403
