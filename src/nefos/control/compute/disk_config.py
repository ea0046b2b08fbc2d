"""``OS-DCF:diskConfig``: whether the guest's partition and file system are grown to fill its root
disk (``AUTO``, kept as ``auto_disk_config`` true) or left as the image made them (``MANUAL``).

As Nova: an image whose ``auto_disk_config`` property is ``disabled`` refuses AUTO (400); without
a requested value a create or rebuild takes the image's property (true-ish: AUTO, else MANUAL),
a resize without one sets MANUAL, and an update changes only what it names. Nefos's drivers boot
the image's disk as it is either way: the value is kept and shown, as Nova's libvirt driver keeps it.
"""

from __future__ import annotations

from nefos import exceptions

API_VALUES = {"AUTO": True, "MANUAL": False}
_TRUE = ("1", "t", "true", "on", "y", "yes")  # oslo's bool_from_string, default false


def from_api(value: str | None) -> bool | None:
    return None if value is None else API_VALUES[value]


def to_api(instance: dict) -> str:
    return "AUTO" if instance.get("auto_disk_config") else "MANUAL"


def _check(image_value, requested: bool | None, image_id) -> None:
    if requested and isinstance(image_value, str) and image_value.strip().lower() == "disabled":
        raise exceptions.Invalid(f"Requested image {image_id} has automatic disk resize disabled.")


def for_image(image: dict, requested: bool | None) -> bool:
    """The value a server booted or rebuilt from ``image`` gets (``requested``: the API's, or None)."""
    image_value = (image.get("properties") or {}).get("auto_disk_config")
    _check(image_value, requested, image.get("id"))
    if requested is None:
        return str(image_value).strip().lower() in _TRUE
    return requested


def for_resize(instance: dict, requested: bool | None) -> bool:
    """The value after a resize: the requested one (refused if the server's image disabled it),
    MANUAL when none (Nova's ``auto_disk_config or False``)."""
    image_value = (instance.get("system_metadata") or {}).get("image_auto_disk_config")
    _check(image_value, requested, instance.get("image_ref"))
    return bool(requested)
