"""Image records: visibility, validation, listing and the status machine.

The REST API (``nefos.control.image.rest``) and the in-process client
(``nefos.control.image.client``) both go through these functions, so an image looks
and behaves the same whichever way it is reached.

Statuses: ``queued`` (no data) -> ``saving`` (upload under way) -> ``active``;
``deleted`` rows stay in the table (ids are never reused) but are invisible.
Each transition is a conditional UPDATE on the expected status, so racing
uploads or an upload racing a delete resolve cleanly on every backend.
Uploaded data is inspected before the image turns ``active``
(``nefos.model.format_inspection``): content that is not its declared
``disk_format`` or fails the safety checks is refused with 400, discarded, and
the image goes back to ``queued``.
"""

from __future__ import annotations

import asyncio
import csv
import datetime as dt
import re
import uuid
from typing import AsyncIterable, AsyncIterator, Callable
from urllib.parse import urlencode

import jsonpatch
from jsonpointer import JsonPointer
from sqlalchemy import String, and_, bindparam, false, func, or_, select
from sqlalchemy import update as sql_update
from sqlalchemy.exc import IntegrityError

from nefos import exceptions, policy, rest, validation
from nefos.context import RequestContext
from nefos.db import codepoint, json_match, listing
from nefos.db.models import Image, utcnow
from nefos.model import format_inspection
from nefos.control.image import schemas
from nefos.control.image.store import ImageStore

MAX_PROPERTIES = 128  # Glance's image_property_quota
MAX_TAGS = 128  # Glance's image_tag_quota
MAX_PROPERTY_VALUE = 65535
_PROPERTY_VALUE = {"type": "string", "maxLength": MAX_PROPERTY_VALUE}
DEFAULT_LIMIT = 25  # Glance's limit_param_default
MAX_LIMIT = 1000  # Glance's api_limit_max
DEFAULT_SIZE_CAP = 1099511627776  # 1 TiB, Glance's image_size_cap

SORT_KEYS = {"name", "status", "container_format", "disk_format", "size", "virtual_size", "id",
             "created_at", "updated_at", "visibility", "owner", "min_disk", "min_ram"}
MEMBER_STATUSES = {"accepted", "pending", "rejected", "all"}
_UUID_RE = re.compile(schemas.UUID_PATTERN)


def size_cap(rt) -> int:
    return int(getattr(rt.cfg, "image_size_cap", DEFAULT_SIZE_CAP))


def store_for(rt) -> ImageStore:
    return ImageStore.for_runtime(rt)


# Views ----------------------------------------------------------------------

def _ts(value: dt.datetime | None) -> str | None:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if value else None


def view(row: Image) -> dict:
    """The image as the Image API v2 shows it: core attributes, extra properties flattened."""
    doc = dict(row.properties or {})
    doc.update({
        "id": row.id,
        "name": row.name,
        "status": row.status,
        "visibility": row.visibility,
        "protected": bool(row.protected),
        "os_hidden": bool(row.os_hidden),
        "checksum": row.checksum,
        "os_hash_algo": row.os_hash_algo,
        "os_hash_value": row.os_hash_value,
        "owner": row.owner,
        "size": row.size,
        "virtual_size": row.virtual_size,
        "min_ram": row.min_ram or 0,
        "min_disk": row.min_disk or 0,
        "container_format": row.container_format,
        "disk_format": row.disk_format,
        "created_at": _ts(row.created_at),
        "updated_at": _ts(row.updated_at or row.created_at),
        "tags": list(row.tags or []),
        "self": f"/v2/images/{row.id}",
        "file": f"/v2/images/{row.id}/file",
        "schema": "/v2/schemas/image",
    })
    return doc


# Access -----------------------------------------------------------------------

def is_visible(ctx: RequestContext, row: Image) -> bool:
    if row.status == "deleted":
        return False
    if ctx.is_admin:
        return True
    if row.visibility in ("public", "community"):
        return True
    return ctx.project_id is not None and row.owner == ctx.project_id


def authorize(ctx: RequestContext, action: str, target: dict | None = None) -> RequestContext:
    """The Image API's one authorization check: ``ctx`` once Glance's policy ``action`` passes on
    ``target`` (an image's ``{"project_id": owner}``; the caller's own project when None), else 403
    in Glance's words."""
    policy.enforce(ctx, action, target, api="image")
    return ctx


def _owned(row: Image) -> dict:
    """The policy target of an existing image: its owner's project."""
    return {"project_id": row.owner}


async def load_row(session, image_id: str, *, lock: bool = False) -> Image | None:
    if not isinstance(image_id, str) or not _UUID_RE.match(image_id):
        return None
    query = select(Image).where(Image.id == image_id)
    if lock:
        query = query.with_for_update()
    return (await session.execute(query)).scalar_one_or_none()


def _seen(ctx: RequestContext, image_id: str, row):
    """``row`` if ``ctx`` may see it; ImageNotFound when it is missing or hidden from ``ctx``."""
    if row is None or not is_visible(ctx, row):
        raise exceptions.ImageNotFound(f"No image found with ID {image_id}", image_id=image_id)
    return row


async def _visible_row(session, ctx: RequestContext, image_id: str, *, lock: bool = False) -> Image:
    return _seen(ctx, image_id, await load_row(session, image_id, lock=lock))


# Built once: every server create reads its image.
_IMAGES = Image.__table__
_BY_ID = select(_IMAGES).where(_IMAGES.c.id == bindparam("b_id"))


async def get(rt, ctx: RequestContext, image_id: str):
    """The image ``ctx`` may see, read-only: a row whose attributes are named as ``Image``'s
    (a Core row: no ORM object to build for a read)."""
    row = None
    if isinstance(image_id, str) and _UUID_RE.match(image_id):
        async with rt.db.reader() as s:
            row = (await s.execute(_BY_ID, {"b_id": image_id})).one_or_none()
    return _seen(ctx, image_id, row)


# Validation -----------------------------------------------------------------

def _bad(message: str) -> exceptions.Invalid:
    return exceptions.Invalid(message)


def _check_key_allowed(key: str, *, creating: bool) -> None:
    if key in schemas.READ_ONLY or (key == "id" and not creating):
        raise exceptions.ImageForbidden(reason=f"Attribute '{key}' is read-only.")
    if key in schemas.RESERVED or key.startswith(schemas.RESERVED_PREFIX):
        raise exceptions.ImageForbidden(reason=f"Attribute '{key}' is reserved.")


# What each core attribute's schema (``schemas.image_schema``) takes, in Glance's 400.
_EXPECTED = {
    "id": "a UUID", "name": "null or a string of at most 255 characters",
    "owner": "null or a string of at most 255 characters",
    "visibility": "one of " + ", ".join(schemas.VISIBILITIES),
    "protected": "a boolean", "os_hidden": "a boolean",
    "min_ram": f"an integer from 0 to {schemas.MAX_INT32}", "min_disk": f"an integer from 0 to {schemas.MAX_INT32}",
    "container_format": "null or one of " + ", ".join(schemas.CONTAINER_FORMATS),
    "disk_format": "null or one of " + ", ".join(schemas.DISK_FORMATS),
    "tags": "an array of strings",
}
_CORE_SCHEMAS = {**schemas.image_schema()["properties"], "tags": {"type": "array"}}


def _validate_core(key: str, value):
    """The validated value of core attribute ``key``; 400 when it does not fit the schema."""
    def glance_error(_error) -> exceptions.Invalid:
        return _bad(f"Provided object does not match schema 'image': {value!r} is not valid "
                    f"under the schema of '{key}' ({_EXPECTED[key]}).")

    validation.validate(value, _CORE_SCHEMAS[key], glance_error)
    if key == "tags":
        return list(dict.fromkeys(_validate_tag(tag) for tag in value))
    return value


def _validate_tag(tag) -> str:
    validation.validate(tag, schemas.TAG, lambda _error: _bad(
        f"Invalid tag {tag!r}: a tag is a non-empty string of at most 255 characters."))
    return tag


def _property_error(key: str, value):
    def glance_error(error) -> exceptions.Invalid:
        if error.validator == "type":
            return _bad(f"Provided object does not match schema 'image': {value!r} is not of type "
                        f"'string' (additional property '{key}').")
        return _bad(f"Value of property '{key}' is longer than {MAX_PROPERTY_VALUE} characters.")
    return glance_error


def _validate_property(key, value) -> str:
    if not isinstance(key, str) or not key or len(key) > 255:
        raise _bad(f"Invalid property name {key!r}: names are 1 to 255 characters long.")
    validation.validate(value, _PROPERTY_VALUE, _property_error(key, value))
    return value


def _check_limits(properties: dict, tags: list) -> None:
    if len(properties) > MAX_PROPERTIES:
        raise exceptions.ImageLimitExceeded(limit=MAX_PROPERTIES, what="properties")
    if len(tags) > MAX_TAGS:
        raise exceptions.ImageLimitExceeded(limit=MAX_TAGS, what="tags")


def _check_publicize(ctx: RequestContext, visibility: str) -> None:
    if visibility == "public":
        authorize(ctx, "publicize_image")


# Create -----------------------------------------------------------------------

async def create(rt, ctx: RequestContext, body) -> Image:
    if not isinstance(body, dict):
        raise _bad("Request body must be a JSON object describing the image.")
    authorize(ctx, "add_image")
    core: dict = {}
    properties: dict = {}
    for key, value in body.items():
        _check_key_allowed(key, creating=True)
        if key == "id" or key in schemas.CORE_WRITABLE:
            core[key] = _validate_core(key, value)
        else:
            properties[key] = _validate_property(key, value)
    tags = core.pop("tags", [])
    _check_limits(properties, tags)
    visibility = core.get("visibility", "shared")
    _check_publicize(ctx, visibility)
    owner = core.pop("owner", ctx.project_id)
    if "owner" in body and owner != ctx.project_id and not ctx.is_admin:
        raise exceptions.ImageForbidden(
            reason=f"You are not permitted to create images owned by '{owner}'.")
    image_id = core.pop("id", None) or str(uuid.uuid4())
    now = utcnow()
    row = Image(id=image_id, status="queued", visibility=visibility, owner=owner,
                name=core.get("name"), container_format=core.get("container_format"),
                disk_format=core.get("disk_format"), min_disk=core.get("min_disk", 0),
                min_ram=core.get("min_ram", 0), protected=core.get("protected", False),
                os_hidden=core.get("os_hidden", False), properties=properties, tags=tags,
                created_at=now, updated_at=now)
    try:
        async with rt.db.transaction() as s:
            s.add(row)
            await s.flush()
    except IntegrityError:
        raise exceptions.ImageConflict(reason=f"Image with identifier {image_id} already exists!")
    return row


# List -------------------------------------------------------------------------

_IN_KEYS = {"name", "id", "status", "container_format", "disk_format", "owner"}
_TIME_OPS = {"gt", "gte", "lt", "lte", "eq", "neq"}
_PAGING = {
    "limit": {"type": "integer", "minimum": 0, "description": f"At most {MAX_LIMIT}; {DEFAULT_LIMIT} if not given."},
    "marker": {"type": "string", "description": "The id of the last image of the previous page."},
    "sort_key": {"type": "array", "items": {"enum": sorted(SORT_KEYS)}},
    "sort_dir": {"type": "array", "items": {"enum": ["asc", "desc"]},
                 "description": "One for every sort_key, or one for them all; desc if not given."},
    "sort": {"type": "string", "pattern": "^[a-z_]+(:(asc|desc))?(,[a-z_]+(:(asc|desc))?)*$",
             "description": "key[:dir],... instead of sort_key and sort_dir."},
}
_PAGING_KEYS = set(_PAGING)
_IN = "a value, or in:a,b,... for any of several (CSV quoting)"
_TIMES = f"a time (ISO 8601), optionally after an operator: {', '.join(sorted(_TIME_OPS))} (gte:2024-01-01T00:00:00Z)"
# GET /v2/images's query parameters as _conditions and list_images read them; any other name
# filters on the extra property of that name, as in Glance.
LIST_QUERY = {"type": "object", "properties": {
    **_PAGING,
    **{key: {"type": "string", "description": _IN} for key in sorted(_IN_KEYS - {"status"})},
    "status": {"type": "string", "description": f"One of {', '.join(schemas.STATUSES)}; or {_IN}."},
    "visibility": {"enum": [*schemas.VISIBILITIES, "all"]},
    "member_status": {"enum": sorted(MEMBER_STATUSES)},
    "tag": {"type": "array", "items": {"type": "string"}, "description": "Images having every tag given."},
    "os_hidden": {"type": "boolean"},
    "protected": {"type": "boolean"},
    "min_ram": {"type": "integer"},
    "min_disk": {"type": "integer"},
    "size_min": {"type": "integer"},
    "size_max": {"type": "integer"},
    "created_at": {"type": "string", "description": _TIMES},
    "updated_at": {"type": "string", "description": _TIMES},
}}


def _parse_bool(key: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise _bad(f"Invalid value '{value}' for parameter '{key}': expected a boolean.")


def _parse_int(key: str, value: str) -> int:
    try:
        return rest.parse_int64(value)
    except ValueError:
        raise _bad(f"{key} param must be an integer")


def _parse_in(value: str) -> set[str]:
    try:
        items = next(csv.reader([value], skipinitialspace=True))
    except (csv.Error, StopIteration):
        raise _bad(f"Invalid 'in' operator value: {value}")
    return {item for item in items}


def _parse_time_filter(key: str, value: str):
    op, sep, stamp = value.partition(":")
    if not sep or op not in _TIME_OPS:
        op, stamp = "eq", value
    try:
        when = dt.datetime.fromisoformat(stamp.strip().replace("Z", "+00:00"))
    except ValueError:
        raise _bad(f"Invalid timestamp '{stamp}' for filter '{key}'.")
    if when.tzinfo is not None:
        when = when.astimezone(dt.timezone.utc).replace(tzinfo=None)
    when = when.replace(microsecond=0)
    return op, when


def _time_condition(column, op: str, when: dt.datetime):
    """``column`` cut to whole seconds compared with ``when`` (a whole second), as Glance compares;
    NULL matches nothing."""
    try:
        next_second = when + dt.timedelta(seconds=1)
        from_next, before_next = column >= next_second, column < next_second
    except OverflowError:  # the last second there is: nothing comes after it
        from_next, before_next = false(), column.is_not(None)
    return {"gt": from_next, "gte": column >= when, "lt": column < when, "lte": before_next,
            "eq": and_(column >= when, before_next), "neq": or_(column < when, from_next)}[op]


def _parse_sort(params: list[tuple[str, str]]) -> list[tuple[str, str]]:
    keys = [v for k, v in params if k == "sort_key"]
    dirs = [v for k, v in params if k == "sort_dir"]
    sorts = [v for k, v in params if k == "sort"]
    result: list[tuple[str, str]] = []
    if sorts:
        if keys or dirs:
            raise _bad("The 'sort' parameter cannot be combined with 'sort_key' or 'sort_dir'.")
        for part in ",".join(sorts).split(","):
            key, _, direction = part.strip().partition(":")
            result.append((key.strip(), (direction.strip() or "desc").lower()))
    else:
        if dirs and len(dirs) not in (1, len(keys) or 1):
            raise _bad("The number of sort_dir values must be one or match the number of sort_key values.")
        keys = keys or ["created_at"]
        for i, key in enumerate(keys):
            direction = (dirs[i] if len(dirs) == len(keys) else dirs[0]) if dirs else "desc"
            result.append((key, direction.lower()))
    for key, direction in result:
        if key not in SORT_KEYS:
            raise _bad(f"Invalid sort key: {key}. It must be one of: {', '.join(sorted(SORT_KEYS))}.")
        if direction not in ("asc", "desc"):
            raise _bad(f"Invalid sort direction: {direction}. It must be one of: asc, desc.")
    if "id" not in [k for k, _ in result]:
        result.append(("id", "desc"))
    return result


# The value an image sorts and filters by: an image never updated was last updated when created.
_UPDATED_AT = func.coalesce(Image.updated_at, Image.created_at)


def _sort_column(key: str):
    if key == "updated_at":
        return _UPDATED_AT
    column = getattr(Image, key)
    return codepoint.ordered(column) if isinstance(column.type, String) else column


def _sort_value(row: Image, key: str):
    return (row.updated_at or row.created_at) if key == "updated_at" else getattr(row, key)


def _conditions(ctx: RequestContext, params: list[tuple[str, str]]) -> list:
    """The SQL conditions for the filters in ``params`` (400 on malformed values)."""
    conditions = []
    single: dict[str, str] = {}
    for key, value in params:
        if key in ("tag",) or key in _PAGING_KEYS:
            continue
        single[key] = value  # last one wins, as in Glance
    tags = [v for k, v in params if k == "tag"]

    visibility = single.pop("visibility", None)
    if visibility is not None and visibility not in (*schemas.VISIBILITIES, "all"):
        raise _bad(f"Invalid visibility value: {visibility}")
    member_status = single.pop("member_status", "accepted")
    if member_status not in MEMBER_STATUSES:
        raise _bad(f"Invalid status value: {member_status}")
    if visibility not in (None, "all"):
        conditions.append(Image.visibility == visibility)
    if not ctx.is_admin and visibility not in ("community", "all"):
        # Beyond plain visibility: community images show only when asked for.
        conditions.append(or_(Image.visibility != "community", Image.owner == ctx.project_id))

    hidden = single.pop("os_hidden", None)
    hidden_value = _parse_bool("os_hidden", hidden) if hidden is not None else False
    conditions.append(func.coalesce(Image.os_hidden, False) == hidden_value)

    if "protected" in single:
        protected = _parse_bool("protected", single.pop("protected"))
        conditions.append(func.coalesce(Image.protected, False) == protected)

    if "size_min" in single:
        conditions.append(Image.size >= _parse_int("size_min", single.pop("size_min")))
    if "size_max" in single:
        conditions.append(Image.size <= _parse_int("size_max", single.pop("size_max")))

    for key in ("created_at", "updated_at"):
        if key in single:
            op, when = _parse_time_filter(key, single.pop(key))
            conditions.append(_time_condition(_sort_column(key), op, when))

    # Glance filters on any other column of the image by equality (its hasattr(Image, key)).
    for key in ("min_ram", "min_disk"):
        if key in single:
            bound = _parse_int(key, single.pop(key))
            conditions.append(func.coalesce(getattr(Image, key), 0) == bound)

    for key in _IN_KEYS:
        if key in single:
            value = single.pop(key)
            if key == "status" and value not in schemas.STATUSES and not value.startswith("in:"):
                raise _bad(f"Invalid status value: {value}")
            wanted = _parse_in(value[3:]) if value.startswith("in:") else {value}
            conditions.append(codepoint.is_in(getattr(Image, key), sorted(wanted)))

    for tag in tags:
        conditions.append(json_match.array_has(Image.tags, tag))

    # Anything else filters on an extra property, as Glance does.
    for key, value in single.items():
        conditions.append(json_match.object_has(Image.properties, key, value))
    return conditions


def _scope(ctx: RequestContext) -> list:
    """The images ``ctx`` may see at all (``is_visible``), as SQL."""
    if ctx.is_admin:
        return [Image.status != "deleted"]
    scope = [Image.visibility.in_(("public", "community"))]
    if ctx.project_id is not None:
        scope.append(Image.owner == ctx.project_id)
    return [Image.status != "deleted", or_(*scope)]


async def list_images(rt, ctx: RequestContext, params: list[tuple[str, str]]) -> dict:
    """The list document for the query ``params`` (a list of (key, value) pairs)."""
    limit_values = [v for k, v in params if k == "limit"]
    limit = DEFAULT_LIMIT
    if limit_values:
        limit = _parse_int("limit", limit_values[-1])
        if limit < 0:
            raise _bad("limit param must be positive")
    limit = min(limit, MAX_LIMIT)
    markers = [v for k, v in params if k == "marker"]
    marker = markers[-1] if markers else None
    sort = _parse_sort(params)
    keys = [listing.SortKey(key, _sort_column(key), direction == "desc") for key, direction in sort]
    query = select(Image).where(*_scope(ctx), *_conditions(ctx, params))

    async with rt.db.reader() as s:
        after = None
        if marker is not None:
            marker_row = await load_row(s, marker)
            if marker_row is None or not is_visible(ctx, marker_row):
                raise _bad(f"Invalid marker. Image {marker} could not be found.")
            after = {key: _sort_value(marker_row, key) for key, _ in sort}
        # One row more than the page tells whether there is a next one.
        rows = list((await s.execute(listing.paged(query, keys, marker=after, limit=limit + 1))).scalars())
    page = rows[:limit]

    kept = [(k, v) for k, v in params if k != "marker"]
    doc: dict = {
        "images": [view(r) for r in page],
        "first": "/v2/images" + (f"?{urlencode(kept)}" if kept else ""),
        "schema": "/v2/schemas/images",
    }
    if page and len(rows) > len(page):
        doc["next"] = "/v2/images?" + urlencode([*kept, ("marker", page[-1].id)])
    return doc


# Update -----------------------------------------------------------------------

def _pointer(path) -> str:
    if not isinstance(path, str) or not path.startswith("/"):
        raise _bad(f"Invalid JSON pointer for this resource: '{path}'")
    parts = [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]
    if parts and parts[0] == "locations":
        raise exceptions.ImageForbidden(
            reason="It's not allowed to update locations if locations are invisible.")
    if len(parts) != 1 or not parts[0]:
        raise _bad(f"Invalid JSON pointer for this resource: '{path}'")
    return parts[0]


_PATCH_OPS = ("add", "replace", "remove")
# An add of a property the image has already: v2.1 replaces it, v2.0 refuses it (409), as Glance.
ADD_NEW = "add_new"


def _op_and_path(change: dict, draft: int) -> tuple[str, object]:
    """Glance's two patch formats: v2.1 (``{"op": "add", "path": "/x"}``, JSON Patch) and v2.0
    (``{"add": "/x"}``, the operation as the member's name)."""
    if draft == 4:
        ops = [op for op in _PATCH_OPS if op in change]
        if len(ops) != 1:
            raise _bad('Operation objects must contain exactly one member named "add", "remove", or "replace".')
        return (ADD_NEW if ops[0] == "add" else ops[0]), change[ops[0]]
    op = change.get("op")
    if op not in _PATCH_OPS:
        raise _bad(f"Invalid operation: {op!r}. Supported operations: add, replace, remove.")
    if "path" not in change:
        raise _bad("Unable to find 'path' in JSON Schema change")
    return op, change["path"]


def parse_patch(body, draft: int = 10) -> list[tuple[str, str, object]]:
    """(op, attribute, value) triples from an ``openstack-images-v2.1-json-patch`` body, or
    (``draft`` 4) an ``openstack-images-v2.0-json-patch`` one."""
    if not isinstance(body, list):
        raise _bad("Request body must be a JSON array of operation objects.")
    changes = []
    for change in body:
        if not isinstance(change, dict):
            raise _bad("Operations must be JSON objects.")
        op, path = _op_and_path(change, draft)
        attr = _pointer(path)
        _check_key_allowed(attr, creating=False)
        if op == "remove":
            changes.append((op, attr, None))
            continue
        if "value" not in change:
            raise _bad(f"Operation '{op}' requires a member named 'value'.")
        changes.append((op, attr, change["value"]))
    return changes


def _patchable(row: Image) -> dict:
    """The image as a patch changes it: its writable core attributes (tags among them) and its extra
    properties, side by side as Glance's image document shows them (no property is named as a core
    attribute)."""
    return {**(row.properties or {}), **{attr: getattr(row, attr) for attr in schemas.CORE_WRITABLE},
            "tags": list(row.tags or [])}


def _apply(document: dict, op: str, attr: str, value: object) -> None:
    """One JSON Patch operation on ``attr`` of ``document``; 409 for a replace or remove of a
    property the image does not have (``add`` makes or replaces it)."""
    operation = {"op": "add" if op == ADD_NEW else op, "path": JsonPointer.from_parts([attr]).path}
    if op != "remove":
        operation["value"] = value
    try:
        jsonpatch.apply_patch(document, [operation], in_place=True)
    except jsonpatch.JsonPatchConflict:
        raise exceptions.ImageConflict(reason=f"Property {attr} does not exist.") from None


async def update(rt, ctx: RequestContext, image_id: str, changes: list[tuple[str, str, object]]) -> Image:
    """Apply ``changes`` (from ``parse_patch``) to the image by JSON Patch, each change first checked
    as Glance checks it: core attributes are never removed and must fit the schema (a format only
    while queued, public only by policy, another owner only by an admin), properties must be strings
    of bounded length, and a v2.0 ``add`` refuses one that exists."""
    async with rt.db.transaction() as s:
        row = await _visible_row(s, ctx, image_id, lock=True)
        authorize(ctx, "modify_image", _owned(row))
        document = _patchable(row)
        for op, attr, value in changes:
            if attr in schemas.CORE_WRITABLE:
                if op == "remove":
                    raise exceptions.ImageForbidden(reason=f"Property {attr} may not be removed.")
                value = _validate_core(attr, value)
                if attr in ("container_format", "disk_format") and row.status != "queued" \
                        and value != getattr(row, attr):
                    raise exceptions.ImageForbidden(
                        reason=f"Attribute {attr} can be only replaced for a queued image.")
                if attr == "visibility":
                    _check_publicize(ctx, value)
                if attr == "owner" and value != row.owner and not ctx.is_admin:
                    raise exceptions.ImageForbidden(
                        reason="You are not authorized to change the owner of an image.")
            elif op == ADD_NEW and attr in document:
                raise exceptions.ImageConflict(reason=f"Property {attr} already present.")
            _apply(document, op, attr, value)
            if attr not in schemas.CORE_WRITABLE and op != "remove":
                _validate_property(attr, value)  # after the patch's own 409, as Glance answers
        properties = {k: v for k, v in document.items() if k not in schemas.CORE_WRITABLE}
        _check_limits(properties, document["tags"])
        for attr in schemas.CORE_WRITABLE - {"tags"}:
            if document[attr] != getattr(row, attr):
                setattr(row, attr, document[attr])
        row.properties = properties
        row.tags = document["tags"]
        row.updated_at = utcnow()
    return row


async def set_properties(rt, ctx: RequestContext, image_id: str,
                         change: Callable[[dict], dict]) -> dict:
    """Replace the image's extra properties with ``change(current)`` in one locked transaction
    (what a PATCH adding, replacing and removing them would do); the new properties."""
    async with rt.db.transaction() as s:
        row = await _visible_row(s, ctx, image_id, lock=True)
        authorize(ctx, "modify_image", _owned(row))
        current = dict(row.properties or {})
        properties = change(dict(current))
        for key, value in properties.items():
            if key in current and current[key] == value:
                continue
            _check_key_allowed(key, creating=False)
            if key in schemas.CORE_WRITABLE:
                raise _bad(f"Attribute '{key}' is a core attribute of the image, not a property.")
            _validate_property(key, value)
        _check_limits(properties, list(row.tags or []))
        row.properties = properties
        row.updated_at = utcnow()
    return properties


async def add_tag(rt, ctx: RequestContext, image_id: str, tag: str) -> None:
    tag = _validate_tag(tag)
    async with rt.db.transaction() as s:
        row = await _visible_row(s, ctx, image_id, lock=True)
        authorize(ctx, "modify_image", _owned(row))
        tags = list(row.tags or [])
        if tag not in tags:
            tags.append(tag)
            _check_limits({}, tags)
            row.tags = tags
            row.updated_at = utcnow()


async def remove_tag(rt, ctx: RequestContext, image_id: str, tag: str) -> None:
    async with rt.db.transaction() as s:
        row = await _visible_row(s, ctx, image_id, lock=True)
        authorize(ctx, "modify_image", _owned(row))
        tags = list(row.tags or [])
        if tag not in tags:
            raise exceptions.NotFound(f"Tag {tag} not found on image {image_id}.")
        tags.remove(tag)
        row.tags = tags
        row.updated_at = utcnow()


# Delete -----------------------------------------------------------------------

async def delete(rt, ctx: RequestContext, image_id: str) -> None:
    async with rt.db.transaction() as s:
        row = await _visible_row(s, ctx, image_id, lock=True)
        authorize(ctx, "delete_image", _owned(row))
        if row.protected:
            raise exceptions.ImageProtected(image_id=image_id)
        row.status = "deleted"
        row.location = None
        row.updated_at = utcnow()
    await store_for(rt).delete(image_id)


# Data -------------------------------------------------------------------------

async def transition(rt, image_id: str, old: str, new: str, **values) -> bool:
    async with rt.db.transaction() as s:
        result = await s.execute(sql_update(Image).where(Image.id == image_id, Image.status == old)
                                 .values(status=new, updated_at=utcnow(), **values))
        return result.rowcount == 1


async def upload(rt, ctx: RequestContext, image_id: str, chunks: AsyncIterable[bytes], *,
                 declared_size: int | None = None, max_size: int | None = None,
                 on_saving: Callable[[bool], None] | None = None) -> Image:
    """Store the image's data (queued -> saving -> active). ``on_saving(True)`` once this upload has
    made the image ``saving``, ``on_saving(False)`` once it has moved it on (active, or back to
    queued): a caller told True and not False knows a failure left the image saving."""
    max_size = size_cap(rt) if max_size is None else max_size
    row = await get(rt, ctx, image_id)
    authorize(ctx, "upload_image", _owned(row))
    if row.status != "queued":
        raise exceptions.ImageConflict(
            reason=f"Image status transition from {row.status} to saving is not allowed")
    if not row.disk_format or not row.container_format:
        raise _bad("Properties disk_format, container_format must be set prior to saving data.")
    if declared_size is not None and declared_size > max_size:
        raise exceptions.ImageSizeLimitExceeded(limit=max_size)
    saving = on_saving or (lambda _saving: None)
    if not await transition(rt, image_id, "queued", "saving"):
        raise exceptions.ImageConflict(
            reason="Image status transition from queued to saving is not allowed: "
                   "another upload may be under way.")
    saving(True)
    store = store_for(rt)
    try:
        data = await store.write(image_id, chunks, max_size=max_size)
        try:
            inspection = await asyncio.to_thread(format_inspection.inspect, data.path, row.disk_format, image_id)
        except exceptions.ImageUnacceptable:
            await store.delete(image_id)  # refused content is not kept (Glance discards it too)
            raise
    except BaseException:
        await transition(rt, image_id, "saving", "queued")
        saving(False)
        raise
    moved = await transition(rt, image_id, "saving", "active", size=data.size,
                             virtual_size=inspection.virtual_size, checksum=data.checksum,
                             os_hash_algo=data.os_hash_algo, os_hash_value=data.os_hash_value,
                             location=data.path)
    saving(False)
    if not moved:
        await store.delete(image_id)
        raise exceptions.ImageConflict(
            reason=f"Image {image_id} could not be found after upload. "
                   "The image may have been deleted during the upload.")
    async with rt.db.reader() as s:
        return await load_row(s, image_id)


async def open_data(rt, ctx: RequestContext, image_id: str) -> tuple[Image, AsyncIterator[bytes] | None]:
    """The image and an iterator over its data (None when it has none yet)."""
    row = await get(rt, ctx, image_id)
    if row.status == "deactivated" and not ctx.is_admin:
        raise exceptions.ImageForbidden(reason="The requested image has been deactivated. "
                                               "Image data download is forbidden.")
    if row.status != "active" or not row.location:
        return row, None
    try:
        chunks = await store_for(rt).open(image_id)
    except exceptions.ImageNotFound:
        raise exceptions.NotFound(f"Image {image_id} has no data in the store.")
    return row, chunks
