"""``/v2.1/servers/{id}/os-interface``: a server's port interfaces, listed, shown, attached
(``interfaceAttachment``: ``net_id`` with optional ``fixed_ips``, or ``port_id``; ``tag`` from 2.49)
and detached. Answers show each attachment's ``tag`` from 2.70. The work is
``nefos.control.compute.interfaces`` (checks, action) and the host's ``nefos.host.compute.interfaces``."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from nefos import exceptions, rest
from nefos.control.compute.rest import response_schemas as responses
from nefos.control.compute.rest.validation import DEVICE_TAG, IP_ADDRESS, UUID, refuse_query_from_2102, validate
from nefos.control.compute.interfaces import InterfacesAPI
from nefos.openapi import documented
from nefos.control.compute.authorization import authorize

router = APIRouter()

_ATTACHMENT = {"type": "object", "properties": {
    "net_id": UUID, "port_id": UUID,
    "fixed_ips": {"type": "array", "minItems": 1, "maxItems": 1, "items": {
        "type": "object", "properties": {"ip_address": IP_ADDRESS}, "required": ["ip_address"],
        "additionalProperties": False}}}, "additionalProperties": False}
CREATE_BODY = {"type": "object", "properties": {"interfaceAttachment": _ATTACHMENT}, "additionalProperties": False}
CREATE_BODY_249 = {"type": "object", "properties": {"interfaceAttachment": {
    **_ATTACHMENT, "properties": {**_ATTACHMENT["properties"], "tag": DEVICE_TAG}}}, "additionalProperties": False}


def _context(request: Request, action: str):
    ctx = rest.get_context(request)
    authorize(ctx, f"os_compute_api:os-attach-interfaces:{action}")
    return ctx


def _api(request: Request) -> InterfacesAPI:
    return InterfacesAPI(request.app.state.compute_api)


def _view(request: Request, instance: dict, port: dict) -> dict:
    info = {"net_id": port["network_id"], "port_id": port["id"], "mac_addr": port["mac_address"],
            "port_state": port["status"],
            "fixed_ips": [{"subnet_id": f["subnet_id"], "ip_address": f["ip_address"]}
                          for f in port.get("fixed_ips") or []]}
    if request.state.api_version.matches("2.70"):
        info["tag"] = next((vif.get("tag") for vif in instance.get("network_info") or []
                            if vif.get("id") == port["id"]), None)
    return info


@router.get("/v2.1/servers/{server_id}/os-interface")
@documented(responses={200: responses.INTERFACE_ATTACHMENTS})
async def list_interfaces(request: Request, server_id: str):
    refuse_query_from_2102(request)
    ctx = _context(request, "list")
    instance, ports = await _api(request).list(ctx, server_id)
    return {"interfaceAttachments": [_view(request, instance, p) for p in ports]}


@router.get("/v2.1/servers/{server_id}/os-interface/{port_id}")
@documented(responses={200: responses.INTERFACE_ATTACHMENT})
async def show_interface(request: Request, server_id: str, port_id: str):
    refuse_query_from_2102(request)
    ctx = _context(request, "show")
    instance, port = await _api(request).show(ctx, server_id, port_id)
    return {"interfaceAttachment": _view(request, instance, port)}


@router.post("/v2.1/servers/{server_id}/os-interface")
@documented(request=CREATE_BODY, responses={200: responses.INTERFACE_ATTACHMENT})
async def attach_interface(request: Request, server_id: str):
    ctx = _context(request, "create")
    body = await rest.json_body(request)
    validate(body, CREATE_BODY_249 if request.state.api_version.matches("2.49") else CREATE_BODY)
    attachment = body.get("interfaceAttachment") or {}
    network_id, port_id = attachment.get("net_id"), attachment.get("port_id")
    fixed_ip = (attachment.get("fixed_ips") or [{}])[0].get("ip_address")
    if network_id and port_id:
        raise exceptions.ValidationError("Must not input both network_id and port_id")
    if fixed_ip and not network_id:
        raise exceptions.ValidationError("Must input network_id when request IP address")
    try:
        port = await _api(request).attach(ctx, server_id, network_id=network_id, port_id=port_id,
                                          fixed_ip=fixed_ip, tag=attachment.get("tag"))
    except (exceptions.NetworkAmbiguous, exceptions.IpAddressGenerationFailure) as exc:
        raise exceptions.Invalid(str(exc)) from None  # 400 here, as Nova answers them for an attach
    instance = await request.app.state.compute_api.get(ctx, server_id)  # the tag is in the new network info
    return {"interfaceAttachment": _view(request, instance, port)}


@router.delete("/v2.1/servers/{server_id}/os-interface/{port_id}")
@documented(responses={202: responses.NO_BODY})
async def detach_interface(request: Request, server_id: str, port_id: str):
    ctx = _context(request, "delete")
    await _api(request).detach(ctx, server_id, port_id)
    return Response(status_code=202)
