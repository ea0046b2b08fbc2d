"""What the compute side needs to check or plan a server's networking, in one call (network 1.1),
one service of the network manager, reading through ``Networks``, ``Ports`` and ``NetworkQuotas``.

A server create's validation (Nova's ``validate_networks``) and its port allocation
(``allocate_for_instance``) each asked several questions one message at a time: the networks a
server of the project may use, their subnets, the requested ports, whether a requested fixed IP
is taken, the project's port quota. ``networks_for_instance`` answers them together, from one
database session, with the answers each of those Networking API calls gives
(``nefos.clients.network`` falls back to those calls for a network service older than 1.1).
"""

from __future__ import annotations

from nefos import exceptions
from nefos.context import RequestContext
from nefos.control.network.networks import Networks
from nefos.control.network.ports import Ports
from nefos.control.network.quotas import NetworkQuotas
from nefos.control.network.store import NetworkStore


class InstanceNetworks:
    """``networks_for_instance`` (bus)."""

    def __init__(self, store: NetworkStore, quotas: NetworkQuotas, networks: Networks, ports: Ports):
        self.store = store
        self.quotas = quotas
        self.networks = networks
        self.ports = ports

    async def networks_for_instance(self, ctx: RequestContext, project_id: str | None,
                                    network_ids: list[str] | None = None, auto_allocate: bool = False,
                                    port_ids: list[str] | None = None, fixed_ips: list[list[str]] | None = None,
                                    port_quota: bool = False, with_subnets: bool = True) -> dict:
        """``{"networks", "subnets", "ports", "fixed_ips_in_use", "port_quota"}``:

        * networks: the ``network_ids`` the caller sees (each once; one not seen is left out), or
          (``network_ids`` None) the networks a server of ``project_id`` may pick: the project's
          own unshared ones (``auto_allocate``: only those up) then the shared ones;
        * subnets: every subnet of those networks (``with_subnets``; always for ``fixed_ips``);
        * ports: by id, the ``port_ids`` the caller sees (one not seen is left out);
        * fixed_ips_in_use: the ``[network_id, address]`` of ``fixed_ips`` a port holds already
          (only on the networks found);
        * port_quota: ``{"limit", "used"}`` of the project's ports when ``port_quota`` (Neutron's
          quota details: a caller may read only its own project's unless admin), else None.
        """
        admin = ctx.elevated()
        async with self.store.reader() as s:
            if network_ids is not None:
                unique = list(dict.fromkeys(network_ids))
                networks = (await self.networks.networks_matching(s, ctx, {"id": unique})) if unique else []
            else:
                own_filters = {"project_id": [project_id], "shared": [False]}
                if auto_allocate:
                    own_filters["admin_state_up"] = [True]
                networks = (await self.networks.networks_matching(s, ctx, own_filters)) if project_id else []
                networks += await self.networks.networks_matching(s, ctx, {"shared": [True]})
            subnets = (await self.networks.subnets_of_networks(s, [n["id"] for n in networks])
                       if with_subnets or fixed_ips else [])
            quota = None
            if port_quota and project_id:
                self.quotas.check_access(ctx, project_id)
                quota = await self.quotas.port_quota(s, project_id)
        ports = {}
        for port_id in dict.fromkeys(port_ids or []):
            try:
                ports[port_id] = await self.ports.get_port(ctx, port_id)
            except exceptions.PortNotFound:
                continue
        found = {n["id"] for n in networks}
        in_use = []
        for network_id, address in fixed_ips or []:
            if network_id in found and await self.ports.list_ports(admin, filters={
                    "network_id": [network_id], "fixed_ips": [f"ip_address={address}"]}, fields=["id"]):
                in_use.append([network_id, address])
        return {"networks": networks, "subnets": subnets, "ports": ports, "fixed_ips_in_use": in_use,
                "port_quota": quota}
