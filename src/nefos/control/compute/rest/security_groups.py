"""``/v2.1/os-security-groups``, ``/v2.1/os-security-group-rules`` and
``GET /v2.1/servers/{id}/os-security-groups``: Nova's security group proxy APIs over the
Networking API (``nefos.control.compute.security_groups``), with the caller's own context.

As Nova: the group and rule APIs exist up to 2.35 (404 from 2.36); the server's list at every
microversion. Bodies are validated first, then the policy is checked (against the caller's own
project: what the caller may see is what the Networking API shows it), then ids (not a UUID:
400). Groups are listed sorted by (tenant_id, name); a rule naming another group shows that group's
name and project (a rule whose group the caller cannot see is left out), other rules their CIDR.
Creates answer 200, deletes 202.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from nefos import exceptions, rest
from nefos.control.compute.rest import common, microversion
from nefos.control.compute.rest import response_schemas as responses
from nefos.control.compute.rest.validation import NON_NEGATIVE_INTEGER, is_uuid_like, query_schema, validate, validate_query
from nefos.control.compute import security_groups as sg_api
from nefos.openapi import documented
from nefos.control.compute.authorization import authorize

router = APIRouter()

_TEXT = {"type": "string", "minLength": 0, "maxLength": 255}
GROUP_BODY = {"type": "object", "properties": {"security_group": {
    "type": "object", "properties": {"name": _TEXT, "description": _TEXT},
    "required": ["name", "description"]}}, "required": ["security_group"]}
RULE_BODY = {"type": "object", "properties": {"security_group_rule": {
    "type": "object", "properties": {
        "group_id": {"type": ["string", "null"], "format": "uuid"},
        "parent_group_id": {"type": "string", "format": "uuid"},
        "to_port": {}, "from_port": {}, "ip_protocol": {}, "cidr": {}},
    "required": ["parent_group_id"]}}, "required": ["security_group_rule"]}
LIST_QUERY = query_schema({"limit": NON_NEGATIVE_INTEGER, "offset": NON_NEGATIVE_INTEGER,
                           "all_tenants": {"type": "string"}}, strict=False)


def _authorize(request: Request, action: str):
    """Nova checks these against the caller's own project: the Networking API scopes the rest."""
    ctx = rest.get_context(request)
    authorize(ctx, f"os_compute_api:os-security-groups:{action}", {"project_id": ctx.project_id})
    return ctx


def _valid_id(value: str) -> str:
    if not is_uuid_like(value):
        raise exceptions.Invalid("Security group id should be uuid")
    return value


class _Formatter:
    """Nova's views, looking each rule's remote group up once per request."""

    def __init__(self, network_api, ctx, known: list[dict] = ()):
        self.network_api, self.ctx = network_api, ctx
        self.groups: dict[str, dict | None] = {g["id"]: _group_ref(g) for g in known}

    async def _source(self, group_id: str) -> dict | None:
        if group_id not in self.groups:
            try:
                self.groups[group_id] = _group_ref(await sg_api.get(self.network_api, self.ctx, group_id))
            except exceptions.SecurityGroupNotFound:
                self.groups[group_id] = None  # gone meanwhile, or not the caller's: the rule is left out
        return self.groups[group_id]

    async def rule(self, rule: dict, source: dict | None = None) -> dict | None:
        view = {"id": rule["id"], "parent_group_id": rule["parent_group_id"], "ip_protocol": rule["protocol"],
                "from_port": rule["from_port"], "to_port": rule["to_port"], "group": {}, "ip_range": {}}
        if source is not None:
            view["group"] = source
        elif rule["group_id"]:
            source = await self._source(rule["group_id"])
            if source is None:
                return None
            view["group"] = source
        else:
            view["ip_range"] = {"cidr": rule["cidr"]}
        return view

    async def group(self, group: dict) -> dict:
        rules = [await self.rule(r) for r in group["rules"]]
        return {"id": group["id"], "description": group["description"], "name": group["name"],
                "tenant_id": group["project_id"], "rules": [r for r in rules if r is not None]}


def _group_ref(group: dict) -> dict:
    return {"name": group.get("name"), "tenant_id": group.get("project_id")}


def _sorted(views: list[dict]) -> list[dict]:
    return sorted(views, key=lambda g: (g["tenant_id"] or "", g["name"] or ""))


def _network_api(request: Request):
    return request.app.state.compute_api.network_api


async def _group_or_404(request: Request, ctx, group_id: str) -> dict:
    group_id = _valid_id(group_id)
    return await sg_api.get(_network_api(request), ctx, group_id)


# Security groups ---------------------------------------------------------------------------------

@router.get("/v2.1/os-security-groups")
@documented(query=LIST_QUERY, responses={200: responses.SECURITY_GROUPS})
async def list_security_groups(request: Request):
    microversion.require_at_most(request, microversion.MAX_PROXY_VERSION)
    validate_query(request.query_params, LIST_QUERY)
    ctx = _authorize(request, "get")
    network_api = _network_api(request)
    groups = await sg_api.list_groups(network_api, ctx, ctx.project_id,
                                      all_tenants="all_tenants" in request.query_params)
    fmt = _Formatter(network_api, ctx, groups)
    return {"security_groups": _sorted([await fmt.group(g) for g in common.limited(request, groups)])}


@router.get("/v2.1/os-security-groups/{group_id}")
@documented(responses={200: responses.SECURITY_GROUP})
async def show_security_group(request: Request, group_id: str):
    microversion.require_at_most(request, microversion.MAX_PROXY_VERSION)
    ctx = _authorize(request, "show")
    group = await _group_or_404(request, ctx, group_id)
    return {"security_group": await _Formatter(_network_api(request), ctx, [group]).group(group)}


@router.post("/v2.1/os-security-groups")
@documented(request=GROUP_BODY, responses={200: responses.SECURITY_GROUP})
async def create_security_group(request: Request):
    microversion.require_at_most(request, microversion.MAX_PROXY_VERSION)
    body = await rest.json_body(request)
    validate(body, GROUP_BODY)
    ctx = _authorize(request, "create")
    spec = body["security_group"]
    group = await sg_api.create(_network_api(request), ctx, spec["name"], spec["description"])
    return {"security_group": await _Formatter(_network_api(request), ctx, [group]).group(group)}


@router.put("/v2.1/os-security-groups/{group_id}")
@documented(request=GROUP_BODY, responses={200: responses.SECURITY_GROUP})
async def update_security_group(request: Request, group_id: str):
    microversion.require_at_most(request, microversion.MAX_PROXY_VERSION)
    body = await rest.json_body(request)
    validate(body, GROUP_BODY)
    ctx = _authorize(request, "update")
    group = await _group_or_404(request, ctx, group_id)
    spec = body["security_group"]
    group = await sg_api.update(_network_api(request), ctx, group, spec["name"], spec["description"])
    return {"security_group": await _Formatter(_network_api(request), ctx, [group]).group(group)}


@router.delete("/v2.1/os-security-groups/{group_id}")
@documented(responses={202: responses.NO_BODY})
async def delete_security_group(request: Request, group_id: str):
    microversion.require_at_most(request, microversion.MAX_PROXY_VERSION)
    ctx = _authorize(request, "delete")
    group = await _group_or_404(request, ctx, group_id)
    await sg_api.destroy(_network_api(request), ctx, group)
    return Response(status_code=202)


# Security group rules ------------------------------------------------------------------------------

@router.post("/v2.1/os-security-group-rules")
@documented(request=RULE_BODY, responses={200: responses.SECURITY_GROUP_RULE})
async def create_security_group_rule(request: Request):
    microversion.require_at_most(request, microversion.MAX_PROXY_VERSION)
    body = await rest.json_body(request)
    validate(body, RULE_BODY)
    ctx = _authorize(request, "rule:create")
    network_api = _network_api(request)
    spec = body["security_group_rule"]
    group_id = spec.get("group_id")
    group = await sg_api.get(network_api, ctx, spec["parent_group_id"])
    source = await sg_api.get(network_api, ctx, group_id) if group_id is not None else None
    if group_id is not None:
        new_rule = sg_api.new_ingress_rule(spec.get("ip_protocol"), spec.get("from_port"), spec.get("to_port"),
                                           group_id=group_id)
    else:
        new_rule = sg_api.new_ingress_rule(spec.get("ip_protocol"), spec.get("from_port"), spec.get("to_port"),
                                           cidr=sg_api.parse_cidr(spec.get("cidr")))
    if new_rule is None:
        raise exceptions.Invalid("Not enough parameters to build a valid rule.")
    new_rule["parent_group_id"] = group["id"]
    if "cidr" in new_rule:
        net, _, prefix = new_rule["cidr"].partition("/")
        if net not in ("0.0.0.0", "::") and prefix == "0":
            raise exceptions.Invalid(f"Bad prefix for network in cidr {new_rule['cidr']}")
    rule = await sg_api.create_rule(network_api, ctx, group, new_rule)
    view = await _Formatter(network_api, ctx).rule(rule, _group_ref(source) if source else None)
    return {"security_group_rule": view}


@router.delete("/v2.1/os-security-group-rules/{rule_id}")
@documented(responses={202: responses.NO_BODY})
async def delete_security_group_rule(request: Request, rule_id: str):
    microversion.require_at_most(request, microversion.MAX_PROXY_VERSION)
    ctx = _authorize(request, "rule:delete")
    rule_id = _valid_id(rule_id)
    network_api = _network_api(request)
    rule = await sg_api.get_rule(network_api, ctx, rule_id)
    await sg_api.get(network_api, ctx, rule["parent_group_id"])
    await sg_api.remove_rule(network_api, ctx, rule["id"])
    return Response(status_code=202)


# A server's security groups (every microversion) --------------------------------------------------

@router.get("/v2.1/servers/{server_id}/os-security-groups")
@documented(responses={200: responses.SECURITY_GROUPS})
async def list_server_security_groups(request: Request, server_id: str):
    ctx = rest.get_context(request)
    instance = await request.app.state.compute_api.get(ctx, server_id)  # 404 first, as Nova
    authorize(rest.get_context(request), "os_compute_api:os-security-groups:list",
              {"project_id": instance["project_id"]})
    network_api = _network_api(request)
    groups = await sg_api.instance_groups(network_api, ctx, instance["uuid"])
    fmt = _Formatter(network_api, ctx, groups)
    return {"security_groups": _sorted([await fmt.group(g) for g in groups])}
