"""The noVNC websocket proxy (Nova's nova-novncproxy), an ASGI app.

HTTP: the noVNC client's files from ``novncproxy_web`` (Nova's ``web``); the console pages
(``vnc_auto.html``, ``vnc_lite.html``, ``vnc.html``) fall back to a small page of our own when the
directory has none (``console.page``). A file that is not there, or a directory that is not
installed, is 404; ``/healthcheck`` answers as every API's does (oslo.middleware's).

Websocket (any path, as websockify): the token is the ``token`` query parameter, or a ``token``
cookie (noVNC before 1.1). As Nova's proxy, it is looked up (``objects.console_auth_tokens``:
unknown or expired is refused), then the instance's compute host is asked whether the guest's
console is still at the token's port (``validate_console_port``), and a browser's ``Origin`` must
name the host the request was sent to, with the scheme of the console URL. A refused connection
gets no websocket: its upgrade is answered 403 and closed. An accepted one carries binary frames
both ways between the browser and the guest's VNC server (``binary`` is the subprotocol chosen
when offered), until either side closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from http.cookies import CookieError, SimpleCookie
from pathlib import Path
from urllib.parse import urlparse

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket, WebSocketDisconnect

from nefos import exceptions, metrics
from nefos.clients.compute import ComputeRPCAPI
from nefos.control.console.page import PAGE
from nefos.context import admin_context
from nefos.objects import console_auth_tokens, instance as instance_obj

LOG = logging.getLogger(__name__)

PAGES = ("/", "/vnc_auto.html", "/vnc_lite.html", "/vnc.html")
CONNECT_TIMEOUT = 10.0  # seconds to reach the guest's VNC server
READ_SIZE = 65536
POLICY_VIOLATION = 1008


class NoVNCProxy:
    def __init__(self, rt):
        self.rt = rt
        self.rpcapi = ComputeRPCAPI(rt.bus)
        self.web = Path(rt.cfg.novncproxy_web)
        self.static = StaticFiles(directory=self.web, html=True, check_dir=False)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "websocket":
            await self.websocket(WebSocket(scope, receive, send))
        elif scope["type"] == "http":
            await self.page(scope, receive, send)

    # Pages ---------------------------------------------------------------------------------
    async def page(self, scope, receive, send) -> None:
        request = Request(scope, receive)
        if request.method not in ("GET", "HEAD"):
            response = PlainTextResponse("Method Not Allowed", status_code=405, headers={"Allow": "GET, HEAD"})
            return await response(scope, receive, send)
        path = scope["path"]
        if path == "/healthcheck":
            response = metrics.healthcheck_response(request.method, self.rt.cfg.healthcheck_disable_by_file_path)
            return await response(scope, receive, send)
        if path in PAGES and not self._has_page(path):
            return await HTMLResponse(PAGE)(scope, receive, send)
        if not self.web.is_dir():  # noVNC not installed: no file of it is here
            return await PlainTextResponse("Not Found", status_code=404)(scope, receive, send)
        try:
            response = await self.static.get_response(self.static.get_path(scope), scope)
        except HTTPException as exc:  # not found, or a path out of the directory
            response = PlainTextResponse(exc.detail, status_code=exc.status_code, headers=exc.headers)
        await response(scope, receive, send)

    def _has_page(self, path: str) -> bool:
        name = path.lstrip("/") or "index.html"
        return (self.web / name).is_file()

    # Websockets ----------------------------------------------------------------------------
    async def websocket(self, ws: WebSocket) -> None:
        try:
            grant = await self.connect_info(_token(ws))
            self.check_origin(ws, grant)
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(grant["host"], grant["port"]), CONNECT_TIMEOUT)
        except (exceptions.InvalidToken, exceptions.ValidationError) as exc:
            LOG.info("console connection refused: %s", exc)
            return await ws.close(POLICY_VIOLATION)  # before the upgrade: answered 403
        except (exceptions.NefosError, OSError, asyncio.TimeoutError) as exc:
            # The compute host did not answer, or the guest's VNC server could not be reached.
            LOG.warning("console connection refused: %s", exc or type(exc).__name__)
            return await ws.close(POLICY_VIOLATION)
        offered = ws.scope.get("subprotocols") or []
        await ws.accept(subprotocol="binary" if "binary" in offered else None)
        LOG.info("console of instance %s: proxying to %s:%s", grant["instance_uuid"], grant["host"],
                 grant["port"])
        await _splice(ws, reader, writer)

    async def connect_info(self, token: str) -> dict:
        """What the token grants, once its compute host confirms the console is still there."""
        grant = await console_auth_tokens.validate(self.rt.db, token)
        try:
            instance = await instance_obj.get(self.rt.db, grant["instance_uuid"])
        except exceptions.InstanceNotFound:
            raise exceptions.InvalidToken(token="***")
        if not instance.get("host") or not await self.rpcapi.validate_console_port(
                admin_context(), instance["host"], grant["instance_uuid"], grant["port"], grant["console_type"]):
            raise exceptions.InvalidToken(token="***")
        return grant

    @staticmethod
    def check_origin(ws: WebSocket, grant: dict) -> None:
        """A browser's Origin must be the host it connected to, with the console URL's scheme (or
        its X-Forwarded-Proto), as Nova's proxy checks; a client without Origin is no browser."""
        origin = ws.headers.get("origin")
        if origin is None:
            return
        parsed = urlparse(origin)
        scheme = ws.headers.get("x-forwarded-proto") or parsed.scheme
        if not parsed.hostname or not scheme:
            raise exceptions.ValidationError(detail="Origin header not valid.")
        if parsed.hostname != urlparse(f"//{ws.headers.get('host', '')}").hostname:
            raise exceptions.ValidationError(detail="Origin header does not match this host.")
        expected = urlparse(grant.get("access_url_base") or "").scheme
        if expected and scheme != expected:
            raise exceptions.ValidationError(detail="Origin header protocol does not match this host.")


def _token(ws: WebSocket) -> str:
    token = ws.query_params.get("token")
    if token:
        return token
    cookies = SimpleCookie()
    for part in (ws.headers.get("cookie") or "").split(";"):
        with contextlib.suppress(CookieError):
            cookies.load(part.strip())
    return cookies["token"].value if "token" in cookies else ""


async def _splice(ws: WebSocket, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Carry bytes both ways until one side closes, then close the other."""

    async def from_guest() -> None:
        while data := await reader.read(READ_SIZE):
            await ws.send_bytes(data)

    async def to_guest() -> None:
        while True:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            data = message.get("bytes")
            if data is None:  # a text frame: noVNC speaks binary only
                data = (message.get("text") or "").encode()
            writer.write(data)
            await writer.drain()

    tasks = [asyncio.create_task(from_guest()), asyncio.create_task(to_guest())]
    try:
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            with contextlib.suppress(OSError, WebSocketDisconnect, RuntimeError):
                task.result()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
        with contextlib.suppress(Exception):
            await ws.close()
