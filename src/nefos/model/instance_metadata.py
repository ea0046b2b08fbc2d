"""What a guest learns about itself: the metadata trees (Nova's ``nova.api.metadata.base``).

One ``InstanceMetadata`` renders, from the instance's record and its network info alone, both
what the metadata service answers (``lookup``) and what a config drive holds
(``config_drive_files``), so the two never differ. It reads no database: the compute host builds
a config drive from the instance dict it was handed.

Two formats, as Nova's:

* OpenStack: ``openstack/<version>/`` with ``meta_data.json``, ``user_data`` (when given),
  ``password``, ``vendor_data.json``, ``network_data.json``, ``vendor_data2.json``, each from the
  version that introduced it (``OPENSTACK_VERSIONS``; ``latest`` is the newest), and the injected
  files (personality) as ``openstack/content/NNNN``, listed in meta_data.json's ``files``. Nova
  puts those on the config drive only (it keeps no copy); Nefos keeps them with the instance and
  serves them from the metadata service too.
* EC2: ``<version>/meta-data/...`` and ``<version>/user-data`` (``EC2_VERSIONS``), rendered as
  EC2's text listings (``ec2_md_print``).

Departures: EC2 ids are derived from the instance's database id (``i-%08x``, as Nova) and from the
image's UUID (``ami-%08x`` of its first 32 bits: Nefos keeps no EC2 id mapping table); device
metadata (``devices``) lists nothing yet; a key pair is ``x509`` when its public key is a PEM
certificate, else ``ssh``.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os

from nefos.model import admin_password, server_password

# The OpenStack metadata versions, oldest first (Nova's names: Folsom ... Victoria).
FOLSOM, GRIZZLY, HAVANA = "2012-08-10", "2013-04-04", "2013-10-17"
LIBERTY, NEWTON_ONE, NEWTON_TWO = "2015-10-15", "2016-06-30", "2016-10-06"
OCATA, ROCKY, VICTORIA = "2017-02-22", "2018-08-27", "2020-10-14"
OPENSTACK_VERSIONS = [FOLSOM, GRIZZLY, HAVANA, LIBERTY, NEWTON_ONE, NEWTON_TWO, OCATA, ROCKY, VICTORIA]
EC2_VERSIONS = ["1.0", "2007-01-19", "2007-03-01", "2007-08-29", "2007-10-10", "2007-12-15",
                "2008-02-01", "2008-09-01", "2009-04-04"]
# The EC2 versions a config drive holds besides ``latest`` (Nova's config_drive_skip_versions).
CONFIG_DRIVE_EC2_VERSIONS = ["2009-04-04"]

MD_JSON_NAME = "meta_data.json"
UD_NAME = "user_data"
PASS_NAME = "password"
VD_JSON_NAME = "vendor_data.json"
VD2_JSON_NAME = "vendor_data2.json"
NW_JSON_NAME = "network_data.json"
CONTENT_DIR = "content"  # openstack/content/NNNN: the injected files (personality)

JSON = "application/json"
TEXT = "text/plain"

# VIF types shown as such in network_data.json's links; others are "phy" (Nova's list).
_EXPOSED_VIF_TYPES = ("bridge", "dvs", "hw_veb", "hyperv", "ovs", "tap", "vhostuser", "vif")


class MetadataNotFound(KeyError):
    """No such path (or version) in the instance's metadata."""


def _at_least(required: str, requested: str, versions: list[str]) -> bool:
    return versions.index(requested) >= versions.index(required)


def ec2_instance_id(instance: dict) -> str:
    return "i-%08x" % int(instance["id"])


def ec2_image_id(image_ref: str | None) -> str:
    if not image_ref:
        return ""
    try:
        return "ami-%08x" % int(image_ref.replace("-", "")[:8], 16)
    except ValueError:
        return "ami-00000000"


def key_type(public_key: str) -> str:
    return "x509" if public_key.lstrip().startswith("-----BEGIN CERTIFICATE-----") else "ssh"


def ec2_md_print(data) -> str | bytes:
    """A tree node as EC2's text answer: a directory's entries one a line, sub-directories with a
    trailing ``/`` (or their ``_name``), a list one item a line, a leaf as itself (Nova's)."""
    if isinstance(data, dict):
        lines = []
        for key in sorted(data):
            if key == "_name":
                continue
            value = data[key]
            if isinstance(value, dict):
                lines.append(str(value["_name"]) if "_name" in value else key + "/")
            else:
                lines.append(key)
        return "\n".join(lines)
    if isinstance(data, list):
        return "\n".join(str(item) for item in data)
    if isinstance(data, (bytes, str)):
        return data
    return str(data)


def network_metadata(network_info: list[dict]) -> dict | None:
    """network_data.json's {links, networks, services} (Nova's ``netutils.get_network_metadata``:
    the first IPv4 and first IPv6 subnet of each VIF); None without network info."""
    if not network_info:
        return None
    links, nets, services = [], [], []
    ifc_num = net_num = -1
    for vif in network_info:
        network = vif.get("network") or {}
        subnets = network.get("subnets") or []
        if not subnets:
            continue
        first = {v: next((s for s in subnets if _version(s) == v), None) for v in (4, 6)}
        ifc_num += 1
        if not (first[4] or first[6]):
            continue
        link = {"id": vif.get("devname") or f"interface{ifc_num}", "vif_id": vif["id"],
                "type": vif.get("type") if vif.get("type") in _EXPOSED_VIF_TYPES else "phy",
                "mtu": network.get("mtu"), "ethernet_mac_address": vif.get("address")}
        links.append(link)
        for version in (4, 6):
            subnet = first[version]
            if not subnet or not subnet.get("ips"):
                continue
            net_num += 1
            nets.append(_network(vif, subnet, version, net_num, link["id"]))
            services += [dns for dns in _dns(subnet) if dns not in services]
    return {"links": links, "networks": nets, "services": services}


def _version(subnet: dict) -> int:
    if subnet.get("ip_version"):
        return int(subnet["ip_version"])
    return ipaddress.ip_network(subnet["cidr"], strict=False).version


def _dns(subnet: dict) -> list[dict]:
    return [{"type": "dns", "address": d["address"]} for d in subnet.get("dns") or []]


def _network(vif: dict, subnet: dict, version: int, net_num: int, link_id: str) -> dict:
    cidr = ipaddress.ip_network(subnet["cidr"], strict=False)
    gateway = subnet.get("gateway")
    if isinstance(gateway, dict):
        gateway = gateway.get("address")
    routes = []
    if gateway:
        anywhere = "0.0.0.0" if version == 4 else "::"
        routes.append({"network": anywhere, "netmask": anywhere, "gateway": gateway})
    for route in subnet.get("routes") or []:
        dest = ipaddress.ip_network(route["cidr"], strict=False)
        via = route.get("gateway")
        routes.append({"network": str(dest.network_address), "netmask": str(dest.netmask),
                       "gateway": via.get("address") if isinstance(via, dict) else via})
    return {"id": f"network{net_num}", "type": f"ipv{version}", "link": link_id,
            "ip_address": subnet["ips"][0]["address"], "netmask": str(cidr.netmask),
            "routes": routes, "network_id": (vif.get("network") or {}).get("id"),
            "services": _dns(subnet)}


class InstanceMetadata:
    """The metadata of one instance (a dict as ``nefos.objects.instance`` returns it)."""

    def __init__(self, instance: dict, *, network_info: list[dict] | None = None,
                 dhcp_domain: str = "novalocal", default_availability_zone: str = "nova"):
        self.instance = instance
        self.network_info = network_info if network_info is not None else (instance.get("network_info") or [])
        self.dhcp_domain = dhcp_domain
        self.availability_zone = instance.get("availability_zone") or default_availability_zone
        raw = instance.get("user_data")
        self.user_data: bytes | None = base64.b64decode("".join(raw.split())) if raw else None
        # Injected files, as Nova's ``content``: each under content/NNNN, listed in meta_data.json.
        self.content: dict[str, bytes] = {}
        self.files: list[dict] = []
        for item in instance.get("injected_files") or []:
            key = "%04i" % len(self.content)
            self.files.append({"path": item["path"], "content_path": f"/{CONTENT_DIR}/{key}"})
            self.content[key] = base64.b64decode("".join(item["contents"].split()))

    # Facts ----------------------------------------------------------------------------------
    @property
    def hostname(self) -> str:
        name = self.instance.get("hostname") or ""
        return f"{name}.{self.dhcp_domain}" if self.dhcp_domain else name

    def fixed_ips(self) -> list[str]:
        return [ip["address"] for vif in self.network_info
                for subnet in (vif.get("network") or {}).get("subnets") or []
                for ip in subnet.get("ips") or [] if ip.get("type", "fixed") == "fixed"]

    def floating_ips(self) -> list[str]:
        return [f["address"] for vif in self.network_info
                for subnet in (vif.get("network") or {}).get("subnets") or []
                for ip in subnet.get("ips") or [] for f in ip.get("floating_ips") or []]

    # OpenStack format ---------------------------------------------------------------------------
    def meta_data(self, version: str) -> dict:
        inst = self.instance
        md: dict = {"uuid": inst["uuid"]}
        if inst.get("metadata"):
            md["meta"] = dict(inst["metadata"])
        if self.files:
            md["files"] = [dict(f) for f in self.files]
        if inst.get("key_name") and inst.get("key_data"):
            md["public_keys"] = {inst["key_name"]: inst["key_data"]}
            md["keys"] = [{"name": inst["key_name"], "type": key_type(inst["key_data"]),
                           "data": inst["key_data"]}]
        if admin_password.extract(inst):  # Nova's extra_md: in every version's meta_data.json
            md["admin_pass"] = admin_password.extract(inst)
        md["hostname"] = self.hostname
        md["name"] = inst.get("display_name")
        md["launch_index"] = inst.get("launch_index") or 0
        md["availability_zone"] = self.availability_zone
        versions = OPENSTACK_VERSIONS
        if _at_least(GRIZZLY, version, versions):
            md["random_seed"] = base64.b64encode(os.urandom(512)).decode()
        if _at_least(LIBERTY, version, versions):
            md["project_id"] = inst.get("project_id")
        if _at_least(NEWTON_ONE, version, versions):
            md["devices"] = []
        if _at_least(VICTORIA, version, versions):
            md["dedicated_cpus"] = []
        return md

    def network_data(self) -> dict:
        return network_metadata(self.network_info) or {}

    def openstack_listing(self, version: str) -> list[str]:
        """The files of ``openstack/<version>/`` (Nova's ``_handle_version``)."""
        names = [MD_JSON_NAME]
        if self.user_data is not None:
            names.append(UD_NAME)
        for since, name in ((GRIZZLY, PASS_NAME), (HAVANA, VD_JSON_NAME), (LIBERTY, NW_JSON_NAME),
                            (NEWTON_TWO, VD2_JSON_NAME)):
            if _at_least(since, version, OPENSTACK_VERSIONS):
                names.append(name)
        return names

    def openstack_item(self, version: str, name: str) -> tuple[bytes, str]:
        """(content, media type) of ``openstack/<version>/<name>``."""
        version = OPENSTACK_VERSIONS[-1] if version == "latest" else version
        if version not in OPENSTACK_VERSIONS or name not in self.openstack_listing(version):
            raise MetadataNotFound(f"openstack/{version}/{name}")
        if name == UD_NAME:
            return self.user_data, TEXT
        if name == PASS_NAME:
            return server_password.extract(self.instance).encode(), TEXT  # what the guest posted
        if name == MD_JSON_NAME:
            data = self.meta_data(version)
        elif name == NW_JSON_NAME:
            data = self.network_data()
        else:
            data = {}  # vendor_data.json, vendor_data2.json: no vendor data providers
        return json.dumps(data).encode(), JSON

    # EC2 format ---------------------------------------------------------------------------------
    def ec2_metadata(self, version: str) -> dict:
        """{"meta-data": {...}, "user-data": bytes (when given)} for an EC2 version (Nova's)."""
        version = EC2_VERSIONS[-1] if version == "latest" else version
        if version not in EC2_VERSIONS:
            raise MetadataNotFound(version)
        inst = self.instance
        fixed, floating = self.fixed_ips(), self.floating_ips()
        md: dict = {
            "ami-id": ec2_image_id(inst.get("image_ref")),
            "ami-launch-index": inst.get("launch_index") or 0,
            "ami-manifest-path": "FIXME",
            "instance-id": ec2_instance_id(inst),
            "hostname": self.hostname,
            "local-ipv4": fixed[0] if fixed else "",
            "reservation-id": inst.get("reservation_id") or "",
            "security-groups": list(inst.get("security_groups") or []),
        }
        if inst.get("key_name") and inst.get("key_data"):
            md["public-keys"] = {"0": {"_name": "0=" + inst["key_name"], "openssh-key": inst["key_data"]}}
        if _at_least("2007-01-19", version, EC2_VERSIONS):
            md["local-hostname"] = self.hostname
            md["public-hostname"] = self.hostname
            md["public-ipv4"] = floating[0] if floating else ""
        if _at_least("2007-08-29", version, EC2_VERSIONS):
            md["instance-type"] = (inst.get("flavor") or {}).get("name") or ""
        if _at_least("2007-12-15", version, EC2_VERSIONS):
            md["block-device-mapping"] = {"ami": "vda", "root": "/dev/vda"}
        if _at_least("2008-02-01", version, EC2_VERSIONS):
            md["placement"] = {"availability-zone": self.availability_zone}
        if _at_least("2008-09-01", version, EC2_VERSIONS):
            md["instance-action"] = "none"
        data: dict = {"meta-data": md}
        if self.user_data is not None:
            data["user-data"] = self.user_data
        return data

    # Paths --------------------------------------------------------------------------------------
    def lookup(self, path: str) -> tuple[bytes, str]:
        """(body, media type) the metadata service answers for ``path``; MetadataNotFound if none.
        ``/`` is the EC2 versions; ``/openstack`` the OpenStack ones; any other path not under
        ``/openstack`` is an EC2 path (Nova's ``lookup``)."""
        tokens = [t for t in path.split("/") if t]
        if not tokens:
            return "\n".join(EC2_VERSIONS + ["latest"]).encode(), TEXT
        if tokens[0] == "openstack":
            if len(tokens) == 1:
                return "\n".join(OPENSTACK_VERSIONS + ["latest"]).encode(), TEXT
            version = tokens[1]
            if version == CONTENT_DIR:  # Nova's _handle_content: no listing, one file a path
                if len(tokens) != 3 or tokens[2] not in self.content:
                    raise MetadataNotFound(path)
                return self.content[tokens[2]], TEXT
            if version != "latest" and version not in OPENSTACK_VERSIONS:
                raise MetadataNotFound(path)
            if len(tokens) == 2:
                resolved = OPENSTACK_VERSIONS[-1] if version == "latest" else version
                return "\n".join(self.openstack_listing(resolved)).encode(), TEXT
            if len(tokens) != 3:
                raise MetadataNotFound(path)
            return self.openstack_item(version, tokens[2])
        if tokens[0] == "ec2":
            tokens = tokens[1:]
            if not tokens:
                raise MetadataNotFound(path)
        data = self.ec2_metadata(tokens[0])
        for i, token in enumerate(tokens[1:]):
            if not isinstance(data, dict) or token not in data:
                raise MetadataNotFound(path)
            data = data[token]
        body = ec2_md_print(data)
        return (body if isinstance(body, bytes) else body.encode()), TEXT

    # Config drive ------------------------------------------------------------------------------
    def config_drive_files(self) -> list[tuple[str, bytes]]:
        """(path, content) of every file a config drive holds (Nova's
        ``metadata_for_config_drive``): ``ec2/<version>/meta-data.json`` (and ``user-data``), then
        each ``openstack/<version>/`` file."""
        files: list[tuple[str, bytes]] = []
        for version in CONFIG_DRIVE_EC2_VERSIONS + ["latest"]:
            data = self.ec2_metadata(version)
            if "user-data" in data:
                files.append((f"ec2/{version}/user-data", data.pop("user-data")))
            data["meta-data"].get("public-keys", {}).get("0", {}).pop("_name", None)
            files.append((f"ec2/{version}/meta-data.json", json.dumps(data["meta-data"]).encode()))
        for version in OPENSTACK_VERSIONS + ["latest"]:
            resolved = OPENSTACK_VERSIONS[-1] if version == "latest" else version
            for name in self.openstack_listing(resolved):
                if name == PASS_NAME:
                    continue
                files.append((f"openstack/{version}/{name}", self.openstack_item(version, name)[0]))
        files += [(f"openstack/{CONTENT_DIR}/{key}", content) for key, content in self.content.items()]
        return files
