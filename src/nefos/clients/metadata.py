"""Which instance a metadata request is for: signed headers from a proxy, never an address alone.

A metadata proxy (Neutron's, in front of the guests' networks) sends ``X-Instance-ID``,
``X-Tenant-ID`` and ``X-Instance-ID-Signature`` = hex HMAC-SHA256 of the instance id keyed with
``metadata_proxy_shared_secret`` (Nova's scheme). The signature is compared in constant time; a
missing or wrong one is 403 whatever else the request carries (``X-Forwarded-For`` included: an
address alone identifies nobody). A signed id of no instance, or of an instance of another
project than ``X-Tenant-ID``, is 404 (Nova's answers).

The secret is the option's value, or (empty) ``<state_dir>/metadata_proxy_shared_secret``,
generated on first use with mode 0600; an existing file others may read is tightened to 0600, and
an empty one is refused (``ConfigError``, at start): a signature keyed with nothing is one anybody
can make.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from pathlib import Path

from nefos import fileperms
from nefos.exceptions import ConfigError

LOG = logging.getLogger(__name__)

SECRET_FILE = "metadata_proxy_shared_secret"


class Refused(Exception):
    """The request cannot be served; ``status`` says how (400, 403 or 404)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def secret_path(cfg) -> Path:
    return Path(cfg.state_dir) / SECRET_FILE


def shared_secret(cfg) -> str:
    """The configured secret, or the state directory's (created 0600 when missing, tightened to 0600
    when wider); raises ``ConfigError`` when that file is empty."""
    if cfg.metadata_proxy_shared_secret:
        return cfg.metadata_proxy_shared_secret
    path = secret_path(cfg)
    secret = fileperms.read_or_create_private(path, lambda: secrets.token_hex(32) + "\n").strip()
    fileperms.private_file(path)
    if not secret:
        raise ConfigError(
            f"metadata_proxy_shared_secret: {path} is empty, and a signature keyed with nothing is one "
            f"anybody can make. Write the secret the metadata proxies share into it (or set "
            f"metadata_proxy_shared_secret), or remove the file to have one generated.")
    return secret


def sign(secret: str, instance_id: str) -> str:
    """The X-Instance-ID-Signature a proxy sends for ``instance_id``."""
    return hmac.new(secret.encode(), instance_id.encode(), hashlib.sha256).hexdigest()


def signed_instance(headers, secret: str) -> tuple[str, str]:
    """(instance id, tenant id) of a request whose signature is right; raises ``Refused``."""
    def single(name: str) -> str | None:
        values = headers.getlist(name)
        if len(values) > 1:
            raise Refused(400, f"Multiple {name} headers found within request.")
        return values[0] if values else None

    instance_id, signature = single("X-Instance-ID"), single("X-Instance-ID-Signature")
    if not instance_id or not signature:
        raise Refused(403, "The request is not signed by a metadata proxy (X-Instance-ID and "
                           "X-Instance-ID-Signature are required).")
    if not hmac.compare_digest(sign(secret, instance_id).encode(), signature.encode()):
        LOG.warning("X-Instance-ID-Signature does not match for instance id %s (request from %s)",
                    instance_id, headers.get("X-Forwarded-For", "-"))
        raise Refused(403, "Invalid proxy request signature.")
    tenant_id = single("X-Tenant-ID")
    if tenant_id is None:
        raise Refused(400, "X-Tenant-ID header is missing from request.")
    return instance_id, tenant_id
