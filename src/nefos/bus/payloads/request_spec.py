"""The request spec payload: what the scheduler weighs to place a server (its flavor and image,
whose it is, where it may or must go, its group, the hosts already tried), from the Compute API
through the conductor to the scheduler and, with a build, to the host that builds it (a host
sends it back to the conductor with a reschedule).

Version history (newest last):

1.0  the spec as the compute, conductor and scheduler interfaces 1.0 carried it
"""

from __future__ import annotations

from nefos.bus.payloads.base import Payload, field


class RequestSpec(Payload):
    NAME = "RequestSpec"
    VERSION = "1.0"
    FIELDS = {
        "flavor": field(dict),
        "image": field(dict),  # id, disk_format, properties
        "project_id": field(str), "user_id": field(str),
        "availability_zone": field(str),
        "force_hosts": field(list),
        "requested_destination": field(dict),  # host, node
        "scheduler_hints": field(dict),
        "instance_group": field(dict),  # the group, its members and policy
        "num_instances": field(int),
        "retry": field(dict),  # num_attempts, hosts ([host, node] already tried)
        "last_error": field(str),  # why the previous host's build failed (a reschedule)
    }
