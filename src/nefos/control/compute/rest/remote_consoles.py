"""Remote consoles (Nova's remote_consoles): a URL to a server's console through the console proxy.

- ``POST /v2.1/servers/{id}/action`` with ``os-getVNCConsole`` / ``os-getSPICEConsole`` /
  ``os-getSerialConsole`` / ``os-getRDPConsole`` (2.1 to 2.5; the action dispatch answers 404
  outside them): ``{"console": {"type", "url"}}``. As Nova's controller: the body's schema first,
  then the policy (no target), then the server. RDP went with the Hyper-V driver (Nova 29.0.0):
  a bare 400 whatever the body.
- ``POST /v2.1/servers/{id}/remote-consoles`` (2.6): ``{"remote_console": {"protocol", "type",
  "url"}}``; MKS from 2.8, ``spice-direct`` from 2.99. As Nova's: the server first, then the
  policy on its project; the protocol ``rdp`` is a 400.

VNC (``novnc``) and SPICE (``spice-direct``) consoles exist (``compute/consoles.py``, the host's
``compute/host/consoles.py``); the other
types answer as a Nova whose other console types are disabled (400). As Nova's, ``spice-direct``
needs no more than the remote consoles policy: the hypervisor's address it leads to is shown only
to admins (``os-console-auth-tokens``). ``xvpvnc`` went with the XenAPI driver: a 400
"Invalid console type" (a Nova whose compute host raises it answers 500 through the action,
which Nefos does not copy).
"""

from __future__ import annotations

import copy

from fastapi import APIRouter, Request

from nefos import exceptions, rest
from nefos.control.compute.rest import response_schemas as responses
from nefos.control.compute.rest.validation import validate
from nefos.control.compute.consoles import ConsolesAPI
from nefos.openapi import documented
from nefos.control.compute.authorization import authorize

router = APIRouter()

POLICY = "os_compute_api:os-remote-consoles"
RDP_ACTION = "os-getRDPConsole"
# webob's HTTPBadRequest() without an explanation, what Nova answers for the removed RDP action.
BARE_BAD_REQUEST = ("The server could not comply with the request since it is either malformed or "
                     "otherwise incorrect.")


def _action_schema(action: str, types: list[str]) -> dict:
    return {"type": "object", "properties": {action: {
        "type": "object", "properties": {"type": {"type": "string", "enum": types}},
        "required": ["type"], "additionalProperties": False}},
        "required": [action], "additionalProperties": False}


VNC_SCHEMA = _action_schema("os-getVNCConsole", ["novnc", "xvpvnc"])
# action -> (protocol, body schema)
ACTIONS = {
    "os-getVNCConsole": ("vnc", VNC_SCHEMA),
    "os-getSPICEConsole": ("spice", _action_schema("os-getSPICEConsole", ["spice-html5"])),
    "os-getSerialConsole": ("serial", _action_schema("os-getSerialConsole", ["serial"])),
}

CREATE_V26 = {"type": "object", "properties": {"remote_console": {
    "type": "object", "properties": {
        "protocol": {"type": "string", "enum": ["vnc", "spice", "serial", "rdp"]},
        "type": {"type": "string", "enum": ["novnc", "xvpvnc", "spice-html5", "serial", "rdp-html5"]}},
    "required": ["protocol", "type"], "additionalProperties": False}},
    "required": ["remote_console"], "additionalProperties": False}
CREATE_V28 = copy.deepcopy(CREATE_V26)
CREATE_V28["properties"]["remote_console"]["properties"]["protocol"]["enum"].append("mks")
CREATE_V28["properties"]["remote_console"]["properties"]["type"]["enum"].append("webmks")
CREATE_V299 = copy.deepcopy(CREATE_V28)
CREATE_V299["properties"]["remote_console"]["properties"]["type"]["enum"].append("spice-direct")


def _consoles(request: Request) -> ConsolesAPI:
    return ConsolesAPI(request.app.state.compute_api)


async def console_action(request: Request, ctx, server_id: str, body: dict) -> dict:
    """One of the os-get*Console actions (below 2.6)."""
    (name, _args), = body.items()
    if name == RDP_ACTION:
        raise exceptions.Invalid(BARE_BAD_REQUEST)
    protocol, schema = ACTIONS[name]
    validate(body, schema)
    authorize(ctx, POLICY)
    console_type = body[name]["type"]
    instance = await request.app.state.compute_api.get(ctx, server_id)
    url = await _consoles(request).get_console(ctx, instance, protocol, console_type)
    return {"console": {"type": console_type, "url": url}}


HANDLERS = {name: console_action for name in (*ACTIONS, RDP_ACTION)}


def create_schema(version) -> dict:
    if version.matches("2.99"):
        return CREATE_V299
    return CREATE_V28 if version.matches("2.8") else CREATE_V26


@router.post("/v2.1/servers/{server_id}/remote-consoles")
@documented(request=CREATE_V26, responses={200: responses.REMOTE_CONSOLE})
async def create_remote_console(request: Request, server_id: str):
    version = request.state.api_version
    if not version.matches("2.6"):
        raise exceptions.NotFound("The resource could not be found.")
    ctx = rest.get_context(request)
    body = await rest.json_body(request)
    validate(body, create_schema(version))
    instance = await request.app.state.compute_api.get(ctx, server_id)
    authorize(ctx, POLICY, {"project_id": instance["project_id"]})
    protocol = body["remote_console"]["protocol"]
    console_type = body["remote_console"]["type"]
    if protocol == "rdp":  # removed with the Hyper-V driver
        raise exceptions.Invalid(f"Unavailable console type {protocol}.")
    url = await _consoles(request).get_console(ctx, instance, protocol, console_type)
    return {"remote_console": {"protocol": protocol, "type": console_type, "url": url}}
