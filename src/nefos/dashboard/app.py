"""The web console's application: sign-in, the pages (``pages.py``, ``infrastructure.py``), the live
events (``live.py``) and the static files, behind headers that keep pages from being framed and
scripts to this origin's own files."""

from __future__ import annotations

import time
import urllib.parse

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from starlette.staticfiles import StaticFiles

from nefos import metrics, rest
from nefos.dashboard import infrastructure, live, pages
from nefos.dashboard.api_client import ApiError, SignInRefused, sign_in
from nefos.dashboard.sessions import COOKIE, SessionStore
from nefos.dashboard.web import HERE, BadForm, SignInNeeded, form_of, render

_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; "
                               "form-action 'self'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def create_app(cfg, identity_url: str) -> FastAPI:
    app = FastAPI(title="Nefos console", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.cfg = cfg
    app.state.identity_url = identity_url
    app.state.sessions = SessionStore()
    app.state.http = httpx.AsyncClient(timeout=30)

    # Each request counted, timed and written as an access line, as every API's.
    app.add_middleware(rest.RequestLogMiddleware, service="dashboard")

    @app.api_route("/healthcheck", methods=["GET", "HEAD"], include_in_schema=False)
    async def healthcheck(request: Request):
        return metrics.healthcheck_response(request.method, cfg.healthcheck_disable_by_file_path)

    @app.middleware("http")
    async def security_headers(request: Request, call_next):
        response = await call_next(request)
        for name, value in _HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    @app.exception_handler(SignInNeeded)
    async def _sign_in(request: Request, exc: SignInNeeded):
        if request.headers.get("x-console-fragment"):  # a page's script asking for a piece: say so
            return Response(status_code=401)
        target = urllib.parse.quote(request.url.path)
        return RedirectResponse(f"/login?next={target}", status_code=303)

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError):
        if exc.status == 401:
            request.app.state.sessions.remove(request.cookies.get(COOKIE))
            return RedirectResponse("/login", status_code=303)
        status = exc.status if exc.status in (400, 403, 404, 409, 413) else 502
        return render(request, "error.html", status=status, message=exc.message, code=exc.status)

    @app.exception_handler(BadForm)
    async def _bad_form(request: Request, exc: BadForm):
        return render(request, "error.html", status=400, message=str(exc), code=400)

    @app.get("/", include_in_schema=False)
    async def home(request: Request):
        return RedirectResponse("/servers", status_code=303)

    @app.get("/login", include_in_schema=False)
    async def login_page(request: Request, next: str = "/servers"):
        return render(request, "login.html", next=_local(next), error=None)

    @app.post("/login", include_in_schema=False)
    async def login(request: Request):
        fields = await form_of(request, csrf=False)
        target = _local(fields.get("next", "/servers"))
        try:
            session = await sign_in(app.state.http, identity_url, fields.get("username", "")[:255],
                                    fields.get("password", "")[:4096], fields.get("project", "")[:255])
        except SignInRefused as exc:
            return render(request, "login.html", status=401, next=target, error=str(exc),
                          username=fields.get("username", ""))
        except httpx.TransportError:
            return render(request, "login.html", status=503, next=target,
                          error="The identity service does not answer.")
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(COOKIE, app.state.sessions.add(session), httponly=True, samesite="strict",
                            path="/", max_age=max(60, int(session.expires - time.time())))
        return response

    @app.post("/logout", include_in_schema=False)
    async def logout(request: Request):
        await form_of(request)
        app.state.sessions.remove(request.cookies.get(COOKIE))
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response

    app.include_router(pages.router)
    app.include_router(infrastructure.router)
    app.include_router(live.router)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    return app


def _local(target: str) -> str:
    """Only a path of this site (never another site's address) to go to after signing in."""
    parsed = urllib.parse.urlsplit(target)
    if parsed.scheme or parsed.netloc or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/servers"
    return target
