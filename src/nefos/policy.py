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

Checks: ``@`` (always), ``!`` (never), ``rule:<name>``, ``role:<name>``, and
``<credential>:<value>`` (``project_id:%(project_id)s``, ``user_id:%(user_id)s``,
``is_admin:True``, ...), combined with ``and``, ``or``, ``not`` and parentheses.
An empty rule always passes. ``%(key)s`` is taken from the target (the
resource's ``project_id``/``user_id``, or the caller's own when creating).

Attribute-level Neutron rules (``create_network:shared``, ``binding:host_id``, ...) are not
separate rules here: those attributes are the admin's (``context_is_admin``).

Defaults follow the upstream "new defaults" (secure RBAC, project scope):
``reader`` may list and show in its project, ``member`` may also create,
change and delete there, ``admin`` may do everything everywhere; ``admin``
implies ``member`` implies ``reader`` (the identity service puts implied roles
in tokens). Admin-only as upstream: os-services, os-hypervisors, os-aggregates, flavor
create/delete and extra-spec writes, flavor access, forced hosts,
``all_tenants``, other projects' quotas and limits, quota updates, AZ detail,
host status, action event tracebacks; os-server-external-events needs the
``service`` or ``admin`` role.

Project isolation itself lives in the data layer (a project's resources are
invisible, 404, to other projects: instances, server groups, networks,
subnets, ports, security groups, images by visibility, key pairs per user);
policy decides what each role may do with what it can see.

Overrides: the YAML (or JSON) mapping of rule name to check string in the
file the ``policy_file`` option names (default ``<state_dir>/policy.yaml``
when that file exists). It is re-read when it changes; rules it does not
name keep their defaults. ``nefos.policy.sample()`` renders every default.
"""

from __future__ import annotations

import ast
import contextvars
import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from nefos import exceptions

LOG = logging.getLogger(__name__)

# Base rules ------------------------------------------------------------------------------------

ADMIN = "rule:context_is_admin"
PROJECT_READER = "role:reader and project_id:%(project_id)s"
PROJECT_MEMBER = "role:member and project_id:%(project_id)s"
ADMIN_OR_READER = "rule:project_reader_or_admin"
ADMIN_OR_MEMBER = "rule:project_member_or_admin"
ADMIN_OR_OWNER = "rule:admin_or_owner"
ADMIN_OR_MANAGER = "rule:project_manager_or_admin"
SERVICE_OR_ADMIN = "rule:service_or_admin"
ANYONE = "@"

BASE_RULES: dict[str, str] = {
    "context_is_admin": "role:admin",
    "admin_api": ADMIN,
    "admin_required": ADMIN,
    "service_role": "role:service",
    "service_or_admin": "rule:service_role or rule:context_is_admin",
    "project_reader_api": PROJECT_READER,
    "project_member_api": PROJECT_MEMBER,
    "project_reader_or_admin": "rule:project_reader_api or rule:context_is_admin",
    "project_member_or_admin": "rule:project_member_api or rule:context_is_admin",
    # Nova's project manager persona (a ``manager`` role on the project); no default role implies it.
    "project_manager_api": "role:manager and project_id:%(project_id)s",
    "project_manager_or_admin": "rule:project_manager_api or rule:context_is_admin",
    "admin_or_owner": "rule:context_is_admin or user_id:%(user_id)s",
}

# Compute (Nova's names) ----------------------------------------------------------------------------

_SERVER_READ = ("index", "detail", "show")
_SERVER_WRITE = ("create", "update", "delete", "start", "stop", "reboot", "rebuild")

COMPUTE_RULES: dict[str, str] = {
    **{f"os_compute_api:servers:{a}": ADMIN_OR_READER for a in _SERVER_READ},
    **{f"os_compute_api:servers:{a}": ADMIN_OR_MEMBER for a in _SERVER_WRITE},
    "os_compute_api:servers:index:get_all_tenants": ADMIN,
    "os_compute_api:servers:detail:get_all_tenants": ADMIN,
    "os_compute_api:servers:allow_all_filters": ADMIN,
    "os_compute_api:servers:create:forced_host": ADMIN,
    "compute:servers:create:requested_destination": ADMIN,
    "os_compute_api:servers:create:trusted_certs": ADMIN_OR_MEMBER,
    "os_compute_api:servers:rebuild:trusted_certs": ADMIN_OR_MEMBER,
    "os_compute_api:servers:show:host_status": ADMIN,
    "os_compute_api:servers:resize": ADMIN_OR_MEMBER,
    "os_compute_api:servers:confirm_resize": ADMIN_OR_MEMBER,
    "os_compute_api:servers:revert_resize": ADMIN_OR_MEMBER,
    "os_compute_api:os-migrate-server:migrate": ADMIN,
    "os_compute_api:os-migrate-server:migrate:host": ADMIN,
    # Nova's manager defaults: a project manager live-migrates where the scheduler picks.
    "os_compute_api:os-migrate-server:migrate_live": ADMIN_OR_MANAGER,
    "os_compute_api:os-migrate-server:migrate_live:host": ADMIN,
    "os_compute_api:os-evacuate": ADMIN,
    "os_compute_api:os-pause-server:pause": ADMIN_OR_MEMBER,
    "os_compute_api:os-pause-server:unpause": ADMIN_OR_MEMBER,
    "os_compute_api:os-rescue": ADMIN_OR_MEMBER,
    "os_compute_api:os-unrescue": ADMIN_OR_MEMBER,
    "os_compute_api:os-suspend-server:suspend": ADMIN_OR_MEMBER,
    "os_compute_api:os-suspend-server:resume": ADMIN_OR_MEMBER,
    "os_compute_api:os-lock-server:lock": ADMIN_OR_MEMBER,
    "os_compute_api:servers:create_image": ADMIN_OR_MEMBER,
    "os_compute_api:os-create-backup": ADMIN_OR_MEMBER,
    "os_compute_api:os-shelve:shelve": ADMIN_OR_MEMBER,
    "os_compute_api:os-shelve:shelve_offload": ADMIN,
    "os_compute_api:os-shelve:unshelve": ADMIN_OR_MEMBER,
    "os_compute_api:os-shelve:unshelve_to_host": ADMIN,
    "compute:server:topology:index": ADMIN_OR_READER,
    "compute:server:topology:host:index": ADMIN,
    "os_compute_api:os-admin-password": ADMIN_OR_MEMBER,
    "os_compute_api:os-security-groups:add": ADMIN_OR_MEMBER,
    "os_compute_api:os-security-groups:remove": ADMIN_OR_MEMBER,
    "os_compute_api:os-security-groups:get": ADMIN_OR_READER,
    "os_compute_api:os-security-groups:show": ADMIN_OR_READER,
    "os_compute_api:os-security-groups:create": ADMIN_OR_MEMBER,
    "os_compute_api:os-security-groups:update": ADMIN_OR_MEMBER,
    "os_compute_api:os-security-groups:delete": ADMIN_OR_MEMBER,
    "os_compute_api:os-security-groups:rule:create": ADMIN_OR_MEMBER,
    "os_compute_api:os-security-groups:rule:delete": ADMIN_OR_MEMBER,
    "os_compute_api:os-security-groups:list": ADMIN_OR_READER,
    "os_compute_api:os-floating-ips:add": ADMIN_OR_MEMBER,
    "os_compute_api:os-floating-ips:remove": ADMIN_OR_MEMBER,
    "os_compute_api:os-floating-ips:list": ADMIN_OR_READER,
    "os_compute_api:os-floating-ips:show": ADMIN_OR_READER,
    "os_compute_api:os-floating-ips:create": ADMIN_OR_MEMBER,
    "os_compute_api:os-floating-ips:delete": ADMIN_OR_MEMBER,
    "os_compute_api:os-floating-ip-pools": ANYONE,
    "os_compute_api:os-networks:list": ADMIN_OR_READER,
    "os_compute_api:os-networks:show": ADMIN_OR_READER,
    "os_compute_api:os-tenant-networks:list": ADMIN_OR_READER,
    "os_compute_api:os-tenant-networks:show": ADMIN_OR_READER,
    "os_compute_api:os-multinic:add": ADMIN_OR_MEMBER,
    "os_compute_api:os-multinic:remove": ADMIN_OR_MEMBER,
    "os_compute_api:os-console-output": ADMIN_OR_MEMBER,
    "os_compute_api:os-remote-consoles": ADMIN_OR_MEMBER,
    "os_compute_api:os-console-auth-tokens": ADMIN,
    "os_compute_api:os-lock-server:unlock": ADMIN_OR_MEMBER,
    "os_compute_api:os-lock-server:unlock:unlock_override": ADMIN,
    "os_compute_api:server-metadata:index": ADMIN_OR_READER,
    "os_compute_api:server-metadata:show": ADMIN_OR_READER,
    "os_compute_api:server-metadata:create": ADMIN_OR_MEMBER,
    "os_compute_api:server-metadata:update": ADMIN_OR_MEMBER,
    "os_compute_api:server-metadata:update_all": ADMIN_OR_MEMBER,
    "os_compute_api:server-metadata:delete": ADMIN_OR_MEMBER,
    "os_compute_api:os-server-tags:index": ADMIN_OR_READER,
    "os_compute_api:os-server-tags:show": ADMIN_OR_READER,
    "os_compute_api:os-server-tags:update": ADMIN_OR_MEMBER,
    "os_compute_api:os-server-tags:update_all": ADMIN_OR_MEMBER,
    "os_compute_api:os-server-tags:delete": ADMIN_OR_MEMBER,
    "os_compute_api:os-server-tags:delete_all": ADMIN_OR_MEMBER,
    "os_compute_api:os-instance-actions:list": ADMIN_OR_READER,
    "os_compute_api:os-instance-actions:show": ADMIN_OR_READER,
    "os_compute_api:os-instance-actions:events": ADMIN,
    "os_compute_api:os-instance-actions:events:details": ADMIN,
    "os_compute_api:os-flavor-manage:create": ADMIN,
    "os_compute_api:os-flavor-manage:delete": ADMIN,
    "os_compute_api:os-flavor-manage:update": ADMIN,
    "os_compute_api:os-flavor-extra-specs:index": ADMIN_OR_READER,
    "os_compute_api:os-flavor-extra-specs:show": ADMIN_OR_READER,
    "os_compute_api:os-flavor-extra-specs:create": ADMIN,
    "os_compute_api:os-flavor-extra-specs:update": ADMIN,
    "os_compute_api:os-flavor-extra-specs:delete": ADMIN,
    "os_compute_api:os-flavor-access": ADMIN,
    "os_compute_api:os-flavor-access:add_tenant_access": ADMIN,
    "os_compute_api:os-flavor-access:remove_tenant_access": ADMIN,
    "os_compute_api:os-keypairs:index": ADMIN_OR_OWNER,
    "os_compute_api:os-keypairs:show": ADMIN_OR_OWNER,
    "os_compute_api:os-keypairs:create": ADMIN_OR_OWNER,
    "os_compute_api:os-keypairs:delete": ADMIN_OR_OWNER,
    "os_compute_api:limits": ANYONE,
    "os_compute_api:limits:other_project": ADMIN,
    "os_compute_api:os-availability-zone:list": ANYONE,
    "os_compute_api:os-availability-zone:detail": ADMIN,
    "os_compute_api:os-aggregates:index": ADMIN,
    "os_compute_api:os-aggregates:create": ADMIN,
    "os_compute_api:os-aggregates:show": ADMIN,
    "os_compute_api:os-aggregates:update": ADMIN,
    "os_compute_api:os-aggregates:delete": ADMIN,
    "os_compute_api:os-aggregates:add_host": ADMIN,
    "os_compute_api:os-aggregates:remove_host": ADMIN,
    "os_compute_api:os-aggregates:set_metadata": ADMIN,
    "compute:aggregates:images": ADMIN,
    "os_compute_api:os-services:list": ADMIN,
    "os_compute_api:os-services:update": ADMIN,
    "os_compute_api:os-services:delete": ADMIN,
    **{f"os_compute_api:os-hosts:{a}": ADMIN for a in ("list", "show", "update", "reboot", "shutdown", "start")},
    "os_compute_api:os-server-diagnostics": ADMIN,
    "os_compute_api:os-server-password:show": ADMIN_OR_READER,
    "os_compute_api:os-server-password:clear": ADMIN_OR_MEMBER,
    "os_compute_api:extensions": ANYONE,
    "os_compute_api:os-volumes-attachments:index": ADMIN_OR_READER,
    "os_compute_api:os-volumes-attachments:show": ADMIN_OR_READER,
    "os_compute_api:os-volumes-attachments:create": ADMIN_OR_MEMBER,
    "os_compute_api:os-volumes-attachments:update": ADMIN_OR_MEMBER,
    "os_compute_api:os-volumes-attachments:swap": "rule:service_role",
    "os_compute_api:os-volumes-attachments:delete": ADMIN_OR_MEMBER,
    **{f"os_compute_api:os-volumes:{a}": ADMIN_OR_READER
       for a in ("list", "detail", "show", "snapshots:list", "snapshots:detail", "snapshots:show")},
    **{f"os_compute_api:os-volumes:{a}": ADMIN_OR_MEMBER
       for a in ("create", "delete", "snapshots:create", "snapshots:delete")},
    "os_compute_api:os-hypervisors:list": ADMIN,
    "nefos:hypervisor-health": ADMIN,
    # The event stream (GET /v2.1/nefos-events): a project's readers see its servers' events; every
    # project's, and the hosts' events and names, are the admin's (as os-services and server hosts).
    "nefos:events:stream": ADMIN_OR_READER,
    "nefos:events:stream:all_projects": ADMIN,
    "nefos:events:stream:hosts": ADMIN,
    "os_compute_api:os-hypervisors:list-detail": ADMIN,
    "os_compute_api:os-hypervisors:statistics": ADMIN,
    "os_compute_api:os-hypervisors:show": ADMIN,
    "os_compute_api:os-hypervisors:uptime": ADMIN,
    "os_compute_api:os-hypervisors:search": ADMIN,
    "os_compute_api:os-hypervisors:servers": ADMIN,
    "os_compute_api:os-quota-sets:show": ADMIN_OR_READER,
    "os_compute_api:os-quota-sets:detail": ADMIN_OR_READER,
    "os_compute_api:os-quota-sets:defaults": ANYONE,
    "os_compute_api:os-quota-sets:update": ADMIN,
    "os_compute_api:os-quota-sets:delete": ADMIN,
    "os_compute_api:os-quota-class-sets:show": ADMIN,
    "os_compute_api:os-quota-class-sets:update": ADMIN,
    "os_compute_api:os-server-groups:index": ADMIN_OR_READER,
    "os_compute_api:os-server-groups:index:all_projects": ADMIN,
    "os_compute_api:os-server-groups:show": ADMIN_OR_READER,
    "os_compute_api:os-server-groups:create": ADMIN_OR_MEMBER,
    "os_compute_api:os-server-groups:delete": ADMIN_OR_MEMBER,
    "os_compute_api:os-server-external-events:create": SERVICE_OR_ADMIN,
    "os_compute_api:os-admin-actions:reset_state": ADMIN,
    "os_compute_api:os-admin-actions:inject_network_info": ADMIN,
    "os_compute_api:os-deferred-delete:restore": ADMIN_OR_MEMBER,
    "os_compute_api:os-deferred-delete:force": ADMIN_OR_MEMBER,
    "os_compute_api:os-attach-interfaces:list": ADMIN_OR_READER,
    "os_compute_api:os-attach-interfaces:show": ADMIN_OR_READER,
    "os_compute_api:os-attach-interfaces:create": ADMIN_OR_MEMBER,
    "os_compute_api:os-attach-interfaces:delete": ADMIN_OR_MEMBER,
    "os_compute_api:ips:index": ADMIN_OR_READER,
    "os_compute_api:ips:show": ADMIN_OR_READER,
    "os_compute_api:os-simple-tenant-usage:list": ADMIN,
    "os_compute_api:os-simple-tenant-usage:show": ADMIN_OR_READER,
    "os_compute_api:os-instance-usage-audit-log:list": ADMIN,
    "os_compute_api:os-instance-usage-audit-log:show": ADMIN,
    # Without ``index:host`` the hosts are hidden (null); a manager lists only its own project's.
    "os_compute_api:os-migrations:index": ADMIN_OR_MANAGER,
    "os_compute_api:os-migrations:index:all_projects": ADMIN,
    "os_compute_api:os-migrations:index:host": ADMIN,
    "os_compute_api:servers:migrations:index": ADMIN_OR_MANAGER,
    "os_compute_api:servers:migrations:index:host": ADMIN,
    "os_compute_api:servers:migrations:show": ADMIN,
    "os_compute_api:servers:migrations:force_complete": ADMIN_OR_MANAGER,
    "os_compute_api:servers:migrations:delete": ADMIN_OR_MANAGER,
}

# Networking (Neutron's names) ------------------------------------------------------------------------

NETWORK_RULES: dict[str, str] = {}
for _one in ("network", "subnet", "port", "security_group", "security_group_rule", "router", "floatingip"):
    NETWORK_RULES[f"create_{_one}"] = ADMIN_OR_MEMBER
    NETWORK_RULES[f"get_{_one}"] = ADMIN_OR_READER
    NETWORK_RULES[f"update_{_one}"] = ADMIN_OR_MEMBER
    NETWORK_RULES[f"delete_{_one}"] = ADMIN_OR_MEMBER
NETWORK_RULES.update({
    "get_quota": ADMIN_OR_READER,
    "update_quota": ADMIN,
    "delete_quota": ADMIN,
    "add_router_interface": ADMIN_OR_MEMBER,
    "remove_router_interface": ADMIN_OR_MEMBER,
    "get_auto_allocated_topology": ADMIN_OR_READER,
    "delete_auto_allocated_topology": ADMIN_OR_MEMBER,
})

# Image (Glance's names) -------------------------------------------------------------------------------

IMAGE_RULES: dict[str, str] = {
    "add_image": ADMIN_OR_MEMBER,
    "get_image": ADMIN_OR_READER,
    "get_images": ADMIN_OR_READER,
    "modify_image": ADMIN_OR_MEMBER,
    "delete_image": ADMIN_OR_MEMBER,
    "upload_image": ADMIN_OR_MEMBER,
    "download_image": ADMIN_OR_READER,
    "publicize_image": ADMIN,
}

# Identity (Keystone's names) ---------------------------------------------------------------------------

IDENTITY_RULES: dict[str, str] = {
    f"identity:{a}": "rule:admin_required" for a in (
        "list_domains", "create_domain", "update_domain", "delete_domain",
        "list_projects", "create_project", "update_project", "delete_project",
        "list_users", "create_user", "update_user", "delete_user",
        "list_roles", "get_role", "create_role", "update_role", "delete_role",
        "list_grants", "create_grant", "revoke_grant", "list_groups",
        "list_services", "get_service", "list_endpoints", "get_endpoint",
        "revoke_token:other_user", "list_role_assignments")
}
IDENTITY_RULES.update({
    # Services validate the tokens their callers send; only an admin revokes another user's token.
    "identity:validate_token:other_user": "rule:admin_required or rule:service_role",
    "identity:get_domain": "rule:admin_required or token.domain.id:%(target.domain.id)s "
                           "or token.user.domain.id:%(target.domain.id)s "
                           "or token.project.domain.id:%(target.domain.id)s",
    "identity:get_project": "rule:admin_required or project_id:%(target.project.id)s",
    "identity:get_user": "rule:admin_required or user_id:%(target.user.id)s",
    "identity:list_user_projects": "rule:admin_required or user_id:%(target.user.id)s",
    "identity:check_grant": "rule:admin_required or user_id:%(target.user.id)s",
    "identity:change_password": "user_id:%(target.user.id)s",
    "identity:list_role_assignments:own": "user_id:%(target.user.id)s or project_id:%(target.project.id)s",
})

DEFAULT_RULES: dict[str, str] = {**BASE_RULES, **COMPUTE_RULES, **NETWORK_RULES, **IMAGE_RULES,
                                 **IDENTITY_RULES}


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


# The check language ------------------------------------------------------------------------------

class PolicySyntaxError(ValueError):
    pass


Check = Callable[[dict, dict, "Rules"], bool]  # (target, creds, rules) -> bool

def _tokens(text: str) -> list[str]:
    """oslo.policy's tokenizer: whitespace-separated, with leading '(' and trailing ')' split off
    (so ``%(project_id)s`` stays whole)."""
    out: list[str] = []
    for tok in text.split():
        clean = tok.lstrip("(")
        out.extend("(" * (len(tok) - len(clean)))
        if not clean:
            continue
        core = clean.rstrip(")")
        if core:
            out.append(core)
        out.extend(")" * (len(clean) - len(core)))
    return out


def _lookup(mapping: dict, dotted: str) -> Any:
    """``mapping[dotted]`` or the nested ``mapping[a][b]`` for ``a.b``; KeyError if absent."""
    if dotted in mapping:
        return mapping[dotted]
    value: Any = mapping
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(dotted)
        value = value[part]
    return value


def _substitute(template: str, target: dict) -> str | None:
    """``%(key)s`` from the target; None when a key is missing or empty (never matches)."""
    def repl(m: re.Match) -> str:
        value = _lookup(target, m.group(1))
        if value is None or value == "":
            raise KeyError(m.group(1))
        return str(value)
    try:
        return re.sub(r"%\(([^)]+)\)s", repl, template)
    except KeyError:
        return None


def _simple(token: str) -> Check:
    if token == "@":
        return lambda target, creds, rules: True
    if token == "!":
        return lambda target, creds, rules: False
    kind, sep, match = token.partition(":")
    if not sep:
        raise PolicySyntaxError(f"not a check: {token!r}")
    if kind == "rule":
        return lambda target, creds, rules: rules.check(match, target, creds)
    if kind == "role":
        def role_check(target, creds, rules):
            wanted = _substitute(match, target)
            return wanted is not None and wanted.lower() in creds.get("roles", ())
        return role_check
    if kind in ("http", "https"):
        raise PolicySyntaxError(f"HTTP checks are not supported: {token!r}")
    try:  # a literal on the right: compare values (is_admin:True, 'x':%(y)s is not supported)
        literal = ast.literal_eval(match)
        literal_ok = isinstance(literal, (bool, int, float, str)) and "%(" not in match
    except (ValueError, SyntaxError):
        literal, literal_ok = None, False

    def generic(target, creds, rules):
        try:
            have = _lookup(creds, kind)
        except KeyError:
            return False
        if have is None or have == "":
            return False
        if literal_ok:
            return have == literal if not isinstance(have, list) else literal in have
        wanted = _substitute(match, target)
        if wanted is None:
            return False
        if isinstance(have, (list, tuple, set)):
            return wanted in {str(v) for v in have}
        return str(have) == wanted
    return generic


class _Parser:
    """Recursive descent over: expr := term ('or' term)*; term := factor ('and' factor)*;
    factor := 'not' factor | '(' expr ')' | check."""

    def __init__(self, text: str):
        self.toks = _tokens(text)
        self.i = 0

    def parse(self) -> Check:
        if not self.toks:
            return lambda target, creds, rules: True
        check = self.expr()
        if self.i != len(self.toks):
            raise PolicySyntaxError(f"unexpected {self.toks[self.i]!r}")
        return check

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> str:
        if self.i >= len(self.toks):
            raise PolicySyntaxError("unexpected end of rule")
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def expr(self) -> Check:
        parts = [self.term()]
        while (self.peek() or "").lower() == "or":
            self.take()
            parts.append(self.term())
        if len(parts) == 1:
            return parts[0]
        return lambda t, c, r: any(p(t, c, r) for p in parts)

    def term(self) -> Check:
        parts = [self.factor()]
        while (self.peek() or "").lower() == "and":
            self.take()
            parts.append(self.factor())
        if len(parts) == 1:
            return parts[0]
        return lambda t, c, r: all(p(t, c, r) for p in parts)

    def factor(self) -> Check:
        tok = self.take()
        if tok.lower() == "not":
            inner = self.factor()
            return lambda t, c, r: not inner(t, c, r)
        if tok == "(":
            inner = self.expr()
            if self.take() != ")":
                raise PolicySyntaxError("missing )")
            return inner
        if tok == ")" or tok.lower() in ("and", "or"):
            raise PolicySyntaxError(f"unexpected {tok!r}")
        return _simple(tok)


def parse(text: str) -> Check:
    """Compile one check string; raises PolicySyntaxError."""
    if not isinstance(text, str):
        raise PolicySyntaxError(f"a rule must be a string, not {type(text).__name__}")
    return _Parser(text).parse()


# Rule sets -----------------------------------------------------------------------------------------

@dataclass
class Rules:
    texts: dict[str, str]
    compiled: dict[str, Check]

    @classmethod
    def build(cls, overrides: dict[str, str] | None = None) -> "Rules":
        texts = {**DEFAULT_RULES, **(overrides or {})}
        return cls(texts, {name: parse(text) for name, text in texts.items()})

    def check(self, name: str, target: dict, creds: dict) -> bool:
        check = self.compiled.get(name)
        if check is None:
            return False  # an unknown rule referenced by another never passes
        try:
            return check(target, creds, self)
        except RecursionError:  # rules that refer to each other in a loop never pass
            LOG.error("policy rule %s refers to itself through other rules", name)
            return False


_DEFAULT = Rules.build()


class Enforcer:
    """The rules in force for one ``policy_file`` (defaults when there is none); re-read on change."""

    CHECK_INTERVAL = 1.0  # seconds between looks at the file

    def __init__(self, path: Path | None):
        self.path = path
        self._stamp: tuple[float, int] | None = None
        self._rules = _DEFAULT
        self._lock = threading.Lock()
        self._next_check = 0.0
        self._error: str | None = None

    def rules(self) -> Rules:
        """The rules in force; ServiceUnavailable (503) while the file is unreadable or wrong:
        a broken policy fails closed rather than falling back to other rules."""
        if self.path is None:
            return _DEFAULT
        now = time.monotonic()
        if now >= self._next_check:
            self._next_check = now + self.CHECK_INTERVAL
            try:
                st = self.path.stat()
                stamp = (st.st_mtime, st.st_size)
            except FileNotFoundError:
                stamp = None
            if stamp != self._stamp:
                with self._lock:
                    if stamp != self._stamp:
                        try:
                            self._rules = load_file(self.path) if stamp else _DEFAULT
                            self._error = None
                            if stamp:
                                LOG.info("policy overrides loaded from %s", self.path)
                        except exceptions.ServiceUnavailable as exc:
                            self._error = str(exc)
                            LOG.error("%s", exc)
                        self._stamp = stamp
        if self._error is not None:
            raise exceptions.ServiceUnavailable(self._error)
        return self._rules


def load_file(path: Path) -> Rules:
    """The defaults overridden by ``path`` (YAML or JSON: rule name -> check string)."""
    import yaml
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise exceptions.ServiceUnavailable(f"Cannot read the policy file {path}: {exc}")
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise exceptions.ServiceUnavailable(f"The policy file {path} must map rule names to rules.")
    try:
        return Rules.build({k: ("" if v is None else v) for k, v in data.items()})
    except PolicySyntaxError as exc:
        raise exceptions.ServiceUnavailable(f"The policy file {path} has a bad rule: {exc}")


_enforcers: dict[tuple[str, str], Enforcer] = {}
_current: contextvars.ContextVar[Enforcer | None] = contextvars.ContextVar("nefos_policy", default=None)


def policy_path(cfg) -> Path | None:
    configured = getattr(cfg, "policy_file", "") or ""
    if configured:
        path = Path(configured)
        if not path.is_absolute():
            candidate = Path(cfg.state_dir) / path
            path = candidate if candidate.exists() or not path.exists() else path
        return path
    default = Path(cfg.state_dir) / "policy.yaml"
    return default


def enforcer_for(cfg) -> Enforcer:
    key = (str(getattr(cfg, "policy_file", "") or ""), str(cfg.state_dir))
    enforcer = _enforcers.get(key)
    if enforcer is None:
        enforcer = _enforcers[key] = Enforcer(policy_path(cfg))
        if key[0]:
            enforcer.rules()  # a named file that is broken fails at start, not on the first request
    return enforcer


def use(cfg) -> contextvars.Token:
    """Make ``cfg``'s rules the ones ``enforce`` uses in this (request's) context."""
    return _current.set(enforcer_for(cfg))


def restore(token: contextvars.Token) -> None:
    _current.reset(token)


def current_rules() -> Rules:
    enforcer = _current.get()
    return enforcer.rules() if enforcer is not None else _DEFAULT


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
