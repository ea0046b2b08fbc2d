"""A new server's block device mappings: the root disk from the image, then its blank local disks
(ephemeral and swap, requested or the flavor's), checked against the flavor as Nova checks them."""

from __future__ import annotations

from sqlalchemy import insert

from nefos import exceptions
from nefos.db.models import BlockDeviceMapping


def check_local_disks(flavor: dict, local_disks: list[dict]) -> None:
    """Requested blank local disks must fit the flavor (as Nova checks ephemeral and swap)."""
    swaps = [d for d in local_disks if d.get("guest_format") == "swap"]
    ephemerals = [d for d in local_disks if d.get("guest_format") != "swap"]
    if len(swaps) > 1:
        raise exceptions.ValidationError("Block Device Mapping is Invalid: only one swap disk is allowed.")
    if swaps and swaps[0]["size"] > flavor.get("swap", 0):  # swap sizes are MiB, as the flavor's
        raise exceptions.ValidationError("Block Device Mapping is Invalid: swap size is greater than "
                                         "allowed by the flavor.")
    if sum(d["size"] for d in ephemerals) > flavor.get("ephemeral_gb", 0):
        raise exceptions.ValidationError("Block Device Mapping is Invalid: total size of the ephemeral "
                                         "disks is greater than allowed by the flavor.")


INSERT = insert(BlockDeviceMapping.__table__)


def for_new_server(uuid: str, image_id: str, flavor: dict,
                           local_disks: list[dict] | None = None) -> list[dict]:
    """The root disk from the image, then the ephemeral and swap disks (requested, or the flavor's),
    as ``block_device_mapping`` rows (every row with the same columns: one INSERT writes them all)."""
    bdms = [dict(instance_uuid=uuid, source_type="image", destination_type="local",
                 device_name="/dev/vda", boot_index=0, image_id=image_id, guest_format=None,
                 volume_size=flavor["root_gb"] or None, delete_on_termination=True)]
    if local_disks is None:
        local_disks = []
        if flavor.get("ephemeral_gb"):
            local_disks.append({"size": flavor["ephemeral_gb"], "guest_format": None})
        if flavor.get("swap"):
            local_disks.append({"size": flavor["swap"], "guest_format": "swap"})
    for index, disk in enumerate(local_disks):
        bdms.append(dict(
            instance_uuid=uuid, source_type="blank", destination_type="local",
            device_name=disk.get("device_name") or f"/dev/vd{chr(ord('b') + index)}", boot_index=-1,
            image_id=None, guest_format=disk.get("guest_format"), volume_size=disk["size"],
            delete_on_termination=True))
    return bdms
