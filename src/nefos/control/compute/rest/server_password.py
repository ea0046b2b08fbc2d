"""``/v2.1/servers/{id}/os-server-password``: the encrypted password the guest posted to the
metadata service (``GET``; "" when none) and clearing it (``DELETE``, 204). Clearing does not
change the guest's password, as in Nova."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from nefos import rest
from nefos.control.compute.rest import response_schemas as responses
from nefos.control.compute.rest.common import authorized_instance
from nefos.model import server_password
from nefos.objects import guest_passwords
from nefos.openapi import documented

router = APIRouter()


@router.get("/v2.1/servers/{server_id}/os-server-password")
@documented(responses={200: responses.SERVER_PASSWORD})
async def show_password(request: Request, server_id: str):
    instance = await authorized_instance(request, rest.get_context(request), server_id,
                                         "os_compute_api:os-server-password:show")
    return {"password": server_password.extract(instance)}


@router.delete("/v2.1/servers/{server_id}/os-server-password")
@documented(responses={204: responses.NO_BODY})
async def clear_password(request: Request, server_id: str):
    instance = await authorized_instance(request, rest.get_context(request), server_id,
                                         "os_compute_api:os-server-password:clear")
    await guest_passwords.store_server_password(request.app.state.rt.db, instance["uuid"], None)
    return Response(status_code=204)
