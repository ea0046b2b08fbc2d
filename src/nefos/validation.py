"""JSON Schema validation of request bodies and query strings, one mechanism for the four APIs.

``first_error(instance, schema)`` checks a parsed JSON body (or a query dict) against a Draft 4
JSON Schema and returns the first error (``jsonschema.ValidationError``) or None; ``validate``
raises what an API's ``wording`` makes of that error, so each API keeps its own words and status
(Nova's "Invalid input for field/attribute ...", Neutron's "Invalid input for ... Reason: ...",
Glance's "Provided object does not match schema ...", Keystone's "Invalid input for field ...").
Errors come in the order of the schema's keywords and properties: a schema written in the order
a handler used to check its fields gives the same first error.

As in Nova, ``minimum``/``maximum`` also apply to numeric strings (``"0"`` fails ``minimum: 1``;
a schema that takes numbers only says so with ``type``). The formats jsonschema knows are checked,
and these as the OpenStack services check them: ``uuid``, ``ipv4``, ``ipv6``, ``cidr``, ``uri``,
``date-time``, ``base64``. An API adds formats of its own to a checker of ``formats()``.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import ipaddress
import re
import uuid as uuidlib
from typing import Any, Callable

import jsonschema
from jsonschema import Draft4Validator, FormatChecker


def is_uuid_like(value) -> bool:
    """oslo's ``uuidutils.is_uuid_like``: hex with or without dashes, any case."""
    if not isinstance(value, str):
        return False
    try:
        canonical = str(uuidlib.UUID(value)).replace("-", "")
    except (TypeError, ValueError, AttributeError):
        return False
    given = value.lower().removeprefix("urn:uuid:").strip("{}").replace("-", "")
    return canonical == given


def is_base64(text: str) -> bool:
    """Whether ``text`` is base64 (line breaks and other whitespace allowed, as Nova's check)."""
    try:
        base64.b64decode(re.sub(r"\s", "", text), validate=True)
        return True
    except (binascii.Error, ValueError):
        return False


def _check_uuid(instance) -> bool:
    return not isinstance(instance, str) or is_uuid_like(instance)


def _address_check(kind) -> Callable[[Any], bool]:
    def check(instance) -> bool:
        if not isinstance(instance, str):
            return True
        try:
            kind(instance)
            return True
        except ValueError:
            return False
    return check


def _check_cidr(instance) -> bool:
    if not isinstance(instance, str):
        return True
    try:
        ipaddress.ip_network(instance, strict=False)
        return "/" in instance
    except ValueError:
        return False


def _check_uri(instance) -> bool:
    if not isinstance(instance, str):
        return True
    return re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://[^\s]+$", instance) is not None


def _check_date_time(instance) -> bool:
    if not isinstance(instance, str):
        return True
    try:
        dt.datetime.fromisoformat(instance.replace("Z", "+00:00"))
        return True
    except ValueError:
        return False


def _check_base64(instance) -> bool:
    return not isinstance(instance, str) or is_base64(instance)


_SHARED_FORMATS = {
    "uuid": _check_uuid, "ipv4": _address_check(ipaddress.IPv4Address),
    "ipv6": _address_check(ipaddress.IPv6Address), "cidr": _check_cidr, "uri": _check_uri,
    "date-time": _check_date_time, "base64": _check_base64,
}


def formats() -> FormatChecker:
    """A new format checker with the shared formats; an API may register more on it."""
    checker = FormatChecker()
    for name, check in _SHARED_FORMATS.items():
        checker.checks(name)(check)
    return checker


FORMATS = formats()


def _number_from_str(instance):
    if isinstance(instance, bool):
        return None
    if isinstance(instance, (int, float)):
        return instance
    try:
        return int(instance)
    except (TypeError, ValueError):
        try:
            return float(instance)
        except (TypeError, ValueError):
            return None


def _minimum(validator, minimum, instance, schema):
    number = _number_from_str(instance)
    if number is None:
        return
    yield from Draft4Validator.VALIDATORS["minimum"](validator, minimum, number, schema)


def _maximum(validator, maximum, instance, schema):
    number = _number_from_str(instance)
    if number is None:
        return
    yield from Draft4Validator.VALIDATORS["maximum"](validator, maximum, number, schema)


_Validator = jsonschema.validators.extend(Draft4Validator, {"minimum": _minimum, "maximum": _maximum})
_cache: dict[tuple[int, int], tuple[dict, FormatChecker, Any]] = {}


def _validator_for(schema: dict, checker: FormatChecker):
    key = (id(schema), id(checker))
    cached = _cache.get(key)
    if cached is not None and cached[0] is schema and cached[1] is checker:
        return cached[2]
    validator = _Validator(schema, format_checker=checker)
    if len(_cache) > 512:
        _cache.clear()
    _cache[key] = (schema, checker, validator)
    return validator


def first_error(instance: Any, schema: dict,
                checker: FormatChecker = FORMATS) -> jsonschema.ValidationError | None:
    """The first way ``instance`` breaks ``schema``, or None when it fits."""
    return next(iter(_validator_for(schema, checker).iter_errors(instance)), None)


def validate(instance: Any, schema: dict, wording: Callable[[jsonschema.ValidationError], Exception],
             checker: FormatChecker = FORMATS) -> None:
    """Raise ``wording(error)``, the API's own answer, when ``instance`` breaks ``schema``."""
    error = first_error(instance, schema, checker)
    if error is not None:
        raise wording(error)
