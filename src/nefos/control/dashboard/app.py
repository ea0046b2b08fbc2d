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
from nefos.control.dashboard import infrastructure, live, pages
from nefos.control.dashboard.api_client import ApiError, SignInRefused, sign_in
from nefos.control.dashboard.sessions import COOKIE, SIGN_IN_COOKIE, SessionStore, SignInTokens, StoreFull
from nefos.control.dashboard.web import HERE, BadForm, CrossSiteForm, SignInNeeded, form_of, render
from nefos.http_client import verified_tls

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
    app.state.sessions = SessionStore(cfg.dashboard_max_sessions, cfg.dashboard_max_sessions_per_user)
    app.state.sign_in_tokens = SignInTokens()
    app.state.http = httpx.AsyncClient(timeout=30, verify=verified_tls())  # the pages' API calls; the streams have their own
    live.set_up(app, cfg)

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

    @app.exception_handler(CrossSiteForm)
    async def _cross_site(request: Request, exc: CrossSiteForm):
        return render(request, "error.html", status=403, message="This form was sent from another site.", code=403)

    @app.get("/", include_in_schema=False)
    async def home(request: Request):
        return RedirectResponse("/servers", status_code=303)

    def sign_in_form(request: Request, status: int = 200, **values) -> Response:
        """The sign-in form with its CSRF token, bound to the browser's sign-in cookie (set here
        when the browser has none)."""
        cookie = request.cookies.get(SIGN_IN_COOKIE) or SignInTokens.new_cookie()
        response = render(request, "login.html", status=status, csrf=app.state.sign_in_tokens.token(cookie), **values)
        response.set_cookie(SIGN_IN_COOKIE, cookie, httponly=True, samesite="strict", path="/login")
        return response

    @app.get("/login", include_in_schema=False)
    async def login_page(request: Request, next: str = "/servers"):
        return sign_in_form(request, next=_local(next), error=None)

    @app.post("/login", include_in_schema=False)
    async def login(request: Request):
        fields = await form_of(request, csrf=False)
        if not app.state.sign_in_tokens.checks(request.cookies.get(SIGN_IN_COOKIE), fields.get("csrf")):
            raise BadForm("The form has expired: reload the page and try again.")
        target = _local(fields.get("next", "/servers"))
        username = fields.get("username", "")[:255]
        try:
            session = await sign_in(app.state.http, identity_url, username,
                                    fields.get("password", "")[:4096], fields.get("project", "")[:255])
            key = app.state.sessions.add(session)
        except SignInRefused as exc:
            return sign_in_form(request, status=401, next=target, error=str(exc), username=username)
        except httpx.TransportError:
            return sign_in_form(request, status=503, next=target, error="The identity service does not answer.")
        except StoreFull:
            return sign_in_form(request, status=503, next=target, username=username,
                                error="Too many people are signed in to the console: try again later.")
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(COOKIE, key, httponly=True, samesite="strict",
                            path="/", max_age=max(60, int(session.expires - time.time())))
        response.delete_cookie(SIGN_IN_COOKIE, path="/login")
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
