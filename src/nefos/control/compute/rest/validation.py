"""Request validation for the Compute API: JSON Schema (``nefos.validation``), with Nova's error
messages.

``validate(body, schema)`` checks a parsed JSON body (or a query dict) against
a Draft 4 JSON Schema and raises ``nefos.exceptions.ValidationError`` (400)
worded as Nova words it, naming the offending field::

    Invalid input for field/attribute flavor. Value: 1. 1 is not of type 'object'

Besides the shared formats, Nova's names are checked: ``name`` (printable, no leading or
trailing whitespace), ``name_with_leading_trailing_spaces``, ``az_name`` (a ``name`` without ':').

The ``parameter_types``-like constants below (``NAME``, ``BOOLEAN``, ...) are
the building blocks Nova's schemas use; ``bool_from_string`` and
``validate_integer`` convert what passed the schema.
"""

from __future__ import annotations

import unicodedata
from typing import Any

import jsonschema

from nefos import exceptions, validation
from nefos.validation import is_uuid_like  # noqa: F401  (re-exported for the Compute API's modules)

MAX_INT = 2147483647


class InvalidName(ValueError):
    """Raised by the ``name`` format checkers; its text becomes the whole error message."""


_NAME_MSG = ("An invalid 'name' value was provided. The name must be: printable characters. "
             "Can not start or end with whitespace.")
_NAME_SPACES_MSG = ("An invalid 'name' value was provided. The name must be: printable "
                    "characters with at least one non space character")


def _printable(char: str) -> bool:
    """Nova's ``_is_printable``: neither an "other" character (control, format, surrogate, private
    use, unassigned) nor a separator other than a space (a line or paragraph separator); and, as
    Nova builds its name pattern from the Basic Multilingual Plane only, nothing beyond U+FFFE."""
    category = unicodedata.category(char)
    return (ord(char) < 0xFFFF and not category.startswith("C")
            and (not category.startswith("Z") or category == "Zs"))


def _printable_not_space(char: str) -> bool:
    return _printable(char) and unicodedata.category(char) != "Zs"


def _nova_name(text: str, allowed=_printable) -> bool:
    """Nova's ``valid_name_regex``: ``allowed`` characters, neither the first nor the last a space."""
    return all(allowed(ch) for ch in text) and (
        not text or (_printable_not_space(text[0]) and _printable_not_space(text[-1])))


_checker = validation.formats()


@_checker.checks("name", raises=InvalidName)
def _check_name(instance) -> bool:
    if isinstance(instance, str) and not _nova_name(instance):
        raise InvalidName(_NAME_MSG)
    return True


@_checker.checks("name_with_leading_trailing_spaces", raises=InvalidName)
def _check_name_spaces(instance) -> bool:
    """Nova's ``valid_name_leading_trailing_spaces_regex``: printable, at least one of them not a space."""
    if not isinstance(instance, str):
        return True
    if not all(_printable(ch) for ch in instance) or (instance and not any(map(_printable_not_space, instance))):
        raise InvalidName(_NAME_SPACES_MSG)
    return True


_AZ_NAME_MSG = ("An invalid 'name' value was provided. The name must be: printable characters except :."
                "Can not start or end with whitespace.")


@_checker.checks("az_name", raises=InvalidName)
def _check_az_name(instance) -> bool:
    """Nova's ``az_name``: a ``name`` without ':' (which separates zone, host and node)."""
    if isinstance(instance, str) and not _nova_name(instance, lambda ch: ch != ":" and _printable(ch)):
        raise InvalidName(_AZ_NAME_MSG)
    return True


def error_message(error: jsonschema.ValidationError) -> str:
    """Nova's wording of one schema error."""
    if isinstance(error.cause, InvalidName):
        return str(error.cause)
    if len(error.path) > 0:
        return (f"Invalid input for field/attribute {error.path[-1]}. "
                f"Value: {error.instance}. {error.message}")
    return error.message


def _nova_error(error: jsonschema.ValidationError) -> exceptions.ValidationError:
    return exceptions.ValidationError(error_message(error))


def validate(body: Any, schema: dict) -> None:
    """Raise ``ValidationError`` (400) naming the first field of ``body`` that breaks ``schema``."""
    validation.validate(body, schema, _nova_error, _checker)


# Conversions of values that passed a schema ------------------------------------

_TRUE = {"1", "t", "true", "on", "y", "yes"}
_FALSE = {"0", "f", "false", "off", "n", "no"}


def bool_from_string(value, strict: bool = False, default: bool = False) -> bool:
    """oslo's ``strutils.bool_from_string``; strict raises ValidationError on anything unrecognised."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    if strict:
        raise exceptions.ValidationError(
            f"Unrecognized value '{value}', acceptable values are: "
            "'0', '1', 'f', 'false', 'n', 'no', 'off', 'on', 't', 'true', 'y', 'yes'")
    return default


def validate_integer(value, name: str, min_value: int | None = None, max_value: int | None = None) -> int:
    """Nova's ``utils.validate_integer``: an int within bounds, else 400 with Nova's message."""
    try:
        if isinstance(value, bool):
            raise ValueError
        number = int(str(value))
    except (ValueError, UnicodeEncodeError):
        raise exceptions.ValidationError(f"Invalid input received: {name} must be an integer")
    if min_value is not None and number < min_value:
        raise exceptions.ValidationError(f"Invalid input received: {name} must be >= {min_value}")
    if max_value is not None and number > max_value:
        raise exceptions.ValidationError(f"Invalid input received: {name} must be <= {max_value}")
    return number


# Building blocks (Nova's nova.api.validation.parameter_types) --------------------

NAME = {"type": "string", "minLength": 1, "maxLength": 255, "format": "name"}
AZ_NAME = {"type": "string", "minLength": 1, "maxLength": 255, "format": "az_name"}
NAME_WITH_SPACES = {"type": "string", "minLength": 1, "maxLength": 255,
                    "format": "name_with_leading_trailing_spaces"}
DESCRIPTION = {"type": ["string", "null"], "minLength": 0, "maxLength": 255,
               "pattern": r"^[^\x00-\x1f\x7f]*$"}
BOOLEAN = {"type": ["boolean", "string"], "enum": [
    True, "True", "TRUE", "true", "1", "ON", "On", "on", "YES", "Yes", "yes", "y", "t",
    False, "False", "FALSE", "false", "0", "OFF", "Off", "off", "NO", "No", "no", "n", "f"]}
NON_NEGATIVE_INTEGER = {"type": ["integer", "string"], "pattern": "^[0-9]*$", "minimum": 0,
                        "minLength": 1, "maximum": MAX_INT}
POSITIVE_INTEGER = {"type": ["integer", "string"], "pattern": "^[0-9]*$", "minimum": 1,
                    "minLength": 1, "maximum": MAX_INT}
HOSTNAME = {"type": "string", "minLength": 1, "maxLength": 255, "pattern": r"^[a-zA-Z0-9-._]*$"}
UUID = {"type": "string", "format": "uuid"}
IP_ADDRESS = {"type": "string", "oneOf": [{"format": "ipv4"}, {"format": "ipv6"}]}
DEVICE_TAG = {"type": "string", "pattern": "^[^,/]*$", "maxLength": 60}  # a NIC's or a disk's tag (2.32+)


def one_action_schema(action: str, properties: dict, required: list[str]) -> dict:
    """A server action's body: ``{action: {...properties}}``, no other key at either level."""
    return {"type": "object", "properties": {action: {
        "type": "object", "properties": properties, "required": required, "additionalProperties": False}},
        "required": [action], "additionalProperties": False}


# Query strings --------------------------------------------------------------------

def query_schema(properties: dict, *, strict: bool, single: tuple[str, ...] = ()) -> dict:
    """Nova's query schemas: each parameter is a list of values (``single``: at most one); ``strict``
    (``additionalProperties: False``, from 2.75 on most APIs) refuses unknown parameters."""
    props = {name: {"type": "array", "items": item, **({"maxItems": 1} if name in single else {})}
             for name, item in properties.items()}
    return {"type": "object", "properties": props, "additionalProperties": not strict}


def validate_query(params, schema: dict) -> None:
    """Raise ``ValidationError`` (400, Nova's wording) when query ``params`` break ``schema``."""
    query = {key: params.getlist(key) for key in params.keys()}
    validation.validate(query, schema, _nova_query_error, _checker)


def _nova_query_error(error: jsonschema.ValidationError) -> exceptions.ValidationError:
    if isinstance(error.cause, InvalidName):
        return exceptions.ValidationError(str(error.cause))
    if len(error.path) > 0:
        return exceptions.ValidationError(f"Invalid input for query parameters {error.path[0]}. "
                                          f"Value: {error.instance}. {error.message}")
    return exceptions.ValidationError(error.message)


NO_QUERY = query_schema({}, strict=True)


def refuse_query_from_2102(request) -> None:
    """2.102: the APIs that read no query parameter refuse any (400), as Nova's query schemas do
    from then on (``additionalProperties: False``); earlier versions ignore them."""
    if request.state.api_version.matches("2.102"):
        validate_query(request.query_params, NO_QUERY)
