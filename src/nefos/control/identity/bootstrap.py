"""Bootstrap: the default domain, the standard roles, and the admin, demo and service accounts.

Idempotent: run at every start of the identity service. Passwords come from
the config (``admin_password``, ``demo_password``, ``service_password``) or
else from ``<state_dir>/passwords.yaml`` (0600), where they are generated
once. Bootstrap makes the stored passwords match those, as ``keystone-manage
bootstrap`` does, so that file (or the config) is the source of truth; clouds
sharing one database across hosts should set the passwords in the config.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import yaml
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from nefos import fileperms
from nefos.db.models import (
    IdentityDomain, IdentityProject, IdentityRole, IdentityRoleAssignment, IdentityUser,
)
from nefos.clients.identity import catalog, tokens
from nefos.control.identity import core, lockout, passwords

DEFAULT_DOMAIN_ID = "default"
DEFAULT_DOMAIN_NAME = "Default"
ROLES = ("admin", "manager", "member", "reader", "service")

# account key -> (user name, project name, roles, config option)
ACCOUNTS = {
    "admin": ("admin", "admin", ("admin",), "admin_password"),
    "demo": ("demo", "demo", ("member", "reader"), "demo_password"),
    "service": ("nefos", "service", ("service", "admin"), "service_password"),
}
# Keystone's user options set on an account at every start. The services' account is never locked
# out, or anyone could stop the cloud's services by guessing at its name; its password is generated
# (144 random bits) unless the operator sets service_password. The admin account is a person's and
# is locked out like any other, as Keystone's bootstrap leaves its admin.
ACCOUNT_OPTIONS = {"service": {lockout.IGNORE_LOCKOUT: True}}


def passwords_file(cfg) -> Path:
    return Path(cfg.state_dir) / "passwords.yaml"




def _load_passwords(cfg) -> dict[str, str]:
    path = passwords_file(cfg)
    stored: dict = {}
    if path.exists():
        loaded = yaml.safe_load(path.read_text()) or {}
        if isinstance(loaded, dict):
            stored = {k: str(v) for k, v in loaded.items() if isinstance(k, str) and v}
    result, changed = {}, False
    for key, (_user, _project, _roles, option) in ACCOUNTS.items():
        configured = getattr(cfg, option)
        if configured:
            result[key] = configured
        elif key in stored:
            result[key] = stored[key]
        else:
            result[key] = stored[key] = secrets.token_urlsafe(18)
            changed = True
    if changed:
        fileperms.write_private(path, yaml.safe_dump(stored, default_flow_style=False))
    return result


async def _get_or_add(s, model, where: dict, **values):
    q = select(model).filter_by(**where)
    row = (await s.execute(q)).scalar_one_or_none()
    if row is None:
        row = model(**where, **values)
        s.add(row)
        await s.flush()
    return row


async def _ensure(rt, pw: dict[str, str]) -> dict:
    rounds = rt.cfg.password_hash_rounds
    # Passwords are checked and hashed before the transaction: no write lock while the KDF runs.
    async with rt.db.reader() as s:
        existing = {u.name: u.password_hash for u in (await s.execute(select(IdentityUser).where(
            IdentityUser.domain_id == DEFAULT_DOMAIN_ID,
            IdentityUser.name.in_([a[0] for a in ACCOUNTS.values()])))).scalars()}
    new_hashes: dict[str, str] = {}
    for key, (user_name, _p, _r, _o) in ACCOUNTS.items():
        if not await passwords.verify_password(pw[key], existing.get(user_name), rounds):
            new_hashes[user_name] = await passwords.hash_password(pw[key], rounds)

    creds = {}
    async with core.write(rt) as s:
        domain = await s.get(IdentityDomain, DEFAULT_DOMAIN_ID)
        if domain is None:
            domain = IdentityDomain(id=DEFAULT_DOMAIN_ID, name=DEFAULT_DOMAIN_NAME,
                                    description="The default domain", enabled=True, tags=[])
            s.add(domain)
            await s.flush()
        roles = {}
        for name in ROLES:
            roles[name] = await _get_or_add(s, IdentityRole, {"name": name}, id=core.new_id(), description="")
        for key, (user_name, project_name, role_names, _o) in ACCOUNTS.items():
            project = await _get_or_add(
                s, IdentityProject, {"domain_id": DEFAULT_DOMAIN_ID, "name": project_name},
                id=core.new_id(), description=f"Bootstrap project {project_name}", enabled=True, tags=[])
            user = (await s.execute(select(IdentityUser).where(
                IdentityUser.domain_id == DEFAULT_DOMAIN_ID, IdentityUser.name == user_name))).scalar_one_or_none()
            if user is None:
                user = IdentityUser(id=core.new_id(), name=user_name, domain_id=DEFAULT_DOMAIN_ID,
                                    enabled=True, default_project_id=project.id, description="", extra={},
                                    password_hash=new_hashes.get(user_name))
                s.add(user)
                await s.flush()
            elif user_name in new_hashes:
                user.password_hash = new_hashes[user_name]
                lockout.forget_failures(user)
                tokens.add_revocation_event(s, user_id=user.id)
            wanted = ACCOUNT_OPTIONS.get(key, {})
            if any((user.options or {}).get(name) != value for name, value in wanted.items()):
                user.options = {**(user.options or {}), **wanted}
            for role_name in role_names:
                await _get_or_add(s, IdentityRoleAssignment,
                                  {"actor_id": user.id, "target_type": "project", "target_id": project.id,
                                   "role_id": roles[role_name].id})
            creds[key] = {"username": user_name, "password": pw[key], "project_name": project_name,
                          "user_domain_name": DEFAULT_DOMAIN_NAME, "project_domain_name": DEFAULT_DOMAIN_NAME,
                          "user_id": user.id, "project_id": project.id}
    return creds


async def bootstrap(rt) -> dict:
    """Ensure the default domain, roles, projects and users; the accounts' credentials.

    Returns ``{"admin": {...}, "demo": {...}, "service": {...}}``, each with
    username, password, project_name, user_domain_name, project_domain_name,
    user_id and project_id.
    """
    tokens.fernet(rt.cfg)  # create the key now rather than on the first request
    pw = _load_passwords(rt.cfg)
    try:
        return await _ensure(rt, pw)
    except IntegrityError:  # another process bootstrapped at the same moment: take what it made
        return await _ensure(rt, pw)


def clouds_yaml(rt, creds: dict) -> dict:
    """The clouds.yaml content: clouds ``nefos`` (demo), ``nefos-admin`` and ``nefos-service``."""
    cfg = rt.cfg
    auth_url = f"http://{catalog.client_host(cfg)}:{cfg.identity_api_port}/v3"

    def cloud(key: str) -> dict:
        c = creds[key]
        return {
            "auth_type": "password",
            "auth": {"auth_url": auth_url, "username": c["username"], "password": c["password"],
                     "project_name": c["project_name"], "user_domain_name": c["user_domain_name"],
                     "project_domain_name": c["project_domain_name"]},
            "region_name": cfg.region_name,
            "identity_api_version": 3,
        }

    return {"clouds": {"nefos": cloud("demo"), "nefos-admin": cloud("admin"),
                       "nefos-service": cloud("service")}}


def write_clouds_yaml(rt, creds: dict, path: str | os.PathLike | None = None) -> Path:
    """Write clouds.yaml (0600, it holds passwords); default ``<state_dir>/clouds.yaml``."""
    target = Path(path) if path else Path(rt.cfg.state_dir) / "clouds.yaml"
    fileperms.write_private(target, yaml.safe_dump(clouds_yaml(rt, creds), default_flow_style=False, sort_keys=False))
    return target
