"""Run by Debian's python3 with Debian's cloud-init on its path: what cloud-init's own OpenStack
and ConfigDrive datasource code reads from a metadata service URL or a mounted config drive,
printed as JSON (its code unmodified: the helpers its datasources call).

    python3 cloud_init_reader.py <cloud-init dist-packages> openstack http://127.0.0.1:8775
    python3 cloud_init_reader.py <cloud-init dist-packages> configdrive /mnt/config
"""

import base64
import json
import sys

sys.path.insert(0, sys.argv[1])

from cloudinit import sources  # noqa: E402
from cloudinit.sources import DataSourceConfigDrive  # noqa: E402
from cloudinit.sources.helpers import ec2, openstack  # noqa: E402


class _Reader(openstack.MetadataReader):
    """The datasource's reader, its EC2 tree read from the same address as the rest (a guest
    reaches both at 169.254.169.254; this machine must never send to that address)."""

    def _read_ec2_metadata(self):
        return ec2.get_instance_metadata(metadata_address=self.base_path, ssl_details=self.ssl_details,
                                         timeout=self.timeout, retries=self.retries)


def main(kind: str, where: str) -> None:
    if kind == "openstack":
        results = _Reader(where, timeout=10, retries=2).read_v2()  # DataSourceOpenStack.read_metadata_service
    else:
        results = DataSourceConfigDrive.read_config_drive(where)
    metadata = results.get("metadata", {})
    network_data = results.get("networkdata")
    network = None
    if network_data:
        # The guest's NICs: one per link of the network data, as the guest's hypervisor gave them.
        nics = {link["ethernet_mac_address"]: f"eth{i}" for i, link in enumerate(network_data.get("links", []))}
        network = openstack.convert_net_json(network_data, known_macs=nics)
    userdata = results.get("userdata")
    if isinstance(userdata, str):
        userdata = userdata.encode()
    print(json.dumps({
        "version": results.get("version"),
        "instance-id": metadata.get("instance-id"),
        "local-hostname": metadata.get("local-hostname"),
        "availability-zone": metadata.get("availability-zone"),
        "public-keys": sources.normalize_pubkey_data(metadata.get("public_keys")),
        "meta": metadata.get("meta"),
        "userdata": base64.b64encode(userdata).decode() if userdata is not None else None,
        "network-config": network,
        "ec2-instance-id": (results.get("ec2-metadata") or {}).get("instance-id"),
    }))


if __name__ == "__main__":
    main(sys.argv[2], sys.argv[3])
