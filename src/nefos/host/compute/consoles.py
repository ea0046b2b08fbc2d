"""Remote consoles on the compute host (Nova's ``ComputeManager.get_vnc_console``; the API's
checks are ``nefos.control.compute.consoles``).

The compute host asks its driver where the guest's VNC server listens, has the conductor store a
token for that host and port (``objects.console_auth_tokens``) and answers the URL of the console
proxy (``novncproxy_base_url``) carrying the token. The proxy asks the host again
(``validate_console_port``) before it connects, as Nova's does: a token for a console that has
since moved or gone is refused.

A ``spice-direct`` console (Compute API 2.99, Nova's ``get_spice_console``) is a token for the
guest's SPICE server itself (its host, port and TLS port), to be turned into those by a
SPICE-native proxy through ``os-console-auth-tokens``; its URL is ``spice_direct_proxy_base_url``
with the token.
"""

from __future__ import annotations

from nefos import exceptions
from nefos.clients.identity.catalog import endpoint_host


def novncproxy_base_url(cfg) -> str:
    """Nova's [vnc] novncproxy_base_url; by default the proxy of ``nefos up`` on this machine."""
    if cfg.novncproxy_base_url:
        return cfg.novncproxy_base_url
    return f"http://{endpoint_host(cfg)}:{cfg.novncproxy_port}/vnc_auto.html"


async def get_vnc_console(manager, ctx, instance_uuid: str, console_type: str) -> dict:
    """On the compute host: a token for the guest's VNC server, and the URL that carries it."""
    cfg = manager.rt.cfg
    if not cfg.vnc_enabled:
        raise exceptions.ConsoleTypeUnavailable(console_type=console_type)
    if console_type != "novnc":  # xvpvnc went with the XenAPI driver
        raise exceptions.ConsoleTypeInvalid(console_type=console_type)
    instance = await manager.conductor.instance_get(None, instance_uuid)
    try:
        console = await manager.driver.get_vnc_console(instance)
    except NotImplementedError:
        raise exceptions.NotSupported()
    except exceptions.InstanceNotFound:
        # The record is there but the guest is not (being built, or set aside by a migration).
        raise exceptions.InstanceNotReady(instance_id=instance_uuid)
    base = novncproxy_base_url(cfg)
    url = await manager.conductor.console_authorize(ctx, instance_uuid, console_type, console["host"],
                                                    console["port"], base, cfg.token_ttl,
                                                    internal_access_path=console.get("internal_access_path"))
    return {"url": url}


async def get_spice_console(manager, ctx, instance_uuid: str, console_type: str) -> dict:
    """On the compute host: a token for the guest's SPICE server (Nova's get_spice_console)."""
    cfg = manager.rt.cfg
    # As Nova's with [spice] disabled; spice-html5 too, as no SPICE HTML5 proxy is run here.
    if not cfg.spice_enabled or console_type == "spice-html5":
        raise exceptions.ConsoleTypeUnavailable(console_type=console_type)
    if console_type != "spice-direct":
        raise exceptions.ConsoleTypeInvalid(console_type=console_type)
    instance = await manager.conductor.instance_get(None, instance_uuid)
    try:
        console = await manager.driver.get_spice_console(instance)
    except NotImplementedError:
        # The driver's guests have no SPICE display (as a Nova host whose [spice] is disabled).
        raise exceptions.ConsoleTypeUnavailable(console_type=console_type)
    except exceptions.InstanceNotFound:
        raise exceptions.InstanceNotReady(instance_id=instance_uuid)
    base = cfg.spice_direct_proxy_base_url
    url = await manager.conductor.console_authorize(ctx, instance_uuid, console_type, console["host"],
                                                    console["port"], base, cfg.token_ttl,
                                                    internal_access_path=console.get("internal_access_path"),
                                                    tls_port=console.get("tls_port"))
    return {"url": url}


async def validate_console_port(manager, ctx, instance_uuid: str, port: int, console_type: str) -> bool:
    """Whether the guest's console is still at ``port`` on this host (Nova's validate_console_port)."""
    try:
        instance = await manager.conductor.instance_get(None, instance_uuid)
    except exceptions.InstanceNotFound:
        return False
    if instance.get("host") != manager.host or console_type != "novnc":
        return False
    try:
        console = await manager.driver.get_vnc_console(instance)
    except (NotImplementedError, exceptions.InstanceNotFound, exceptions.InstanceNotReady):
        return False
    return int(console["port"]) == int(port)
