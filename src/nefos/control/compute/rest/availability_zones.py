"""``/v2.1/os-availability-zone`` and ``/detail`` (admin: hosts and their services' states)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from nefos import rest
from nefos.control.compute.rest import common
from nefos.control.compute.rest.validation import refuse_query_from_2102
from nefos.control.compute import availability_zones as az_mod
from nefos.control.compute.rest import response_schemas as responses
from nefos.openapi import documented
from nefos.control.compute.authorization import authorize

router = APIRouter()


@router.get("/v2.1/os-availability-zone")
@documented(responses={200: responses.AVAILABILITY_ZONES})
async def list_zones(request: Request):
    refuse_query_from_2102(request)
    authorize(rest.get_context(request), "os_compute_api:os-availability-zone:list")
    rt = request.app.state.rt
    return {"availabilityZoneInfo": await az_mod.describe(rt.db, rt.cfg, detail=False)}


@router.get("/v2.1/os-availability-zone/detail")
@documented(responses={200: responses.AVAILABILITY_ZONES})
async def list_zones_detail(request: Request):
    refuse_query_from_2102(request)
    authorize(rest.get_context(request), "os_compute_api:os-availability-zone:detail")
    rt = request.app.state.rt
    zones = await az_mod.describe(rt.db, rt.cfg, detail=True)
    for zone in zones:
        for services in (zone["hosts"] or {}).values():
            for state in services.values():
                state["updated_at"] = common.iso_micro(state["updated_at"])
    return {"availabilityZoneInfo": zones}
