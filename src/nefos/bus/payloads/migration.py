"""The migration payload: one move of a server (a resize, a cold or live migration, an evacuation)
as the Compute API hands it to the conductor and the conductor and the hosts to each other. It is
the move's message, not the ``migrations`` row: the row keeps the move's record, this carries what
each step needs (both flavors, the state to go back to, the quota the move holds).

Version history (newest last):

1.0  the move as the compute and conductor interfaces 1.0 carried it
"""

from __future__ import annotations

from nefos.bus.payloads.base import Payload, field

_TEXT = field(str)


class Migration(Payload):
    NAME = "Migration"
    VERSION = "1.0"
    FIELDS = {
        "uuid": _TEXT,
        "type": _TEXT,  # resize, migration, live-migration, evacuation
        "status": _TEXT,
        "source_compute": _TEXT, "source_node": _TEXT,
        "dest_compute": _TEXT, "dest_node": _TEXT,
        "old_flavor": field(dict), "new_flavor": field(dict),
        "old_vm_state": _TEXT,
        # A resize's: the cores and RAM its quota holds while it lasts (the larger flavor's).
        "quota": field(dict),
        # An evacuation's: the vm state the guest is left in (its old one, or stopped).
        "target_state": _TEXT,
        # A live migration's: copy the disks too.
        "block_migration": field(bool),
    }
