"""``nefos events``: the cloud's event stream (``GET /v2.1/nefos-events``), one line per event.

``read_stream`` is the stream's client: it parses Server-Sent Events and, when the connection
drops, connects again with the last id it saw as ``Last-Event-ID``, as a browser's EventSource
does, so nothing between is lost. When the server ends the stream because the token expired
(``stream.closed``, ``token_expired``), ``nefos events`` signs in again and resumes the same way,
as keystoneauth gets a new token for a client whose token expired.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import AsyncIterator

import httpx
from rich.console import Console
from rich.markup import escape

from nefos.cmd.status import ADMIN_CLOUD, StatusError, cloud_auth, login
from nefos.http_client import verified_tls

_STYLES = {"server.created": "cyan", "server.updated": "bold", "server.deleted": "magenta",
           "server.step.started": "dim", "server.step.finished": "green", "server.event.received": "blue",
           "host.up": "green", "host.down": "bold red", "host.disabled": "yellow", "host.enabled": "green",
           "stream.truncated": "bold red", "stream.overflow": "bold red"}
# Why a stream may end for a client that signs in again and resumes: its token expired, or the
# server could not check it for a moment.
_RESUMABLE = ("token_expired", "unavailable")


async def sse_messages(response: httpx.Response) -> AsyncIterator[dict]:
    """The messages of an SSE body: ``{"id", "event", "data"}`` (``data`` parsed as JSON)."""
    fields: dict[str, str] = {}
    data: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            if data:
                yield {"id": fields.get("id"), "event": fields.get("event", "message"),
                       "data": json.loads("\n".join(data))}
            fields, data = {}, []
            continue
        if line.startswith(":"):
            continue  # a comment: the stream's greeting or a keep-alive
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            data.append(value)
        else:
            fields[name] = value


async def read_stream(client: httpx.AsyncClient, url: str, *, headers: dict, params: dict | None = None,
                      last_event_id: str | None = None, reconnect_delay: float = 1.0) -> AsyncIterator[dict]:
    """Every message of the stream at ``url``, reconnecting after a cut from the last id seen.
    Ends when the server ends the stream (its ``timeout``) or refuses it (``HTTPStatusError``)."""
    while True:
        sent = dict(headers, Accept="text/event-stream")
        if last_event_id is not None:
            sent["Last-Event-ID"] = last_event_id
        try:
            async with client.stream("GET", url, headers=sent, params=params, timeout=httpx.Timeout(
                    30.0, read=None)) as response:
                if response.status_code != 200:
                    await response.aread()
                    response.raise_for_status()
                async for message in sse_messages(response):
                    if message["id"] is not None:
                        last_event_id = message["id"]
                    yield message
            return
        except (httpx.TransportError, httpx.RemoteProtocolError):
            await asyncio.sleep(reconnect_delay)


def line(message: dict) -> str:
    """One event as a Rich markup line."""
    data = message["data"]
    kind = message["event"]
    style = _STYLES.get(kind, "")
    what = ""
    if kind.startswith("server."):
        what = data.get("server_id") or ""
        if kind in ("server.created", "server.updated", "server.deleted"):
            what += f" {data.get('status')} task={data.get('task_state')}"
            if data.get("name"):
                what += f" name={data['name']}"
        elif data.get("name"):
            what += f" {data['name']}"
            if data.get("result"):
                what += f" {data['result']}"
            if data.get("tag"):
                what += f" tag={data['tag']}"
    elif kind.startswith("host."):
        what = data.get("host") or ""
        if data.get("disabled_reason"):
            what += f" ({data['disabled_reason']})"
    else:
        what = json.dumps(data)
    when = (data.get("time") or "")[11:23]
    return f"{escape(when)} [{style}]{escape(kind):<22}[/] {escape(what)}"


async def tail(clouds_file: Path, *, cloud: str = ADMIN_CLOUD, params: dict, last_event_id: str | None,
               count: int | None, console: Console) -> int:
    """Print the stream's events until ``count`` were printed or the stream ends; how many."""
    auth = cloud_auth(clouds_file, cloud)
    shown = 0
    async with httpx.AsyncClient(timeout=30.0, verify=verified_tls()) as client:
        try:
            while True:
                token, urls = await asyncio.to_thread(_login, auth)
                url = urls["compute"].rstrip("/") + "/nefos-events"
                closing = None
                async for message in read_stream(client, url, headers={"X-Auth-Token": token}, params=params,
                                                 last_event_id=last_event_id):
                    if message["id"] is not None:
                        last_event_id = message["id"]
                    if message["event"] == "stream.connected":
                        console.print(f"[dim]following the events after id {message['data']['last_event_id']}[/dim]",
                                      highlight=False)
                        continue
                    if message["event"] == "stream.closed":  # the last message: the stream ends
                        closing = message["data"]
                        continue
                    console.print(line(message), highlight=False)
                    shown += 1
                    if count is not None and shown >= count:
                        return shown
                if closing is None:
                    return shown
                if closing.get("reason") not in _RESUMABLE:
                    raise StatusError(f"the event stream ended: {closing.get('reason')} "
                                      f"({closing.get('message', '')})")
                console.print(f"[dim]the stream ended ({escape(str(closing.get('reason')))}): "
                              "signing in again[/dim]", highlight=False)
        except httpx.HTTPStatusError as exc:
            raise StatusError(f"the event stream answered {exc.response.status_code}: "
                              f"{exc.response.text[:300]}") from None
        except KeyError as exc:
            raise StatusError(f"the catalog has no {exc} endpoint") from None


def _login(auth: dict) -> tuple[str, dict[str, str]]:
    with httpx.Client(timeout=30.0, verify=verified_tls()) as client:
        try:
            return login(auth, client)
        except httpx.TransportError as exc:
            raise StatusError(f"the cloud does not answer at {auth['auth_url']} ({exc}): is it running?") from None
