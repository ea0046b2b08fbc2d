"""Identity logic under the REST layer: lookups, authentication, role resolution, token bodies."""

from __future__ import annotations

import contextlib
import datetime as dt
import uuid
from typing import Any, AsyncIterator

from sqlalchemy import select

from nefos import exceptions, validation
from nefos.db.models import (
    IdentityDomain, IdentityProject, IdentityRole, IdentityRoleAssignment, IdentityUser,
)
from nefos.clients.identity import catalog, tokens
from nefos.control.identity import lockout, passwords, schemas
from nefos.clients.identity.tokens import TokenData

# Roles that imply others, as Keystone's bootstrap sets up: admin > manager > member > reader.
ROLE_IMPLIES = {"admin": ("manager",), "manager": ("member",), "member": ("reader",)}

AUTH_FAILED = "The request you have made requires authentication."


def new_id() -> str:
    return uuid.uuid4().hex


def isotime_us(us: int) -> str:
    t = dt.datetime.fromtimestamp(us / 1_000_000, tz=dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def bad_request(message: str) -> exceptions.ValidationError:
    return exceptions.ValidationError(message)


def fits(value: Any, schema: dict) -> Any:
    """``value`` when it fits ``schema`` (JSON Schema, through the shared validator); else
    Keystone's 400 in the words ``schema`` carries ("x-message", formatted with the value)."""
    validation.validate(value, schema, lambda _error: bad_request(schema["x-message"].format(value=value)))
    return value


@contextlib.asynccontextmanager
async def write(rt) -> AsyncIterator[Any]:
    """A write transaction; cached revocation answers are dropped after it commits."""
    async with rt.db.transaction() as s:
        yield s
    tokens.forget_cached_revocations()


# Lookups ---------------------------------------------------------------------

async def get_row(s, model, kind: str, row_id: str):
    """The ``model`` row of ``row_id``; Keystone's 404 (``Could not find <kind>``) when there is none."""
    row = await s.get(model, row_id) if isinstance(row_id, str) else None
    if row is None:
        raise exceptions.NotFound(f"Could not find {kind}: {row_id}.")
    return row


async def get_domain(s, domain_id: str) -> IdentityDomain:
    return await get_row(s, IdentityDomain, "domain", domain_id)


async def get_project(s, project_id: str) -> IdentityProject:
    return await get_row(s, IdentityProject, "project", project_id)


async def get_user(s, user_id: str) -> IdentityUser:
    return await get_row(s, IdentityUser, "user", user_id)


async def get_role(s, role_id: str) -> IdentityRole:
    return await get_row(s, IdentityRole, "role", role_id)


def _ref(obj: Any, what: str) -> dict:
    if not isinstance(obj, dict) or not (isinstance(obj.get("id"), str) or isinstance(obj.get("name"), str)):
        raise bad_request(f"Expecting to find id or name in {what}.")
    return obj


async def resolve_domain(s, ref: Any, what: str = "domain") -> IdentityDomain | None:
    """The domain ``{"id"}`` or ``{"name"}`` names, or None when there is none."""
    ref = _ref(ref, what)
    if isinstance(ref.get("id"), str):
        return await s.get(IdentityDomain, ref["id"])
    return (await s.execute(select(IdentityDomain).where(IdentityDomain.name == ref["name"]))).scalar_one_or_none()


# Roles -----------------------------------------------------------------------

async def direct_roles(s, user_id: str, target_type: str, target_id: str) -> list[IdentityRole]:
    q = (select(IdentityRole).join(IdentityRoleAssignment, IdentityRoleAssignment.role_id == IdentityRole.id)
         .where(IdentityRoleAssignment.actor_id == user_id,
                IdentityRoleAssignment.target_type == target_type,
                IdentityRoleAssignment.target_id == target_id))
    return list((await s.execute(q)).scalars())


async def expand_implied(s, roles: list[IdentityRole]) -> list[IdentityRole]:
    """``roles`` plus the roles they imply (by name), each once, in a stable order."""
    by_id = {r.id: r for r in roles}
    wanted = {r.name for r in roles}
    frontier = list(wanted)
    while frontier:
        name = frontier.pop()
        for implied in ROLE_IMPLIES.get(name, ()):
            if implied not in wanted:
                wanted.add(implied)
                frontier.append(implied)
    missing = wanted - {r.name for r in roles}
    if missing:
        for r in (await s.execute(select(IdentityRole).where(IdentityRole.name.in_(missing)))).scalars():
            by_id[r.id] = r
    return sorted(by_id.values(), key=lambda r: r.name)


async def effective_roles(s, user_id: str, target_type: str, target_id: str) -> list[IdentityRole]:
    return await expand_implied(s, await direct_roles(s, user_id, target_type, target_id))


async def _assigned_to(s, model, target_type: str, user_id: str) -> list:
    """The ``model`` rows (projects or domains) ``user_id`` has a role assignment on, by name."""
    q = (select(model).where(model.id.in_(
        select(IdentityRoleAssignment.target_id).where(
            IdentityRoleAssignment.actor_id == user_id, IdentityRoleAssignment.target_type == target_type)))
         .order_by(model.name))
    return list((await s.execute(q)).scalars())


async def user_projects(s, user_id: str) -> list[IdentityProject]:
    return await _assigned_to(s, IdentityProject, "project", user_id)


async def user_domains(s, user_id: str) -> list[IdentityDomain]:
    return await _assigned_to(s, IdentityDomain, "domain", user_id)


# Authentication --------------------------------------------------------------

def _unauthorized(message: str = AUTH_FAILED) -> exceptions.Unauthorized:
    return exceptions.Unauthorized(message)


async def _password_user(rt, pw: Any) -> IdentityUser:
    u = fits(pw, schemas.AUTH_PASSWORD)["user"]
    password = fits(u.get("password"), schemas.AUTH_PASSWORD_OF_USER)
    user = None
    # The lookup's session is closed before the KDF runs: slow hashing never pins a DB connection.
    async with rt.db.reader() as s:
        if isinstance(u.get("id"), str):
            user = await s.get(IdentityUser, u["id"])
        elif isinstance(u.get("name"), str):
            if "domain" not in u:
                raise bad_request("Expecting to find domain in user.")
            domain = await resolve_domain(s, u["domain"], "user domain")
            if domain is not None:
                user = (await s.execute(select(IdentityUser).where(
                    IdentityUser.domain_id == domain.id, IdentityUser.name == u["name"]))).scalar_one_or_none()
        else:
            raise bad_request("Expecting to find id or name in user.")

    if user is None:
        # An unknown user costs one hash too, so timing does not tell users apart.
        await passwords.verify_password(password, None, rt.cfg.password_hash_rounds)
        raise _unauthorized()
    await check_password(rt, user, password)
    return user


async def check_password(rt, user: IdentityUser, password: str) -> None:
    """401 unless ``password`` is ``user``'s; every attempt is counted towards the lockout
    before the hash is computed, and refused unchecked once the user is locked out."""
    place = await lockout.count_attempt(rt, user)
    if not await passwords.verify_password(password, user.password_hash, rt.cfg.password_hash_rounds):
        raise _unauthorized()
    await lockout.clear_after_success(rt, user.id, place)


async def authenticate(rt, body: Any) -> TokenData:
    """Check a ``POST /v3/auth/tokens`` body; the new token's data. 400 for bad input, 401 otherwise."""
    auth = fits(body, schemas.AUTH_BODY)["auth"]
    identity = fits(auth.get("identity"), schemas.AUTH_IDENTITY)
    methods = fits(identity.get("methods"), schemas.AUTH_METHODS)
    for m in methods:
        if m not in ("password", "token"):
            raise _unauthorized(f"Attempted to authenticate with an unsupported method: {m}.")
        if m not in identity:
            raise bad_request(f"Expecting to find {m} in identity.")
    if "password" in methods and "token" in methods:
        raise bad_request("Authenticate with one of password or token, not both.")
    scope = fits(auth.get("scope"), schemas.AUTH_SCOPE)

    now = tokens.now_us()
    expires_at = now + rt.cfg.token_expiration * 1_000_000
    audit_ids = [tokens.new_audit_id()]
    if "password" in methods:
        user = await _password_user(rt, identity["password"])
    async with rt.db.reader() as s:
        if "password" in methods:
            user = await s.get(IdentityUser, user.id)
            if user is None:
                raise _unauthorized()
        else:
            ref = fits(identity["token"], schemas.AUTH_TOKEN)
            old = await tokens.validate(rt, ref["id"])
            user = await s.get(IdentityUser, old.user_id)
            if user is None:
                raise _unauthorized()
            expires_at = min(expires_at, old.expires_at)  # rescoping never extends a token's life
            audit_ids.append(old.audit_ids[-1])
            methods = list(dict.fromkeys(old.methods + ["token"]))
        if not user.enabled:
            raise _unauthorized(f"User {user.id} is disabled.")
        user_domain = await s.get(IdentityDomain, user.domain_id)
        if user_domain is None or not user_domain.enabled:
            raise _unauthorized()
        data = TokenData(user_id=user.id, user_domain_id=user.domain_id, methods=list(methods),
                         issued_at=now, expires_at=expires_at, audit_ids=audit_ids)
        await _apply_scope(s, data, user, scope)
    return data


async def _apply_scope(s, data: TokenData, user: IdentityUser, scope: Any) -> None:
    if scope is None:
        # No scope asked for: the user's default project when they have a role there.
        if user.default_project_id:
            project = await s.get(IdentityProject, user.default_project_id)
            if project is not None and project.enabled:
                roles = await effective_roles(s, user.id, "project", project.id)
                if roles:
                    data.project_id, data.project_domain_id = project.id, project.domain_id
                    data.roles = [{"id": r.id, "name": r.name} for r in roles]
        return
    if scope == "unscoped":
        return
    kinds = [k for k in ("project", "domain", "system", "OS-TRUST:trust") if k in scope]
    if len(kinds) != 1:
        raise bad_request("Specify exactly one of project, domain in scope.")
    kind = kinds[0]
    if kind not in ("project", "domain"):
        raise bad_request(f"Scoping to {kind} is not supported.")
    if kind == "project":
        ref = _ref(scope["project"], "project")
        project = None
        if isinstance(ref.get("id"), str):
            project = await s.get(IdentityProject, ref["id"])
        else:
            if "domain" not in ref:
                raise bad_request("Expecting to find domain in project.")
            domain = await resolve_domain(s, ref["domain"], "project domain")
            if domain is not None:
                project = (await s.execute(select(IdentityProject).where(
                    IdentityProject.domain_id == domain.id,
                    IdentityProject.name == ref["name"]))).scalar_one_or_none()
        if project is None:
            raise _unauthorized("Could not find the requested project.")
        if not project.enabled:
            raise _unauthorized(f"Project {project.id} is disabled.")
        domain = await s.get(IdentityDomain, project.domain_id)
        if domain is None or not domain.enabled:
            raise _unauthorized(f"Domain {project.domain_id} is disabled.")
        roles = await effective_roles(s, user.id, "project", project.id)
        if not roles:
            raise _unauthorized(f"User {user.id} has no access to project {project.id}.")
        data.project_id, data.project_domain_id = project.id, project.domain_id
    else:
        domain = await resolve_domain(s, scope["domain"], "domain")
        if domain is None:
            raise _unauthorized("Could not find the requested domain.")
        if not domain.enabled:
            raise _unauthorized(f"Domain {domain.id} is disabled.")
        roles = await effective_roles(s, user.id, "domain", domain.id)
        if not roles:
            raise _unauthorized(f"User {user.id} has no access to domain {domain.id}.")
        data.domain_id = domain.id
    data.roles = [{"id": r.id, "name": r.name} for r in roles]


# Token bodies ----------------------------------------------------------------

async def token_body(rt, data: TokenData, *, include_catalog: bool = True) -> dict:
    """The ``{"token": ...}`` document; 404 when the user or scope no longer exists."""
    async with rt.db.reader() as s:
        user = await s.get(IdentityUser, data.user_id)
        if user is None:
            raise exceptions.NotFound("Could not find token.")
        domains = {}

        async def domain_ref(domain_id: str) -> dict:
            if domain_id not in domains:
                row = await s.get(IdentityDomain, domain_id)
                domains[domain_id] = {"id": domain_id, "name": row.name if row else domain_id}
            return domains[domain_id]

        token: dict = {
            "methods": data.methods,
            "user": {"id": user.id, "name": user.name, "domain": await domain_ref(user.domain_id),
                     "password_expires_at": None},
            "audit_ids": data.audit_ids,
            "issued_at": isotime_us(data.issued_at),
            "expires_at": isotime_us(data.expires_at),
        }
        if data.project_id:
            project = await s.get(IdentityProject, data.project_id)
            if project is None:
                raise exceptions.NotFound("Could not find token.")
            token["project"] = {"id": project.id, "name": project.name,
                                "domain": await domain_ref(project.domain_id)}
            token["is_domain"] = False
        elif data.domain_id:
            token["domain"] = await domain_ref(data.domain_id)
    if data.scope != "unscoped":
        token["roles"] = data.roles
        if include_catalog:
            token["catalog"] = catalog.catalog(rt.cfg)
    elif include_catalog:
        token["catalog"] = []
    return {"token": token}
