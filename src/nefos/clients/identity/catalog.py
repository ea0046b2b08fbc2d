"""The service catalog, derived from the configuration (no endpoint table).

Every service gets public, internal and admin endpoints in ``region_name``
at ``http://<endpoint host>:<port>``; ids are stable (uuid5 of the URL), so
clients that cache them keep working across restarts.
"""

from __future__ import annotations

import ipaddress
import uuid

_NS = uuid.UUID("5f0a3c1e-8f0e-4d36-9b7e-6e65666f7301")
INTERFACES = ("public", "internal", "admin")
_WILDCARDS = {"", "0.0.0.0", "::", "[::]", "*"}

# (type, name, port option, path)
SERVICES = (
    ("identity", "keystone", "identity_api_port", "/v3"),
    ("compute", "nova", "compute_api_port", "/v2.1"),
    ("network", "neutron", "network_api_port", ""),
    ("image", "glance", "image_api_port", ""),
)


def _bracket(host: str) -> str:
    try:
        if ipaddress.ip_address(host.strip("[]")).version == 6:
            return f"[{host.strip('[]')}]"
    except ValueError:
        pass
    return host


def endpoint_host(cfg) -> str:
    if cfg.endpoint_host:
        return _bracket(cfg.endpoint_host)
    if cfg.bind_host in _WILDCARDS:
        return _bracket(cfg.host)
    return _bracket(cfg.bind_host)


def client_host(cfg) -> str:
    """The host a client on this machine should use (clouds.yaml)."""
    if cfg.endpoint_host:
        return _bracket(cfg.endpoint_host)
    if cfg.bind_host in _WILDCARDS or cfg.bind_host in ("localhost", "127.0.0.1"):
        return "127.0.0.1"
    return _bracket(cfg.bind_host)


def base_url(cfg, port_option: str) -> str:
    return f"http://{endpoint_host(cfg)}:{getattr(cfg, port_option)}"


def identity_base_url(cfg) -> str:
    """Keystone's base URL (no version), as in ``WWW-Authenticate: Keystone uri="..."``."""
    return base_url(cfg, "identity_api_port")


def www_authenticate(cfg) -> str:
    """The ``WWW-Authenticate`` header of a 401 from any API: where Keystone is, as Keystone and
    keystonemiddleware answer."""
    return f'Keystone uri="{identity_base_url(cfg)}"'


def service_url(cfg, service_type: str) -> str:
    for stype, _name, port_option, path in SERVICES:
        if stype == service_type:
            return base_url(cfg, port_option) + path
    raise KeyError(service_type)


def service_id(service_type: str) -> str:
    return uuid.uuid5(_NS, f"service:{service_type}").hex


def services(cfg) -> list[dict]:
    return [{"id": service_id(stype), "type": stype, "name": name, "enabled": True,
             "description": f"Nefos {stype} service"} for stype, name, _p, _path in SERVICES]


def endpoints(cfg) -> list[dict]:
    out = []
    for stype, _name, _port, _path in SERVICES:
        url = service_url(cfg, stype)
        for interface in INTERFACES:
            out.append({"id": uuid.uuid5(_NS, f"endpoint:{interface}:{url}").hex,
                        "interface": interface, "region": cfg.region_name,
                        "region_id": cfg.region_name, "url": url,
                        "service_id": service_id(stype), "enabled": True})
    return out


def catalog(cfg) -> list[dict]:
    """The catalog as a token body carries it."""
    eps = endpoints(cfg)
    out = []
    for svc in services(cfg):
        out.append({
            "id": svc["id"], "type": svc["type"], "name": svc["name"],
            "endpoints": [{"id": e["id"], "interface": e["interface"], "region": e["region"],
                           "region_id": e["region_id"], "url": e["url"]}
                          for e in eps if e["service_id"] == svc["id"]],
        })
    return out
