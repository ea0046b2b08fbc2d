"""The instance payload: a server as the conductor tells a compute host about it, and which of its
fields a host may write back.

Version history (newest last):

1.0  the instance as the conductor interface 1.1 first carried it (every column of the instance
     row; times as ISO strings, metadata a mapping, network_info a list of VIF 1.0)
"""

from __future__ import annotations

from nefos import exceptions
from nefos.bus.payloads.base import Payload, field
from nefos.bus.payloads.network_info import VIF

_TEXT = field(str)
_COUNT = field(int)
_FLAG = field(bool)
_TIME = field(str)  # ISO 8601, as every time crosses the bus
_MAPPING = field(dict)
_LIST = field(list)


class Instance(Payload):
    NAME = "Instance"
    VERSION = "1.0"
    FIELDS = {
        "id": _COUNT, "uuid": _TEXT, "project_id": _TEXT, "user_id": _TEXT,
        "display_name": _TEXT, "display_description": _TEXT, "hostname": _TEXT,
        "vm_state": _TEXT, "task_state": _TEXT, "power_state": _COUNT,
        "host": _TEXT, "node": _TEXT, "launched_on": _TEXT, "availability_zone": _TEXT,
        "instance_type_id": _COUNT, "flavor": _MAPPING, "vcpus": _COUNT, "memory_mb": _COUNT,
        "root_gb": _COUNT, "ephemeral_gb": _COUNT,
        "image_ref": _TEXT, "key_name": _TEXT, "key_data": _TEXT, "user_data": _TEXT,
        "config_drive": _TEXT, "auto_disk_config": _FLAG,
        "metadata": _MAPPING, "system_metadata": _MAPPING, "security_groups": _LIST,
        "network_info": field(list, items=VIF), "requested_networks": _LIST,
        "reservation_id": _TEXT, "launch_index": _COUNT, "access_ip_v4": _TEXT, "access_ip_v6": _TEXT,
        "locked": _FLAG, "locked_by": _TEXT, "locked_reason": _TEXT,
        "tags": _LIST, "trusted_certs": _LIST, "scheduler_hints": _MAPPING,
        "pinned_availability_zone": _TEXT, "injected_files": _LIST,
        "progress": _COUNT, "launched_at": _TIME, "terminated_at": _TIME,
        "deleted_at": _TIME, "deleted": _COUNT, "cleaned": _FLAG,
        "created_at": _TIME, "updated_at": _TIME,
    }


# What a compute host may write of an instance (Nova's compute manager saves no more): its states
# and progress, where it runs, its network info cache, its system metadata (a move's and a
# shelve's records, an evacuated guest's password), when it was launched, and the flavor a resize
# finishes or reverts to. Who owns the server, what it is called, its image, keys and user data are
# the API's: a host's save naming any other field is refused, whole.
HOST_WRITABLE = frozenset({
    "vm_state", "task_state", "power_state", "progress",
    "host", "node",
    "network_info", "system_metadata", "launched_at",
    "flavor", "instance_type_id", "vcpus", "memory_mb", "root_gb", "ephemeral_gb",
})


def host_writable(updates: dict) -> Instance:
    """``updates`` of a compute host's instance save as the fields of an instance (each of its
    type, the network info as VIFs), refused (``InstanceFieldsNotHostWritable``) when it names a
    field a host may not write."""
    refused = set(updates) - HOST_WRITABLE
    if refused:
        raise exceptions.InstanceFieldsNotHostWritable(fields=", ".join(sorted(refused)))
    return Instance(updates)
