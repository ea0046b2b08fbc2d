"""Credentials of the service user (``nefos`` in project ``service``, roles service and admin), for
what a service does on its own behalf over the other services' HTTP APIs (Nova's
``[service_user]``): the Networking service's notifier posting events to the Compute API, a
compute host cleaning up images.

With ``auth_strategy = keystone`` a password token from the identity API, renewed before it
expires or after a 401 (``forget``); the password is ``service_password`` or the bootstrap's
``<state_dir>/passwords.yaml``. With ``noauth`` the noauth headers of a caller with the service and
admin roles. Imports nothing of the database: compute hosts use it.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import httpx
import yaml

TOKEN_MARGIN = 60.0  # renew a token this long before it expires
SERVICE_USER, SERVICE_PROJECT = "nefos", "service"


def token_expiry(token: dict) -> float:
    """When a token body (``{"token": ...}``'s value) says it expires, in epoch seconds; five minutes
    from now when it says nothing readable."""
    try:
        return dt.datetime.fromisoformat(token["expires_at"].replace("Z", "+00:00")).timestamp()
    except (KeyError, ValueError, AttributeError):
        return time.time() + 300


def catalog_urls(token: dict, interface: str = "public") -> dict[str, str]:
    """A token body's catalog: each service type's ``interface`` URL."""
    return {service["type"]: endpoint["url"] for service in token.get("catalog") or []
            for endpoint in service.get("endpoints") or [] if endpoint.get("interface") == interface}


def read_service_password(cfg) -> str | None:
    """The service user's password: the config, else the bootstrap's passwords file (never generated here)."""
    if cfg.service_password:
        return cfg.service_password
    path = Path(cfg.state_dir) / "passwords.yaml"
    try:
        stored = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    value = stored.get("service") if isinstance(stored, dict) else None
    return str(value) if value else None


class ServiceAuth:
    def __init__(self, cfg, roles: str = "service"):
        self.cfg = cfg
        self.noauth_roles = roles  # what a noauth request claims
        self._token: str | None = None
        self._expires = 0.0
        self._catalog: list[dict] = []

    def forget(self) -> None:
        self._token, self._expires = None, 0.0

    async def headers(self, http: httpx.AsyncClient) -> dict[str, str]:
        if self.cfg.auth_strategy != "keystone":
            return {"X-Project-Id": SERVICE_PROJECT, "X-User-Id": SERVICE_USER, "X-Roles": self.noauth_roles}
        if not self._token or time.time() >= self._expires - TOKEN_MARGIN:
            await self._authenticate(http)
        return {"X-Auth-Token": self._token}

    def endpoint(self, service_type: str) -> str | None:
        """The internal (else public) URL of ``service_type`` in the last token's catalog."""
        for svc in self._catalog:
            if svc.get("type") == service_type:
                urls = {e.get("interface"): e.get("url") for e in svc.get("endpoints") or []}
                return urls.get("internal") or urls.get("public")
        return None

    async def _authenticate(self, http: httpx.AsyncClient) -> None:
        from nefos.clients.identity import catalog
        password = read_service_password(self.cfg)
        if not password:
            raise RuntimeError("the service user's password is not known yet "
                               "(service_password, or passwords.yaml in the state directory)")
        body = {"auth": {"identity": {"methods": ["password"], "password": {"user": {
            "name": SERVICE_USER, "domain": {"name": "Default"}, "password": password}}},
            "scope": {"project": {"name": SERVICE_PROJECT, "domain": {"name": "Default"}}}}}
        r = await http.post(catalog.identity_base_url(self.cfg) + "/v3/auth/tokens", json=body)
        if r.status_code != 201:
            raise RuntimeError(f"the identity service refused the service user: {r.status_code} {r.text[:200]}")
        token = r.json().get("token") or {}
        self._token = r.headers.get("x-subject-token")
        self._expires = token_expiry(token)
        self._catalog = token.get("catalog") or []
