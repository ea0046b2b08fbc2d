"""Every route of the Compute, Networking, Image and Identity APIs, called by each persona, answers the
status ``policy_matrix.yaml`` expects, and no successful answer to an outsider shows project A's
resources; a route without an entry fails, and docs/policy.md shows the same matrix.

One all-in-one cloud (fake driver, auth_strategy=keystone) runs in this process; the matrix's
requests go to each API's app over ASGI with real tokens from its identity API. Personas: anonymous
(no token), reader and member of project A, member of project B ("other"), the bootstrap admin, and a
user holding only the ``service`` role in the service project. Path parameters name resources of
project A (or of A's member for key pairs); a case with ``fresh`` gets a new one before each
persona's request, so a delete or a state change one persona makes does not decide what the next one
gets.
"""
from __future__ import annotations

import asyncio
import json
import time
import uuid

import httpx
from fastapi.routing import iter_route_contexts
from sqlalchemy import insert

from nefos.cmd.allinone import Cloud, all_in_one_components, free_port
from nefos.config import load_config
from nefos.db.models import Service as ServiceRow
from nefos.control.image.bootstrap import DEFAULT_IMAGE_ID
from nefos.service import Runtime

from . import policy_matrix
from .policy_matrix import PERSONAS

API_OF_COMPONENT = {"compute-api": "compute", "network": "network", "image": "image", "identity": "identity"}


def routes_of(apps: dict[str, object]) -> set[tuple[str, str]]:
    """``{(api, "METHOD /path")}`` from each app's route table (HEAD only where it is the sole method:
    Starlette answers HEAD on every GET route by itself)."""
    found = set()
    for api, app in apps.items():
        for route in iter_route_contexts(app.routes):
            methods = set(route.methods or ())
            if len(methods) > 1:
                methods.discard("HEAD")
            found |= {(api, f"{m} {route.path}") for m in methods}
    return found


def components_by_api(rt) -> tuple[list, dict]:
    components = all_in_one_components(rt)
    apps = {API_OF_COMPONENT[c.name]: c.app for c in components if c.name in API_OF_COMPONENT}
    return components, apps


async def test_every_route_has_a_matrix_entry(tmp_path):
    rt = await Runtime.open(load_config(state_dir=tmp_path, auth_strategy="keystone"), migrate=True)
    try:
        _components, apps = components_by_api(rt)
        served = routes_of(apps)
    finally:
        await rt.close()
    listed = {(api, case["route"]) for api, cases in policy_matrix.load().items() for case in cases}
    assert served - listed == set(), "routes without a policy_matrix.yaml entry"
    assert listed - served == set(), "policy_matrix.yaml entries for routes no app serves"


def test_docs_show_the_matrix():
    text = policy_matrix.DOCS_FILE.read_text()
    assert policy_matrix.current_docs_section(text) == policy_matrix.render(policy_matrix.load()), (
        "docs/policy.md's route matrix is stale: run python tests/isolation/policy_matrix.py")


# The running cloud ------------------------------------------------------------------------------------

class Matrix:
    """The cloud, the personas' tokens, and the ids path parameters resolve to."""

    def __init__(self, rt, apps):
        self.rt = rt
        self.clients = {api: httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                               base_url=f"http://{api}.test", timeout=60)
                        for api, app in apps.items()}
        self.tokens: dict[str, str | None] = {"anonymous": None}
        self.ids: dict[str, dict[str, str]] = {api: {} for api in apps}
        self.users: dict[str, str] = {}
        self.roles: dict[str, str] = {}
        self.project_a = self.member_password = ""
        self.private_ids: set[str] = set()  # every fixture id of project A, whatever the API
        self.seq = 0

    def unique(self, prefix: str) -> str:
        self.seq += 1
        return f"{prefix}-{self.seq}"

    async def call(self, persona: str, api: str, method: str, path: str, *, body=None, query=None,
                   headers=None, content: str | None = None) -> httpx.Response:
        h = dict(headers or {})
        token = self.tokens[persona]
        if token is not None:
            h["X-Auth-Token"] = token
        if content is not None:
            return await self.clients[api].request(method, path, content=content.encode(), params=query,
                                                   headers=h)
        return await self.clients[api].request(method, path, json=body, params=query, headers=h)

    async def ok(self, persona: str, api: str, method: str, path: str, body=None, **kw) -> dict:
        r = await self.call(persona, api, method, path, body=body, **kw)
        assert r.status_code < 300, (method, path, r.status_code, r.text)
        return r.json() if r.content else {}

    async def login(self, user: str, password: str, project: str) -> str:
        r = await self.clients["identity"].post("/v3/auth/tokens", params={"nocatalog": "1"}, json={
            "auth": {"identity": {"methods": ["password"], "password": {"user": {
                "name": user, "domain": {"id": "default"}, "password": password}}},
                "scope": {"project": {"name": project, "domain": {"id": "default"}}}}})
        assert r.status_code == 201, r.text
        return r.headers["x-subject-token"]

    async def close(self) -> None:
        for client in self.clients.values():
            await client.aclose()


async def _tenancy(m: Matrix, creds: dict) -> None:
    """Projects A and B, the personas' users and tokens, and a spare user grants are made for."""
    admin = creds["admin"]
    m.tokens["admin"] = await m.login(admin["username"], admin["password"], admin["project_name"])
    roles = {r["name"]: r["id"] for r in (await m.ok("admin", "identity", "GET", "/v3/roles"))["roles"]}
    projects = {}
    for name in ("matrix-a", "matrix-b"):
        projects[name] = (await m.ok("admin", "identity", "POST", "/v3/projects", {"project": {
            "name": name, "domain_id": "default"}}))["project"]["id"]
    for persona, project, role in (("reader", "matrix-a", "reader"), ("member", "matrix-a", "member"),
                                   ("other", "matrix-b", "member"), ("service", "service", "service"),
                                   ("spare", "matrix-a", None)):
        password = uuid.uuid4().hex
        uid = (await m.ok("admin", "identity", "POST", "/v3/users", {"user": {
            "name": f"matrix-{persona}", "password": password, "domain_id": "default"}}))["user"]["id"]
        m.users[persona] = uid
        if role is None:
            continue
        project_id = projects.get(project) or creds["service"]["project_id"]
        await m.ok("admin", "identity", "PUT", f"/v3/projects/{project_id}/users/{uid}/roles/{roles[role]}")
        m.tokens[persona] = await m.login(f"matrix-{persona}", password, project)
        if persona == "member":
            m.member_password = password
    m.project_a = projects["matrix-a"]
    m.roles.update(roles)


async def _wait_active(m: Matrix, server_id: str, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        server = (await m.ok("member", "compute", "GET", f"/v2.1/servers/{server_id}"))["server"]
        if server["status"] == "ACTIVE" and not server.get("OS-EXT-STS:task_state"):
            return server
        assert server["status"] != "ERROR" and time.monotonic() < deadline, server
        await asyncio.sleep(0.05)


async def _compute_fixtures(m: Matrix) -> None:
    ids = m.ids["compute"]
    ids["name"] = (await m.ok("member", "compute", "POST", "/v2.1/os-keypairs", {"keypair": {
        "name": "matrix-key"}}))["keypair"]["name"]
    ids["group_id"] = (await m.ok("member", "compute", "POST", "/v2.1/os-server-groups", {"server_group": {
        "name": "matrix-group", "policies": ["anti-affinity"]}}))["server_group"]["id"]
    ids["server_id"] = await _server(m)
    server = await _wait_active(m, ids["server_id"])
    ids["network_label"] = next(iter(server["addresses"]))
    ids["net_id"] = m.ids["network"]["network_id"]
    ids["port_id"] = (await m.ok("member", "compute", "GET", f"/v2.1/servers/{ids['server_id']}/os-interface")
                      )["interfaceAttachments"][0]["port_id"]
    await _fresh_server_tag(m)
    ids["key"], ids["tag"] = "owner", "matrix-tag"
    actions = await m.ok("member", "compute", "GET", f"/v2.1/servers/{ids['server_id']}/os-instance-actions")
    ids["request_id"] = actions["instanceActions"][0]["request_id"]
    flavor = await m.ok("admin", "compute", "POST", "/v2.1/flavors", {"flavor": {
        "name": "matrix-private", "ram": 64, "vcpus": 1, "disk": 1, "os-flavor-access:is_public": False}})
    ids["private_flavor_id"] = flavor["flavor"]["id"]
    ids["flavor_id"] = "42"
    await m.ok("admin", "compute", "POST", "/v2.1/flavors/42/os-extra_specs",
               {"extra_specs": {"hw:matrix": "1"}})
    hypervisor = (await m.ok("admin", "compute", "GET", "/v2.1/os-hypervisors"))["hypervisors"][0]
    ids["hypervisor_id"], ids["pattern"] = str(hypervisor["id"]), hypervisor["hypervisor_hostname"]
    compute = next(s for s in (await m.ok("admin", "compute", "GET", "/v2.1/os-services"))["services"]
                   if s["binary"] == "nova-compute")
    ids["compute_host"], ids["action"], ids["project_id"] = compute["host"], "enable", m.project_a
    ids["class_name"], ids["image_ref"] = "default", DEFAULT_IMAGE_ID
    ids["member_user_id"] = m.users["member"]
    ids.update(await _fresh_compute_image(m))
    # The network proxy APIs name the Networking API's resources of project A.
    for key in ("security_group_id", "security_group_rule_id", "floatingip_id", "external_network_id"):
        ids[key] = m.ids["network"][key]
    m.ids["network"]["compute_host"] = compute["host"]
    ids["aggregate_id"] = str((await m.ok("admin", "compute", "POST", "/v2.1/os-aggregates", {"aggregate": {
        "name": "matrix-aggregate"}}))["aggregate"]["id"])


async def _server(m: Matrix) -> str:
    return (await m.ok("member", "compute", "POST", "/v2.1/servers", {"server": {
        "name": m.unique("matrix-vm"), "imageRef": DEFAULT_IMAGE_ID, "flavorRef": "42",
        "networks": [{"uuid": m.ids["network"]["network_id"]}], "metadata": {"owner": "a"}}}))["server"]["id"]


async def _network_fixtures(m: Matrix) -> None:
    ids = m.ids["network"]
    ids["network_id"] = await _new_network(m)
    ids["subnet_id"] = (await m.ok("member", "network", "POST", "/v2.0/subnets", {"subnet": {
        "network_id": ids["network_id"], "cidr": "10.91.0.0/24", "ip_version": 4}}))["subnet"]["id"]
    ids["alias"], ids["project_id"] = "security-group", m.project_a
    # A shared network project A owns: other projects may put guest ports on it, nothing else.
    ids["shared_network_id"] = (await m.ok("admin", "network", "POST", "/v2.0/networks", {"network": {
        "name": m.unique("matrix-shared"), "shared": True, "project_id": m.project_a}}))["network"]["id"]
    await m.ok("admin", "network", "POST", "/v2.0/subnets", {"subnet": {
        "network_id": ids["shared_network_id"], "cidr": "10.93.0.0/24", "ip_version": 4}})
    ids.update(await _fresh_port(m))
    ids.update(await _fresh_security_group(m))
    ids.update(await _fresh_security_group_rule(m))
    # Routers and floating IPs: an external network (the admin's, the default one of auto-allocated
    # topologies), project A's router and floating IP.
    ids["external_network_id"] = (await m.ok("admin", "network", "POST", "/v2.0/networks", {"network": {
        "name": m.unique("matrix-public"), "router:external": True, "is_default": True}}))["network"]["id"]
    await m.ok("admin", "network", "POST", "/v2.0/subnets", {"subnet": {
        "network_id": ids["external_network_id"], "cidr": "172.29.4.0/24", "ip_version": 4, "enable_dhcp": False}})
    ids.update(await _fresh_router(m))
    ids.update(await _fresh_floatingip(m))


async def _no_l3_limits(m) -> None:
    """Each fresh router or floating IP is one more of project A's (its quota DELETE case resets them)."""
    await m.ok("admin", "network", "PUT", f"/v2.0/quotas/{m.project_a}", {"quota": {"router": -1, "floatingip": -1}})


async def _fresh_router(m):
    await _no_l3_limits(m)
    return {"router_id": (await m.ok("member", "network", "POST", "/v2.0/routers", {"router": {
        "name": m.unique("matrix-router"),
        "external_gateway_info": {"network_id": m.ids["network"]["external_network_id"]}}}))["router"]["id"]}


async def _fresh_router_subnet(m):
    """A new router of project A's and a new subnet of A's for it."""
    subnet = (await _fresh_subnet(m))["subnet_id"]
    return {**await _fresh_router(m), "subnet_id": subnet}


async def _fresh_router_interface(m):
    """A new router of project A's with an interface on a new subnet of A's."""
    ids = await _fresh_router_subnet(m)
    await m.ok("member", "network", "PUT", f"/v2.0/routers/{ids['router_id']}/add_router_interface",
               {"subnet_id": ids["subnet_id"]})
    return ids


async def _fresh_floatingip(m):
    await _no_l3_limits(m)
    return {"floatingip_id": (await m.ok("member", "network", "POST", "/v2.0/floatingips", {"floatingip": {
        "floating_network_id": m.ids["network"]["external_network_id"]}}))["floatingip"]["id"]}


async def _new_network(m: Matrix) -> str:
    return (await m.ok("member", "network", "POST", "/v2.0/networks", {"network": {
        "name": m.unique("matrix-net")}}))["network"]["id"]


async def _image_fixtures(m: Matrix) -> None:
    m.ids["image"]["image_id"] = await _new_image(m)
    m.ids["image"]["tag"] = "matrix-tag"
    await m.ok("member", "image", "PUT", f"/v2/images/{m.ids['image']['image_id']}/tags/matrix-tag")
    await m.ok("member", "image", "PUT", f"/v2/images/{m.ids['image']['image_id']}/file", content="0" * 512,
               headers={"Content-Type": "application/octet-stream"})


async def _new_image(m: Matrix) -> str:
    return (await m.ok("member", "image", "POST", "/v2/images", {
        "name": m.unique("matrix-image"), "disk_format": "raw", "container_format": "bare",
        "visibility": "private"}))["id"]


async def _identity_fixtures(m: Matrix) -> None:
    ids = m.ids["identity"]
    ids["domain_id"] = (await m.ok("admin", "identity", "POST", "/v3/domains", {"domain": {
        "name": "matrix-domain"}}))["domain"]["id"]
    ids["project_id"], ids["user_id"] = m.project_a, m.users["member"]
    ids["role_id"], ids["member_role_id"] = m.roles["reader"], m.roles["member"]
    ids["spare_id"], ids["member_password"] = m.users["spare"], m.member_password
    ids["target_id"] = m.project_a
    services = (await m.ok("admin", "identity", "GET", "/v3/services"))["services"]
    ids["service_id"] = services[0]["id"]
    ids["endpoint_id"] = (await m.ok("admin", "identity", "GET", "/v3/endpoints"))["endpoints"][0]["id"]
    ids["region_id"] = (await m.ok("admin", "identity", "GET", "/v3/regions"))["regions"][0]["id"]


# Fresh resources, one per persona's request: each returns the values it adds to the path parameters
# (and "headers" to send).

async def _fresh_server(m):
    server_id = await _server(m)
    await _wait_active(m, server_id)
    return {"server_id": server_id}


async def _fresh_metadata_key(m):
    await m.ok("member", "compute", "PUT", f"/v2.1/servers/{m.ids['compute']['server_id']}/metadata/gone",
               {"meta": {"gone": "1"}})
    return {"key": "gone"}


async def _fresh_server_tag(m):
    await m.ok("member", "compute", "PUT", f"/v2.1/servers/{m.ids['compute']['server_id']}/tags/matrix-tag",
               headers={"OpenStack-API-Version": "compute 2.26"})
    return {}


async def _fresh_interface(m):
    attached = await m.ok("member", "compute", "POST", f"/v2.1/servers/{m.ids['compute']['server_id']}/os-interface",
                          {"interfaceAttachment": {"net_id": m.ids["network"]["network_id"]}})
    return {"port_id": attached["interfaceAttachment"]["port_id"]}


async def _fresh_flavor(m):
    return {"flavor_id": (await m.ok("admin", "compute", "POST", "/v2.1/flavors", {"flavor": {
        "name": m.unique("matrix-flavor"), "ram": 64, "vcpus": 1, "disk": 1}}))["flavor"]["id"]}


async def _fresh_extra_spec(m):
    await m.ok("admin", "compute", "POST", "/v2.1/flavors/42/os-extra_specs",
               {"extra_specs": {"hw:gone": "1"}})
    return {"key": "hw:gone"}


async def _fresh_keypair(m):
    return {"name": (await m.ok("member", "compute", "POST", "/v2.1/os-keypairs", {"keypair": {
        "name": m.unique("matrix-key")}}))["keypair"]["name"]}


async def _fresh_server_group(m):
    return {"group_id": (await m.ok("member", "compute", "POST", "/v2.1/os-server-groups", {"server_group": {
        "name": m.unique("matrix-group"), "policies": ["affinity"]}}))["server_group"]["id"]}


async def _fresh_compute_service(m):
    """A stopped scheduler's service record: deleting it leaves the running cloud alone."""
    async with m.rt.db.transaction() as s:
        result = await s.execute(insert(ServiceRow).values(
            uuid=str(uuid.uuid4()), host=m.unique("matrix-gone-host"), binary="nova-scheduler",
            topic="scheduler", report_count=0))
    return {"service_id": str(result.inserted_primary_key[0])}


async def _fresh_aggregate(m):
    return {"aggregate_id": str((await m.ok("admin", "compute", "POST", "/v2.1/os-aggregates", {"aggregate": {
        "name": m.unique("matrix-aggregate")}}))["aggregate"]["id"])}


async def _fresh_aggregate_host(m):
    """A new aggregate holding the compute host (no zone: nothing moves when the host leaves)."""
    made = await _fresh_aggregate(m)
    await m.ok("admin", "compute", "POST", f"/v2.1/os-aggregates/{made['aggregate_id']}/action",
               {"add_host": {"host": m.ids["compute"]["compute_host"]}})
    return made


async def _fresh_network(m):
    return {"network_id": await _new_network(m)}


async def _fresh_subnet(m):
    return {"subnet_id": (await m.ok("member", "network", "POST", "/v2.0/subnets", {"subnet": {
        "network_id": await _new_network(m), "cidr": "10.92.0.0/24", "ip_version": 4}}))["subnet"]["id"]}


async def _fresh_port(m):
    return {"port_id": (await m.ok("member", "network", "POST", "/v2.0/ports", {"port": {
        "network_id": m.ids["network"]["network_id"]}}))["port"]["id"]}


async def _fresh_security_group(m):
    return {"security_group_id": (await m.ok("member", "network", "POST", "/v2.0/security-groups", {
        "security_group": {"name": m.unique("matrix-sg")}}))["security_group"]["id"]}


async def _fresh_security_group_rule(m):
    rule = await m.ok("member", "network", "POST", "/v2.0/security-group-rules", {"security_group_rule": {
        "security_group_id": m.ids["network"]["security_group_id"], "direction": "ingress",
        "protocol": "tcp", "port_range_min": 1000 + m.seq, "port_range_max": 1000 + m.seq}})
    m.seq += 1
    return {"security_group_rule_id": rule["security_group_rule"]["id"]}


async def _fresh_image(m):
    return {"image_id": await _new_image(m)}


async def _fresh_compute_image(m):
    """A new private image of project A's with the property ``matrix_key`` (the image proxy's
    metadata), for the Compute API's ``/v2.1/images`` routes."""
    image = await m.ok("member", "image", "POST", "/v2/images", {
        "name": m.unique("matrix-image"), "disk_format": "raw", "container_format": "bare",
        "visibility": "private", "matrix_key": "1"})
    return {"image_id": image["id"], "image_key": "matrix_key"}


async def _fresh_image_tag(m):
    await m.ok("member", "image", "PUT", f"/v2/images/{m.ids['image']['image_id']}/tags/matrix-tag")
    return {}


async def _fresh_domain(m):
    return {"domain_id": (await m.ok("admin", "identity", "POST", "/v3/domains", {"domain": {
        "name": m.unique("matrix-domain"), "enabled": False}}))["domain"]["id"]}


async def _fresh_project(m):
    return {"project_id": (await m.ok("admin", "identity", "POST", "/v3/projects", {"project": {
        "name": m.unique("matrix-project"), "domain_id": "default"}}))["project"]["id"]}


async def _fresh_user(m):
    return {"user_id": (await m.ok("admin", "identity", "POST", "/v3/users", {"user": {
        "name": m.unique("matrix-user"), "domain_id": "default"}}))["user"]["id"]}


async def _fresh_role(m):
    return {"role_id": (await m.ok("admin", "identity", "POST", "/v3/roles", {"role": {
        "name": m.unique("matrix-role")}}))["role"]["id"]}


async def _fresh_grant(m):
    """The spare user is a reader of project A and of the matrix domain."""
    spare, reader = m.users["spare"], m.roles["reader"]
    await m.ok("admin", "identity", "PUT", f"/v3/projects/{m.project_a}/users/{spare}/roles/{reader}")
    await m.ok("admin", "identity", "PUT",
               f"/v3/domains/{m.ids['identity']['domain_id']}/users/{spare}/roles/{reader}")
    return {"user_id": spare}


async def _fresh_member_token(m):
    """Another token of project A's member, as the subject of a validate or revoke."""
    return {"headers": {"X-Subject-Token": await m.login("matrix-member", m.member_password, "matrix-a")}}


FRESH = {
    "server": _fresh_server, "metadata_key": _fresh_metadata_key, "server_tag": _fresh_server_tag,
    "interface": _fresh_interface,
    "flavor": _fresh_flavor, "extra_spec": _fresh_extra_spec, "keypair": _fresh_keypair,
    "server_group": _fresh_server_group, "compute_service": _fresh_compute_service,
    "aggregate": _fresh_aggregate, "aggregate_host": _fresh_aggregate_host,
    "network": _fresh_network, "subnet": _fresh_subnet, "port": _fresh_port,
    "security_group": _fresh_security_group, "security_group_rule": _fresh_security_group_rule,
    "router": _fresh_router, "router_subnet": _fresh_router_subnet, "router_interface": _fresh_router_interface,
    "floatingip": _fresh_floatingip,
    "image": _fresh_image, "image_tag": _fresh_image_tag, "compute_image": _fresh_compute_image, "domain": _fresh_domain, "project": _fresh_project,
    "user": _fresh_user, "role": _fresh_role, "grant": _fresh_grant, "member_token": _fresh_member_token,
}


def _fill(value, values: dict):
    """``value`` with every ``{name}`` in its strings replaced from ``values``."""
    if isinstance(value, str):
        return value.format_map(values)
    if isinstance(value, dict):
        return {_fill(k, values): _fill(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, values) for v in value]
    return value


# Callers outside project A, and the ids of A's own resources they must never be shown.
OUTSIDERS = ("other", "service")
PRIVATE_IDS = {
    "compute": ("server_id", "group_id", "image_id"), "image": ("image_id",),
    "network": ("network_id", "subnet_id", "port_id", "security_group_id", "security_group_rule_id"),
}


async def _run_case(m: Matrix, api: str, case: dict, persona: str) -> tuple[int, str]:
    """(status, the start of the body); an answer that shows an outsider one of project A's resources,
    beyond ids the request itself named, is a failure too."""
    values = dict(m.ids[api])
    headers = dict(case.get("headers") or {})
    if case.get("fresh"):
        made = await FRESH[case["fresh"]](m)
        headers.update(made.pop("headers", {}))
        values.update(made)
    values.update(_fill(case.get("params") or {}, values))
    method, template = case["route"].split(" ", 1)
    path, body = template.format_map(values), _fill(case.get("body"), values)
    r = await m.call(persona, api, method, path, body=body, query=_fill(case.get("query"), values),
                     headers=_fill(headers, values), content=case.get("content"))
    if persona in OUTSIDERS and r.status_code < 300:
        asked = path + json.dumps(body)
        private = {values[k] for k in PRIVATE_IDS.get(api, ()) if k in values} | m.private_ids
        shown = {i for i in private if i in r.text and i not in asked}
        assert not shown, f"{method} {path} shows {persona} project A's {shown}: {r.text[:300]}"
    return r.status_code, r.text[:300]


async def test_policy_matrix(tmp_path):
    # The APIs are served on ports too (the network service sends its events to the Compute API over
    # HTTP); the matrix's own requests go over ASGI.
    ports = {f"{api}_api_port": free_port() for api in ("compute", "network", "image", "identity")}
    # Room for the fresh resources each persona's request gets.
    quotas = {"quota_instances": 100, "quota_cores": 200, "quota_ram": 1 << 20, "quota_server_groups": 50,
              "quota_security_groups": 100, "quota_security_group_rules": 500}
    # A cheaper scrypt cost (2^12) for the dozen logins; what is checked does not depend on it.
    cfg = load_config(state_dir=tmp_path, auth_strategy="keystone", password_hash_rounds=12,
                      **ports, **quotas)
    rt = await Runtime.open(cfg, migrate=True)
    components, apps = components_by_api(rt)
    cloud = Cloud(rt, components)
    await cloud.start()
    m = Matrix(rt, apps)
    try:
        identity = next(c for c in components if c.name == "identity")
        await _tenancy(m, identity.credentials)
        await _network_fixtures(m)
        await _compute_fixtures(m)
        await _image_fixtures(m)
        await _identity_fixtures(m)
        m.private_ids = {m.ids[api][k] for api, keys in PRIVATE_IDS.items() for k in keys}
        mismatches = []
        for api, cases in policy_matrix.load().items():
            for case in cases:
                for persona, expected in zip(PERSONAS, case["expect"]):
                    status, text = await _run_case(m, api, case, persona)
                    if status != expected:
                        mismatches.append(f"{api} {case['route']} {case.get('variant', '')} as {persona}: "
                                          f"{status}, expected {expected}: {text}")
        assert not mismatches, "\n".join(mismatches)
    finally:
        await m.close()
        await cloud.stop()
        await rt.close()
