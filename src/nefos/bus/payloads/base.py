"""What a typed bus payload is (Nova's versioned objects, as the messages that cross the bus).

A payload class has a name, a version and declared fields, each with the types its value may take
and the payload version it was added in. A payload is built only from its declared fields, each
of a declared type, so what a service sends is a message it means, not whatever its database row
held. Its primitive form, what crosses the bus as JSON, is the plain mapping of its fields: the
form every earlier release sent and reads.

Which payload version an interface carries is declared with the interface
(``RPCInterface.payloads``): a message sent as an older version of its interface (a caller pinned
by ``[upgrade_levels]`` to what its older servers read) carries its payloads in the version that
interface version carried, the fields added since left out (``to_primitive``), as Nova's
``obj_make_compatible`` serves an older receiver. An answer carries the server's own payload
version; a received primitive with fields this release does not know (a newer sender's) is read
without them (``from_primitive``).

A payload reads as a mapping, as Nova's ``NovaObjectDictCompat`` lets the code written for dicts
read its objects, and by attribute; only a declared field may be set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Iterable

from nefos.bus.versioning import parse

JSON_SCALARS = (str, int, float, bool)


@dataclass(frozen=True)
class Field:
    """A declared field: the types its value may take (None is always allowed: a column may be
    NULL, a sender may not know the value), the payload version it was added in, and for a list of
    payloads their class (``items``: each item is read as one)."""

    types: tuple[type, ...]
    added: str = "1.0"
    items: type | None = None


def field(*types: type, added: str = "1.0", items: type | None = None) -> Field:
    return Field(types, added, items)


class PayloadFieldError(TypeError):
    """A payload built with a field it does not declare, or a value of an undeclared type."""


class Payload(dict):
    """Base of every bus payload: subclasses declare ``NAME``, ``VERSION`` and ``FIELDS``."""

    NAME: ClassVar[str]
    VERSION: ClassVar[str]
    FIELDS: ClassVar[dict[str, Field]]

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        newest = parse(cls.VERSION)
        late = [name for name, f in cls.FIELDS.items() if parse(f.added) > newest]
        if late:
            raise ValueError(f"{cls.NAME} {cls.VERSION}: fields added after it: {', '.join(late)}")

    def __init__(self, values: Any = (), /, **fields):
        super().__init__()
        self.update(values, **fields)

    # Only declared fields, each of a declared type ------------------------------------------
    def __setitem__(self, name: str, value: Any) -> None:
        declared = self.FIELDS.get(name)
        if declared is None:
            raise PayloadFieldError(f"{self.NAME} has no field {name!r}")
        if value is not None and not isinstance(value, declared.types):
            raise PayloadFieldError(f"{self.NAME}.{name} takes {_names(declared.types)}, not "
                                    f"{type(value).__name__}")
        if declared.items is not None and value is not None:
            value = [item if isinstance(item, declared.items) else declared.items(item) for item in value]
        super().__setitem__(name, value)

    def update(self, values: Any = (), /, **fields) -> None:
        items = values.items() if hasattr(values, "items") else values
        for name, value in (*items, *fields.items()):
            self[name] = value

    def setdefault(self, name: str, default: Any = None) -> Any:
        if name not in self:
            self[name] = default
        return self[name]

    def __getattr__(self, name: str) -> Any:
        if name in type(self).FIELDS:
            return self.get(name)
        raise AttributeError(f"{type(self).__name__} has no field {name!r}")

    def copy(self):
        return type(self)(self)

    # The primitive form ----------------------------------------------------------------------
    @classmethod
    def fields_of(cls, version: str) -> frozenset[str]:
        """The fields version ``version`` of this payload has."""
        wanted = parse(version)
        return frozenset(name for name, f in cls.FIELDS.items() if parse(f.added) <= wanted)

    def to_primitive(self, version: str | None = None) -> dict:
        """What crosses the bus: the plain mapping of the fields, in ``version`` (default: this
        release's) — the fields added after it left out."""
        if version is None or version == self.VERSION:
            return dict(self)
        if parse(version) > parse(self.VERSION):
            raise ValueError(f"{self.NAME} {version} is newer than this release's {self.VERSION}")
        known = self.fields_of(version)
        return {name: value for name, value in self.items() if name in known}

    @classmethod
    def from_primitive(cls, primitive: dict | None):
        """A received primitive as this payload (None stays None); fields a newer sender added,
        which this release does not know, are left out."""
        if primitive is None:
            return None
        if not isinstance(primitive, dict):
            raise PayloadFieldError(f"{cls.NAME}: a primitive is a mapping, not {type(primitive).__name__}")
        return cls((name, value) for name, value in primitive.items() if name in cls.FIELDS)

    @classmethod
    def list_from_primitive(cls, primitives: Iterable[dict] | None) -> list:
        return [cls.from_primitive(p) for p in primitives or ()]


def _names(types: tuple[type, ...]) -> str:
    return " or ".join(t.__name__ for t in types)
