"""The compute side's network client (Nova's neutronv2 API): validate, allocate and free ports.

Everything goes over the bus to the network service (topic ``network``);
this module never touches the network tables. ``allocate_for_instance``
follows Nova's: pick the available networks (the project's own and the
shared ones), refuse ambiguity, resolve security groups by name or id,
claim requested ports (the server's project's own only) and create the others,
and on any failure delete the ports it created and give back the pre-existing
ports it touched. A port is created with the caller's authority, so a server
gets nothing its project could not ask the Networking API for; only its binding
(``binding:host_id``) and the claims are the service's, as in Nova.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
from typing import Any

from nefos import exceptions
from nefos.bus import interfaces
from nefos.bus.payloads.network_info import VIF
from nefos.bus.versioning import NoSuchMethod, RPCClient, UnsupportedVersion
from nefos.context import RequestContext

LOG = logging.getLogger(__name__)

TOPIC = "network"


def _is_special(requested_networks) -> bool:
    return requested_networks is None or requested_networks in ("auto", "none") or requested_networks == []


def _restore_body(original: dict) -> dict:
    """The update that gives a claimed port back as it was."""
    return {"device_id": "", "device_owner": original.get("device_owner", ""),
            "binding:host_id": original.get("binding:host_id", ""),
            "binding:profile": original.get("binding:profile") or {}}


def _canonical_ip(address) -> str | None:
    """``address`` as the network service writes it (None: no address, or not one)."""
    if not address:
        return None
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return None


def _in_request_order(networks: list[dict], net_ids: list[str]) -> list[dict]:
    """``networks`` in the order of ``net_ids`` (each once); NetworkNotFound for one missing."""
    by_id = {n["id"]: n for n in networks}
    unique = list(dict.fromkeys(net_ids))
    for net_id in unique:
        if net_id not in by_id:
            raise exceptions.NetworkNotFound(net_id=net_id)
    return [by_id[i] for i in unique]


def check_port_usable(port: dict, project_id: str | None, instance_uuid: str | None = None) -> None:
    """Nova's checks of a port asked for by a server of ``project_id``: the project's own
    (PortNotUsable: a network's owner and an admin see other projects' ports, and may not take
    them), free (PortInUse) and with an address (PortRequiresFixedIP). ``instance_uuid`` None:
    the server is not made yet (a create's validation)."""
    if port.get("project_id") != project_id:
        if instance_uuid is None:
            raise exceptions.PortNotUsable(f"Port {port['id']} not usable for a server of project {project_id}.",
                                           port_id=port["id"], instance=None)
        raise exceptions.PortNotUsable(port_id=port["id"], instance=instance_uuid)
    if port.get("device_id"):
        raise exceptions.PortInUse(port_id=port["id"])
    if not port.get("fixed_ips"):
        raise exceptions.PortRequiresFixedIP(port_id=port["id"])


def network_rpc(bus) -> RPCClient:
    """The network service's client (topic ``network``): one Networking API operation a call,
    each declared in ``nefos.bus.interfaces.NETWORK``."""
    return RPCClient(bus, interfaces.NETWORK)


class NetworkAPI:
    def __init__(self, rt):
        self.rt = rt
        self.client = network_rpc(rt.bus)

    async def _call(self, ctx: RequestContext, method: str, **kwargs) -> Any:
        return await self.client.call(ctx, method, **kwargs)

    # The Compute API's proxies (os-networks, os-floating-ips, os-security-groups) ------------
    # Each as ``ctx``: the proxies pass the caller's own context, so the network service scopes
    # every look-up to the caller's project as Neutron does.

    async def list_networks(self, ctx: RequestContext, filters: dict | None = None) -> list[dict]:
        return await self._call(ctx, "list_networks", **({"filters": filters} if filters is not None else {}))

    async def get_network(self, ctx: RequestContext, network_id: str) -> dict:
        return await self._call(ctx, "get_network", network_id=network_id)

    async def list_ports(self, ctx: RequestContext, filters: dict, fields: list[str]) -> list[dict]:
        return await self._call(ctx, "list_ports", filters=filters, fields=fields)

    async def get_floatingip(self, ctx: RequestContext, floatingip_id: str) -> dict:
        return await self._call(ctx, "get_floatingip", floatingip_id=floatingip_id)

    async def list_floatingips(self, ctx: RequestContext, filters: dict) -> list[dict]:
        return await self._call(ctx, "list_floatingips", filters=filters)

    async def create_floatingip(self, ctx: RequestContext, floatingip: dict) -> dict:
        return await self._call(ctx, "create_floatingip", floatingip=floatingip)

    async def delete_floatingip(self, ctx: RequestContext, floatingip_id: str) -> None:
        await self._call(ctx, "delete_floatingip", floatingip_id=floatingip_id)

    async def get_security_group(self, ctx: RequestContext, security_group_id: str) -> dict:
        return await self._call(ctx, "get_security_group", security_group_id=security_group_id)

    async def list_security_groups(self, ctx: RequestContext, filters: dict) -> list[dict]:
        return await self._call(ctx, "list_security_groups", filters=filters)

    async def create_security_group(self, ctx: RequestContext, security_group: dict) -> dict:
        return await self._call(ctx, "create_security_group", security_group=security_group)

    async def update_security_group(self, ctx: RequestContext, security_group_id: str, security_group: dict) -> dict:
        return await self._call(ctx, "update_security_group", security_group_id=security_group_id,
                                security_group=security_group)

    async def delete_security_group(self, ctx: RequestContext, security_group_id: str) -> None:
        await self._call(ctx, "delete_security_group", security_group_id=security_group_id)

    async def create_security_group_rule(self, ctx: RequestContext, security_group_rule: dict) -> dict:
        return await self._call(ctx, "create_security_group_rule", security_group_rule=security_group_rule)

    async def get_security_group_rule(self, ctx: RequestContext, security_group_rule_id: str) -> dict:
        return await self._call(ctx, "get_security_group_rule", security_group_rule_id=security_group_rule_id)

    async def delete_security_group_rule(self, ctx: RequestContext, security_group_rule_id: str) -> None:
        await self._call(ctx, "delete_security_group_rule", security_group_rule_id=security_group_rule_id)

    # Helpers ------------------------------------------------------------------------------

    async def _available_networks(self, ctx: RequestContext, project_id: str | None,
                                  net_ids: list[str] | None = None, auto_allocate: bool = False) -> list[dict]:
        """The networks an instance of ``project_id`` may use, in ``net_ids`` order when given
        (``auto_allocate``: of the project's own, only those up, as Nova asks for)."""
        nets = await self._listed_networks(ctx, project_id, net_ids or None, auto_allocate)
        return _in_request_order(nets, net_ids) if net_ids else nets

    async def _listed_networks(self, ctx: RequestContext, project_id: str | None, net_ids: list[str] | None,
                               auto_allocate: bool) -> list[dict]:
        """``_available_networks`` by the Networking API's list (``net_ids`` not seen are left out)."""
        if net_ids is not None:
            unique = list(dict.fromkeys(net_ids))
            return await self._call(ctx, "list_networks", filters={"id": unique}) if unique else []
        filters = {"project_id": [project_id], "shared": [False]}
        if auto_allocate:
            filters["admin_state_up"] = [True]
        own = await self._call(ctx, "list_networks", filters=filters) if project_id else []
        shared = await self._call(ctx, "list_networks", filters={"shared": [True]})
        return own + shared

    async def _networks_for_instance(self, ctx: RequestContext, project_id: str | None, *,
                                     network_ids: list[str] | None = None, auto_allocate: bool = False,
                                     port_ids: list[str] | None = None,
                                     fixed_ips: list[tuple[str, str]] | None = None,
                                     port_quota: bool = False, with_subnets: bool = True) -> dict:
        """The network service's ``networks_for_instance`` (network 1.1: networks, their subnets,
        ports, fixed IPs taken, port quota in one call; ``network_ids`` None: the networks the
        project may pick; ``with_subnets`` False: the subnets only where ``fixed_ips`` needs them).
        A network service pinned below 1.1 or older than it gets the Networking API calls that
        method replaces."""
        kwargs = {"project_id": project_id, "network_ids": network_ids, "auto_allocate": auto_allocate,
                  "port_ids": list(port_ids or []), "fixed_ips": [list(f) for f in fixed_ips or []],
                  "port_quota": port_quota, "with_subnets": with_subnets}
        if await self.client.can_send_version("1.1"):
            try:
                return await self._call(ctx, "networks_for_instance", **kwargs)
            except (UnsupportedVersion, NoSuchMethod):
                LOG.debug("the network service does not serve networks_for_instance yet: asking by its "
                          "Networking API calls")
        return await self._networks_for_instance_by_calls(ctx, **kwargs)

    async def _networks_for_instance_by_calls(self, ctx: RequestContext, *, project_id: str | None,
                                              network_ids: list[str] | None, auto_allocate: bool,
                                              port_ids: list[str], fixed_ips: list[list[str]],
                                              port_quota: bool, with_subnets: bool) -> dict:
        admin = ctx.elevated()
        networks = await self._listed_networks(ctx, project_id, network_ids, auto_allocate)
        found = [n["id"] for n in networks]
        subnets = (await self._call(admin, "list_subnets", filters={"network_id": found})
                   if found and (with_subnets or fixed_ips) else [])
        ports = {}
        for port_id in dict.fromkeys(port_ids):
            try:
                ports[port_id] = await self._call(ctx, "get_port", port_id=port_id)
            except exceptions.PortNotFound:
                continue
        in_use = []
        for network_id, address in fixed_ips:
            if network_id in found and await self._call(admin, "list_ports", filters={
                    "network_id": [network_id], "fixed_ips": [f"ip_address={address}"]}):
                in_use.append([network_id, address])
        quota = None
        if port_quota and project_id:
            details = (await self._call(ctx, "get_quota_details", project_id=project_id))["port"]
            quota = {"limit": details["limit"], "used": details["used"]}
        return {"networks": networks, "subnets": subnets, "ports": ports, "fixed_ips_in_use": in_use,
                "port_quota": quota}

    @staticmethod
    def _check_attachable(ctx: RequestContext, net: dict) -> None:
        if net.get("router:external") and not net.get("shared") and not ctx.is_admin:
            raise exceptions.ExternalNetworkAttachForbidden(network_uuid=net["id"])

    async def _resolve_security_groups(self, ctx: RequestContext, project_id: str,
                                       names: list[str]) -> list[str]:
        if not names:
            return []
        admin = ctx.elevated()
        groups = await self._call(admin, "list_security_groups", filters={"project_id": [project_id]})
        ids = []
        for wanted in names:
            by_name = [g["id"] for g in groups if g["name"] == wanted]
            if len(by_name) > 1:
                raise exceptions.SecurityGroupAmbiguous(name=wanted)
            by_id = [g["id"] for g in groups if g["id"] == wanted]
            if by_name:
                ids.append(by_name[0])  # a name equal to another group's id wins, as in Nova
            elif by_id:
                ids.append(by_id[0])
            else:
                raise exceptions.SecurityGroupNotFound(id=wanted)
        return list(dict.fromkeys(ids))

    async def _vifs(self, ctx: RequestContext, ports: list[dict], preserve: set[str],
                    tags: dict[str, str | None] | None = None, nets: dict[str, dict] | None = None,
                    known_subnets: list[dict] | None = None, floating_of: set[str] | None = None) -> list[dict]:
        """Nova's network_info (a list of VIF payloads) for ``ports``, in their order (``nets`` by
        id and ``known_subnets``: what the caller has already; ``floating_of``: the only ports
        that may have floating IPs, None: any)."""
        if not ports:
            return []
        admin = ctx.elevated()
        net_ids = list(dict.fromkeys(p["network_id"] for p in ports))
        if nets is None or not set(net_ids) <= set(nets):
            nets = {n["id"]: n for n in await self._call(admin, "list_networks", filters={"id": net_ids})}
        subnets = {s["id"]: s for s in known_subnets or []}
        unknown = any(f["subnet_id"] not in subnets for p in ports for f in p.get("fixed_ips") or [])
        if known_subnets is None or unknown:  # (a subnet made since they were read)
            subnets = {s["id"]: s for s in await self._call(admin, "list_subnets",
                                                            filters={"network_id": net_ids})}
        floating: dict[tuple[str, str], list[str]] = {}  # (port, fixed address) -> its floating addresses
        may_float = [p["id"] for p in ports if floating_of is None or p["id"] in floating_of]
        fips = await self._call(admin, "list_floatingips", filters={"port_id": may_float}) if may_float else []
        for fip in fips:
            floating.setdefault((fip["port_id"], fip["fixed_ip_address"]), []).append(fip["floating_ip_address"])
        vifs = []
        for port in ports:
            net = nets.get(port["network_id"], {"id": port["network_id"], "name": "", "mtu": 1500})
            vif_subnets: dict[str, dict] = {}
            for fixed in port.get("fixed_ips") or []:
                sub = subnets.get(fixed["subnet_id"])
                if sub is None:
                    continue
                entry = vif_subnets.setdefault(sub["id"], {
                    "cidr": sub["cidr"], "gateway": sub["gateway_ip"], "ip_version": sub["ip_version"],
                    "ips": [],
                    "dns": [{"address": ns, "type": "dns", "version": ipaddress.ip_address(ns).version}
                            for ns in sub.get("dns_nameservers") or []],
                    "routes": [{"cidr": r["destination"], "gateway": r["nexthop"]}
                               for r in sub.get("host_routes") or []],
                })
                ip = {"address": fixed["ip_address"], "type": "fixed",
                      "version": ipaddress.ip_address(fixed["ip_address"]).version}
                if (port["id"], fixed["ip_address"]) in floating:  # Nova's FixedIP.floating_ips
                    ip["floating_ips"] = [{"address": a, "type": "floating", "version": 4}
                                          for a in sorted(floating[port["id"], fixed["ip_address"]])]
                entry["ips"].append(ip)
            vif = {
                "id": port["id"], "address": port["mac_address"],
                "type": port.get("binding:vif_type") if port.get("binding:vif_type") not in (None, "unbound")
                else "bridge",
                "devname": "tap" + port["id"][:11], "active": port["status"] == "ACTIVE",
                "preserve_on_delete": port["id"] in preserve,
                "vnic_type": port.get("binding:vnic_type", "normal"),
                "details": port.get("binding:vif_details") or {},
                "profile": port.get("binding:profile") or {},
                "network": {"id": net["id"], "label": net.get("name", ""), "bridge": "brq" + net["id"][:11],
                            "mtu": net.get("mtu"), "subnets": list(vif_subnets.values())},
            }
            if tags and tags.get(port["id"]):
                vif["tag"] = tags[port["id"]]
            vifs.append(VIF(vif))
        return vifs

    async def _check_auto_allocation(self, ctx: RequestContext, project_id: str | None) -> None:
        """Nova's ``_can_auto_allocate_network``: Neutron's dry run, its 409 our 400."""
        try:
            await self._call(ctx, "get_auto_allocated_topology", project_id=project_id, fields=["dry-run"])
        except exceptions.Conflict as exc:
            LOG.debug("unable to auto-allocate networks: %s", exc)
            raise exceptions.UnableToAutoAllocateNetwork(project_id=project_id)

    async def _auto_allocated_network(self, ctx: RequestContext, project_id: str) -> dict:
        """Nova's ``_auto_allocate_network``: the project's auto-allocated network, built if need be."""
        try:
            topology = await self._call(ctx, "get_auto_allocated_topology", project_id=project_id)
            return await self._call(ctx, "get_network", network_id=topology["id"])
        except (exceptions.Conflict, exceptions.NetworkNotFound):
            raise exceptions.UnableToAutoAllocateNetwork(project_id=project_id)

    async def _ports_of(self, admin: RequestContext, instance_uuid: str, project_id: str | None) -> list[dict]:
        """The ports of the instance: those naming it (``device_id``) *and of its project*, as Nova
        lists them (``tenant_id``): any project may name any device, and a port another project made
        naming the server is no part of it (never listed, bound, plugged or deleted for it)."""
        return await self._call(admin, "list_ports", filters={"device_id": [instance_uuid],
                                                              "project_id": [project_id or ""]})

    def _device(self, instance: dict) -> dict:
        """What marks a port as the instance's: its ``device_id`` and compute ``device_owner``."""
        zone = instance.get("availability_zone") or self.rt.cfg.default_availability_zone
        return {"device_id": instance["uuid"], "device_owner": f"compute:{zone}"}

    async def _create_bound_port(self, ctx: RequestContext, body: dict, host: str) -> dict:
        """A port made from ``body`` with the caller's authority (``ctx``) and bound to ``host`` with
        the service's (``binding:host_id`` is an admin's attribute), as Nova creates a server's port
        with the user's token and binds it with its admin client: one call to a network service
        serving 1.2 (``create_port(binding_host_id)``), else the create and an admin's
        ``update_port`` of the binding. The port as an admin sees it (no ``host``: as the caller does)."""
        if not host:
            return await self._call(ctx, "create_port", port=body)
        if await self.client.can_send_version("1.2"):
            try:
                return await self._call(ctx, "create_port", port=body, binding_host_id=host)
            except UnsupportedVersion:  # refused before it ran: nothing was made
                LOG.debug("the network service does not bind a port as it creates it yet: binding it after")
        port = await self._call(ctx, "create_port", port=body)
        admin = ctx.elevated()
        try:
            return await self._call(admin, "update_port", port_id=port["id"], port={"binding:host_id": host},
                                    expected_device_id=body["device_id"])
        except BaseException:  # all or nothing, as the one call is
            with contextlib.suppress(Exception):
                await self._call(admin, "delete_port", port_id=port["id"])
            raise

    # The API compute calls -----------------------------------------------------------------

    async def validate_networks(self, ctx: RequestContext, requested_networks, num_instances: int) -> int:
        """Check a create request's networks; how many instances the port quota allows.

        Raises NetworkNotFound, PortNotFound, PortInUse, PortRequiresFixedIP, NetworkAmbiguous,
        NetworkRequiresSubnet, FixedIpAlreadyInUse, InvalidIpAddress,
        ExternalNetworkAttachForbidden or UnableToAutoAllocateNetwork.
        """
        if requested_networks == "none":
            return num_instances
        project = ctx.project_id
        special = _is_special(requested_networks)
        # Everything the checks below read, in one call; the checks then run in the request's
        # order, so the first bad entry is the one reported.
        requests = [] if special else list(requested_networks)
        port_ids = [r["port"] for r in requests if r.get("port")]
        on_networks = [r for r in requests if not r.get("port") and r.get("uuid")]
        known = await self._networks_for_instance(
            ctx, project, network_ids=None if special else [r["uuid"] for r in on_networks], port_ids=port_ids,
            fixed_ips=[(r["uuid"], ip) for r in on_networks if (ip := _canonical_ip(r.get("fixed_ip")))],
            port_quota=bool(special or on_networks), with_subnets=False)
        ports_needed = 0
        if special:
            nets = known["networks"]
            if len(nets) > 1:
                raise exceptions.NetworkAmbiguous()
            if not nets and requested_networks != "auto":
                return num_instances
            if not nets:  # built with the first port: only check that it can be
                await self._check_auto_allocation(ctx, project)
            to_check = [(nets[0], None)] if nets else []
            ports_needed = 1
        else:
            requested = []
            for req in requested_networks:
                port_id = req.get("port")
                if port_id:
                    port = known["ports"].get(port_id)
                    if port is None:
                        raise exceptions.PortNotFound(port_id=port_id)
                    check_port_usable(port, project)
                    continue
                net_id = req.get("uuid")
                if not net_id:
                    raise exceptions.NetworkNotFound(net_id=net_id)
                fixed_ip = req.get("fixed_ip")
                if fixed_ip:
                    fixed_ip = _canonical_ip(fixed_ip)
                    if fixed_ip is None:
                        raise exceptions.InvalidIpAddress(address=req.get("fixed_ip"))
                requested.append((net_id, fixed_ip))
                ports_needed += 1
            nets = _in_request_order(known["networks"], [n for n, _ in requested])
            by_id = {n["id"]: n for n in nets}
            to_check = [(by_id[n], ip) for n, ip in requested]
        in_use = {tuple(pair) for pair in known["fixed_ips_in_use"]}
        for net, fixed_ip in to_check:
            self._check_attachable(ctx, net)
            if not net.get("subnets"):
                raise exceptions.NetworkRequiresSubnet(network_uuid=net["id"])
            if fixed_ip:
                subnets = [s for s in known["subnets"] if s["network_id"] == net["id"]]
                if not any(ipaddress.ip_address(fixed_ip) in ipaddress.ip_network(s["cidr"]) for s in subnets):
                    raise exceptions.InvalidIpForNetwork(ip_address=fixed_ip)
                for subnet in subnets:  # the network service refuses it too; here before the server is made
                    if subnet.get("gateway_ip") == fixed_ip:
                        raise exceptions.InvalidIpForSubnet.gateway_held(fixed_ip, subnet["id"])
                if (net["id"], fixed_ip) in in_use:
                    raise exceptions.FixedIpAlreadyInUse(address=fixed_ip, net_id=net["id"])
        if not ports_needed or not project:
            return num_instances
        quota = known["port_quota"]
        if quota["limit"] < 0:
            return num_instances
        free = max(quota["limit"] - quota["used"], 0)
        return min(num_instances, free // ports_needed)

    async def validate_security_groups(self, ctx: RequestContext, names: list[str]) -> None:
        """The create-time check (Nova's ``_check_requested_secgroups``): every requested group but
        "default" (made on first use) exists in the caller's project, by name or id.

        Raises SecurityGroupNotFound or SecurityGroupAmbiguous.
        """
        await self._resolve_security_groups(ctx, ctx.project_id, [n for n in names if n != "default"])

    async def allocate_for_instance(self, ctx: RequestContext, instance: dict, requested_networks,
                                    security_groups: list[str]) -> list[dict]:
        """Create or claim the instance's ports and return its network_info (all or nothing)."""
        project = instance.get("project_id")
        if not project:
            raise exceptions.Invalid(f"empty project id for instance {instance.get('uuid')}")
        if requested_networks == "none":
            return []
        uuid = instance["uuid"]
        admin = ctx.elevated()
        # 1. Requested ports: they must exist, be the caller's and be free.
        ordered: list[dict] = []  # {"network_id", "port", "fixed_ip", "tag"}
        existing: dict[str, dict] = {}
        if not _is_special(requested_networks):
            for req in requested_networks:
                entry = {"network_id": req.get("uuid"), "port": req.get("port"),
                         "fixed_ip": req.get("fixed_ip"), "tag": req.get("tag")}
                if entry["port"]:
                    port = await self._call(ctx, "get_port", port_id=entry["port"])
                    check_port_usable(port, project, uuid)
                    # what to restore on failure, binding included (only an admin sees it)
                    existing[port["id"]] = await self._call(admin, "get_port", port_id=port["id"])
                    entry["network_id"] = port["network_id"]
                ordered.append(entry)
        # 2. The available networks; without a request exactly one may be there.
        net_ids = [e["network_id"] for e in ordered if e["network_id"]]
        known = await self._networks_for_instance(ctx, project, network_ids=net_ids or None,
                                                  auto_allocate=requested_networks == "auto")
        nets = _in_request_order(known["networks"], net_ids) if net_ids else known["networks"]
        if _is_special(requested_networks):
            if not nets and requested_networks == "auto":
                nets = [await self._auto_allocated_network(ctx, project)]
            if not nets:
                LOG.warning("instance %s: no network configured", uuid)
                return []
            if len(nets) > 1:
                raise exceptions.NetworkAmbiguous()
            ordered = [{"network_id": nets[0]["id"], "port": None, "fixed_ip": None, "tag": None}]
        by_id = {n["id"]: n for n in nets}
        for net in nets:
            self._check_attachable(ctx, net)
        # 3. Security groups by name or id within the instance's project. Just "default" needs no
        # look-up: a port created without security groups gets the project's default group
        # (made on first use), wherever the client would have passed it.
        only_default = list(security_groups or []) in ([], ["default"])
        group_ids = [] if only_default else await self._resolve_security_groups(
            ctx, project, list(security_groups or []))
        # 4. Claim or create, undoing everything on the first failure.
        device = self._device(instance)
        host = instance.get("host") or ""
        created: list[str] = []
        touched: dict[str, dict] = {}  # port id -> what to restore
        port_ids: list[str] = []
        tags: dict[str, str | None] = {}
        ports: list[dict] = []  # the admin views of the ports as created or claimed
        try:
            for entry in ordered:
                net = by_id[entry["network_id"]]
                if entry["port"]:
                    port = await self._call(admin, "update_port", port_id=entry["port"],
                                            port={**device, "binding:host_id": host}, expected_device_id="")
                    touched[entry["port"]] = _restore_body(existing[entry["port"]])
                    port_ids.append(entry["port"])
                    ports.append(port)
                else:
                    body = {"network_id": net["id"], "project_id": project, "admin_state_up": True, **device}
                    if entry["fixed_ip"]:
                        body["fixed_ips"] = [{"ip_address": entry["fixed_ip"]}]
                    if group_ids:
                        if not (net.get("subnets") and net.get("port_security_enabled", True)):
                            if not only_default:
                                raise exceptions.SecurityGroupCannotBeApplied()
                        else:
                            body["security_groups"] = group_ids
                    port = await self._create_bound_port(ctx, body, host)
                    created.append(port["id"])
                    port_ids.append(port["id"])
                    ports.append(port)
                tags[port_ids[-1]] = entry.get("tag")
            # A port made here has no floating IP yet: only the claimed ones may.
            return await self._vifs(ctx, ports, set(touched), tags, nets=by_id, known_subnets=known["subnets"],
                                    floating_of=set(touched))
        except BaseException:
            await self._undo(admin, uuid, project, created, touched, existing)
            raise

    async def _undo(self, admin: RequestContext, device_id: str, project_id: str, created: list[str],
                    touched: dict[str, dict], existing: dict[str, dict]) -> None:
        try:
            # A call whose reply never reached us (cancelled, timed out) may still have claimed
            # or created a port for the instance: find those by device_id too. The user's own
            # ports are given back, never deleted.
            for port in await self._ports_of(admin, device_id, project_id):
                if port["id"] in existing:
                    touched.setdefault(port["id"], _restore_body(existing[port["id"]]))
                elif port["id"] not in created:
                    created.append(port["id"])
        except Exception:
            LOG.exception("failed to list the ports of %s", device_id)
        for port_id, original in touched.items():
            try:
                await self._call(admin, "update_port", port_id=port_id, port=original,
                                 expected_device_id=device_id)
            except (exceptions.PortNotFound, exceptions.PortInUse):
                pass  # gone, or no longer ours to give back
            except Exception:
                LOG.exception("failed to restore port %s", port_id)
        for port_id in created:
            try:
                await self._call(admin, "delete_port", port_id=port_id)
            except exceptions.PortNotFound:
                pass
            except Exception:
                LOG.exception("failed to delete port %s", port_id)

    # One port on a running server (os-interface) ----------------------------------------------

    async def allocate_port_for_instance(self, ctx: RequestContext, instance: dict, *, network_id: str | None = None,
                                         port_id: str | None = None, fixed_ip: str | None = None,
                                         tag: str | None = None) -> dict:
        """Bind one more port to the instance: the caller's free ``port_id``, or a new port on
        ``network_id`` (with ``fixed_ip`` when given; without a network, the one network the
        project has). Returns its VIF (``preserve_on_delete`` for the caller's own port). Unlike
        ``allocate_for_instance`` a failure only undoes this port: the instance's others stay.

        Raises PortNotFound, PortInUse, PortRequiresFixedIP, NetworkNotFound,
        InterfaceAttachFailedNoNetwork, NetworkAmbiguous, NetworkRequiresSubnet,
        ExternalNetworkAttachForbidden, and what the network service refuses (FixedIpAlreadyInUse,
        InvalidIpForNetwork, IpAddressGenerationFailure, port quota).
        """
        project = instance["project_id"]
        uuid = instance["uuid"]
        admin = ctx.elevated()
        device = self._device(instance)
        host = instance.get("host") or ""
        if port_id:
            port = await self._call(ctx, "get_port", port_id=port_id)  # one the caller may not see: PortNotFound
            check_port_usable(port, project, uuid)
            original = await self._call(admin, "get_port", port_id=port_id)
            nets = await self._call(admin, "list_networks", filters={"id": [port["network_id"]]})
            for net in nets:
                self._check_attachable(ctx, net)
            port = await self._call(admin, "update_port", port_id=port_id, port={**device, "binding:host_id": host},
                                    expected_device_id="")
            try:
                return (await self._vifs(ctx, [port], {port_id}, {port_id: tag}))[0]
            except BaseException:
                with contextlib.suppress(Exception):
                    await self._call(admin, "update_port", port_id=port_id, port=_restore_body(original),
                                     expected_device_id=uuid)
                raise
        if network_id:
            (net,) = await self._available_networks(ctx, project, [network_id])
        else:
            nets = await self._available_networks(ctx, project)
            if not nets:
                raise exceptions.InterfaceAttachFailedNoNetwork(project_id=project)
            if len(nets) > 1:
                raise exceptions.NetworkAmbiguous()
            (net,) = nets
        self._check_attachable(ctx, net)
        if not net.get("subnets"):
            raise exceptions.NetworkRequiresSubnet(network_uuid=net["id"])
        body = {"network_id": net["id"], "project_id": project, "admin_state_up": True, **device}
        if fixed_ip:
            body["fixed_ips"] = [{"ip_address": fixed_ip}]
        port = await self._create_bound_port(ctx, body, host)
        try:
            return (await self._vifs(ctx, [port], set(), {port["id"]: tag}, nets={net["id"]: net},
                                     floating_of=set()))[0]
        except BaseException:
            with contextlib.suppress(Exception):
                await self._call(admin, "delete_port", port_id=port["id"])
            raise

    async def deallocate_port_for_instance(self, ctx: RequestContext, instance: dict, vif: dict) -> None:
        """Take one port off the instance: deleted when it was made for it, unbound (given back
        as it was before) when it is the user's own (``preserve_on_delete``); idempotent."""
        admin = ctx.elevated()
        try:
            if vif.get("preserve_on_delete"):
                await self._call(admin, "update_port", port_id=vif["id"], port={
                    "device_id": "", "device_owner": "", "binding:host_id": "", "binding:profile": {}},
                    expected_device_id=instance["uuid"])
            else:
                await self._call(admin, "delete_port", port_id=vif["id"])
        except (exceptions.PortNotFound, exceptions.PortInUse):
            pass  # already gone, or already given to someone else

    async def instance_ports(self, ctx: RequestContext, instance: dict) -> list[dict]:
        """The ports bound to the instance (the caller may see the instance: checked before)."""
        return await self._ports_of(ctx.elevated(), instance["uuid"], instance.get("project_id"))

    async def port_vif(self, ctx: RequestContext, port: dict, *, preserve: bool, tag: str | None) -> dict:
        """One port's VIF, as the instance's network_info holds it (``preserve``: the user's own
        port, unbound, not deleted, with the instance)."""
        return (await self._vifs(ctx, [port], {port["id"]} if preserve else set(), {port["id"]: tag}))[0]

    async def show_port(self, ctx: RequestContext, port_id: str, *, as_caller: bool = False) -> dict:
        """The port (``as_caller``: as the caller sees it, PortNotFound when it may not)."""
        return await self._call(ctx if as_caller else ctx.elevated(), "get_port", port_id=port_id)

    @staticmethod
    def _preserved(instance: dict, network_info: list[dict] | None) -> set[str]:
        """The user's own ports (unbind on delete): from network_info, or the original request."""
        keep = {vif["id"] for vif in network_info or [] if vif.get("preserve_on_delete")}
        requested = instance.get("requested_networks")
        if isinstance(requested, list):
            keep |= {r["port"] for r in requested if isinstance(r, dict) and r.get("port")}
        return keep

    async def devices_holding_ports(self, ctx: RequestContext, devices: dict[str, str]) -> set[str]:
        """Which of the instances ``devices`` (uuid: project) still have ports (of their project)."""
        ports = await self._call(ctx.elevated(), "list_ports", filters={"device_id": list(devices)},
                                 fields=["device_id", "project_id"])
        return {p["device_id"] for p in ports if p["project_id"] == devices[p["device_id"]]}

    async def deallocate_for_instance(self, ctx: RequestContext, instance: dict,
                                      network_info: list[dict] | None = None) -> None:
        """Delete the ports made for the instance and unbind the user's own; idempotent."""
        admin = ctx.elevated()
        uuid = instance["uuid"]
        ports = await self._ports_of(admin, uuid, instance.get("project_id"))
        keep = self._preserved(instance, network_info)
        listed = {p["id"] for p in ports}
        for vif in network_info or []:
            # A port of the cache no longer pointing at the instance (its binding was already
            # undone) is still deleted if it was ours, never if it now serves another device.
            if vif["id"] not in listed and vif["id"] not in keep:
                try:
                    port = await self._call(admin, "get_port", port_id=vif["id"])
                except exceptions.PortNotFound:
                    continue
                if port.get("device_id") in ("", uuid) and port.get("project_id") == instance.get("project_id"):
                    ports.append(port)
        for port in ports:
            try:
                if port["id"] in keep:
                    await self._call(admin, "update_port", port_id=port["id"], port={
                        "device_id": "", "device_owner": "", "binding:host_id": "", "binding:profile": {}},
                        expected_device_id=uuid)
                else:
                    await self._call(admin, "delete_port", port_id=port["id"])
            except (exceptions.PortNotFound, exceptions.PortInUse):
                pass  # already gone, or already given to someone else

    async def change_instance_security_group(self, ctx: RequestContext, instance: dict, name: str,
                                             add: bool) -> None:
        """addSecurityGroup / removeSecurityGroup: the group (a name or id in the server's project) on or
        off every port of the server. 400 when it is already on / not on the server, 404 when unknown."""
        admin = ctx.elevated()
        (group_id,) = await self._resolve_security_groups(ctx, instance["project_id"], [name])
        ports = await self._ports_of(admin, instance["uuid"], instance.get("project_id"))
        if not ports:
            raise exceptions.Invalid(f"Server {instance['uuid']} has no ports to apply security group {name} to")
        on = [p for p in ports if group_id in (p.get("security_groups") or [])]
        if add and len(on) == len(ports):
            raise exceptions.Invalid(f"Security group {name} is already associated with the instance "
                                     f"{instance['uuid']}")
        if not add and not on:
            raise exceptions.Invalid(f"Security group {name} not associated with the instance {instance['uuid']}")
        for port in ports:
            groups = [g for g in port.get("security_groups") or [] if g != group_id]
            if add:
                groups.append(group_id)
            if groups != list(port.get("security_groups") or []):
                await self._call(admin, "update_port", port_id=port["id"], port={"security_groups": groups},
                                 expected_device_id=instance["uuid"])

    async def _floating_ip_by_address(self, ctx: RequestContext, address: str) -> dict:
        """The floating IP at ``address`` the caller may see (Nova's ``_get_floating_ip_by_address``)."""
        fips = await self._call(ctx, "list_floatingips", filters={"floating_ip_address": [address]})
        if not fips:
            raise exceptions.FloatingIpNotFoundForAddress(address=address)
        if len(fips) > 1:
            raise exceptions.FloatingIpMultipleFoundForAddress(address=address)
        return fips[0]

    async def associate_floating_ip(self, ctx: RequestContext, instance: dict, floating_address: str,
                                    fixed_address: str) -> dict:
        """addFloatingIp: the caller's floating IP at ``floating_address`` onto the server's port holding
        ``fixed_address`` (moved there when it was associated elsewhere, as Neutron does); the floating
        IP as it was. FixedIpNotFoundForAddress, FloatingIpNotFoundForAddress, and
        FloatingIpAssociateFailed for the network service's conflicts (that fixed address has a
        floating IP on that network already)."""
        ports = await self.instance_ports(ctx, instance)
        port_id = next((p["id"] for p in ports for f in p.get("fixed_ips") or []
                        if f["ip_address"] == fixed_address), None)
        if port_id is None:
            raise exceptions.FixedIpNotFoundForAddress(address=fixed_address)
        fip = await self._floating_ip_by_address(ctx, floating_address)
        try:
            await self._call(ctx, "update_floatingip", floatingip_id=fip["id"],
                             floatingip={"port_id": port_id, "fixed_ip_address": fixed_address})
        except exceptions.Conflict as exc:
            raise exceptions.FloatingIpAssociateFailed(reason=str(exc)) from None
        return fip

    async def disassociate_floating_ip(self, ctx: RequestContext, instance: dict, address: str) -> dict:
        """removeFloatingIp: the caller's floating IP at ``address`` off the server's port; the floating
        IP as it was. FloatingIpNotFoundForAddress, FloatingIpNotAssociatedWithInstance when it is not
        on one of the server's ports."""
        fip = await self._floating_ip_by_address(ctx, address)
        device = None
        if fip.get("port_id"):
            try:
                device = (await self.show_port(ctx, fip["port_id"])).get("device_id")
            except exceptions.PortNotFound:
                device = None
        if device != instance["uuid"]:
            raise exceptions.FloatingIpNotAssociatedWithInstance(address=address, instance=instance["uuid"])
        await self._call(ctx, "update_floatingip", floatingip_id=fip["id"], floatingip={"port_id": None})
        return fip

    async def add_fixed_ip_to_instance(self, ctx: RequestContext, instance: dict, network_id: str) -> dict:
        """addFixedIp: one more fixed IP on the server's port on ``network_id``, from the first of that
        network's subnets able to give one (Nova's neutron API: the port keeps its other addresses);
        the port as updated. NoFixedIpForNetwork when the server has no port there or no subnet gave
        an address."""
        admin = ctx.elevated()
        subnets = await self._call(admin, "list_subnets", filters={"network_id": [network_id]})
        ports = [p for p in await self.instance_ports(ctx, instance) if p["network_id"] == network_id]
        for port in ports:
            kept = [{"subnet_id": f["subnet_id"], "ip_address": f["ip_address"]} for f in port["fixed_ips"]]
            for subnet in subnets:
                try:
                    return await self._call(admin, "update_port", port_id=port["id"],
                                            port={"fixed_ips": [*kept, {"subnet_id": subnet["id"]}]},
                                            expected_device_id=instance["uuid"])
                except (exceptions.Invalid, exceptions.Conflict):
                    continue  # that subnet is full (or refuses): the next one
        raise exceptions.NoFixedIpForNetwork(network_id=network_id, instance_uuid=instance["uuid"])

    async def remove_fixed_ip_from_instance(self, ctx: RequestContext, instance: dict, address: str) -> dict:
        """removeFixedIp: ``address`` off the server's port holding it (its other addresses kept); the
        port as updated. FixedIpNotFoundForInstance when none of the server's ports holds it."""
        for port in await self.instance_ports(ctx, instance):
            if any(f["ip_address"] == address for f in port["fixed_ips"]):
                kept = [{"subnet_id": f["subnet_id"], "ip_address": f["ip_address"]}
                        for f in port["fixed_ips"] if f["ip_address"] != address]
                return await self._call(ctx.elevated(), "update_port", port_id=port["id"],
                                        port={"fixed_ips": kept}, expected_device_id=instance["uuid"])
        raise exceptions.FixedIpNotFoundForInstance(instance_uuid=instance["uuid"], ip=address)

    async def setup_instance_network_on_host(self, ctx: RequestContext, instance: dict,
                                             host: str | None) -> list[dict]:
        """Bind the instance's ports to ``host`` (None: unbind them, as a shelve offload leaves
        them); returns the network_info. Nova's name for a move's port binding update."""
        admin = ctx.elevated()
        ports = await self._ports_of(admin, instance["uuid"], instance.get("project_id"))
        for port in ports:
            if (port.get("binding:host_id") or "") != (host or ""):
                await self._call(admin, "update_port", port_id=port["id"],
                                 port={"binding:host_id": host or ""}, expected_device_id=instance["uuid"])
        return await self.get_instance_nw_info(ctx, instance)

    async def get_instance_nw_info(self, ctx: RequestContext, instance: dict) -> list[dict]:
        """The instance's network_info from its ports now (in the cached order where known)."""
        admin = ctx.elevated()
        ports = await self._ports_of(admin, instance["uuid"], instance.get("project_id"))
        cached = instance.get("network_info") or []
        order = {vif["id"]: i for i, vif in enumerate(cached)}
        ports.sort(key=lambda p: (order.get(p["id"], len(order)), p.get("created_at") or "", p["id"]))
        tags = {vif["id"]: vif.get("tag") for vif in cached}
        return await self._vifs(ctx, ports, self._preserved(instance, cached), tags)
