"""The JSON schemas served at ``/v2/schemas/image`` and ``/v2/schemas/images``.

Clients (python-glanceclient, some openstacksdk paths) fetch them to learn
which attributes are core and that every other attribute is a string
property. ``nefos.control.image.images`` validates request bodies against them (and ``TAG``)
through the shared validator, ``nefos.validation``, in Glance's words.
"""

from __future__ import annotations

import copy

CONTAINER_FORMATS = ["ami", "ari", "aki", "bare", "ovf", "ova", "docker", "compressed"]
DISK_FORMATS = ["ami", "ari", "aki", "vhd", "vhdx", "vmdk", "raw", "qcow2", "vdi", "iso", "ploop"]
VISIBILITIES = ["public", "private", "shared", "community"]
MAX_INT32 = 2 ** 31 - 1  # min_ram and min_disk are 32-bit columns, as in Glance
STATUSES = ["queued", "saving", "active", "killed", "deleted", "pending_delete",
            "deactivated", "uploading", "importing"]
UUID_PATTERN = ("^([0-9a-fA-F]){8}-([0-9a-fA-F]){4}-([0-9a-fA-F]){4}"
                "-([0-9a-fA-F]){4}-([0-9a-fA-F]){12}$")


def _image_properties() -> dict:
    def ro(schema: dict, description: str) -> dict:
        return {**schema, "readOnly": True, "description": description}

    return {
        "id": {"type": "string", "pattern": UUID_PATTERN,
               "description": "An identifier for the image"},
        "name": {"type": ["null", "string"], "maxLength": 255,
                 "description": "Descriptive name for the image"},
        "status": ro({"type": "string", "enum": STATUSES}, "Status of the image"),
        "visibility": {"type": "string", "enum": VISIBILITIES,
                       "description": "Scope of image accessibility"},
        "protected": {"type": "boolean",
                      "description": "If true, image will not be deletable."},
        "os_hidden": {"type": "boolean",
                      "description": "If true, image will not appear in default image list response."},
        "checksum": ro({"type": ["null", "string"], "maxLength": 32},
                       "md5 hash of image contents."),
        "os_hash_algo": ro({"type": ["null", "string"], "maxLength": 64},
                           "Algorithm to calculate the os_hash_value"),
        "os_hash_value": ro({"type": ["null", "string"], "maxLength": 128},
                            "Hexdigest of the image contents using the algorithm in os_hash_algo."),
        "owner": {"type": ["null", "string"], "maxLength": 255,
                  "description": "Owner of the image"},
        "size": ro({"type": ["null", "integer"]}, "Size of image file in bytes"),
        "virtual_size": ro({"type": ["null", "integer"]}, "Virtual size of image in bytes"),
        "container_format": {"type": ["null", "string"], "enum": [None, *CONTAINER_FORMATS],
                             "description": "Format of the container"},
        "disk_format": {"type": ["null", "string"], "enum": [None, *DISK_FORMATS],
                        "description": "Format of the disk"},
        "created_at": ro({"type": "string"}, "Date and time of image registration"),
        "updated_at": ro({"type": "string"}, "Date and time of the last image modification"),
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 255},
                 "description": "List of strings related to the image"},
        "min_ram": {"type": "integer", "minimum": 0, "maximum": MAX_INT32,
                    "description": "Amount of ram (in MB) required to boot image."},
        "min_disk": {"type": "integer", "minimum": 0, "maximum": MAX_INT32,
                     "description": "Amount of disk space (in GB) required to boot image."},
        "self": ro({"type": "string"}, "An image self url"),
        "file": ro({"type": "string"}, "An image file url"),
        "schema": ro({"type": "string"}, "An image schema url"),
    }


_IMAGE_LINKS = [
    {"rel": "self", "href": "{self}"},
    {"rel": "enclosure", "href": "{file}"},
    {"rel": "describedby", "href": "{schema}"},
]


# A tag as the API takes it: the schema's tag, and not empty.
TAG = {"type": "string", "minLength": 1, "maxLength": 255}


def image_schema() -> dict:
    return {
        "name": "image",
        "properties": _image_properties(),
        "additionalProperties": {"type": "string"},
        "links": copy.deepcopy(_IMAGE_LINKS),
    }


def images_schema() -> dict:
    item = image_schema()
    item.pop("name")
    return {
        "name": "images",
        "properties": {
            "images": {"type": "array", "items": item},
            "schema": {"type": "string"},
            "first": {"type": "string"},
            "next": {"type": "string"},
        },
        "links": [
            {"rel": "first", "href": "{first}"},
            {"rel": "next", "href": "{next}"},
            {"rel": "describedby", "href": "{schema}"},
        ],
    }


# Attribute classes the API enforces (mirroring the schema above).
CORE_WRITABLE = {"name", "visibility", "protected", "os_hidden", "owner", "container_format",
                 "disk_format", "tags", "min_ram", "min_disk"}
READ_ONLY = {"status", "checksum", "os_hash_algo", "os_hash_value", "size", "virtual_size",
             "created_at", "updated_at", "self", "file", "schema", "direct_url", "locations"}
RESERVED = {"location", "deleted", "deleted_at", "properties"}
RESERVED_PREFIX = "os_glance"


# The other answers of the API, for its OpenAPI document ---------------------------------------

VERSIONS_DOCUMENT = {"type": "object", "required": ["versions"], "properties": {"versions": {
    "type": "array", "items": {"type": "object", "required": ["id", "status", "links"], "properties": {
        "id": {"type": "string"}, "status": {"enum": ["CURRENT", "SUPPORTED", "DEPRECATED"]},
        "links": {"type": "array", "items": {"type": "object", "required": ["rel", "href"], "properties": {
            "rel": {"type": "string"}, "href": {"type": "string"}}}}}}}}}

# What /v2/schemas/* serve: a JSON Schema with Glance's "name" and hyper-schema "links".
SCHEMA_DOCUMENT = {"type": "object", "required": ["name", "properties"], "properties": {
    "name": {"type": "string"}, "properties": {"type": "object"},
    "additionalProperties": {"type": ["object", "boolean"]},
    "links": {"type": "array", "items": {"type": "object", "required": ["rel", "href"], "properties": {
        "rel": {"type": "string"}, "href": {"type": "string"}}}}}}

TASK_STATUSES = ["pending", "processing", "success", "failure"]


def task_schema() -> dict:
    """A Glance task (``/v2/images/{id}/tasks``, Image API 2.12)."""
    nullable = {"type": ["string", "null"]}
    return {"type": "object", "required": ["id", "type", "status"], "properties": {
        "id": {"type": "string", "pattern": UUID_PATTERN}, "type": {"type": "string"},
        "status": {"enum": TASK_STATUSES}, "owner": {"type": "string"}, "message": {"type": "string"},
        "input": {"type": ["object", "null"]}, "result": {"type": ["object", "null"]},
        "expires_at": nullable, "created_at": {"type": "string"}, "updated_at": {"type": "string"},
        "image_id": {"type": "string"}, "request_id": {"type": "string"}, "user_id": {"type": "string"},
        "self": {"type": "string"}, "schema": {"type": "string"}}}


def image_tasks_schema() -> dict:
    return {"type": "object", "required": ["tasks"],
            "properties": {"tasks": {"type": "array", "items": task_schema()}}}
