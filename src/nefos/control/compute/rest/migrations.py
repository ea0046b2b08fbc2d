"""``/v2.1/os-migrations`` (every resize and cold migration, newest first from 2.59) and
``/v2.1/servers/{id}/migrations[/{migration_id}]`` (2.23: a server's live migrations in progress),
as Nova's MigrationsController and ServerMigrationsController.

os-migrations filters on ``host`` (source or destination; else ``source_compute``), ``status``,
``instance_uuid``, ``migration_type``, ``hidden`` and, from 2.80, ``user_id`` and ``project_id``.
2.23 shows ``migration_type``; 2.59 shows ``uuid``, pages (``limit``, ``marker``: a migration's
uuid, ``migrations_links``) and takes ``changes-since``; 2.66 ``changes-before``; 2.80 shows
``user_id`` and ``project_id``. Listing another project's (or every project's) migrations needs
``index:all_projects``; without ``index:host`` the hosts are hidden and the filters naming a host
or node are ignored (as Nova ignores the server list's admin-only filters for others), so that
guessing names tells such a caller nothing about the hosts.

A live migration in progress is aborted with ``DELETE /servers/{id}/migrations/{id}`` (2.24; a
queued or preparing one too from 2.65) and completed at once with ``POST .../{id}/action``
``force_complete`` (2.22), as Nova's (``nefos.control.compute.live_migration``).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from nefos import exceptions, policy, rest
from nefos.control.compute.rest import common, response_schemas as responses
from nefos.control.compute.rest.validation import NON_NEGATIVE_INTEGER, bool_from_string, query_schema, validate, validate_query
from nefos.objects import migrations as migrations_obj
from nefos.openapi import documented
from nefos.control.compute.authorization import authorize

router = APIRouter()

_STRING = {"type": "string"}
_FILTERS = {name: _STRING for name in ("hidden", "host", "instance_uuid", "source_compute", "status",
                                       "migration_type")}
_V259 = {"limit": NON_NEGATIVE_INTEGER, "marker": _STRING, "changes-since": {"type": "string", "format": "date-time"}}
_V266 = {"changes-before": {"type": "string", "format": "date-time"}}
_V280 = {"user_id": _STRING, "project_id": _STRING}
LIST_QUERY = query_schema(_FILTERS, strict=False)
LIST_QUERY_V259 = query_schema({**_FILTERS, **_V259}, strict=True, single=tuple(_V259))
LIST_QUERY_V266 = query_schema({**_FILTERS, **_V259, **_V266}, strict=True, single=(*_V259, *_V266))
LIST_QUERY_V280 = query_schema({**_FILTERS, **_V259, **_V266, **_V280}, strict=True,
                               single=(*_V259, *_V266, *_V280))
_HOST_FIELDS = ("dest_compute", "dest_host", "dest_node", "source_compute", "source_node")
_HOST_FILTERS = ("host", "source_compute", "node")
_FIELDS = ("created_at", "updated_at", "id", "instance_uuid", "old_instance_type_id", "new_instance_type_id",
           "status", *_HOST_FIELDS)


def _list_query(version) -> dict:
    if version.matches("2.80"):
        return LIST_QUERY_V280
    if version.matches("2.66"):
        return LIST_QUERY_V266
    return LIST_QUERY_V259 if version.matches("2.59") else LIST_QUERY


def _view(request: Request, row: dict, *, show_hosts: bool) -> dict:
    version = request.state.api_version
    body = {key: row[key] for key in _FIELDS}
    body["created_at"], body["updated_at"] = common.iso_micro(row["created_at"]), common.iso_micro(row["updated_at"])
    if not show_hosts:
        body.update(dict.fromkeys(_HOST_FIELDS))
    if version.matches("2.23"):
        body["migration_type"] = row["migration_type"]
        if row["migration_type"] == "live-migration" and row["status"] in migrations_obj.LIVE_IN_PROGRESS:
            body["links"] = common.links(request, f"servers/{row['instance_uuid']}/migrations", row["id"])
    if version.matches("2.59"):
        body["uuid"] = row["uuid"]
    if version.matches("2.80"):
        body["user_id"], body["project_id"] = row["user_id"], row["project_id"]
    return body


def _filters(request: Request, version, *, by_host: bool) -> dict:
    """Every query parameter is a filter, as Nova passes ``req.GET`` down (its last value); those
    naming a host or node only when ``by_host``."""
    filters: dict = {key: request.query_params[key] for key in request.query_params.keys()}
    for key in ("changes-since", "changes-before", "limit", "marker", *(() if by_host else _HOST_FILTERS)):
        filters.pop(key, None)
    since, before = common.changes_window(request, before=version.matches("2.66")) \
        if version.matches("2.59") else (None, None)
    filters["changes-since"], filters["changes-before"] = since, before
    if "hidden" in filters:
        filters["hidden"] = bool_from_string(filters["hidden"])
    return filters


@router.get("/v2.1/os-migrations")
@documented(query=LIST_QUERY_V280, responses={200: responses.MIGRATIONS})
async def list_migrations(request: Request):
    version = request.state.api_version
    validate_query(request.query_params, _list_query(version))
    ctx = rest.get_context(request)
    authorize(ctx, "os_compute_api:os-migrations:index")
    project_id = request.query_params.get("project_id")
    if not project_id or project_id != ctx.project_id:
        authorize(ctx, "os_compute_api:os-migrations:index:all_projects")
    show_hosts = policy.check(ctx, "os_compute_api:os-migrations:index:host")
    filters = _filters(request, version, by_host=show_hosts)
    db = request.app.state.rt.db
    if version.matches("2.59"):
        limit, marker = common.limit_and_marker(request)
        rows = await migrations_obj.list_migrations(db, filters, paged=True, limit=limit, marker=marker)
    else:
        rows = await migrations_obj.list_migrations(db, filters)
    body: dict = {"migrations": [_view(request, r, show_hosts=show_hosts) for r in rows if not r["hidden"]]}
    if version.matches("2.59") and (links := common.collection_links(request, body["migrations"],
                                                                      "os-migrations", "uuid")):
        body["migrations_links"] = links
    return body


def _server_migration_view(request: Request, row: dict, *, show_hosts: bool = True) -> dict:
    version = request.state.api_version
    body = {"created_at": common.iso_micro(row["created_at"]), "updated_at": common.iso_micro(row["updated_at"]),
            "id": row["id"], "server_uuid": row["instance_uuid"], "status": row["status"],
            **{f"{kind}_{what}_bytes": row[f"{kind}_{what}"] for kind in ("memory", "disk")
               for what in ("total", "processed", "remaining")},
            **{key: (row[key] if show_hosts else None) for key in _HOST_FIELDS}}
    if version.matches("2.59"):
        body["uuid"] = row["uuid"]
    if version.matches("2.80"):
        body["user_id"], body["project_id"] = row["user_id"], row["project_id"]
    return body


async def _server(request: Request, server_id: str, rule: str):
    if not request.state.api_version.matches("2.23"):
        raise exceptions.NotFound("The resource could not be found.")
    ctx = rest.get_context(request)
    instance = await request.app.state.compute_api.get(ctx, server_id)
    target = {"project_id": instance["project_id"]}
    authorize(ctx, rule, target)
    return ctx, instance, target


@router.get("/v2.1/servers/{server_id}/migrations")
@documented(responses={200: responses.SERVER_MIGRATIONS})
async def list_server_migrations(request: Request, server_id: str):
    ctx, instance, target = await _server(request, server_id, "os_compute_api:servers:migrations:index")
    show_hosts = policy.check(ctx, "os_compute_api:servers:migrations:index:host", target)
    rows = await migrations_obj.in_progress_live(request.app.state.rt.db, instance["uuid"])
    return {"migrations": [_server_migration_view(request, r, show_hosts=show_hosts) for r in rows]}


@router.get("/v2.1/servers/{server_id}/migrations/{migration_id}")
@documented(responses={200: responses.SERVER_MIGRATION})
async def show_server_migration(request: Request, server_id: str, migration_id: str):
    _ctx, instance, _target = await _server(request, server_id, "os_compute_api:servers:migrations:show")
    row = None
    if migration_id.isdigit() and int(migration_id) <= 2**31 - 1:
        row = await migrations_obj.get_by_id_and_instance(request.app.state.rt.db, int(migration_id),
                                                          instance["uuid"])
    if row is None:
        raise exceptions.NotFound(f"In-progress live migration {migration_id} is not found for server "
                                  f"{server_id}.")
    if row["migration_type"] != "live-migration":
        raise exceptions.NotFound(f"Migration {migration_id} for server {server_id} is not live-migration.")
    if row["status"] not in migrations_obj.LIVE_IN_PROGRESS:
        raise exceptions.NotFound(f"Live migration {migration_id} for server {server_id} is not in progress.")
    return {"migration": _server_migration_view(request, row)}


FORCE_COMPLETE_SCHEMA = {"type": "object", "properties": {"force_complete": {"type": "null"}},
                         "required": ["force_complete"], "additionalProperties": False}


@router.post("/v2.1/servers/{server_id}/migrations/{migration_id}/action")
@documented(request=FORCE_COMPLETE_SCHEMA, responses={202: responses.NO_BODY})
async def server_migration_action(request: Request, server_id: str, migration_id: str):
    if not request.state.api_version.matches("2.22"):
        raise exceptions.NotFound("The resource could not be found.")
    validate(await rest.json_body(request), FORCE_COMPLETE_SCHEMA)
    ctx = rest.get_context(request)
    compute_api = request.app.state.compute_api
    instance = await compute_api.get(ctx, server_id)
    authorize(ctx, "os_compute_api:servers:migrations:force_complete", {"project_id": instance["project_id"]})
    from nefos.control.compute import live_migration
    await live_migration.force_complete(compute_api, ctx, instance["uuid"], migration_id)
    return Response(status_code=202)


@router.delete("/v2.1/servers/{server_id}/migrations/{migration_id}")
@documented(responses={202: responses.NO_BODY})
async def delete_server_migration(request: Request, server_id: str, migration_id: str):
    version = request.state.api_version
    if not version.matches("2.24"):
        raise exceptions.NotFound("The resource could not be found.")
    ctx = rest.get_context(request)
    compute_api = request.app.state.compute_api
    instance = await compute_api.get(ctx, server_id)
    authorize(ctx, "os_compute_api:servers:migrations:delete", {"project_id": instance["project_id"]})
    from nefos.control.compute import live_migration
    await live_migration.abort(compute_api, ctx, instance["uuid"], migration_id, queued_too=version.matches("2.65"))
    return Response(status_code=202)
