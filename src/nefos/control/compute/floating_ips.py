"""A server's floating IPs through its actions (Nova's ``addFloatingIp`` / ``removeFloatingIp``, the
floating_ips API controller up to 2.43), on the API side.

The floating IPs are the Networking API's (``nefos.control.network.floating_ips``), reached through
``nefos.clients.network``; nothing reaches the compute host. As Nova's:

* addFloatingIp: the fixed address is ``fixed_address`` when given (400 when none of the server's
  ports holds it), else the server's first IPv4 fixed address (400 when the server has no network
  yet, no fixed IP, or no IPv4 one); a floating IP the caller cannot see is 404; one associated
  with another port (this server's or another's) is moved, as Neutron moves it; the network
  service's refusals (that fixed address has a floating IP on that network already, no router
  to the floating IP's network, another project's port) are 400.
* removeFloatingIp: 404 for an unknown floating IP, 409 when it is not on one of the server's
  ports.
"""

from __future__ import annotations

import ipaddress

from nefos import exceptions


def fixed_addresses(instance: dict) -> list[str]:
    """The server's fixed addresses, in its network_info order."""
    return [ip["address"] for vif in instance.get("network_info") or []
            for subnet in (vif.get("network") or {}).get("subnets") or []
            for ip in subnet.get("ips") or [] if ip.get("type", "fixed") == "fixed"]


def choose_fixed_address(instance: dict, floating_address: str, fixed_address: str | None) -> str:
    if not instance.get("network_info"):
        raise exceptions.Invalid("Instance network is not ready yet")
    fixed = fixed_addresses(instance)
    if not fixed:
        raise exceptions.Invalid("No fixed IPs associated to instance")
    if fixed_address is not None:
        if fixed_address not in fixed:
            raise exceptions.Invalid("Specified fixed address not assigned to instance")
        return fixed_address
    for address in fixed:
        if ipaddress.ip_address(address).version == 4:
            return address
    raise exceptions.Invalid(f"Unable to associate floating IP {floating_address} to any fixed IPs for instance "
                             f"{instance['uuid']}. Instance has no fixed IPv4 addresses to associate.")


async def add_floating_ip(network_api, ctx, instance: dict, address: str, fixed_address: str | None) -> None:
    fixed = choose_fixed_address(instance, address, fixed_address)
    try:
        await network_api.associate_floating_ip(ctx, instance, address, fixed)
    except exceptions.FloatingIpNotFoundForAddress:
        raise exceptions.NotFound("floating IP not found") from None
    except exceptions.FixedIpNotFoundForAddress:
        raise exceptions.Invalid("Specified fixed address not assigned to instance") from None
    except (exceptions.FloatingIpAssociateFailed, exceptions.Invalid, exceptions.NotFound) as exc:
        # Nova answers the network service's refusals with a 400 naming them.
        raise exceptions.Invalid(f"Unable to associate floating IP {address} to fixed IP {fixed} for instance "
                                 f"{instance['uuid']}. Error: {exc}") from None


async def remove_floating_ip(network_api, ctx, instance: dict, address: str) -> None:
    try:
        await network_api.disassociate_floating_ip(ctx, instance, address)
    except exceptions.FloatingIpNotFoundForAddress:
        raise exceptions.NotFound("floating IP not found") from None
