"""The Identity API: a Keystone v3 subset, one router per resource (``versions``, ``auth`` for
tokens, ``domains``, ``projects``, ``users``, ``roles``, ``groups``, ``grants`` for role grants and
assignments, ``catalog_resources`` for services, endpoints and regions), on the HTTP helpers of ``http`` and
the row documents of ``documents``; the request bodies' and list filters' reading is in
``nefos.control.identity.request_input``.

Every route except the version documents and ``POST /v3/auth/tokens`` needs a
valid ``X-Auth-Token`` (checked here whatever ``auth_strategy`` says: the
identity service is the authority). Writes need the admin role; a user may
read themselves, their projects and their own token.
"""

from __future__ import annotations

from fastapi import Request
from starlette.responses import JSONResponse

from nefos import exceptions, openapi, rest
from nefos.clients.identity import catalog
from nefos.control.identity.rest import (
    auth, catalog_resources, domains, grants, groups, projects, roles, users, versions,
)

# In the order they are matched and documented.
ROUTERS = [versions, auth, domains, projects, users, roles, groups, grants, catalog_resources]

_TITLES = {
    400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
    405: "Method Not Allowed", 406: "Not Acceptable", 409: "Conflict", 413: "Request Entity Too Large",
    415: "Unsupported Media Type", 500: "Internal Server Error", 501: "Not Implemented",
    503: "Service Unavailable",
}


KEYSTONE_ERROR_SCHEMA = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["code", "message", "title"],
    "properties": {"code": {"type": "integer"}, "message": {"type": "string"}, "title": {"type": "string"}}}}}


def keystone_error_body(status: int, message: str, kind: str) -> dict:
    return {"error": {"code": status, "message": message, "title": _TITLES.get(status, "Error")}}


def create_app(rt):
    """The Identity API over ``rt`` (config, database)."""
    app = rest.make_app("Nefos Identity API", "identity", keystone_error_body)
    app.state.rt = rt

    @app.exception_handler(exceptions.Unauthorized)
    async def _unauthorized(request: Request, exc: exceptions.Unauthorized):
        return JSONResponse(keystone_error_body(401, str(exc), type(exc).__name__), status_code=401,
                            headers={"WWW-Authenticate": catalog.www_authenticate(rt.cfg)})

    for module in ROUTERS:
        app.include_router(module.router)
    openapi.serve(app, "/v3/openapi.json", title="Nefos Identity API", version="3.14",
                  error_schema=KEYSTONE_ERROR_SCHEMA)
    return app
