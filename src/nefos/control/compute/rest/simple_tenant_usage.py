"""``/v2.1/os-simple-tenant-usage``: the usage of every project (admin), or of one (its readers),
over a period, as Nova's SimpleTenantUsageController.

``start`` and ``end`` are naive UTC times in one of Nova's three formats (missing or empty: now);
``end`` later than now counts as now; ``start`` must come before ``end``. ``detailed=1`` adds each
server's usage to the list. From 2.40 the servers are paged (``limit``, ``marker``: a server's
uuid) with a ``next`` link; from 2.75 unknown query parameters are refused.
"""

from __future__ import annotations

import datetime as dt

from fastapi import APIRouter, Request

from nefos import exceptions, rest
from nefos.control.compute.rest import common, response_schemas as responses
from nefos.control.compute.rest.validation import NON_NEGATIVE_INTEGER, query_schema, validate_query
from nefos.control.compute import usage
from nefos.db.models import utcnow
from nefos.openapi import documented
from nefos.control.compute.authorization import authorize

router = APIRouter()

_STRING = {"type": "string"}
_SHOW = {"start": _STRING, "end": _STRING}
_INDEX = {**_SHOW, "detailed": _STRING}
_PAGING = {"limit": NON_NEGATIVE_INTEGER, "marker": _STRING}
INDEX_QUERY, INDEX_QUERY_V240, INDEX_QUERY_V275 = (query_schema(_INDEX, strict=False),
                                                   query_schema({**_INDEX, **_PAGING}, strict=False),
                                                   query_schema({**_INDEX, **_PAGING}, strict=True))
SHOW_QUERY, SHOW_QUERY_V240, SHOW_QUERY_V275 = (query_schema(_SHOW, strict=False),
                                                query_schema({**_SHOW, **_PAGING}, strict=False),
                                                query_schema({**_SHOW, **_PAGING}, strict=True))
_FORMATS = ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M:%S.%f", "%Y-%m-%d %H:%M:%S.%f")


def _query_schema(request: Request, schemas: tuple[dict, dict, dict]) -> dict:
    version = request.state.api_version
    return schemas[2] if version.matches("2.75") else schemas[1] if version.matches("2.40") else schemas[0]


def _first(request: Request, name: str) -> str | None:
    """The first non-empty value of ``name`` (Nova reads the query with ``parse_qs``)."""
    values = [v for v in request.query_params.getlist(name) if v]
    return values[0] if values else None


def _parse_time(value: str | None) -> dt.datetime:
    if not value:
        return utcnow()
    for fmt in _FORMATS:
        try:
            return dt.datetime.strptime(value, fmt)
        except ValueError:
            continue
    raise exceptions.ValidationError("Invalid datetime string: Datetime is in invalid format")


def _period(request: Request) -> tuple[dt.datetime, dt.datetime]:
    start, stop = _parse_time(_first(request, "start")), _parse_time(_first(request, "end"))
    if not start < stop:
        raise exceptions.ValidationError("Invalid start time. The start time cannot occur after the end time.")
    return start, min(stop, utcnow())


def _view(summary: dict) -> dict:
    body = dict(summary, start=common.iso_micro(summary["start"]), stop=common.iso_micro(summary["stop"]))
    if "server_usages" in body:
        body["server_usages"] = [_server_view(u) for u in body["server_usages"]]
    return body


def _server_view(info: dict) -> dict:
    return dict(info, started_at=common.iso_micro(info["started_at"]), ended_at=common.iso_micro(info["ended_at"]))


def _paging(request: Request) -> tuple[bool, int, str | None]:
    if request.state.api_version.matches("2.40"):
        return (True, *common.limit_and_marker(request))
    return False, common.MAX_LIMIT, None


@router.get("/v2.1/os-simple-tenant-usage")
@documented(query=INDEX_QUERY_V240, responses={200: responses.TENANT_USAGES})
async def list_usages(request: Request):
    validate_query(request.query_params, _query_schema(request, (INDEX_QUERY, INDEX_QUERY_V240, INDEX_QUERY_V275)))
    authorize(rest.get_context(request), "os_compute_api:os-simple-tenant-usage:list")
    start, stop = _period(request)
    detailed = _first(request, "detailed") == "1"
    links, limit, marker = _paging(request)
    summaries, server_usages = await usage.tenant_usages(request.app.state.rt.db, start, stop, detailed=detailed,
                                                         limit=limit, marker=marker)
    body: dict = {"tenant_usages": [_view(s) for s in summaries]}
    if links and (next_links := common.collection_links(request, server_usages, "os-simple-tenant-usage",
                                                        "instance_id")):
        body["tenant_usages_links"] = next_links
    return body


@router.get("/v2.1/os-simple-tenant-usage/{tenant_id}")
@documented(query=SHOW_QUERY_V240, responses={200: responses.TENANT_USAGE})
async def show_usage(request: Request, tenant_id: str):
    validate_query(request.query_params, _query_schema(request, (SHOW_QUERY, SHOW_QUERY_V240, SHOW_QUERY_V275)))
    authorize(rest.get_context(request), "os_compute_api:os-simple-tenant-usage:show", {"project_id": tenant_id})
    start, stop = _period(request)
    links, limit, marker = _paging(request)
    summaries, server_usages = await usage.tenant_usages(request.app.state.rt.db, start, stop, tenant_id=tenant_id,
                                                         detailed=True, limit=limit, marker=marker)
    body: dict = {"tenant_usage": _view(summaries[0]) if summaries else {}}
    if links and (next_links := common.collection_links(request, server_usages,
                                                        f"os-simple-tenant-usage/{tenant_id}", "instance_id")):
        body["tenant_usage_links"] = next_links
    return body


@router.get("/v2.1/os-simple-tenant-usage/", include_in_schema=False)
@documented(responses={})  # never a success
async def show_usage_without_tenant(request: Request):
    """An empty tenant id matches no route in Nova (404), where Starlette would redirect."""
    raise exceptions.NotFound("The resource could not be found.")
