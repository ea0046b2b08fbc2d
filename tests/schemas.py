"""Check Compute API responses against Tempest's published response schemas.

    from tests.schemas import assert_schema
    body = assert_schema("flavors.list_flavors", response)          # picks the microversion
    body = assert_schema("v2_1.keypairs.create_keypair", response)  # or names the module's version
    body = assert_schema(some_schema_dict, response)                # or a schema of your own

A name without a ``v2_N.`` prefix resolves to the attribute in the module of
the highest Tempest microversion directory (``tempest.lib.api_schema.response.
compute.v2_N``) not above the response's ``OpenStack-API-Version`` (or the
``version=`` argument) that defines it — exactly the schema Tempest would use.
The status code must be one the schema lists; a schema without a body demands
an empty one. Returns the parsed body (None when empty).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from pathlib import Path

import jsonschema
from tempest.lib.api_schema.response import compute as _compute
from tempest.lib.common.jsonschema_validator import FORMAT_CHECKER, JSONSCHEMA_VALIDATOR


@functools.cache
def _versions() -> list[tuple[int, int]]:
    found = set()
    for mod in pkgutil.iter_modules(_compute.__path__):
        if mod.ispkg and mod.name.startswith("v2_"):
            found.add((2, int(mod.name[3:])))
    for path in _compute.__path__:  # a few (v2_84) have no __init__.py: namespace packages
        for entry in Path(path).glob("v2_*/*.py"):
            found.add((2, int(entry.parent.name[3:])))
    return sorted(found)


def _parse(version: str | None) -> tuple[int, int]:
    if not version:
        return (2, 1)
    major, minor = version.strip().split(".")
    return int(major), int(minor)


def resolve(name: str, version: str | None = None) -> dict:
    """The Tempest schema ``name`` ("module.attr" or "v2_N.module.attr") for ``version``."""
    parts = name.split(".")
    if parts[0].startswith("v2_"):
        module = importlib.import_module(f"tempest.lib.api_schema.response.compute.{parts[0]}.{parts[1]}")
        return getattr(module, parts[2])
    module_name, attr = parts
    wanted = _parse(version)
    for v in reversed(_versions()):
        if v > wanted:
            continue
        try:
            module = importlib.import_module(
                f"tempest.lib.api_schema.response.compute.v{v[0]}_{v[1]}.{module_name}")
        except ModuleNotFoundError:
            continue
        if hasattr(module, attr):
            return getattr(module, attr)
    raise LookupError(f"no Tempest schema {name} at or below {version}")


def _response_version(response) -> str | None:
    header = response.headers.get("openstack-api-version", "")
    parts = header.split()
    if len(parts) == 2 and parts[0] == "compute":
        return parts[1]
    return response.headers.get("x-openstack-nova-api-version")


def assert_schema(schema: str | dict, response, version: str | None = None):
    """Assert ``response`` (an httpx response) matches ``schema``; return its parsed body."""
    if isinstance(schema, str):
        schema = resolve(schema, version or _response_version(response))
    assert response.status_code in schema["status_code"], (
        f"status {response.status_code} not in {schema['status_code']}: {response.text}")
    body_schema = schema.get("response_body")
    if not body_schema:
        assert not response.content, f"expected no body, got {response.text!r}"
        return None
    body = response.json()
    error = jsonschema.exceptions.best_match(validator_for(body_schema).iter_errors(body))
    if error is not None:
        raise AssertionError(f"response body does not match the schema: {error.message} at "
                             f"{list(error.absolute_path)}\nbody: {body}")
    return body


_validators: dict[tuple[int, type], tuple[dict, object]] = {}


def validator_for(schema: dict, cls: type = JSONSCHEMA_VALIDATOR, format_checker=FORMAT_CHECKER):
    """The validator of ``schema`` (Tempest's draft and format checker unless told), the schema
    itself checked once: what ``jsonschema.validate`` does on each call, done once per schema.
    The schemas are module constants (Tempest's, the suite's), so one per object is kept."""
    key = (id(schema), cls)
    held = _validators.get(key)
    if held is None or held[0] is not schema:
        cls.check_schema(schema)
        held = (schema, cls(schema, format_checker=format_checker))
        _validators[key] = held
    return held[1]
