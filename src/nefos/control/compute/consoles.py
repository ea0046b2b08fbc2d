"""Remote consoles, the API side (Nova's ``compute.api.API.get_*_console``; the host's grant is
``nefos.host.compute.consoles``).

The API side looks the server up for the caller, then checks as Nova does that it has a host
(409 ``InstanceNotReady``), that no delete or migration is under way and that it is in a state
whose guest has a display (409 ``InstanceInvalidState``). VNC and SPICE consoles exist here:
serial and MKS answer as a Nova whose other console types are disabled (400
``ConsoleTypeUnavailable``), and so does ``spice-html5`` (no SPICE HTML5 proxy is run).
"""

from __future__ import annotations

from nefos import exceptions
from nefos.model import states

# vm_states whose guest has a running display (Nova rejects only deleting and migrating tasks; a
# stopped or suspended guest here has no VNC server to connect to).
DISPLAY_VM_STATES = (states.ACTIVE, states.PAUSED, states.RESCUED, states.RESIZED)
REJECTED_TASK_STATES = (states.DELETING, "migrating")
# The compute host's call for each protocol served here (Nova's get_<protocol>_console).
HOST_CALLS = {"vnc": "get_vnc_console", "spice": "get_spice_console"}


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
