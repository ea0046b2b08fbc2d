"""Key pairs: generated (RSA, or an X.509 certificate) or imported, per user, counted against quota.

Fingerprints are Nova's: the MD5 of the SSH key blob in colon-separated hex
for ``ssh`` keys, the SHA-1 of the DER certificate for ``x509`` ones. The
``key_pairs`` quota is consumed in the owner's project (the transaction that
inserts the row), and released by delete.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import hashlib
import string

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError

from nefos import exceptions
from nefos.db.models import KeyPair
from nefos.objects import quotas

TYPE_SSH = "ssh"
TYPE_X509 = "x509"
_SAFE_CHARS = set("_- " + string.digits + string.ascii_letters)


def to_dict(row: KeyPair) -> dict:
    return {"id": row.id, "name": row.name, "user_id": row.user_id, "project_id": row.project_id,
            "fingerprint": row.fingerprint, "public_key": row.public_key, "type": row.type or TYPE_SSH,
            "created_at": row.created_at, "updated_at": row.updated_at}


def _colon_hex(digest: str) -> str:
    return ":".join(digest[i:i + 2] for i in range(0, len(digest), 2))


def ssh_fingerprint(public_key: str) -> str:
    """Nova's ``generate_fingerprint``; InvalidKeypair when the key does not parse."""
    try:
        serialization.load_ssh_public_key(public_key.strip().encode("utf-8"))
        blob = base64.b64decode(public_key.strip().split()[1])
        return _colon_hex(hashlib.md5(blob, usedforsecurity=False).hexdigest())
    except Exception:
        raise exceptions.InvalidKeypair(reason="failed to generate fingerprint")


def x509_fingerprint(pem: str) -> str:
    try:
        cert = x509.load_pem_x509_certificate(pem.encode("utf-8"))
        return _colon_hex(cert.fingerprint(hashes.SHA1()).hex())
    except Exception as exc:
        raise exceptions.InvalidKeypair(
            reason=f"failed to generate X509 fingerprint. Error message: {exc}")


def _generate_ssh() -> tuple[str, str, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                           serialization.PublicFormat.OpenSSH).decode()
    public = f"{public} Generated-by-Nova"
    return private, public, ssh_fingerprint(public)


def _generate_x509(user_id: str) -> tuple[str, str, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, user_id or "nefos")])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + dt.timedelta(days=3650))
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(key, hashes.SHA256()))
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    pem = cert.public_bytes(serialization.Encoding.PEM).decode()
    return private, pem, x509_fingerprint(pem)


def validate_name(name: str, extra_chars: str = "") -> None:
    """``extra_chars``: allowed besides letters, digits, ``_``, ``-`` and spaces (2.92: ``@`` and ``.``)."""
    if any(ch not in _SAFE_CHARS and ch not in extra_chars for ch in name):
        raise exceptions.InvalidKeypair(reason="Keypair name contains unsafe characters")
    if not 1 <= len(name) <= 255:
        raise exceptions.InvalidKeypair(
            reason="Keypair name must be string and between 1 and 255 characters long")


async def get_keypair(db, user_id, name) -> dict:
    """The key pair ``name`` of ``user_id``; KeypairNotFound otherwise."""
    async with db.reader() as s:
        row = (await s.execute(select(KeyPair).where(
            KeyPair.user_id == user_id, KeyPair.name == name))).scalar_one_or_none()
    if row is None:
        raise exceptions.KeypairNotFound(name=name, user_id=user_id)
    return to_dict(row)


async def list_keypairs(db, user_id, *, limit: int | None = None, marker: str | None = None) -> list[dict]:
    """The user's key pairs by name (Nova orders by name, then id), after ``marker`` (a name)."""
    async with db.reader() as s:
        q = select(KeyPair).where(KeyPair.user_id == user_id).order_by(KeyPair.name, KeyPair.id)
        if marker is not None:
            found = (await s.execute(select(KeyPair.id).where(
                KeyPair.user_id == user_id, KeyPair.name == marker))).first()
            if found is None:
                raise exceptions.MarkerNotFound(marker=marker)
            q = q.where(KeyPair.name > marker)
        if limit is not None:
            q = q.limit(limit)
        rows = (await s.execute(q)).scalars().all()
    return [to_dict(r) for r in rows]


async def create_keypair(db, cfg, *, user_id: str, project_id: str | None, name: str,
                         key_type: str = TYPE_SSH, public_key: str | None = None,
                         extra_name_chars: str = "") -> dict:
    """Import ``public_key`` or generate a key pair (then ``private_key`` is in the result)."""
    validate_name(name, extra_name_chars)
    private_key = None
    if public_key is not None:
        fingerprint = x509_fingerprint(public_key) if key_type == TYPE_X509 else ssh_fingerprint(public_key)
    elif key_type == TYPE_X509:
        private_key, public_key, fingerprint = await asyncio.to_thread(_generate_x509, user_id)
    else:
        private_key, public_key, fingerprint = await asyncio.to_thread(_generate_ssh)
    try:
        async with db.transaction() as s:
            exists = (await s.execute(select(KeyPair.id).where(
                KeyPair.user_id == user_id, KeyPair.name == name))).first()
            if exists:
                raise exceptions.KeyPairExists(key_name=name)
            try:
                await quotas.consume(s, cfg, project_id, {"key_pairs": 1})
            except exceptions.OverQuota:
                raise exceptions.KeypairLimitExceeded()
            row = KeyPair(name=name, user_id=user_id, project_id=project_id, fingerprint=fingerprint,
                          public_key=public_key, type=key_type)
            s.add(row)
            await s.flush()
    except IntegrityError:
        raise exceptions.KeyPairExists(key_name=name)
    result = to_dict(row)
    if private_key is not None:
        result["private_key"] = private_key
    return result


async def delete_keypair(db, user_id: str, name: str) -> None:
    async with db.transaction() as s:
        row = (await s.execute(select(KeyPair).where(
            KeyPair.user_id == user_id, KeyPair.name == name))).scalar_one_or_none()
        if row is None:
            raise exceptions.KeypairNotFound(name=name, user_id=user_id)
        await s.execute(delete(KeyPair).where(KeyPair.id == row.id))
        await quotas.release(s, row.project_id, {"key_pairs": 1})
