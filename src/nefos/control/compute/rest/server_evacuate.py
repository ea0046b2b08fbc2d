"""``POST /v2.1/servers/{id}/action`` ``evacuate`` (Nova's evacuate controller; the work is in
``nefos.control.compute.evacuate``, the conductor's ``nefos.control.conductor.evacuate`` and the hosts'
``nefos.host.compute.evacuate``).

The body by microversion, as Nova's schemas: 2.1 ``host``, ``adminPass`` and ``onSharedStorage``
(required); 2.14 drops ``onSharedStorage``; 2.29 adds ``force`` (forcing needs a host); 2.68 drops
it again. The body is validated first (400), the server looked up (404), then the policy
(``os_compute_api:os-evacuate``, admin only); an ``adminPass`` with ``onSharedStorage`` true (below
2.14) is 400, an unknown target host 404, the server's own host 400, a wrong state 409, a source
host that is still up 400 (Nova's ``ComputeServiceInUse``). The answer is 200, with the
``adminPass`` below 2.14 (Nova with ``enable_instance_password``, its default) and no body from
2.14. From 2.95 the server ends stopped on its new host (Nova's ``target_state``).

The password (the one given, else below 2.14 a generated one that the answer shows) goes with the
evacuation to the destination, which gives it to the guest as a rebuild does (``admin_pass`` in
meta_data.json). Unlike Nova, no password nobody is shown is generated (from 2.14, or with
``enable_instance_password`` off): the guest then keeps the one it had.
"""

from __future__ import annotations

import copy

from fastapi import Request
from starlette.responses import JSONResponse, Response

from nefos import exceptions
from nefos.control.compute.rest.validation import BOOLEAN, HOSTNAME, bool_from_string, one_action_schema, validate
from nefos.model import states
from nefos.control.compute.authorization import authorize

ACTION = "evacuate"
SCHEMA = one_action_schema(ACTION, {"host": HOSTNAME, "onSharedStorage": BOOLEAN, "adminPass": {"type": "string"}},
                           ["onSharedStorage"])
SCHEMA_V214 = one_action_schema(ACTION, {"host": HOSTNAME, "adminPass": {"type": "string"}}, [])
SCHEMA_V229 = copy.deepcopy(SCHEMA_V214)
SCHEMA_V229["properties"][ACTION]["properties"]["force"] = BOOLEAN


def _schema(version) -> dict:
    if version.matches("2.68"):
        return SCHEMA_V214
    if version.matches("2.29"):
        return SCHEMA_V229
    return SCHEMA_V214 if version.matches("2.14") else SCHEMA


async def evacuate(request: Request, ctx, server_id: str, body: dict) -> Response:
    from nefos.control.compute.rest.servers import _generate_password
    version = request.state.api_version
    validate(body, _schema(version))
    args = body[ACTION]
    compute_api = request.app.state.compute_api
    instance = await compute_api.get(ctx, server_id)  # 404 first, as Nova
    authorize(ctx, "os_compute_api:os-evacuate",
              {"user_id": instance["user_id"], "project_id": instance["project_id"]})
    host = args.get("host")
    force: bool | None = None
    if version.matches("2.29"):
        force = bool_from_string(args.get("force", False), strict=True)
        if force and not host:
            raise exceptions.Invalid("Can't force to a non-provided destination")
    answered = not version.matches("2.14") and request.app.state.rt.cfg.enable_instance_password
    if version.matches("2.14"):
        password = args.get("adminPass")
    else:
        on_shared_storage = bool_from_string(args["onSharedStorage"], strict=True)
        if "adminPass" in args:
            if on_shared_storage:
                raise exceptions.Invalid("admin password can't be changed on existing disk")
            password = args["adminPass"]
        else:
            password = _generate_password() if answered and not on_shared_storage else None
    await compute_api.evacuate(ctx, server_id, host, force=force,
                               target_state=states.STOPPED if version.matches("2.95") else None,
                               admin_password=password or None)
    if answered:
        return JSONResponse({"adminPass": password}, status_code=200)
    return Response(status_code=200)


HANDLERS = {ACTION: evacuate}
