"""The auto-allocated topology (Neutron's ``auto-allocated-topology`` extension), one service of
the network manager, built of ``Networks`` and ``Routers``.

``GET /v2.0/auto-allocated-topology/{project_id}`` gives the project's network, building it on
first use: a network ``auto_allocated_network`` with a subnet ``auto_allocated_subnet_v4`` and a
router ``auto_allocated_router`` between that subnet and the default external network (an
external network with ``is_default``). Nova's ``networks: "auto"`` boot uses it for a project
with no network of its own.

As Neutron: ``?fields=dry-run`` only checks that a topology could be built (409 when not), any
other field is a 400, a non-admin may only name their own project (403), the project ``None``
is the caller's, and one topology per project is kept by the table's primary key. Unlike
Neutron, the whole topology is written in one transaction, so nobody ever sees it half-built
(Neutron creates the network down and raises it at the end) and a concurrent duplicate rolls
back whole instead of being deleted afterwards.

Nefos has no subnet pools: the subnet is the first ``auto_allocated_subnet_prefixlen`` block of
``auto_allocated_subnet_pool`` overlapping none of the project's subnets, the external
networks' and the other topologies' (where Neutron takes one from the default subnet pool).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging

from sqlalchemy import or_, select
from sqlalchemy.exc import IntegrityError

from nefos import exceptions
from nefos.context import RequestContext
from nefos.db.models import AutoAllocatedTopology, Network, Port, Subnet
from nefos.control.network.networks import Networks
from nefos.control.network.routers import Routers
from nefos.control.network.store import NetworkStore

LOG = logging.getLogger(__name__)

CHECK_REQUIREMENTS = "dry-run"
# The ports a topology's network may have and still be deleted with it.
_TOPOLOGY_OWNERS = ("network:router_interface", "network:dhcp")


class AutoAllocatedTopologies:
    """``get_auto_allocated_topology`` / ``delete_auto_allocated_topology`` (bus and REST)."""

    def __init__(self, store: NetworkStore, cfg, networks: Networks, routers: Routers):
        self.store = store
        self.cfg = cfg
        self.networks = networks
        self.routers = routers
        # One build at a time per project in this process; the primary key settles the rest.
        self._locks: dict[str, asyncio.Lock] = {}

    async def get_auto_allocated_topology(self, ctx: RequestContext, project_id: str,
                                          fields: list[str] | None = None) -> dict:
        """``{"id": network id, "tenant_id", "project_id"}``, the topology built when missing; with
        ``fields=["dry-run"]`` only the check, answering ``id`` ``dry-run=pass``."""
        fields = list(fields or [])
        project_id = self.topology_project(ctx, project_id)
        if CHECK_REQUIREMENTS in fields:
            await self._check_requirements()
            return _response("dry-run=pass", project_id)
        if fields:
            raise exceptions.BadRequest(resource="auto_allocate", msg="Unrecognized field")
        network_id = await self._topology_network(project_id)
        if network_id is None:
            async with self._locks.setdefault(project_id, asyncio.Lock()):
                network_id = await self._topology_network(project_id)
                if network_id is None:
                    network_id = await self._build_topology(ctx, project_id)
        return _response(network_id, project_id)

    async def delete_auto_allocated_topology(self, ctx: RequestContext, project_id: str) -> None:
        """Remove the project's topology: the router's interfaces, the router, the network (409,
        and nothing removed, while guests still have ports on it)."""
        project_id = self.topology_project(ctx, project_id)
        async with self.store.reader() as s:
            topology = (await s.execute(select(AutoAllocatedTopology).where(
                AutoAllocatedTopology.project_id == project_id))).scalar_one_or_none()
            if topology is None:
                # Neutron reads (so builds) the topology before deleting it: without a default
                # external network that read is its 409.
                await self._default_external_network(s)
                return
            network_id, router_id = topology.network_id, topology.router_id
            in_use = (await s.execute(select(Port.id).where(
                Port.network_id == network_id, or_(Port.device_owner.is_(None),
                                                   Port.device_owner.notin_(_TOPOLOGY_OWNERS))).limit(1))).first()
            if in_use is not None:
                raise exceptions.NetworkInUse(net_id=network_id)
            subnet_ids = list((await s.execute(select(Subnet.id).where(Subnet.network_id == network_id))).scalars())
        admin = ctx.elevated()
        if router_id:
            for subnet_id in subnet_ids:
                await _ignore_not_found(self.routers.remove_router_interface(admin, router_id,
                                                                             {"subnet_id": subnet_id}))
            await _ignore_not_found(self.routers.delete_router(admin, router_id))
        await _ignore_not_found(self.networks.delete_network(admin, network_id))  # the topology row goes with it

    # Helpers ------------------------------------------------------------------------------------

    @staticmethod
    def topology_project(ctx: RequestContext, project_id: str) -> str:
        """The project a request names (``None``: the caller's); a non-admin's own only (403)."""
        if project_id == "None":  # a client that sent no project means the caller's
            project_id = ctx.project_id
        if not ctx.is_admin and project_id != ctx.project_id:
            raise exceptions.NotAuthorized()
        return project_id

    async def _topology_network(self, project_id: str) -> str | None:
        async with self.store.reader() as s:
            return (await s.execute(select(AutoAllocatedTopology.network_id).where(
                AutoAllocatedTopology.project_id == project_id))).scalar()

    @staticmethod
    async def _default_external_network(s) -> str:
        found = (await s.execute(select(Network.id).where(
            Network.external.is_(True), Network.is_default.is_(True)).order_by(Network.created_at))).scalars().all()
        if not found:
            LOG.error("no default external network: mark one is_default for auto-allocation to work")
            raise exceptions.AutoAllocationFailure(reason="No default router:external network")
        return found[0]

    def _pool(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        try:
            pool = ipaddress.ip_network(self.cfg.auto_allocated_subnet_pool)
            if not pool.prefixlen <= self.cfg.auto_allocated_subnet_prefixlen <= pool.max_prefixlen - 2:
                raise ValueError
            return pool
        except ValueError:
            raise exceptions.AutoAllocationFailure(reason="No default subnetpools defined")

    async def _check_requirements(self) -> None:
        async with self.store.reader() as s:
            await self._default_external_network(s)
        self._pool()

    async def _free_cidr(self, s, project_id: str) -> str:
        """The first block of the pool that overlaps no subnet the new one could meet."""
        pool = self._pool()
        taken = [ipaddress.ip_network(c) for c in (await s.execute(
            select(Subnet.cidr).join(Network, Network.id == Subnet.network_id).where(or_(
                Subnet.project_id == project_id, Network.project_id == project_id, Network.external.is_(True),
                Network.id.in_(select(AutoAllocatedTopology.network_id)))))).scalars()]
        taken = [t for t in taken if t.version == pool.version and t.overlaps(pool)]
        for candidate in pool.subnets(new_prefix=self.cfg.auto_allocated_subnet_prefixlen):
            if not any(candidate.overlaps(t) for t in taken):
                return str(candidate)
        raise exceptions.AutoAllocationFailure(reason="Unable to provide project private network")

    async def _build_topology(self, ctx: RequestContext, project_id: str) -> str:
        """Network, subnet, router and the topology's row, all in one transaction."""
        admin = ctx.elevated()  # the plugin's own calls, as Neutron's: no policy, the project's resources
        try:
            async with self.store.transaction() as s:
                external = await self._default_external_network(s)
                network = await self.networks.create_network_in(s, admin, {
                    "name": "auto_allocated_network", "project_id": project_id, "shared": False,
                    "admin_state_up": True})
                subnet = await self.networks.create_subnet_in(s, admin, {
                    "name": "auto_allocated_subnet_v4", "network_id": network["id"], "project_id": project_id,
                    "ip_version": self._pool().version, "cidr": await self._free_cidr(s, project_id)})
                try:
                    router = await self.routers.create_router_in(s, admin, {
                        "name": "auto_allocated_router", "project_id": project_id, "admin_state_up": True,
                        "external_gateway_info": {"network_id": external}})
                    await self.routers.add_router_interface_in(s, admin, router["id"], subnet["id"], None)
                except exceptions.Invalid as exc:  # no free gateway address, say
                    LOG.error("auto-allocated topology of project %s: no external connectivity (%s)",
                              project_id, exc)
                    raise exceptions.AutoAllocationFailure(reason="Unable to provide external connectivity")
                s.add(AutoAllocatedTopology(project_id=project_id, network_id=network["id"],
                                            router_id=router["id"]))
                await s.flush()
        except IntegrityError:
            # Another process built the project's topology first: ours rolled back, theirs stands.
            network_id = await self._topology_network(project_id)
            if network_id is None:
                raise
            return network_id
        LOG.info("auto-allocated topology of project %s: network %s, subnet %s, router %s",
                 project_id, network["id"], subnet["cidr"], router["id"])
        return network["id"]


def _response(network_id: str, project_id: str) -> dict:
    return {"id": network_id, "tenant_id": project_id, "project_id": project_id}


async def _ignore_not_found(call) -> None:
    """Concurrent deletes of one topology may interleave: what is already gone is fine (Neutron's)."""
    try:
        await call
    except exceptions.NotFound:
        pass
