"""Helpers the Compute API resources share: links, timestamps, pagination, admin checks."""

from __future__ import annotations

import datetime as dt
from urllib.parse import urlencode

from fastapi import Request

from nefos import exceptions, rest
from nefos.control.compute.authorization import authorize

MAX_LIMIT = 1000  # Nova's [api] max_limit


def base_url(request: Request) -> str:
    """``http://host:port`` (no trailing slash, no version)."""
    return str(request.base_url).rstrip("/")


def links(request: Request, collection: str, ident) -> list[dict]:
    """Nova's ``self`` and ``bookmark`` links of one resource."""
    base = base_url(request)
    return [{"rel": "self", "href": f"{base}/v2.1/{collection}/{ident}"},
            {"rel": "bookmark", "href": f"{base}/{collection}/{ident}"}]


def iso_micro(value) -> str | None:
    """Nova's timestamp format outside servers: ``2013-11-14T06:29:00.000000``."""
    if value is None:
        return None
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    if value.tzinfo is not None:
        value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return value.strftime("%Y-%m-%dT%H:%M:%S.%f")


def parse_isotime(value: str, name: str) -> dt.datetime:
    """An ISO 8601 query value as naive UTC (400 naming parameter ``name`` otherwise)."""
    try:
        parsed = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise exceptions.ValidationError(f"Invalid filter field: {name}. '{value}' is not an ISO 8601 "
                                         "date-time") from None
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return parsed


def changes_window(request: Request, *, before: bool) -> tuple[dt.datetime | None, dt.datetime | None]:
    """The ``changes-since`` and (``before``: 2.66) ``changes-before`` bounds of a list; 400 when
    changes-before is earlier than changes-since, as Nova."""
    params = request.query_params
    since = parse_isotime(params["changes-since"], "changes-since") if "changes-since" in params else None
    until = (parse_isotime(params["changes-before"], "changes-before")
             if before and "changes-before" in params else None)
    if since is not None and until is not None and until < since:
        raise exceptions.ValidationError("The value of changes-since must be less than or equal to "
                                         "changes-before.")
    return since, until


async def authorized_instance(request: Request, ctx, server_id: str, rule: str) -> dict:
    """The server, once policy ``rule`` allows the caller on its project: a server the caller
    cannot see is 404 before any 403, as Nova."""
    instance = await request.app.state.compute_api.get(ctx, server_id)
    authorize(ctx, rule, {"project_id": instance["project_id"]})
    return instance


def limit_and_marker(request: Request) -> tuple[int, str | None]:
    """Nova's ``common.get_limit_and_marker``: (min(limit, max_limit), marker)."""
    params = request.query_params
    limit = MAX_LIMIT
    if "limit" in params:
        try:
            requested = rest.parse_int64(params["limit"])
        except ValueError:
            raise exceptions.ValidationError("limit param must be an integer")
        if requested < 0:
            raise exceptions.ValidationError("limit param must be positive")
        limit = min(limit, requested)
    return limit, params.get("marker")


def limited(request: Request, items: list) -> list:
    """Nova's ``common.limited``: ``offset`` and ``limit`` query parameters."""
    params = request.query_params
    offset = 0
    if "offset" in params:
        try:
            offset = int(params["offset"])
        except ValueError:
            raise exceptions.ValidationError("offset param must be an integer")
        if offset < 0:
            raise exceptions.ValidationError("offset param must be positive")
    limit, _ = limit_and_marker(request)
    return items[offset:offset + limit]


def collection_links(request: Request, items: list[dict], collection: str, id_key: str) -> list[dict]:
    """A ``next`` link when the page is full (Nova's ``_get_collection_links``)."""
    params = request.query_params
    try:
        max_items = min(int(params.get("limit", MAX_LIMIT)), MAX_LIMIT)
    except ValueError:
        max_items = MAX_LIMIT
    if not max_items or max_items != len(items):
        return []
    query = dict(sorted((k, v) for k, v in params.items() if k != "marker"))
    query["marker"] = items[-1][id_key]
    return [{"rel": "next", "href": f"{base_url(request)}/v2.1/{collection}?{urlencode(query)}"}]


def query_bool(request: Request, name: str, default: bool = False) -> bool:
    value = request.query_params.get(name)
    if value is None:
        return default
    from nefos.control.compute.rest.validation import bool_from_string
    return bool_from_string(value, default=default)
