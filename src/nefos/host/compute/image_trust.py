"""Trusted image certificates (Compute API 2.63): a server created or rebuilt with
``trusted_image_certificates`` may only boot an image whose signature verifies against one of them.

Verifying needs the certificates themselves, which Nova fetches from a key manager (Barbican) by id.
Nefos has no key manager, so no certificate can be validated: such a build or rebuild fails, as
Nova's does when certificate validation fails, rather than booting an unverified image.
"""

from __future__ import annotations

from nefos import exceptions

NO_KEY_MANAGER = "no key manager is available to fetch the trusted certificates"


def check_trusted_certs(instance: dict) -> None:
    """Raise ``CertificateValidationFailed`` when the server asks for verified images."""
    certs = instance.get("trusted_certs") or []
    if certs:
        raise exceptions.CertificateValidationFailed(cert_uuid=certs[0], reason=NO_KEY_MANAGER)
