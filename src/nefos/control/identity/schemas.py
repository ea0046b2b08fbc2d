"""The Identity API's answers in JSON Schema (Keystone v3's API reference: names, types, which may
be null), for its OpenAPI document, and the query schemas of its lists' filters."""

from __future__ import annotations

import functools

_STRING = {"type": "string"}
_NULLABLE = {"type": ["string", "null"]}
_SELF = {"type": "object", "required": ["self"], "properties": {"self": _STRING}}
_LIST_LINKS = {"type": "object", "required": ["self", "previous", "next"],
               "properties": {"self": _STRING, "previous": _NULLABLE, "next": _NULLABLE}}
_TAGS = {"type": "array", "items": _STRING}


def _object(properties: dict, required=None, **extra) -> dict:
    return {"type": "object", "properties": properties,
            "required": sorted(properties) if required is None else required, **extra}


DOMAIN = _object({"id": _STRING, "name": _STRING, "description": _STRING, "enabled": {"type": "boolean"},
                  "tags": _TAGS, "options": {"type": "object"}, "links": _SELF}, additionalProperties=False)
PROJECT = _object({"id": _STRING, "name": _STRING, "domain_id": _STRING, "description": _STRING,
                   "enabled": {"type": "boolean"}, "parent_id": _NULLABLE, "is_domain": {"type": "boolean"},
                   "tags": _TAGS, "options": {"type": "object"}, "links": _SELF}, additionalProperties=False)
# A user also carries the attributes it was created or updated with that Keystone does not define.
USER = _object({"id": _STRING, "name": _STRING, "domain_id": _STRING, "enabled": {"type": "boolean"},
                "password_expires_at": _NULLABLE, "options": {"type": "object"}, "links": _SELF,
                "default_project_id": _STRING, "description": _STRING},
               required=["domain_id", "enabled", "id", "links", "name", "options", "password_expires_at"])
ROLE = _object({"id": _STRING, "name": _STRING, "domain_id": _NULLABLE, "description": _STRING,
                "options": {"type": "object"}, "links": _SELF}, additionalProperties=False)
GROUP = _object({"id": _STRING, "name": _STRING, "domain_id": _STRING, "description": _STRING,
                 "links": _SELF}, required=["id", "name", "domain_id", "links"])
SERVICE = _object({"id": _STRING, "type": _STRING, "name": _STRING, "enabled": {"type": "boolean"},
                   "description": _STRING, "links": _SELF}, additionalProperties=False)
ENDPOINT = _object({"id": _STRING, "interface": {"enum": ["public", "internal", "admin"]},
                    "region": _NULLABLE, "region_id": _NULLABLE, "url": _STRING, "service_id": _STRING,
                    "enabled": {"type": "boolean"}, "links": _SELF}, additionalProperties=False)
REGION = _object({"id": _STRING, "description": _STRING, "parent_region_id": _NULLABLE, "links": _SELF},
                 additionalProperties=False)

_CATALOG_ENDPOINT = _object({"id": _STRING, "interface": {"enum": ["public", "internal", "admin"]},
                             "region": _NULLABLE, "region_id": _NULLABLE, "url": _STRING})
CATALOG = {"type": "array", "items": _object({"id": _STRING, "type": _STRING, "name": _STRING,
                                              "endpoints": {"type": "array", "items": _CATALOG_ENDPOINT}})}

_NAMED_DOMAIN = _object({"id": _STRING, "name": _STRING})
_TOKEN = _object({
    "methods": {"type": "array", "items": _STRING, "minItems": 1},
    "user": _object({"id": _STRING, "name": _STRING, "domain": _NAMED_DOMAIN, "password_expires_at": _NULLABLE}),
    "audit_ids": {"type": "array", "items": _STRING, "minItems": 1},
    "issued_at": {"type": "string", "format": "date-time"},
    "expires_at": {"type": "string", "format": "date-time"},
    "project": _object({"id": _STRING, "name": _STRING, "domain": _NAMED_DOMAIN}),
    "is_domain": {"type": "boolean"},
    "domain": _NAMED_DOMAIN,
    "roles": {"type": "array", "items": _object({"id": _STRING, "name": _STRING})},
    "catalog": CATALOG,
}, required=["audit_ids", "expires_at", "issued_at", "methods", "user"], additionalProperties=False)
TOKEN = _object({"token": _TOKEN})

_NAMED_REF = _object({"id": _STRING, "name": _STRING, "domain": _NAMED_DOMAIN}, required=["id"])
ROLE_ASSIGNMENT = _object({
    "role": _object({"id": _STRING, "name": _STRING}, required=["id"]),
    "user": _NAMED_REF,
    "scope": {"type": "object", "minProperties": 1, "maxProperties": 1,
              "properties": {"project": _NAMED_REF, "domain": _NAMED_REF}, "additionalProperties": False},
    "links": _object({"assignment": _STRING, "prior_role": _STRING}, required=["assignment"]),
})

_VERSION = _object({"id": _STRING, "status": {"enum": ["stable", "deprecated", "experimental"]},
                    "updated": _STRING, "links": {"type": "array", "items": _object({"rel": _STRING, "href": _STRING})},
                    "media-types": {"type": "array", "items": _object({"base": _STRING, "type": _STRING})}})
VERSION = _object({"version": _VERSION})
VERSIONS = _object({"versions": _object({"values": {"type": "array", "items": _VERSION}})})


def one(key: str, item: dict) -> dict:
    return _object({key: item}, additionalProperties=False)


def many(key: str, item: dict) -> dict:
    return _object({key: {"type": "array", "items": item}, "links": _LIST_LINKS}, additionalProperties=False)


def catalog_answer() -> dict:
    return _object({"catalog": CATALOG, "links": _LIST_LINKS}, additionalProperties=False)


# Query parameters ------------------------------------------------------------------------------

def query(**parameters: dict) -> dict:
    return {"type": "object", "properties": parameters}


# Request bodies --------------------------------------------------------------------------------
# Each field carries Keystone's answer when a value does not fit it ("x-message", formatted with
# the value); the routes check the fields where, and in the order, Keystone does.

def _field(schema: dict, message: str) -> dict:
    return {**schema, "x-message": message}


@functools.cache
def name_field(what: str) -> dict:
    # ``\S``: a name of only whitespace is refused as an empty one.
    return _field({"type": "string", "minLength": 1, "maxLength": 255, "pattern": r"\S"},
                  f"Invalid input for field 'name': a {what} name must be a non-empty string of at "
                  f"most 255 characters.")


@functools.cache
def boolean_field(field: str) -> dict:
    return _field({"type": "boolean"}, f"Invalid input for field '{field}': {{value!r}} is not a boolean.")


@functools.cache
def text_field(field: str) -> dict:
    return _field({"type": ["string", "null"]}, f"Invalid input for field '{field}': {{value!r}} is not a string.")


TAGS_FIELD = _field({"type": ["array", "null"], "maxItems": 80,
                     "items": {"type": "string", "minLength": 1, "maxLength": 255}},
                    "Invalid input for field 'tags': expected a list of strings.")
PASSWORD_FIELD = _field({"type": ["string", "null"], "maxLength": 4096},
                        "Invalid input for field 'password': expected a string.")


def _with(key: str, schema: dict) -> dict:
    return {"type": "object", "required": [key], "properties": {key: schema}}


# The parts of a ``POST /v3/auth/tokens`` body, each checked where authentication reads it.
AUTH_BODY = _field(_with("auth", {"type": "object"}), "Expecting to find auth in request body.")
AUTH_IDENTITY = _field({"type": "object"}, "Expecting to find identity in auth.")
AUTH_METHODS = _field({"type": "array", "minItems": 1, "items": {"type": "string"}},
                      "Expecting to find methods in identity.")
AUTH_SCOPE = _field({"anyOf": [{"type": ["object", "null"]}, {"enum": ["unscoped"]}]}, "Invalid scope.")
AUTH_PASSWORD = _field(_with("user", {"type": "object"}), "Expecting to find user in password.")
AUTH_PASSWORD_OF_USER = _field({"type": "string"}, "Expecting to find password in user.")
AUTH_TOKEN = _field(_with("id", {"type": "string"}), "Expecting to find id in token.")
