"""Policy: which roles may call which API, with upstream OpenStack's default rules.

One entry point for every API (Compute, Networking, Image, Identity)::

    policy.enforce(ctx, "os_compute_api:servers:create", {"project_id": ...})

raises ``nefos.exceptions.PolicyNotAuthorized`` (403, rendered in the calling
API's own error body, with that API's own message) when the rule does not pass.

Rules are written in oslo.policy's check language, so an operator's
``policy.yaml`` for Nova, Neutron, Glance or Keystone reads the same here::

    "os_compute_api:servers:create": "role:member and project_id:%(project_id)s"
    "context_is_admin": "role:admin"
    "admin_api": "rule:context_is_admin"

Two parts, apart: ``nefos.policy.defaults`` holds the default rules (the base
rules and one table per API), ``nefos.policy.engine`` the check language and the
rules in force (the defaults with the ``policy_file`` over them, re-read when it
changes). This module asks them on a request's behalf. ``%(key)s`` in a rule
is taken from the target: the resource's ``project_id``/``user_id``, or the
caller's own when creating.

Project isolation itself lives in the data layer (a project's resources are
invisible, 404, to other projects: instances, server groups, networks,
subnets, ports, security groups, images by visibility, key pairs per user);
policy decides what each role may do with what it can see.
``nefos.policy.sample()`` renders every default.
"""

from __future__ import annotations

import contextvars
import logging
import os
from pathlib import Path
from typing import Callable

from nefos import exceptions
from nefos.policy.defaults import DEFAULT_RULES, IMAGE_RULES
from nefos.policy.engine import (DEFAULTS, Enforcer, PolicySyntaxError, Rules, enforcer_for,  # noqa: F401
                                 load_file, parse, policy_path)

LOG = logging.getLogger(__name__)


def _api_of(rule: str) -> str:
    if rule.startswith("os_compute_api:"):
        return "compute"
    if rule.startswith("identity:"):
        return "identity"
    if rule in IMAGE_RULES:
        return "image"
    return "network"


# Each API's 403 message for a rule that did not pass (the upstream services' wording).
MESSAGES: dict[str, Callable[[str], str]] = {
    "compute": lambda rule: f"Policy doesn't allow {rule} to be performed.",
    "network": lambda rule: f"({'rule:' + rule}) is disallowed by policy",
    "image": lambda rule: f"You are not authorized to complete {rule} action.",
    "identity": lambda rule: f"You are not authorized to perform the requested action: {rule}.",
}


_current: contextvars.ContextVar[Enforcer | None] = contextvars.ContextVar("nefos_policy", default=None)


def use(cfg) -> contextvars.Token:
    """Make ``cfg``'s rules the ones ``enforce`` uses in this (request's) context."""
    return _current.set(enforcer_for(cfg))


def restore(token: contextvars.Token) -> None:
    _current.reset(token)


def current_rules() -> Rules:
    enforcer = _current.get()
    return enforcer.rules() if enforcer is not None else DEFAULTS


# Checking --------------------------------------------------------------------------------------------

def credentials(ctx) -> dict:
    """What rules test about the caller; ``ctx`` is a RequestContext (or already such a dict)."""
    if isinstance(ctx, dict):
        return ctx
    roles = [r.lower() for r in (getattr(ctx, "roles", None) or [])]
    creds = {"roles": roles, "project_id": ctx.project_id, "user_id": ctx.user_id,
             "is_admin": bool(getattr(ctx, "is_admin", False))}
    extra = getattr(ctx, "policy_credentials", None)
    if extra:
        creds.update(extra)
    return creds


def default_target(ctx) -> dict:
    creds = credentials(ctx)
    return {"project_id": creds.get("project_id"), "user_id": creds.get("user_id")}


def check(ctx, rule: str, target: dict | None = None) -> bool:
    """Whether ``rule`` passes for ``ctx`` on ``target`` (default: the caller's own project/user)."""
    rules = current_rules()
    if rule not in rules.compiled:
        raise KeyError(f"unknown policy rule {rule!r}")
    tgt = default_target(ctx) if target is None else {**default_target(ctx), **target}
    return rules.check(rule, tgt, credentials(ctx))


def enforce(ctx, rule: str, target: dict | None = None, *, api: str | None = None) -> None:
    """Raise PolicyNotAuthorized (403, in the API's own words) unless ``rule`` passes."""
    if not check(ctx, rule, target):
        message = MESSAGES[api or _api_of(rule)](rule)
        creds = credentials(ctx)
        LOG.debug("policy %s denied for user %s project %s roles %s", rule,
                  creds.get("user_id"), creds.get("project_id"), creds.get("roles"))
        raise exceptions.PolicyNotAuthorized(message)


def check_is_admin(ctx) -> bool:
    """``context_is_admin`` for the caller (what makes a context an admin's, as in Nova)."""
    rules = current_rules()
    return rules.check("context_is_admin", default_target(ctx), {**credentials(ctx), "is_admin": False})


def sample() -> str:
    """Every default rule as a commented YAML file for operators to start from."""
    lines = ["# Nefos policy defaults. Uncomment and change a rule to override it; point the",
             "# policy_file option at this file (default <state_dir>/policy.yaml).", ""]
    for name, text in DEFAULT_RULES.items():
        lines.append(f'#"{name}": "{text}"')
    return "\n".join(lines) + "\n"


def validate_file(path: str | os.PathLike) -> list[str]:
    """Problems in an override file (bad syntax, names no API uses); empty when it is fine."""
    problems = []
    try:
        load_file(Path(path))
    except exceptions.ServiceUnavailable as exc:
        return [str(exc)]
    import yaml
    data = yaml.safe_load(Path(path).read_text()) or {}
    for name in data:
        if name not in DEFAULT_RULES:
            problems.append(f"{name}: not a rule Nefos checks (an alias other rules may use)")
    return problems
