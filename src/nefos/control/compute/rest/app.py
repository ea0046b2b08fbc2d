"""Builds the Compute API application."""

from __future__ import annotations

from fastapi import Request
from starlette.datastructures import Headers
from starlette.responses import JSONResponse

from nefos import openapi, rest
from nefos.control.compute.rest import microversion

# Nova's error body keys by status (nova.api.openstack.wsgi.Fault).
_FAULT_NAMES = {
    400: "badRequest", 401: "unauthorized", 403: "forbidden", 404: "itemNotFound",
    405: "badMethod", 409: "conflictingRequest", 413: "overLimit", 415: "badMediaType",
    429: "overLimit", 501: "notImplemented", 503: "serviceUnavailable",
}


NOVA_ERROR_SCHEMA = {"type": "object", "minProperties": 1, "maxProperties": 1, "additionalProperties": {
    "type": "object", "required": ["code", "message"],
    "properties": {"code": {"type": "integer"}, "message": {"type": "string"}}}}


def nova_error_body(status: int, message: str, kind: str) -> dict:
    return {_FAULT_NAMES.get(status, "computeFault"): {"code": status, "message": message}}


# Sent with every /v2.1 response.
_VARY = "OpenStack-API-Version, X-OpenStack-Nova-API-Version"


class MicroversionMiddleware:
    """Negotiate the microversion for /v2.1 requests and echo it in both headers."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not (path.startswith("/v2.1") or path.startswith("/v2/")):
            await self.app(scope, receive, send)
            return
        try:
            version = microversion.negotiate(Headers(scope=scope))
        except Exception as exc:  # bad or unsupported version: answer here, before routing
            status = getattr(exc, "code", 400)
            response = JSONResponse(nova_error_body(status, str(exc), type(exc).__name__), status_code=status)
            await response(scope, receive, rest.send_with_headers(send, {"vary": _VARY}))
            return
        Request(scope).state.api_version = version
        await self.app(scope, receive, rest.send_with_headers(send, {
            "openstack-api-version": f"compute {version}", "x-openstack-nova-api-version": str(version),
            "vary": _VARY}))


def create_app(rt, compute_api):
    """The Compute API over ``rt`` (config, database, bus) and the compute API layer."""
    app = rest.make_app("Nefos Compute API", "compute", nova_error_body, inner_middleware=(MicroversionMiddleware,))
    app.state.rt = rt
    app.state.compute_api = compute_api
    # Nova's router does not redirect a path with a trailing slash to the one without: a path no
    # route has (``DELETE /v2.1/os-security-groups/``, an empty id) is 404, not a redirect to a route
    # that may not take that method.
    app.router.redirect_slashes = False
    from nefos.control.compute.rest import routes
    routes.include_all(app)
    openapi.serve(app, "/v2.1/openapi.json", title="Nefos Compute API", version="2.1",
                  error_schema=NOVA_ERROR_SCHEMA,
                  description="The OpenStack Compute API at its default microversion, 2.1.")
    return app
