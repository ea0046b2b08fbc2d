"""``/v2.1/limits``: the project's absolute limits and usage (no rate limits, as in Nova).

2.36 drops the network limits (floating IPs, security groups and their rules),
2.39 ``maxImageMeta``, 2.57 the personality (injected file) limits; 2.75
refuses query parameters other than ``tenant_id``.
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from nefos import rest
from nefos.control.compute.rest.validation import query_schema, validate_query
from nefos.control.compute import quota_sets as qs_mod
from nefos.control.compute.rest import response_schemas as responses
from nefos.openapi import documented
from nefos.control.compute.authorization import authorize

router = APIRouter()

# Quota resource -> the absolute limit names it feeds, and the usage name.
_LIMIT_NAMES = {
    "ram": ["maxTotalRAMSize"],
    "instances": ["maxTotalInstances"],
    "cores": ["maxTotalCores"],
    "key_pairs": ["maxTotalKeypairs"],
    "floating_ips": ["maxTotalFloatingIps"],
    "metadata_items": ["maxServerMeta", "maxImageMeta"],
    "injected_files": ["maxPersonality"],
    "injected_file_content_bytes": ["maxPersonalitySize"],
    "security_groups": ["maxSecurityGroups"],
    "security_group_rules": ["maxSecurityGroupRules"],
    "server_groups": ["maxServerGroups"],
    "server_group_members": ["maxServerGroupMembers"],
}
_USED_NAMES = {
    "instances": "totalInstancesUsed",
    "cores": "totalCoresUsed",
    "ram": "totalRAMUsed",
    "floating_ips": "totalFloatingIpsUsed",
    "security_groups": "totalSecurityGroupsUsed",
    "server_groups": "totalServerGroupsUsed",
}


def absolute_limits(version, limits: dict[str, int], used: dict[str, int]) -> dict[str, int]:
    hidden: set[str] = set()
    if version.matches("2.36"):
        hidden |= {"floating_ips", "security_groups", "security_group_rules"}
    if version.matches("2.57"):
        hidden |= {"injected_files", "injected_file_content_bytes"}
    absolute = {}
    for resource, names in _LIMIT_NAMES.items():
        if resource in hidden:
            continue
        for name in names:
            if name == "maxImageMeta" and version.matches("2.39"):
                continue
            absolute[name] = limits[resource]
    for resource, name in _USED_NAMES.items():
        if resource not in hidden:
            absolute[name] = used.get(resource, 0)
    return absolute


_QUERY = query_schema({"tenant_id": {"type": "string"}}, strict=False)
_QUERY_V275 = query_schema({"tenant_id": {"type": "string"}}, strict=True)


@router.get("/v2.1/limits")
@documented(query=_QUERY, responses={200: responses.LIMITS})
async def show_limits(request: Request):
    validate_query(request.query_params, _QUERY_V275 if request.state.api_version.matches("2.75") else _QUERY)
    ctx = rest.get_context(request)
    authorize(ctx, "os_compute_api:limits")
    project_id = ctx.project_id
    requested = request.query_params.get("tenant_id")
    if requested and requested != project_id:
        authorize(ctx, "os_compute_api:limits:other_project", {"project_id": requested})
        project_id = requested
    rt = request.app.state.rt
    limits = await qs_mod.get_limits(rt.db, rt.cfg, project_id)
    used = await qs_mod.get_usages(rt.db, project_id)
    # Nova's totalFloatingIpsUsed/totalSecurityGroupsUsed come from nova-network: always 0 with Neutron.
    used = {**used, "floating_ips": 0, "security_groups": 0}
    return {"limits": {"rate": [], "absolute": absolute_limits(request.state.api_version, limits, used)}}
