"""What the network service's modules share: Neutron's timestamps, ids, chunking, errors."""

from __future__ import annotations

import uuid as uuidlib

from nefos import exceptions
from nefos.network import attributes as attrs

CHUNK = 500


def iso(value) -> str | None:
    """Neutron's timestamp format: ISO 8601, seconds, UTC as ``Z``."""
    if value is None:
        return None
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def new_id() -> str:
    return str(uuidlib.uuid4())


def chunks(values: list, size: int = CHUNK):
    for i in range(0, len(values), size):
        yield values[i:i + size]


def not_owner(action: str) -> exceptions.PolicyNotAuthorized:
    return exceptions.PolicyNotAuthorized(f"(rule:{action}) is disallowed by policy")


def bulk(items) -> list:
    if not isinstance(items, list) or not items:
        raise attrs.bad_request("Resources required")
    return items
