"""The console's way to the cloud: the public APIs, with the signed-in user's token, exactly as the
`openstack` CLI reaches them (the console holds no database credentials and no service token)."""

from __future__ import annotations

import httpx

from nefos.control.dashboard.sessions import Session
from nefos.clients.identity.service_auth import catalog_urls, token_expiry

# The Compute API version the pages are written for: networks "none" on create (2.37), action
# events with their details (2.84), the services' uuids and forced_down (2.53).
COMPUTE_VERSION = "compute 2.84"


class ApiError(Exception):
    """An API's refusal, with its status and its message (said to the user as is)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class SignInRefused(Exception):
    pass


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:300] or response.reason_phrase
    if isinstance(body, dict):
        for value in body.values():  # Nova's {"badRequest": {"message": ...}}, Neutron's NeutronError
            if isinstance(value, dict) and value.get("message"):
                return str(value["message"])
        if body.get("message"):
            return str(body["message"])
    return response.text[:300]


class CloudClient:
    """The APIs, as one user (``session``)."""

    def __init__(self, http: httpx.AsyncClient, session: Session):
        self.http = http
        self.session = session

    def url(self, service: str, path: str) -> str:
        try:
            base = self.session.urls[service].rstrip("/")
        except KeyError:
            raise ApiError(503, f"the catalog has no {service} endpoint") from None
        return base + path

    def headers(self, service: str) -> dict[str, str]:
        headers = {"X-Auth-Token": self.session.token}
        if service == "compute":
            headers["OpenStack-API-Version"] = COMPUTE_VERSION
        return headers

    async def request(self, method: str, service: str, path: str, *, json=None, params=None) -> dict | None:
        try:
            r = await self.http.request(method, self.url(service, path), headers=self.headers(service),
                                        json=json, params=params)
        except httpx.TransportError as exc:
            raise ApiError(503, f"the {service} service does not answer ({type(exc).__name__})") from None
        if r.status_code >= 400:
            raise ApiError(r.status_code, _message(r))
        return r.json() if r.content and r.headers.get("content-type", "").startswith("application/json") else None

    async def get(self, service: str, path: str, **params) -> dict:
        return await self.request("GET", service, path, params=params or None)

    async def post(self, service: str, path: str, body: dict) -> dict | None:
        return await self.request("POST", service, path, json=body)

    async def delete(self, service: str, path: str) -> None:
        await self.request("DELETE", service, path)


async def sign_in(http: httpx.AsyncClient, identity_url: str, username: str, password: str,
                  project_name: str = "", domain: str = "Default") -> Session:
    """A session for ``username``: scoped to ``project_name``, or to the first project the user has
    a role on (as Horizon picks one at sign-in)."""
    user = {"name": username, "password": password, "domain": {"name": domain}}
    tokens = identity_url.rstrip("/") + "/v3/auth/tokens"
    if project_name:
        scope = {"project": {"name": project_name, "domain": {"name": domain}}}
    else:
        r = await http.post(tokens, json={"auth": {"identity": {"methods": ["password"], "password": {"user": user}}}})
        if r.status_code != 201:
            raise SignInRefused("The user name or the password is wrong.")
        unscoped = r.headers["x-subject-token"]
        r = await http.get(identity_url.rstrip("/") + "/v3/auth/projects", headers={"X-Auth-Token": unscoped})
        projects = sorted(r.json().get("projects", []), key=lambda p: p["name"]) if r.status_code == 200 else []
        if not projects:
            raise SignInRefused("This user has a role on no project.")
        scope = {"project": {"id": projects[0]["id"]}}
    r = await http.post(tokens, json={"auth": {"identity": {"methods": ["password"], "password": {"user": user}},
                                               "scope": scope}})
    if r.status_code != 201:
        raise SignInRefused("The user name, the password or the project is wrong.")
    token = r.json()["token"]
    return Session(token=r.headers["x-subject-token"], expires=token_expiry(token),
                   user_name=token["user"]["name"], user_id=token["user"]["id"],
                   project_name=token["project"]["name"], project_id=token["project"]["id"],
                   roles=[role["name"] for role in token.get("roles", [])], urls=catalog_urls(token))
