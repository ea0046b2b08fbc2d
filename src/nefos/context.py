"""The request context: who asks, for which project, under which request id.

It travels with every bus message (``to_dict``/``from_dict``) so that the
request id that the API returned shows up in every service's logs and in
notifications.
"""

from __future__ import annotations

import contextvars
import re
import uuid
from dataclasses import dataclass, field, fields

DEFAULT_PROJECT_ID = "00000000000000000000000000000001"
DEFAULT_USER_ID = "00000000000000000000000000000001"


def new_request_id() -> str:
    return f"req-{uuid.uuid4()}"


# oslo.middleware's form of a request id: its request_id middleware takes an inbound global
# request id only in this form and ignores anything else.
_REQUEST_ID_FORM = re.compile(r"req-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def is_request_id(value) -> bool:
    """Whether ``value`` is a request id as ``new_request_id`` (and every OpenStack service) makes them."""
    return isinstance(value, str) and _REQUEST_ID_FORM.fullmatch(value) is not None


@dataclass
class RequestContext:
    project_id: str | None = DEFAULT_PROJECT_ID
    user_id: str | None = DEFAULT_USER_ID
    roles: list[str] = field(default_factory=lambda: ["admin", "member", "reader"])
    request_id: str = field(default_factory=new_request_id)
    global_request_id: str | None = None
    is_admin: bool = True
    read_deleted: str = "no"
    # The token the request came with (Nova's ``auth_token``): a compute host acts with it on the
    # user's behalf on other services' APIs (the Image API for a snapshot). Never logged.
    auth_token: str | None = field(default=None, repr=False)

    def to_dict(self) -> dict:
        # Every field is a string, a bool or a list of strings: a copy of the list is a deep
        # copy (dataclasses.asdict's recursive copy costs more than the rest of a bus message).
        data = {name: getattr(self, name) for name in _FIELD_NAMES}
        data["roles"] = list(self.roles)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "RequestContext":
        """The context a message (or a stored request) carried. What it leaves out grants nothing:
        no project, no user, no roles, not an admin. (The class's own defaults, an admin's, are for
        the contexts a service builds for itself in its process.)"""
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**{**_NOBODY, **known})

    def elevated(self) -> "RequestContext":
        ctx = RequestContext(**self.to_dict())
        ctx.is_admin = True
        if "admin" not in ctx.roles:
            ctx.roles = [*ctx.roles, "admin"]
        return ctx


_FIELD_NAMES = tuple(f.name for f in fields(RequestContext))
_NOBODY = {"project_id": None, "user_id": None, "roles": [], "is_admin": False}


def admin_context() -> RequestContext:
    """The service acting for itself, in no one's request (a host's start-up and periodic work):
    an admin of no project, built on purpose, as Nova's ``get_admin_context``."""
    return RequestContext(project_id=None, user_id=None, roles=["admin"], is_admin=True)


# The context of the request being served, so log records can carry its id.
current_context: contextvars.ContextVar[RequestContext | None] = contextvars.ContextVar(
    "nefos_current_context", default=None
)
