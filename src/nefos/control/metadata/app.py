"""The metadata service's HTTP application (Nova's ``MetadataRequestHandler``).

No Keystone authentication, as Nova's: a request is for the instance its proxy signed for
(``identification``), and answers only that instance's metadata. ``GET /`` (the EC2 versions)
needs no identification, as in Nova; every other path does. Content comes from
``nefos.model.instance_metadata``, the same rendering a config drive holds. The writes: the
guest's ``POST`` of its encrypted password to ``openstack/<version>/password``
(``nefos.model.server_password``), read back through os-server-password; and the server's
``admin_pass``, dropped once a meta_data.json carrying it was served (``nefos.model.admin_password``).
"""

from __future__ import annotations

import logging

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from nefos import exceptions
from nefos.clients import metadata as identification
from nefos.model import admin_password, server_password
from nefos.model.instance_metadata import EC2_VERSIONS, MD_JSON_NAME, PASS_NAME, InstanceMetadata, MetadataNotFound, TEXT
from nefos.objects import guest_passwords, instance as instance_obj

LOG = logging.getLogger(__name__)


async def _serve(request: Request) -> Response:
    rt = request.app.state.rt
    path = "/" + request.path_params.get("path", "")
    if not path.strip("/"):
        return PlainTextResponse("\n".join(EC2_VERSIONS + ["latest"]))
    try:
        instance_id, tenant_id = identification.signed_instance(request.headers, request.app.state.secret)
    except identification.Refused as exc:
        return PlainTextResponse(str(exc), status_code=exc.status)
    try:
        instance = await instance_obj.get(rt.db, instance_id)
    except exceptions.InstanceNotFound:
        LOG.warning("metadata request for instance %s, which does not exist", instance_id)
        return PlainTextResponse("Not Found", status_code=404)
    if instance.get("project_id") != tenant_id:
        LOG.warning("metadata request for instance %s names project %s, not the instance's",
                    instance_id, tenant_id)
        return PlainTextResponse("Not Found", status_code=404)
    metadata = InstanceMetadata(instance, dhcp_domain=rt.cfg.dhcp_domain,
                                default_availability_zone=rt.cfg.default_availability_zone)
    try:
        body, media_type = metadata.lookup(path)
    except MetadataNotFound:
        return PlainTextResponse("Not Found", status_code=404)
    if request.method == "POST" and _is_password(path):
        return await _post_password(request, rt, instance)
    if request.method == "GET" and path.rstrip("/").endswith("/" + MD_JSON_NAME) and admin_password.extract(instance):
        # The guest has its password now: no later reader in the guest gets it from here.
        await guest_passwords.forget_admin_password(rt.db, instance["uuid"], admin_password.extract(instance))
    return Response(body, media_type=media_type if media_type != TEXT else "text/plain; charset=utf-8")


def _is_password(path: str) -> bool:
    tokens = [t for t in path.split("/") if t]
    return len(tokens) == 3 and tokens[0] == "openstack" and tokens[2] == PASS_NAME


async def _post_password(request: Request, rt, instance: dict) -> Response:
    """The guest's encrypted password, accepted once (409 once one is stored) and at most
    ``MAX_SIZE`` bytes (400), as Nova's ``handle_password``; the owner reads it through
    os-server-password."""
    if server_password.extract(instance):
        return PlainTextResponse("Conflict", status_code=409)
    too_large = PlainTextResponse("Request is too large.", status_code=400)
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > server_password.MAX_SIZE:
        return too_large
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > server_password.MAX_SIZE:
            return too_large
    try:
        password = body.decode("utf-8")
    except UnicodeDecodeError:
        return PlainTextResponse("The password is not UTF-8 text.", status_code=400)
    try:
        await guest_passwords.store_server_password(rt.db, instance["uuid"], password, only_if_unset=True)
    except exceptions.Conflict:
        return PlainTextResponse("Conflict", status_code=409)
    return Response(b"", media_type="text/plain; charset=utf-8")


def create_app(rt) -> Starlette:
    # POST: only the password path takes one (any other path answers as to a GET, as Nova's)
    app = Starlette(routes=[Route("/{path:path}", _serve, methods=["GET", "HEAD", "POST"])])
    app.state.rt = rt
    app.state.secret = identification.shared_secret(rt.cfg)
    return app
