"""What every page of the web console uses: its templates, the signed-in user's session and API
client, and posted forms (where they come from and their CSRF token checked)."""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape

from nefos.control.dashboard.api_client import CloudClient
from nefos.control.dashboard.sessions import COOKIE, Session

HERE = Path(__file__).parent
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_MAX_FORM = 64 * 1024

templates = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(default=True),
                        trim_blocks=True, lstrip_blocks=True)


class SignInNeeded(Exception):
    pass


class BadForm(Exception):
    pass


class CrossSiteForm(Exception):
    """A form posted from a page of another site (403)."""


def from_this_site(request: Request) -> bool:
    """Whether a posted form comes from this console's own pages, as its browser tells: the
    ``Origin`` header, else the ``Referer``, must name this host (the ``Host`` the request came to;
    Django's check). A post with neither (an older browser, a script) relies on the CSRF token alone;
    ``Origin: null`` (a sandboxed frame, a file) is another site."""
    source = request.headers.get("origin") or request.headers.get("referer")
    if source is None:
        return True
    parsed = urllib.parse.urlsplit(source)
    host = request.headers.get("host", "")
    return parsed.scheme in ("http", "https") and bool(host) and parsed.netloc == host


def is_uuid(value: str | None) -> bool:
    """Whether ``value`` is an id the console may put in an API's path: a UUID, nothing else (never ``../``)."""
    return bool(value) and _UUID.match(value) is not None


def render(request: Request, name: str, status: int = 200, **values) -> HTMLResponse:
    session = getattr(request.state, "session", None)
    html = templates.get_template(name).render(session=session, path=request.url.path, **values)
    return HTMLResponse(html, status_code=status)


def session_of(request: Request) -> Session:
    session = request.app.state.sessions.get(request.cookies.get(COOKIE))
    if session is None:
        raise SignInNeeded()
    request.state.session = session
    return session


def cloud_of(request: Request) -> CloudClient:
    return CloudClient(request.app.state.http, session_of(request))


async def form_of(request: Request, *, csrf: bool = True) -> dict[str, str]:
    """The posted form (URL-encoded, at most 64 KiB) from one of this site's pages, its CSRF token
    checked against the session's (``csrf=False``: the caller checks a token of its own)."""
    if not from_this_site(request):
        raise CrossSiteForm()
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > _MAX_FORM:
            raise BadForm("The form is too large.")
    if "application/x-www-form-urlencoded" not in request.headers.get("content-type", ""):
        raise BadForm("The form is not URL-encoded.")
    try:
        fields = {k: v[0] for k, v in urllib.parse.parse_qs(body.decode(), strict_parsing=False).items()}
    except UnicodeDecodeError:
        raise BadForm("The form is not UTF-8.") from None
    if csrf and not session_of(request).checks(fields.get("csrf")):
        raise BadForm("The form has expired: reload the page and try again.")
    return fields
