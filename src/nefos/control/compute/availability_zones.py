"""Availability zones, derived as in Nova from the services' zones.

A compute service is in the ``availability_zone`` metadata of its host's aggregate
(``compute/aggregates.py``), else the configured ``default_availability_zone``; every other
service is in ``internal``. A zone is available when at least one of its services is enabled;
a zone of an aggregate without hosts is not listed (as in Nova).
"""

from __future__ import annotations

from nefos.control.compute import services as services_mod

# API services are not listed per host (Nova skips nova-osapi_compute and nova-metadata).
_API_BINARIES = {"nefos-api", "nova-osapi_compute", "nova-metadata"}


async def zones(db, cfg) -> tuple[list[str], list[str], list[dict]]:
    """(available zones, unavailable zones, the services with their ``zone`` set)."""
    services = await services_mod.list_services(db, cfg)
    available = sorted({s["zone"] for s in services if not s["disabled"]})
    unavailable = sorted({s["zone"] for s in services if s["disabled"]} - set(available))
    return available, unavailable, services


async def describe(db, cfg, *, detail: bool) -> list[dict]:
    """Nova's ``availabilityZoneInfo`` list (the ``internal`` zone only in detail)."""
    available, unavailable, services = await zones(db, cfg)
    if not detail:
        return ([{"zoneName": z, "zoneState": {"available": True}, "hosts": None}
                 for z in available if z != services_mod.INTERNAL_ZONE]
                + [{"zoneName": z, "zoneState": {"available": False}, "hosts": None}
                   for z in unavailable if z != services_mod.INTERNAL_ZONE])
    hosts_by_zone: dict[str, dict[str, dict]] = {}
    for svc in services:
        if svc["disabled"] or svc["binary"] in _API_BINARIES:
            continue
        host = hosts_by_zone.setdefault(svc["zone"], {}).setdefault(svc["host"], {})
        host[svc["binary"]] = {"available": svc["state"] == "up", "active": not svc["disabled"],
                               "updated_at": svc["updated_at"]}
    return ([{"zoneName": z, "zoneState": {"available": True}, "hosts": hosts_by_zone.get(z, {})}
             for z in available]
            + [{"zoneName": z, "zoneState": {"available": False}, "hosts": None} for z in unavailable])
