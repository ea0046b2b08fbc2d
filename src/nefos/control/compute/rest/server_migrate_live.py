"""``POST /v2.1/servers/{id}/action`` ``os-migrateLive`` (Nova's migrate_server controller; the work
is in ``nefos.control.compute.live_migration``).

The body by microversion, as Nova's schemas: 2.1 ``host``, ``block_migration`` and
``disk_over_commit`` (booleans, all three required); 2.25 ``block_migration`` may be ``auto`` and
``disk_over_commit`` is gone; 2.30 adds ``force`` (forcing needs a host); 2.68 removes it again.
404 for an unknown server (looked up before the policy check, as Nova); 409 for a locked server
or one that is not ACTIVE or PAUSED with no task; 400 for an unknown host and, before 2.34 (when
the conductor is called), for the source host, a host that is down, no valid host, or a
destination whose driver refuses; 202 otherwise.
"""

from __future__ import annotations

import copy

from fastapi import Request
from starlette.responses import Response

from nefos import exceptions
from nefos.control.compute.rest.validation import BOOLEAN, bool_from_string, one_action_schema, validate
from nefos.control.compute.authorization import authorize

_HOST = {"type": ["string", "null"], "minLength": 1, "maxLength": 255, "pattern": "^[a-zA-Z0-9-._]*$"}
SCHEMA = one_action_schema("os-migrateLive", {"block_migration": BOOLEAN, "disk_over_commit": BOOLEAN,
                                              "host": _HOST}, ["block_migration", "disk_over_commit", "host"])
SCHEMA_V225 = one_action_schema("os-migrateLive", {"block_migration": {**BOOLEAN, "enum": [*BOOLEAN["enum"], "auto"]},
                                                   "host": _HOST}, ["block_migration", "host"])
SCHEMA_V230 = copy.deepcopy(SCHEMA_V225)
SCHEMA_V230["properties"]["os-migrateLive"]["properties"]["force"] = BOOLEAN


def _schema(version) -> dict:
    if version.matches("2.68"):
        return SCHEMA_V225
    if version.matches("2.30"):
        return SCHEMA_V230
    return SCHEMA_V225 if version.matches("2.25") else SCHEMA


async def migrate_live(request: Request, ctx, server_id: str, body: dict) -> Response:
    version = request.state.api_version
    validate(body, _schema(version))
    args = body["os-migrateLive"]
    host = args.get("host")
    block_migration = args["block_migration"]
    block_migration = None if block_migration == "auto" else bool_from_string(block_migration, strict=True)
    if not version.matches("2.25"):
        bool_from_string(args["disk_over_commit"], strict=True)  # accepted, and unused (as Nova's libvirt)
    force: bool | None = None
    if version.matches("2.30"):
        force = bool_from_string(args.get("force", False), strict=True) if not version.matches("2.68") else False
        if force and not host:
            raise exceptions.Invalid("Can't force to a non-provided destination")
    compute_api = request.app.state.compute_api
    instance = await compute_api.get(ctx, server_id)  # 404 first, as Nova
    target = {"project_id": instance["project_id"]}
    authorize(ctx, "os_compute_api:os-migrate-server:migrate_live", target)
    if host:
        authorize(ctx, "os_compute_api:os-migrate-server:migrate_live:host", target)
    await compute_api.live_migrate(ctx, server_id, host or None, block_migration=block_migration, force=force,
                                   async_=version.matches("2.34"))
    return Response(status_code=202)


HANDLERS = {"os-migrateLive": migrate_live}
