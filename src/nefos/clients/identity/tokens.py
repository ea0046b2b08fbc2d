"""Fernet tokens: issued by the identity service, validated locally by every API.

A token is a Fernet message (AES-CBC + HMAC-SHA256, keys in
``<state_dir>/fernet.key`` or config ``fernet_key``) whose payload is a small
JSON document: user, scope, roles (ids and names, implied roles included),
methods, issue and expiry times and audit ids. Validating one needs no call
to the identity service: decrypt, check the expiry, and check the revocation
events in the shared database. The "not revoked" answer is cached per token
for ``revocation_cache_time`` seconds; a revocation made in this process
clears the cache at once, one made in another process is seen within that time.

Revocation is by event (as Keystone does): an event names any of audit id,
user, project, domain, role and an ``issued_before`` time; a token issued at
or before that time whose attributes match every field the event sets is
revoked. Removing a role, disabling or deleting a user or project, changing a
password and ``DELETE /v3/auth/tokens`` each write one.
"""

from __future__ import annotations

import base64
import collections
import json
import re
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from sqlalchemy import delete, or_, select

from nefos import exceptions, fileperms
from nefos.context import RequestContext, new_request_id
from nefos.db.models import IdentityRevocationEvent

# Tokens may be validated this long after expiry with ``allow_expired`` (Keystone's window).
ALLOW_EXPIRED_WINDOW = 2 * 24 * 3600
_CACHE_SIZE = 4096
_PAYLOAD_VERSION = 1


def now_us() -> int:
    return time.time_ns() // 1000


def new_audit_id() -> str:
    # Keystone's audit ids: 16 random bytes, urlsafe base64 without padding.
    return base64.urlsafe_b64encode(secrets.token_bytes(16)).rstrip(b"=").decode()


@dataclass
class TokenData:
    user_id: str
    user_domain_id: str
    methods: list[str]
    issued_at: int  # microseconds since the epoch
    expires_at: int
    audit_ids: list[str]  # [own, chain head] once rescoped
    project_id: str | None = None
    project_domain_id: str | None = None
    domain_id: str | None = None  # domain scope
    roles: list[dict] = field(default_factory=list)  # [{"id", "name"}]

    @property
    def scope(self) -> str:
        if self.project_id:
            return "project"
        if self.domain_id:
            return "domain"
        return "unscoped"

    @property
    def role_names(self) -> list[str]:
        return [r["name"] for r in self.roles]

    @property
    def is_admin(self) -> bool:
        return "admin" in self.role_names

    def to_payload(self) -> dict:
        return {
            "v": _PAYLOAD_VERSION, "u": self.user_id, "ud": self.user_domain_id, "m": self.methods,
            "ia": self.issued_at, "ea": self.expires_at, "a": self.audit_ids,
            "p": self.project_id, "pd": self.project_domain_id, "d": self.domain_id,
            "r": [[r["id"], r["name"]] for r in self.roles],
        }

    @classmethod
    def from_payload(cls, p: dict) -> "TokenData":
        if p.get("v") != _PAYLOAD_VERSION:
            raise ValueError("unknown token payload version")
        return cls(user_id=p["u"], user_domain_id=p["ud"], methods=list(p["m"]),
                   issued_at=int(p["ia"]), expires_at=int(p["ea"]), audit_ids=list(p["a"]),
                   project_id=p.get("p"), project_domain_id=p.get("pd"), domain_id=p.get("d"),
                   roles=[{"id": i, "name": n} for i, n in p.get("r", [])])

    def to_context(self, request_id: str | None = None,
                   global_request_id: str | None = None) -> RequestContext:
        names = self.role_names
        return RequestContext(project_id=self.project_id, user_id=self.user_id, roles=names,
                              request_id=request_id or new_request_id(),
                              global_request_id=global_request_id, is_admin="admin" in names)


# Keys ------------------------------------------------------------------------

_keys: dict[tuple[str, str], MultiFernet] = {}


def key_file(cfg) -> Path:
    return Path(cfg.state_dir) / "fernet.key"


def _read_or_create_key_file(path: Path) -> list[str]:
    text = fileperms.read_or_create_private(path, lambda: Fernet.generate_key().decode() + "\n")
    keys = [line.strip() for line in text.splitlines() if line.strip()]
    if not keys:
        raise exceptions.ServiceUnavailable(f"Fernet key file {path} is empty.")
    return keys


def fernet(cfg) -> MultiFernet:
    """The keys of this cloud (created on first use); the first one encrypts, all decrypt."""
    cache_key = (cfg.fernet_key, str(Path(cfg.state_dir).resolve()))
    f = _keys.get(cache_key)
    if f is None:
        if cfg.fernet_key:
            keys = [k.strip() for k in cfg.fernet_key.split(",") if k.strip()]
        else:
            keys = _read_or_create_key_file(key_file(cfg))
        f = MultiFernet([Fernet(k.encode()) for k in keys])
        _keys[cache_key] = f
    return f


# Issue and decode ------------------------------------------------------------

def issue(cfg, data: TokenData) -> str:
    raw = json.dumps(data.to_payload(), separators=(",", ":")).encode()
    return fernet(cfg).encrypt(raw).decode()


# (keys, token) -> its decrypted payload. A process reads its keys once (``fernet``), so a token
# always decrypts to the same payload; decrypting (AES and HMAC) costs more than the rest of a
# request's authentication. Expiry and revocation are still checked on every use.
_FERNET_TEXT = re.compile(r"[A-Za-z0-9_-]+={0,2}")
_decrypted: collections.OrderedDict[tuple[MultiFernet, str], bytes] = collections.OrderedDict()


def decode(cfg, token: str, *, allow_expired: bool = False) -> TokenData:
    """Decrypt and check expiry (no revocation check). Raises Unauthorized."""
    # Only the exact token issued: Fernet's lenient base64 would also accept it with characters
    # appended after its padding, or with stray characters inside.
    if not token or len(token) > 8192 or len(token) % 4 or not _FERNET_TEXT.fullmatch(token):
        raise exceptions.Unauthorized("The request you have made requires authentication.")
    try:
        keys = fernet(cfg)
        raw = _decrypted.get((keys, token))
        if raw is None:
            raw = keys.decrypt(token.encode("ascii"))
            _decrypted[(keys, token)] = raw
            while len(_decrypted) > _CACHE_SIZE:
                _decrypted.popitem(last=False)
        data = TokenData.from_payload(json.loads(raw))
    except (InvalidToken, UnicodeError, ValueError, KeyError, TypeError):
        raise exceptions.Unauthorized("The request you have made requires authentication.")
    now = now_us()
    limit = data.expires_at + (ALLOW_EXPIRED_WINDOW * 1_000_000 if allow_expired else 0)
    if now >= limit:
        raise exceptions.Unauthorized("The token has expired.")
    return data


# Revocation ------------------------------------------------------------------

# audit id -> (monotonic time the answer stops being trusted, revoked?)
_revocation_cache: collections.OrderedDict[str, tuple[float, bool]] = collections.OrderedDict()


def forget_cached_revocations() -> None:
    """Drop every cached answer (call after committing a revocation event)."""
    _revocation_cache.clear()


def _remember(audit_id: str, until: float, revoked: bool) -> None:
    _revocation_cache[audit_id] = (until, revoked)
    _revocation_cache.move_to_end(audit_id)
    while len(_revocation_cache) > _CACHE_SIZE:
        _revocation_cache.popitem(last=False)


async def is_revoked(rt, data: TokenData) -> bool:
    key = data.audit_ids[0]
    hit = _revocation_cache.get(key)
    mono = time.monotonic()
    if hit is not None and (hit[1] or hit[0] > mono):
        return hit[1]
    E = IdentityRevocationEvent
    domains = [d for d in (data.user_domain_id, data.project_domain_id, data.domain_id) if d]
    role_ids = [r["id"] for r in data.roles]
    q = select(E.id).where(
        E.issued_before >= data.issued_at,
        or_(E.audit_id.is_(None), E.audit_id.in_(data.audit_ids)),
        or_(E.user_id.is_(None), E.user_id == data.user_id),
        or_(E.project_id.is_(None), E.project_id == (data.project_id or "")),
        or_(E.domain_id.is_(None), E.domain_id.in_(domains or [""])),
        or_(E.role_id.is_(None), E.role_id.in_(role_ids or [""])),
    ).limit(1)
    async with rt.db.reader() as s:
        revoked = (await s.execute(q)).first() is not None
    if revoked:
        _remember(key, float("inf"), True)
    elif rt.cfg.revocation_cache_time > 0:
        _remember(key, mono + rt.cfg.revocation_cache_time, False)
    return revoked


def add_revocation_event(session, *, audit_id: str | None = None, user_id: str | None = None,
                         project_id: str | None = None, domain_id: str | None = None,
                         role_id: str | None = None) -> None:
    """Record a revocation in ``session``'s transaction; call forget_cached_revocations() after commit."""
    if not any((audit_id, user_id, project_id, domain_id, role_id)):
        raise ValueError("a revocation event must match something")
    session.add(IdentityRevocationEvent(audit_id=audit_id, user_id=user_id, project_id=project_id,
                                        domain_id=domain_id, role_id=role_id,
                                        issued_before=now_us()))


async def prune_revocation_events(rt) -> int:
    """Delete events no unexpired token can match any more."""
    horizon = now_us() - (rt.cfg.token_expiration + ALLOW_EXPIRED_WINDOW + 60) * 1_000_000
    async with rt.db.transaction() as s:
        result = await s.execute(delete(IdentityRevocationEvent).where(
            IdentityRevocationEvent.issued_before < horizon))
    return result.rowcount or 0


# Validation ------------------------------------------------------------------

async def validate(rt, token: str, *, allow_expired: bool = False) -> TokenData:
    """Decrypt, check expiry and revocation. Raises Unauthorized."""
    data = decode(rt.cfg, token, allow_expired=allow_expired)
    if await is_revoked(rt, data):
        raise exceptions.Unauthorized("The token has been revoked.")
    return data


def expires_at(cfg, token: str) -> float:
    """When ``token`` expires, in seconds since the epoch (Unauthorized when it is no token of this
    cloud). Says nothing of revocation: ``validate`` decides whether a token is still good."""
    return decode(cfg, token, allow_expired=True).expires_at / 1_000_000


async def validate_token(rt, token: str, *, request_id: str | None = None,
                         global_request_id: str | None = None) -> RequestContext:
    """The request context a token stands for; raises ``nefos.exceptions.Unauthorized``."""
    data = await validate(rt, token)
    return data.to_context(request_id, global_request_id)
