"""Remote consoles: the API side's checks and the compute host's grant (Nova's
``compute.api.API.get_*_console`` and ``ComputeManager.get_vnc_console``).

The API side looks the server up for the caller, then checks as Nova does that it has a host
(409 ``InstanceNotReady``), that no delete or migration is under way and that it is in a state
whose guest has a display (409 ``InstanceInvalidState``). VNC and SPICE consoles exist here:
serial and MKS answer as a Nova whose other console types are disabled (400
``ConsoleTypeUnavailable``), and so does ``spice-html5`` (no SPICE HTML5 proxy is run). The
compute host asks its driver where the guest's VNC server listens, stores a token for that host and port (``objects.console_auth_tokens``) and answers the
URL of the console proxy (``novncproxy_base_url``) carrying the token. The proxy asks the host
again (``validate_console_port``) before it connects, as Nova's does: a token for a console that
has since moved or gone is refused.

A ``spice-direct`` console (Compute API 2.99, Nova's ``get_spice_console``) is a token for the
guest's SPICE server itself (its host, port and TLS port), to be turned into those by a
SPICE-native proxy through ``os-console-auth-tokens``; its URL is ``spice_direct_proxy_base_url``
with the token.
"""

from __future__ import annotations

from nefos import exceptions
from nefos.identity.catalog import endpoint_host
from nefos.objects import console_auth_tokens, instance as instance_obj, states

# vm_states whose guest has a running display (Nova rejects only deleting and migrating tasks; a
# stopped or suspended guest here has no VNC server to connect to).
DISPLAY_VM_STATES = (states.ACTIVE, states.PAUSED, states.RESCUED, states.RESIZED)
REJECTED_TASK_STATES = (states.DELETING, "migrating")
# The compute host's call for each protocol served here (Nova's get_<protocol>_console).
HOST_CALLS = {"vnc": "get_vnc_console", "spice": "get_spice_console"}


def novncproxy_base_url(cfg) -> str:
    """Nova's [vnc] novncproxy_base_url; by default the proxy of ``nefos up`` on this machine."""
    if cfg.novncproxy_base_url:
        return cfg.novncproxy_base_url
    return f"http://{endpoint_host(cfg)}:{cfg.novncproxy_port}/vnc_auto.html"


class ConsolesAPI:
    """The API side: the checks Nova's compute API makes before it asks the host."""

    def __init__(self, compute_api):
        self.compute_api = compute_api
        self.rpcapi = compute_api.compute_rpcapi

    @staticmethod
    def check_state(instance: dict, action: str) -> None:
        uuid = instance["uuid"]
        if not instance.get("host"):
            raise exceptions.InstanceNotReady(instance_id=uuid)
        if instance.get("task_state") in REJECTED_TASK_STATES:
            raise exceptions.InstanceInvalidState(action=action, instance_uuid=uuid, attr="task_state",
                                                  state=instance["task_state"])
        if instance.get("vm_state") not in DISPLAY_VM_STATES:
            raise exceptions.InstanceInvalidState(action=action, instance_uuid=uuid, attr="vm_state",
                                                  state=instance["vm_state"])

    async def get_console(self, ctx, instance: dict, protocol: str, console_type: str) -> str:
        """The console's URL (``protocol``: vnc, spice, serial or mks)."""
        self.check_state(instance, f"get_{protocol}_console")
        if protocol not in HOST_CALLS:  # as a compute host whose [serial_console] / [mks] are disabled
            raise exceptions.ConsoleTypeUnavailable(console_type=console_type)
        ask = getattr(self.rpcapi, HOST_CALLS[protocol])
        answer = await ask(ctx, instance["host"], instance["uuid"], console_type)
        return answer["url"]


async def get_vnc_console(manager, ctx, instance_uuid: str, console_type: str) -> dict:
    """On the compute host: a token for the guest's VNC server, and the URL that carries it."""
    cfg = manager.rt.cfg
    if not cfg.vnc_enabled:
        raise exceptions.ConsoleTypeUnavailable(console_type=console_type)
    if console_type != "novnc":  # xvpvnc went with the XenAPI driver
        raise exceptions.ConsoleTypeInvalid(console_type=console_type)
    instance = await instance_obj.get(manager.rt.db, instance_uuid)
    try:
        console = await manager.driver.get_vnc_console(instance)
    except NotImplementedError:
        raise exceptions.NotSupported()
    except exceptions.InstanceNotFound:
        # The record is there but the guest is not (being built, or set aside by a migration).
        raise exceptions.InstanceNotReady(instance_id=instance_uuid)
    base = novncproxy_base_url(cfg)
    token = await console_auth_tokens.authorize(
        manager.rt.db, console_type=console_type, host=console["host"], port=console["port"],
        internal_access_path=console.get("internal_access_path"), instance_uuid=instance_uuid,
        access_url_base=base, ttl=cfg.token_ttl)
    return {"url": console_auth_tokens.access_url(base, console_type, token)}


async def get_spice_console(manager, ctx, instance_uuid: str, console_type: str) -> dict:
    """On the compute host: a token for the guest's SPICE server (Nova's get_spice_console)."""
    cfg = manager.rt.cfg
    # As Nova's with [spice] disabled; spice-html5 too, as no SPICE HTML5 proxy is run here.
    if not cfg.spice_enabled or console_type == "spice-html5":
        raise exceptions.ConsoleTypeUnavailable(console_type=console_type)
    if console_type != "spice-direct":
        raise exceptions.ConsoleTypeInvalid(console_type=console_type)
    instance = await instance_obj.get(manager.rt.db, instance_uuid)
    try:
        console = await manager.driver.get_spice_console(instance)
    except NotImplementedError:
        # The driver's guests have no SPICE display (as a Nova host whose [spice] is disabled).
        raise exceptions.ConsoleTypeUnavailable(console_type=console_type)
    except exceptions.InstanceNotFound:
        raise exceptions.InstanceNotReady(instance_id=instance_uuid)
    base = cfg.spice_direct_proxy_base_url
    token = await console_auth_tokens.authorize(
        manager.rt.db, console_type=console_type, host=console["host"], port=console["port"],
        tls_port=console.get("tls_port"), internal_access_path=console.get("internal_access_path"),
        instance_uuid=instance_uuid, access_url_base=base, ttl=cfg.token_ttl)
    return {"url": console_auth_tokens.access_url(base, console_type, token)}


async def validate_console_port(manager, ctx, instance_uuid: str, port: int, console_type: str) -> bool:
    """Whether the guest's console is still at ``port`` on this host (Nova's validate_console_port)."""
    try:
        instance = await instance_obj.get(manager.rt.db, instance_uuid)
    except exceptions.InstanceNotFound:
        return False
    if instance.get("host") != manager.host or console_type != "novnc":
        return False
    try:
        console = await manager.driver.get_vnc_console(instance)
    except (NotImplementedError, exceptions.InstanceNotFound, exceptions.InstanceNotReady):
        return False
    return int(console["port"]) == int(port)
