"""The metadata service's HTTP application (Nova's ``MetadataRequestHandler``).

No Keystone authentication, as Nova's: a request is for the instance its proxy signed for
(``identification``), and answers only that instance's metadata. ``GET /`` (the EC2 versions)
needs no identification, as in Nova; every other path does. Content comes from
``nefos.objects.instance_metadata``, the same rendering a config drive holds.
"""

from __future__ import annotations

import logging

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from nefos import exceptions
from nefos.metadata import identification
from nefos.objects import instance as instance_obj
from nefos.objects.instance_metadata import (EC2_VERSIONS, InstanceMetadata, MetadataNotFound, TEXT)

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
    return Response(body, media_type=media_type if media_type != TEXT else "text/plain; charset=utf-8")


def create_app(rt) -> Starlette:
    app = Starlette(routes=[Route("/{path:path}", _serve, methods=["GET", "HEAD"])])
    app.state.rt = rt
    app.state.secret = identification.shared_secret(rt.cfg)
    return app
