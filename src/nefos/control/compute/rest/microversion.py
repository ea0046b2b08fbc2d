"""Compute API microversions: negotiation and comparison.

The range below is what Nefos honours in every response; raising MAX means
honouring every change the Compute API reference lists up to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import total_ordering

from nefos import exceptions

MIN_VERSION = "2.1"
MAX_VERSION = "2.104"


@total_ordering
@dataclass(frozen=True)
class APIVersion:
    major: int
    minor: int

    @classmethod
    def parse(cls, text: str) -> "APIVersion":
        try:
            major, minor = text.strip().split(".")
            if not (major.isdigit() and minor.isdigit()):
                raise ValueError
            return cls(int(major), int(minor))
        except ValueError:
            raise exceptions.ValidationError(f"Invalid API version request string {text!r}.")

    def __lt__(self, other: "APIVersion") -> bool:
        return (self.major, self.minor) < (other.major, other.minor)

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"

    def matches(self, min_version: str, max_version: str | None = None) -> bool:
        if self < APIVersion.parse(min_version):
            return False
        return max_version is None or not APIVersion.parse(max_version) < self


MIN = APIVersion.parse(MIN_VERSION)
MAX = APIVersion.parse(MAX_VERSION)


class VersionNotAcceptable(exceptions.NotAcceptable):
    message = "Version %(version)s is not supported by the API. Minimum is %(min)s and maximum is %(max)s."


def negotiate(headers) -> APIVersion:
    """The version the request asked for (``OpenStack-API-Version: compute X.Y`` or the legacy header)."""
    requested = None
    for value in headers.getlist("openstack-api-version") if hasattr(headers, "getlist") else [headers.get("openstack-api-version")]:
        if not value:
            continue
        for item in value.split(","):
            parts = item.strip().split()
            if len(parts) == 2 and parts[0].lower() == "compute":
                requested = parts[1]
    if requested is None:
        requested = headers.get("x-openstack-nova-api-version")
    if requested is None:
        return MIN
    if requested.strip().lower() == "latest":
        return MAX
    version = APIVersion.parse(requested)
    if version < MIN or MAX < version:
        raise VersionNotAcceptable(version=str(version), min=MIN_VERSION, max=MAX_VERSION)
    return version


# Nova's MAX_PROXY_API_SUPPORT_VERSION: the APIs proxying the Networking and Image services are gone
# from 2.36 on.
MAX_PROXY_VERSION = "2.35"


def require_at_most(request, max_version: str) -> None:
    """404 (Nova's VersionNotFoundForAPIMethod) when the request's version is above ``max_version``:
    for APIs Nova stopped serving at the next microversion (the proxies after 2.35, os-hosts
    after 2.42), before anything else is looked at (Nova's version routing)."""
    if not request.state.api_version.matches(MIN_VERSION, max_version):
        raise exceptions.NotFound("The resource could not be found.")
