"""Tempest's compute tests that do not pass against Nefos, each with its reason (docs/compatibility.md).

``KNOWN_FAILURES``: test_tempest.py fails on any other failure; a test leaving this list is progress,
one joining it needs a reason here. ``SKIPS``: every skip message Tempest gives is classified here;
a skip no entry explains fails the run, and so does any reason other than block storage or live
migration that more than a handful (``HANDFUL``) of tests are skipped for.
"""

import re

BLOCK_STORAGE = "needs block storage"
LIVE_MIGRATION = "needs a multi-host live migration"
HANDFUL = 5

KNOWN_FAILURES: dict[str, str] = {
    "tempest.api.compute.servers.test_create_server.ServersV294TestFqdnHostnames.test_verify_hostname_allows_fqdn":
        "with validation on (test_tempest_validation.py), Tempest creates its SSH key pair at the test class's "
        "microversion, 2.94, without a public key; from 2.92 the Compute API (Nova's, and Nefos' as Nova) only "
        "imports key pairs (public_key required), so the key pair is refused (400) before any server is built: "
        "a Tempest limitation, no cloud following Nova passes it with validation on",
}


# (regex searched in Tempest's skip message, reason category, why it applies to Nefos)
SKIPS: list[tuple[str, str, str]] = [
    (r"[Cc]inder|[Vv]olume service|volume.*not available|VolumeService|[Vv]olume-backed|microversion range\[3[.]",
     BLOCK_STORAGE, "Nefos provides no block storage service (service_available.cinder = false)"),
    (r"barbican|vTPM", "no key manager",
     "vTPM guests keep their secrets in a key manager (Barbican); Nefos has none"),
    (r"[Ll]ive.migration is not available|[Ll]ive migration is not enabled", LIVE_MIGRATION,
     "Nefos has no live migration (compute-feature-enabled.live_migration = false)"),
    (r"certified_image_ref", "no key manager",
     "booting with trusted image certificates (2.63) needs a key manager holding the certificates; "
     "Nefos has none, so such builds fail (compute.certified_image_ref unset)"),
    (r"Neutron (allows|does not check)", "Neutron's behaviour",
     "skipped by Tempest on every cloud whose security groups Neutron serves (the compute proxy passes "
     "the request to the network service, which accepts what the test expects refused, as Neutron)"),
    (r"nova-network is not available", "nova-network",
     "nova-network was removed from Nova; Tempest skips its tests on every current cloud"),
    (r"VNC Console|novnc", "no VNC console",
     "remote consoles are off (compute-feature-enabled.vnc_console = false)"),
    (r"Serial console", "no serial console",
     "Nefos serves noVNC and spice-direct consoles, not serial ones (compute-feature-enabled.serial_console "
     "= false)"),
    (r"no known-for-sure existing network", "no fixed network for Tempest",
     "Tempest's projects get networks of their own here (dynamic credentials), so tempest.conf names no "
     "fixed network for the test to look for (the external network cannot be one: servers are not "
     "plugged into it)"),
    (r"RBAC new defaults are not enabled", "scoped RBAC not configured for Tempest",
     "Tempest runs without enforce_scope for Nova, as the rest of the run does; Nefos has the manager "
     "role and Nova's manager defaults (os-migrations, live migration)"),
]
# Tempest's own skips until a Launchpad bug is fixed: one reason per bug.
_TEMPEST_BUG = re.compile(r"(?:Skipped until bug|Marked as unstable and skipped because of bug):? "
                          r"https://launchpad.net/bugs/(\d+)")


def classify_skip(details: str) -> tuple[str, str] | None:
    """``(category, why)`` for a Tempest skip message, or None when no entry explains it."""
    text = " ".join(details.split())
    if bug := _TEMPEST_BUG.search(text):
        return (f"skipped by Tempest until Launchpad bug {bug.group(1)} is fixed",
                "skipped by Tempest itself, on every cloud, until that bug is fixed")
    for pattern, category, why in SKIPS:
        if re.search(pattern, text):
            return category, why
    return None
