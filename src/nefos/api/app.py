"""Builds the Compute API application."""

from __future__ import annotations

from fastapi import Request
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.responses import JSONResponse

from nefos import rest
from nefos.api import microversion

# Nova's error body keys by status (nova.api.openstack.wsgi.Fault).
_FAULT_NAMES = {
    400: "badRequest", 401: "unauthorized", 403: "forbidden", 404: "itemNotFound",
    405: "badMethod", 409: "conflictingRequest", 413: "overLimit", 415: "badMediaType",
    429: "overLimit", 501: "notImplemented", 503: "serviceUnavailable",
}


def nova_error_body(status: int, message: str, kind: str) -> dict:
    return {_FAULT_NAMES.get(status, "computeFault"): {"code": status, "message": message}}


class MicroversionMiddleware(BaseHTTPMiddleware):
    """Negotiate the microversion for /v2.1 requests and echo it in both headers."""

    async def dispatch(self, request: Request, call_next):
        path = request.url.path
        versioned = path.startswith("/v2.1") or path.startswith("/v2/")
        if not versioned:
            return await call_next(request)
        try:
            version = microversion.negotiate(request.headers)
        except Exception as exc:  # bad or unsupported version: answer here, before routing
            status = getattr(exc, "code", 400)
            response = JSONResponse(nova_error_body(status, str(exc), type(exc).__name__), status_code=status)
            self._vary(response)
            return response
        request.state.api_version = version
        response = await call_next(request)
        response.headers["openstack-api-version"] = f"compute {version}"
        response.headers["x-openstack-nova-api-version"] = str(version)
        self._vary(response)
        return response

    @staticmethod
    def _vary(response) -> None:
        response.headers["vary"] = "OpenStack-API-Version, X-OpenStack-Nova-API-Version"


def create_app(rt, compute_api):
    """The Compute API over ``rt`` (config, database, bus) and the compute API layer."""
    app = rest.make_app("Nefos Compute API", nova_error_body, inner_middleware=(MicroversionMiddleware,))
    app.state.rt = rt
    app.state.compute_api = compute_api
    from nefos.api import routes
    routes.include_all(app)
    return app
