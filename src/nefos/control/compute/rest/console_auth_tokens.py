"""``GET /v2.1/os-console-auth-tokens/{console_token}`` (admin): what a console token grants.

As Nova's console_auth_tokens: below 2.31 a bare 400 (the API then served only RDP consoles,
removed with Hyper-V); from 2.31 the policy ``os_compute_api:os-console-auth-tokens`` (admin),
then the token: unknown or expired is 404 "Token not found". Unknown query parameters are
ignored, and refused from 2.99. From 2.99 a ``spice-direct`` token's answer has its ``tls_port``
too (null when the SPICE server has none), as Nova's; other tokens' answers do not.
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from nefos import exceptions, rest
from nefos.control.compute.rest import response_schemas as responses
from nefos.control.compute.rest.remote_consoles import BARE_BAD_REQUEST
from nefos.control.compute.rest.validation import query_schema, validate_query
from nefos.objects import console_auth_tokens
from nefos.openapi import documented
from nefos.control.compute.authorization import authorize

router = APIRouter()

_QUERY_V299 = query_schema({}, strict=True)


@router.get("/v2.1/os-console-auth-tokens/{console_token}")
@documented(responses={200: responses.CONSOLE_AUTH_TOKEN})
async def show_console_auth_token(request: Request, console_token: str):
    version = request.state.api_version
    if not version.matches("2.31"):
        raise exceptions.Invalid(BARE_BAD_REQUEST)
    if version.matches("2.99"):
        validate_query(request.query_params, _QUERY_V299)
    authorize(rest.get_context(request), "os_compute_api:os-console-auth-tokens")
    try:
        grant = await console_auth_tokens.validate(request.app.state.rt.db, console_token)
    except exceptions.InvalidToken:
        raise exceptions.NotFound("Token not found")
    console = {"instance_uuid": grant["instance_uuid"], "host": grant["host"], "port": grant["port"],
               "internal_access_path": grant["internal_access_path"]}
    if grant["console_type"] == "spice-direct" and version.matches("2.99"):
        console["tls_port"] = grant["tls_port"]
    return {"console": console}
