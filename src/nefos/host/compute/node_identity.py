"""The compute node's stable identity (Nova 2023.1's ``compute_id`` file): a host refuses to start
when its state does not match the database's records, instead of acting on the wrong records.

The node's UUID is kept in a file of the compute host's state (``compute_id_path``, default
``<state_dir>/compute_id``; an all-in-one's extra fake hosts ``compute_id.<host>``). At start, before anything touches a guest:

* the file names a node the database records under another host name: the host was renamed (or
  the state copied); starting would orphan that node's instances and adopt another's: refuse;
* the database records a node for this host with another UUID: this state belongs to another
  node (a reinstall, a wrong state directory): refuse;
* no file yet: the node recorded for this host keeps its UUID (an existing host), or a new one
  is chosen; the file is written.

``init_host`` destroys guests only with positive evidence (the instance deleted) on top of this:
a host that does not know who it is never gets that far.
"""

from __future__ import annotations

import logging
import uuid as uuidlib
from pathlib import Path

from nefos import exceptions, fileperms

LOG = logging.getLogger(__name__)


class ComputeIdentityMismatch(exceptions.NefosError):
    """The compute host's recorded identity does not match the database: it must not start."""


def identity_path(cfg, host: str) -> Path:
    if host != cfg.host:  # an all-in-one's extra fake host
        return Path(cfg.state_dir) / f"compute_id.{host}"
    return Path(cfg.compute_id_path) if cfg.compute_id_path else Path(cfg.state_dir) / "compute_id"


async def ensure_stable_identity(rt, conductor, host: str, driver) -> str | None:
    """Check (or establish) the host's node UUID; returns it (None for multi-node drivers, whose
    nodes have no single identity). Raises ComputeIdentityMismatch."""
    nodes = driver.get_available_nodes()
    if len(nodes) != 1:
        return None
    path = identity_path(rt.cfg, host)
    recorded = path.read_text().strip() if path.exists() else None
    known = await conductor.compute_node_identity(None, host, recorded)
    mine, owner = known["node_uuids"], known["owner_of_recorded"]
    if recorded:
        if owner is not None and owner != host:
            raise ComputeIdentityMismatch(
                f"compute node {recorded} (from {path}) is recorded for host {owner!r}, not {host!r}: "
                f"the host was renamed or its state copied; refusing to start")
        others = [u for u in mine if u != recorded]
        if others:
            raise ComputeIdentityMismatch(
                f"host {host!r} is recorded with compute node {others[0]}, but its state ({path}) says "
                f"{recorded}: this state belongs to another node; refusing to start")
        return recorded
    node_uuid = mine[0] if mine else str(uuidlib.uuid4())
    fileperms.write_private(path, node_uuid + "\n")
    LOG.info("compute host %s: node identity %s written to %s", host, node_uuid, path)
    return node_uuid
