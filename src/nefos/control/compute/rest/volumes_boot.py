"""``/v2.1/os-volumes_boot``: Nova's old name of the servers collection (its VolumesBootController
is the servers controller: list, detail, create, show, update, delete and actions, up to 2.102;
2.103 removed the name, so it answers 404 from then on). The same handlers answer; links in the answers name ``servers``, as
Nova's do; the OpenAPI document shows them as it shows the servers routes."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from nefos.control.compute.rest import microversion, server_actions, servers

router = APIRouter()
LAST_VERSION = "2.102"


def _served(request: Request) -> None:
    microversion.require_at_most(request, LAST_VERSION)


_BASE = "/v2.1/os-volumes_boot"
for _path, _method, _endpoint in (
        ("", "GET", servers.list_servers),
        ("", "POST", servers.create_server),
        ("/detail", "GET", servers.list_servers_detail),
        ("/{server_id}", "GET", servers.show_server),
        ("/{server_id}", "PUT", servers.update_server),
        ("/{server_id}", "DELETE", servers.delete_server),
        ("/{server_id}/action", "POST", server_actions.server_action)):
    router.add_api_route(_BASE + _path, _endpoint, methods=[_method], dependencies=[Depends(_served)])
