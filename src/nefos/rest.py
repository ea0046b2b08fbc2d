"""HTTP plumbing every API service shares: request ids, the request context, JSON bodies.

Each API (compute, network, image, identity) is a FastAPI app built with
``make_app``; it gets the request-id middleware, the context, and a handler
turning ``nefos.exceptions`` into that API's own error body.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import JSONResponse, Response

from nefos import exceptions, logs, metrics, policy
from nefos.context import DEFAULT_USER_ID, RequestContext, current_context, is_request_id, new_request_id
from nefos.db.retry import transient_error
from nefos.clients.identity import catalog
from nefos.clients.identity.tokens import validate_token
from nefos.openapi import documented

LOG = logging.getLogger(__name__)

ErrorBody = Callable[[int, str, str], dict]  # (status, message, error type name) -> body


# Paths every API serves without a token: the healthcheck, version documents, OpenAPI documents,
# getting a token.
PUBLIC_PATHS = frozenset({"/healthcheck", "/", "/versions", "/v2", "/v2/", "/v2.1", "/v2.1/", "/v2.0", "/v2.0/",
                          "/v3", "/v3/", "/v2.1/openapi.json", "/v2.0/openapi.json", "/v2/openapi.json", "/v3/openapi.json"})


def is_public(method: str, path: str) -> bool:
    return path in PUBLIC_PATHS or (method == "POST" and path.rstrip("/") == "/v3/auth/tokens")


def send_with_headers(send, headers: dict[str, str]):
    """``send`` that sets ``headers`` on the response it starts (pure ASGI middlewares use it:
    Starlette's BaseHTTPMiddleware runs every request through an extra task and stream)."""
    async def wrapped(message) -> None:
        if message["type"] == "http.response.start":
            response_headers = MutableHeaders(scope=message)
            for name, value in headers.items():
                response_headers[name] = value
        await send(message)
    return wrapped


class RequestContextMiddleware:
    """Give every request a context and its id; return the id on every response.

    A request without a valid token (or, with ``auth_strategy`` "noauth", without
    X-Project-Id) gets 401 in the app's own error body (``error_body``).
    """

    def __init__(self, app, error_body: ErrorBody | None = None):
        self.app = app
        self.error_body = error_body or (lambda status, message, kind: {"error": {"code": status, "message": message}})

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        request_id = new_request_id()
        send = send_with_headers(send, {"x-openstack-request-id": request_id, "x-compute-request-id": request_id})
        # A caller's own global request id, in oslo.middleware's form only: anything else is
        # ignored, never logged nor passed on as given.
        global_id = request.headers.get("x-openstack-request-id")
        if not is_request_id(global_id):
            global_id = None
        rt = getattr(request.app.state, "rt", None)
        policy_token = None
        try:
            policy_token = policy.use(rt.cfg) if rt is not None else None
            ctx = await authenticated_context(request, request_id, global_id)
        except exceptions.NefosError as exc:  # 401; 503 when tokens or the policy file cannot be read
            response = JSONResponse(self.error_body(exc.code, str(exc), type(exc).__name__), status_code=exc.code)
            if rt is not None and exc.code == 401:
                response.headers["www-authenticate"] = catalog.www_authenticate(rt.cfg)
            if policy_token is not None:
                policy.restore(policy_token)
            request.state.access = {"request_id": request_id, "global_request_id": global_id}
            await response(scope, receive, send)
            return
        request.state.context = ctx
        request.state.access = {"request_id": ctx.request_id, "global_request_id": ctx.global_request_id,
                                "user_id": ctx.user_id, "project_id": ctx.project_id}
        token = current_context.set(ctx)
        try:
            await self.app(scope, receive, send)
        finally:
            current_context.reset(token)
            if policy_token is not None:
                policy.restore(policy_token)


class RequestLogMiddleware:
    """Every request of an API, refused ones included: counted and timed as ``service``'s
    (nefos.metrics) and written as an access line (nefos.logs) with the ids, user and project
    RequestContextMiddleware found for it (none for a request refused before it)."""

    def __init__(self, app, service: str):
        self.app = app
        self.service = service

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status, length = 500, 0  # what the server answers if the app raises before it starts a response

        async def recording(message) -> None:
            nonlocal status, length
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                length += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, recording)
        finally:
            seconds = time.perf_counter() - started
            metrics.observe_request(self.service, scope, status, seconds)
            # The path as the client sent it, undecoded: a %0A in it stays three characters in the log.
            path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
            if scope.get("query_string"):
                path += "?" + scope["query_string"].decode("latin-1")
            client = scope.get("client")
            logs.access(client[0] if client else "-", scope["method"], path, status, length, seconds,
                        **scope.get("state", {}).get("access", {}))


async def context_from_headers(request: Request, request_id: str, global_id: str | None) -> RequestContext:
    """The caller's context: from a valid X-Auth-Token, else (auth_strategy "noauth" only)
    from X-Project-Id / X-User-Id / X-Roles (Nova's noauth2: admin only when X-Roles says so).

    A missing or invalid token raises Unauthorized, except on public paths, where the caller
    is nobody in particular; so does a noauth request that names no project.
    """
    rt = getattr(request.app.state, "rt", None)
    noauth = rt is not None and rt.cfg.auth_strategy == "noauth"
    public = is_public(request.method, request.scope["path"])
    token = request.headers.get("x-auth-token")
    if token and rt is not None:
        try:
            ctx = await validate_token(rt, token, request_id=request_id, global_request_id=global_id)
            ctx.auth_token = token
            return ctx
        except exceptions.Unauthorized:
            # noauth clients send a placeholder token (keystoneauth's NoAuth sends "notused").
            if not public and not noauth:
                raise
    if noauth and request.headers.get("x-project-id"):
        roles = [r.strip().lower() for r in request.headers.get("x-roles", "member,reader").split(",") if r.strip()]
        return RequestContext(request_id=request_id, global_request_id=global_id,
                              project_id=request.headers["x-project-id"],
                              user_id=request.headers.get("x-user-id") or DEFAULT_USER_ID,
                              roles=roles, is_admin="admin" in roles)
    if not public:
        raise exceptions.Unauthorized("The request you have made requires authentication.")
    return RequestContext(request_id=request_id, global_request_id=global_id,
                          project_id=None, user_id=None, roles=[], is_admin=False)


async def authenticated_context(request: Request, request_id: str, global_id: str | None) -> RequestContext:
    """The caller's context as every request gets it (``context_from_headers``), with ``is_admin``
    decided by the rules in use ("context_is_admin", as Nova decides it). A long-lived response
    calls it again to re-check its caller the way the request was checked."""
    ctx = await context_from_headers(request, request_id, global_id)
    ctx.is_admin = policy.check_is_admin(ctx)
    return ctx


INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1


def parse_int64(value) -> int:
    """``int(value)`` for a number bound for a 64-bit database column or comparison: ValueError
    (which every caller answers with its 400) rather than an overflow deep in the driver."""
    number = int(value)
    if not INT64_MIN <= number <= INT64_MAX:
        raise ValueError(f"{value} does not fit in 64 bits")
    return number


def get_context(request: Request) -> RequestContext:
    return request.state.context


async def json_body(request: Request) -> Any:
    """The parsed JSON body; 400 (never 500) when it is missing or malformed."""
    raw = await request.body()
    if not raw:
        raise exceptions.ValidationError("The request body is missing or empty.")
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: absurdly deep nesting
        raise exceptions.ValidationError("Malformed request body: the body is not valid JSON.")


class BodySizeLimitMiddleware:
    """Refuse a request body over ``max_request_body_size`` (Nova's and Keystone's option, from
    oslo.middleware's sizelimit) with 413 before it is read whole: at once when Content-Length
    says so, else as soon as the bytes received pass the limit. It runs before authentication,
    so an unauthenticated caller cannot make a service buffer a huge body either. ``streams``
    names the requests whose bodies are streamed to disk under their own cap (image data)."""

    def __init__(self, app, error_body: ErrorBody, streams: Callable[[str, str], bool] | None = None):
        self.app = app
        self.error_body = error_body
        self.streams = streams or (lambda method, path: False)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or self.streams(scope["method"], scope["path"]):
            await self.app(scope, receive, send)
            return
        rt = getattr(scope["app"].state, "rt", None) if "app" in scope else None
        limit = rt.cfg.max_request_body_size if rt is not None else DEFAULT_MAX_BODY
        if limit <= 0:
            await self.app(scope, receive, send)
            return
        length = Headers(scope=scope).get("content-length", "")
        if length.strip().isdigit() and int(length) > limit:
            await self._refuse(scope, receive, send)
            return
        seen = 0

        async def bounded_receive():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise exceptions.RequestEntityTooLarge("Request is too large.")
            return message

        await self.app(scope, bounded_receive, send)

    async def _refuse(self, scope, receive, send) -> None:
        body = self.error_body(413, "Request is too large.", "RequestEntityTooLarge")
        response = JSONResponse(body, status_code=413, headers={"connection": "close"})
        await response(scope, receive, send)


DEFAULT_MAX_BODY = 114688


def make_app(title: str, service: str, error_body: ErrorBody, inner_middleware: tuple = (),
             streamed_bodies: Callable[[str, str], bool] | None = None) -> FastAPI:
    """An API app whose every response, including one a middleware in ``inner_middleware``
    answers by itself (e.g. a 406 for an unsupported microversion), carries the request ids.
    Request bodies are bounded by ``max_request_body_size`` except where ``streamed_bodies``
    (method, path) says the route streams its body under its own cap. Every request is counted
    and timed as ``service``'s (nefos.metrics); ``/healthcheck`` answers without a token."""
    app = FastAPI(title=title, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.error_body = error_body  # also the server's, for what it refuses before the app (http_server)
    for middleware in inner_middleware:  # added first: they run inside the request context
        app.add_middleware(middleware)
    app.add_middleware(RequestContextMiddleware, error_body=error_body)
    app.add_middleware(BodySizeLimitMiddleware, error_body=error_body, streams=streamed_bodies)
    app.add_middleware(RequestLogMiddleware, service=service)  # outermost: refusals count too

    @app.api_route("/healthcheck", methods=["GET", "HEAD"], include_in_schema=False)
    @documented(responses={200: None})  # text/plain "OK": no JSON body
    async def _healthcheck(request: Request) -> Response:
        rt = getattr(request.app.state, "rt", None)
        return metrics.healthcheck_response(request.method, rt.cfg.healthcheck_disable_by_file_path if rt else "")

    def respond(status: int, message: str, kind: str, headers=None) -> Response:
        if status == 204:
            return Response(status_code=204)
        return JSONResponse(error_body(status, message, kind), status_code=status, headers=headers)

    @app.exception_handler(exceptions.NefosError)
    async def _nefos_error(request: Request, exc: exceptions.NefosError):
        if exc.code >= 500:
            LOG.error("%s %s failed: %s", request.method, request.url.path, exc,
                      exc_info=exc if not getattr(exc, "remote_traceback", None) else None)
        return respond(exc.code, str(exc), type(exc).__name__, getattr(exc, "headers", None))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        message = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
        if exc.status_code == 404 and message == "Not Found":
            message = "The resource could not be found."
        if exc.status_code == 405:
            message = "The method is not allowed for the requested URL."
        return respond(exc.status_code, message, "HTTPException", getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError):
        errors = exc.errors()
        where = ".".join(str(p) for p in errors[0]["loc"]) if errors else "request"
        msg = errors[0]["msg"] if errors else "invalid"
        return respond(400, f"Invalid input for field/attribute {where}. {msg}", "ValidationError")

    # Database and socket errors are answered inside the app (Starlette re-raises whatever reaches
    # its catch-all ``Exception`` handler, for the server to log it again); anything else there.
    @app.exception_handler(DBAPIError)
    @app.exception_handler(OSError)
    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        transient = transient_error(exc)
        if transient is not None:  # the database away or too contended: 503, worth a retry
            LOG.warning("%s %s failed: %s (%s)", request.method, request.url.path, transient, exc)
            return respond(transient.code, str(transient), type(transient).__name__)
        LOG.exception("unexpected error serving %s %s", request.method, request.url.path)
        return respond(500, "Unexpected API Error. Please report this at the project's issue tracker.",
                       type(exc).__name__)

    return app
