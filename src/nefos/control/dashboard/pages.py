"""The servers' pages: the list (kept current by the event stream), a server with its boot timeline,
console log and addresses, and the forms that create a server and start, stop, reboot or delete it."""

from __future__ import annotations

import asyncio
import urllib.parse

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from nefos.context import is_request_id
from nefos.model import states

from nefos.control.dashboard import timeline
from nefos.control.dashboard.api_client import ApiError, CloudClient
from nefos.control.dashboard.web import BadForm, cloud_of, form_of, is_uuid, render

router = APIRouter()

# What each button asks of the Compute API.
ACTIONS = {"start": {"os-start": None}, "stop": {"os-stop": None}, "reboot": {"reboot": {"type": "SOFT"}}}


def _server_id(value: str) -> str:
    """A server id as a path segment of the APIs' URLs (404 for anything but a UUID)."""
    if not is_uuid(value):
        raise ApiError(404, "No such server.")
    return value


def _with_message(path: str, cloud: CloudClient, message: str) -> RedirectResponse:
    """To ``path``, where the page shows ``message``: kept in the session, the address carries only
    its key (a page never shows text from its address, which anyone can write into a link)."""
    return RedirectResponse(f"{path}?" + urllib.parse.urlencode({"error": cloud.session.keep_message(message)}),
                            status_code=303)


def server_view(server: dict) -> dict:
    addresses = [f"{a['addr']} ({network})" for network, addrs in (server.get("addresses") or {}).items()
                 for a in addrs]
    return {"id": server["id"], "name": server.get("name") or "", "status": server.get("status"),
            "task_state": server.get("OS-EXT-STS:task_state"),
            "power_state": states.POWER_STATE_NAMES.get(server.get("OS-EXT-STS:power_state"), "").upper(),
            "progress": server.get("progress"), "addresses": addresses,
            "host": server.get("OS-EXT-SRV-ATTR:host"), "created": server.get("created"),
            "flavor": (server.get("flavor") or {}).get("original_name")}


@router.get("/servers", include_in_schema=False)
async def servers(request: Request, error: str | None = None):
    cloud = cloud_of(request)
    listed, images, flavors, networks = await asyncio.gather(
        cloud.get("compute", "/servers/detail", limit="1000"), cloud.get("image", "/v2/images"),
        cloud.get("compute", "/flavors/detail"), cloud.get("network", "/v2.0/networks"))
    return render(request, "servers.html", servers=[server_view(s) for s in listed["servers"]],
                  images=images["images"], flavors=sorted(flavors["flavors"], key=lambda f: (f["ram"], f["id"])),
                  networks=networks["networks"], error=cloud.session.take_message(error))


@router.get("/servers/{server_id}/row", include_in_schema=False)
async def server_row(request: Request, server_id: str):
    """One row of the list, for the page's script to put in place (204: not this project's)."""
    cloud = cloud_of(request)
    try:
        server = (await cloud.get("compute", f"/servers/{_server_id(server_id)}"))["server"]
    except ApiError as exc:
        if exc.status == 404:
            return Response(status_code=404)
        raise
    if server.get("tenant_id") != cloud.session.project_id:
        return Response(status_code=204)
    return render(request, "server_row.html", server=server_view(server))


@router.post("/servers", include_in_schema=False)
async def create_server(request: Request):
    cloud = cloud_of(request)
    fields = await form_of(request)
    name = fields.get("name", "").strip()
    if not name or len(name) > 255:
        raise BadForm("A server needs a name of 1 to 255 characters.")
    server = {"name": name, "imageRef": fields.get("image", ""), "flavorRef": fields.get("flavor", ""),
              "networks": [{"uuid": fields["network"]}] if fields.get("network") else "none"}
    try:
        await cloud.post("compute", "/servers", {"server": server})
    except ApiError as exc:
        if exc.status >= 500:
            raise
        return _with_message("/servers", cloud, exc.message)
    return RedirectResponse("/servers", status_code=303)


@router.get("/servers/{server_id}", include_in_schema=False)
async def server_page(request: Request, server_id: str, action: str | None = None, error: str | None = None):
    return await _server(request, server_id, action, "server.html", error)


@router.get("/servers/{server_id}/summary", include_in_schema=False)
async def server_summary(request: Request, server_id: str, action: str | None = None):
    """The page's changing parts (state, addresses, timeline), for its script after each event."""
    return await _server(request, server_id, action, "server_summary.html")


async def _server(request: Request, server_id: str, action: str | None, template: str, error: str | None = None):
    cloud = cloud_of(request)
    server_id = _server_id(server_id)
    server = (await cloud.get("compute", f"/servers/{server_id}"))["server"]
    actions = (await cloud.get("compute", f"/servers/{server_id}/os-instance-actions"))["instanceActions"]
    chosen = None
    if is_request_id(action):
        chosen = next((a for a in actions if a["request_id"] == action), None)
    if chosen is None:  # the boot's, as long as the server has it; else the latest
        chosen = next((a for a in actions if a["action"] == "create"), actions[0] if actions else None)
    detail = None
    if chosen is not None:
        detail = (await cloud.get("compute", f"/servers/{server_id}/os-instance-actions/"
                                             f"{chosen['request_id']}"))["instanceAction"]
    return render(request, template, server=server_view(server), actions=actions, action=detail,
                  bars=timeline.bars(detail) if detail else [], error=cloud.session.take_message(error))


@router.get("/servers/{server_id}/console", include_in_schema=False)
async def console_log(request: Request, server_id: str):
    cloud = cloud_of(request)
    answer = await cloud.post("compute", f"/servers/{_server_id(server_id)}/action",
                              {"os-getConsoleOutput": {"length": 200}})
    return render(request, "console_log.html", output=(answer or {}).get("output", ""))


@router.post("/servers/{server_id}/action", include_in_schema=False)
async def server_action(request: Request, server_id: str):
    cloud = cloud_of(request)
    server_id = _server_id(server_id)
    fields = await form_of(request)
    what = fields.get("action")
    try:
        if what == "delete":
            await cloud.delete("compute", f"/servers/{server_id}")
            return RedirectResponse("/servers", status_code=303)
        if what not in ACTIONS:
            raise BadForm("Unknown action.")
        await cloud.post("compute", f"/servers/{server_id}/action", ACTIONS[what])
    except ApiError as exc:
        if exc.status >= 500:
            raise
        return _with_message(f"/servers/{server_id}", cloud, exc.message)
    return RedirectResponse(f"/servers/{server_id}", status_code=303)
