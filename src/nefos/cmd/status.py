"""``nefos status``: what a running cloud says of itself, read through its APIs as its admin.

The admin's credentials come from the clouds.yaml ``nefos up`` wrote (``nefos-admin``); the
endpoints from the token's catalog. Shows the endpoints, the compute services (up or down,
enabled or disabled with the reason, an AUTO-disable included), the hypervisors' capacity and use,
the servers by status, and where the web console is.
"""

from __future__ import annotations

import collections
from pathlib import Path

import httpx
import yaml
from rich.console import Console
from rich.table import Table

from nefos.clients.identity.service_auth import catalog_urls
from nefos.http_client import verified_tls

ADMIN_CLOUD = "nefos-admin"


class StatusError(Exception):
    """Why the cloud's state could not be read (said to the user, without a traceback)."""


def login(auth: dict, client: httpx.Client) -> tuple[str, dict[str, str]]:
    """An admin token and the catalog's public URLs by service type."""
    body = {"auth": {"identity": {"methods": ["password"], "password": {"user": {
        "name": auth["username"], "password": auth["password"], "domain": {"name": auth["user_domain_name"]}}}},
        "scope": {"project": {"name": auth["project_name"], "domain": {"name": auth["project_domain_name"]}}}}}
    r = client.post(auth["auth_url"].rstrip("/") + "/auth/tokens", json=body)
    if r.status_code != 201:
        raise StatusError(f"the identity service refused the admin's credentials ({r.status_code})")
    return r.headers["x-subject-token"], catalog_urls(r.json()["token"])


def _get(client: httpx.Client, url: str, headers: dict, key: str) -> list[dict]:
    """Every item of a list answer, following the ``*_links`` next page."""
    items: list[dict] = []
    while url:
        r = client.get(url, headers=headers)
        if r.status_code != 200:
            raise StatusError(f"GET {url} answered {r.status_code}")
        body = r.json()
        items += body[key]
        url = next((link["href"] for link in body.get(f"{key}_links", []) if link.get("rel") == "next"), None)
    return items


def cloud_auth(clouds_file: Path, cloud: str = ADMIN_CLOUD) -> dict:
    """The ``auth`` of ``cloud`` in ``clouds_file`` (the clouds.yaml ``nefos up`` wrote)."""
    try:
        clouds = yaml.safe_load(clouds_file.read_text())
        return clouds["clouds"][cloud]["auth"]
    except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
        raise StatusError(f"no {cloud} cloud in {clouds_file} ({exc}): has `nefos up` run with this "
                          f"state directory?") from None


def gather(clouds_file: Path, timeout: float = 10.0) -> dict:
    """The cloud's state, as the admin of ``clouds_file`` reads it."""
    auth = cloud_auth(clouds_file)
    with httpx.Client(timeout=timeout, verify=verified_tls()) as client:
        try:
            token, urls = login(auth, client)
            headers = {"X-Auth-Token": token, "OpenStack-API-Version": "compute 2.53"}
            compute = urls["compute"]
            services = _get(client, f"{compute}/os-services?binary=nova-compute", headers, "services")
            hypervisors = _get(client, f"{compute}/os-hypervisors/detail", headers, "hypervisors")
            servers = _get(client, f"{compute}/servers/detail?all_tenants=1&limit=1000", headers, "servers")
        except httpx.TransportError as exc:
            raise StatusError(f"the cloud does not answer at {auth['auth_url']} ({exc}): is it running?") from None
        except KeyError as exc:
            raise StatusError(f"the catalog has no {exc} endpoint") from None
    return {"endpoints": urls, "services": services, "hypervisors": hypervisors,
            "servers": dict(collections.Counter(s["status"] for s in servers))}


def render(state: dict, console: Console) -> None:
    if state.get("dashboard"):
        console.print(f"Web console: {state['dashboard']} (sign in as a user of clouds.yaml)", highlight=False)
    endpoints = Table(title="Endpoints", title_justify="left")
    endpoints.add_column("service")
    endpoints.add_column("URL")
    for kind, url in sorted(state["endpoints"].items()):
        endpoints.add_row(kind, url)
    console.print(endpoints)

    hosts = Table(title="Compute hosts", title_justify="left")
    for column in ("host", "state", "status", "disabled reason", "vCPUs used", "RAM used (MB)", "servers"):
        hosts.add_column(column)
    usage = {h["service"]["host"]: h for h in state["hypervisors"] if h.get("service")}
    for service in sorted(state["services"], key=lambda s: s["host"]):
        h = usage.get(service["host"], {})
        hosts.add_row(service["host"], service["state"], service["status"], service.get("disabled_reason") or "",
                      f"{h.get('vcpus_used', 0)}/{h.get('vcpus', 0)}",
                      f"{h.get('memory_mb_used', 0)}/{h.get('memory_mb', 0)}", str(h.get("running_vms", 0)))
    console.print(hosts)

    servers = Table(title="Servers", title_justify="left")
    servers.add_column("status")
    servers.add_column("count", justify="right")
    for status, count in sorted(state["servers"].items()):
        servers.add_row(status, str(count))
    servers.add_row("total", str(sum(state["servers"].values())))
    console.print(servers)
