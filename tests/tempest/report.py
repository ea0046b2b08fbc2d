"""Render docs/compatibility.md from a Tempest results file written by test_tempest.py / harness.py,
with the results of the run with SSH validation on real guests (test_tempest_validation.py) when
given: its tests, skipped in the first run, count as that run reports them.

    python tests/tempest/report.py /tmp/.../tempest-results.json [/tmp/.../tempest-validation-results.json] \
        > docs/compatibility.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import MAX_MICROVERSION  # noqa: E402
from known_results import KNOWN_FAILURES, classify_skip  # noqa: E402

# Why Tempest's own skip messages apply here (the feature flag in tempest.conf and what Nefos lacks).
SKIP_WHY = [
    ("microversion range", f"Nefos' Compute API goes up to microversion {MAX_MICROVERSION}"),
    ("Resize not available", "no resize/migration (compute-feature-enabled.resize = false)"),
    ("Shelve is not available", "no shelve (compute-feature-enabled.shelve = false)"),
    ("Snapshotting not available", "no server snapshots or backups (compute-feature-enabled.snapshot = false)"),
    ("volume service", "no block storage service (service_available.cinder = false)"),
    ("Volume service not enabled", "no block storage service (service_available.cinder = false)"),
    ("Cinder is not available", "no block storage service (service_available.cinder = false)"),
    ("Instance validation tests are disabled", "no SSH validation inside guests: fake guests have no "
                                               "network stack (validation.run_validation = false)"),
    ("Validation should be enabled", "needs SSH validation inside guests (the test logs in before it "
                                     "hot-plugs NICs): fake guests have no network stack "
                                     "(validation.run_validation = false); os-interface itself is served, "
                                     "see tests/servers/test_interfaces.py and, on a real guest, "
                                     "tests/libvirt/test_interfaces_real_guest.py"),
    ("Console output not supported", "console output is not configured for Tempest "
                                     "(compute-feature-enabled.console_output = false)"),
    ("Change password not available", "no changePassword (compute-feature-enabled.change_password = false)"),
    ("Cold migration not available", "no cold migration (compute-feature-enabled.cold_migration = false)"),
    ("DiskConfig extension not enabled", "no OS-DCF:diskConfig MANUAL/AUTO semantics "
                                         "(compute-feature-enabled.disk_config = false)"),
    ("certified_image_ref", "booting with trusted image certificates (2.63) needs a key manager holding the "
                            "certificates; Nefos has none, so such builds fail (compute.certified_image_ref unset)"),
    ("Skipped until bug", "skipped by Tempest itself (for every cloud) until the Launchpad bug it names is fixed"),
    ("Need distinct images", "needs two images (image_ref_alt)"),
]

RESULT = {"success": "passed", "fail": "failed", "skip": "skipped", "missing": "not run"}


def skip_reason(details: str) -> str:
    text = " ".join(details.split())
    found = classify_skip(details)
    if found is not None:
        return f"{found[0]}: {found[1]}. Tempest: \u201c{text}\u201d"
    for needle, why in SKIP_WHY:
        if needle.lower() in text.lower():
            return f"{why}. Tempest: \u201c{text}\u201d"
    return f"Tempest: \u201c{text}\u201d"


def groups(tests) -> list[tuple[str, list[str]]]:
    """The tests by module (``servers.test_server_actions``), in order."""
    out: dict[str, list[str]] = {}
    for t in sorted(tests):
        module = t.replace("tempest.api.compute.", "").rsplit(".", 2)[0]
        out.setdefault(module, []).append(t)
    return list(out.items())


def merge(summary: dict, validation: dict) -> dict:
    """``summary`` with the tests of the validation run as that run reports them, counts recounted."""
    tests = {**summary["tests"], **{t: e for t, e in validation["tests"].items() if t in summary["tests"]}}
    counts: dict[str, int] = {}
    for e in tests.values():
        counts[e["status"]] = counts.get(e["status"], 0) + 1
    return {**summary, "tests": tests, "counts": counts, "validation": {
        "total": validation["total"], "counts": validation["counts"], "seconds": validation.get("seconds")}}


def render(summary: dict, validation: dict | None = None) -> str:
    if validation is not None:
        summary = merge(summary, validation)
    tests = summary["tests"]
    counts = summary["counts"]
    passed, failed, skipped = counts.get("success", 0), counts.get("fail", 0), counts.get("skip", 0)
    ran = passed + failed
    lines = [
        "# Compatibility: Tempest's compute API tests against Nefos",
        "",
        "`tests/tempest/test_tempest.py` (run by CI with the rest of the suite) starts `nefos up` (two fake",
        "compute hosts, Keystone-style auth), creates an external network `public`, writes a `tempest.conf` from the",
        "`clouds.yaml` it wrote (admin credentials for Tempest's dynamic credentials, identity v3 URI,",
        "`image_ref` nefos-tiny plus a second image, `flavor_ref` 42 / `flavor_ref_alt` 84, feature flags",
        "off for what Nefos does not have, cinder and swift unavailable) and runs **every test of",
        "`tempest.api.compute`** (`stestr list`, no hand-picked list) with `tempest run --concurrency 2`.",
        "A failure not listed in `tests/tempest/known_results.py` fails the CI test; so does a skip whose",
        "message that file does not explain, more than a handful (5) of tests skipped for any reason but",
        "block storage and live migration, and fewer than 85 % of all the compute tests passing.",
        "",
        "Tempest's dynamic credentials give each project its own network, subnet and router to `public`",
        "(no shared network), so the auto-allocated-topology tests run too.",
        "",
        "The interface-attachment tests (`test_attach_interfaces`) need SSH validation: Tempest logs into",
        "each guest before it hot-plugs NICs; so do device tagging and the server tests that read the",
        "guest's hostname, vCPUs and disks (`harness.VALIDATION_TESTS`). On the fake hosts Tempest skips them; they run with",
        "validation on real guests in a second, small run, `tests/tempest/test_tempest_validation.py`:",
        "`nefos up --driver libvirt` (the tiny guest, busybox and dropbear, under QEMU), `[validation]",
        "run_validation = true` (`connect_method = floating`, `auth_method = keypair`, `image_ssh_user =",
        "root`); Tempest reaches every guest over SSH through a floating IP on `public` (there a bridge",
        "of its own, 172.24.4.0/24). Their results below are that run's; the pass rate counts both runs.",
        "",
        f"Nefos' Compute API goes up to microversion {MAX_MICROVERSION} (`nefos.control.compute.rest.microversion.MAX_VERSION`)",
        "and Tempest runs with that maximum. Past 2.47 it honours: 2.50 (quota classes), 2.51 (action",
        "events for non-admins), 2.52 (tags on create, with the 2.26 tags API), 2.53 (service and",
        "hypervisor uuids, `PUT /os-services/{id}`, hypervisor query parameters), 2.54 (key_name on",
        "rebuild), 2.55 (flavor description, `PUT /flavors/{id}`), 2.57 (no personality, user_data on",
        "rebuild, no injected-file quotas or limits; before 2.57 personality files on create and rebuild",
        "are validated, held to the injected-file quotas (403) and given to the guest as Nova's",
        "`openstack/content/NNNN` files listed in meta_data.json, on the config drive and, unlike Nova,",
        "from the metadata service too), 2.58 and 2.66 (instance-action paging,",
        "changes-since/-before), 2.61 (flavor extra_specs), 2.62 (host/hostId in action events), 2.63",
        "(trusted image certificates: accepted and shown; with no key manager to fetch them, such a",
        "build or rebuild fails instead of booting an unverified image), 2.64 (server group policy and",
        "rules; the scheduler honours max_server_per_host), 2.66 (changes-before), 2.67 (volume_type in",
        "block device mappings, though volumes are refused), 2.71 (server_groups), 2.73 (locked_reason),",
        "2.74 (requested host/node), 2.75 (strict query strings, whole servers from update and rebuild,",
        "swap 0, hypervisor servers), and 2.56 (cold migration to a named host, admin only; resize and",
        "cold migration run on the fake driver, the libvirt driver answers them 409; so does live",
        "migration, `os-migrateLive` with 2.25's `auto` block migration, 2.30's `force` and 2.68's",
        "removal of it, 2.22's force-complete and 2.24/2.65's abort, between fake hosts; a single",
        "libvirt host refuses it with 400), 2.49 and 2.70",
        "(interface attachments' tags; os-interface attaches and detaches NICs on running servers), 2.48",
        "(server diagnostics in the standard form, from the fake and libvirt drivers), 2.59 (the",
        "os-migrations list's uuids, paging and changes-since; resizes and cold migrations are recorded",
        "with Nova's statuses). The others change APIs Nefos does not have at any version (volume",
        "attachments 2.49/2.70, multiattach 2.60, cells 2.69, QoS ports 2.72).",
        "",
        "Past 2.75 it honours: 2.76 (`power-update` external events: a `start`/`stop` action of their",
        "own, the compute host brings the guest and the database to the reported power state), 2.77",
        "(availability zone on unshelve of a shelved-offloaded server; the zone a server is pinned to is",
        "kept apart from its host's), 2.78 (`GET /servers/{id}/topology`: Nefos' guests have no NUMA",
        "topology, so `nodes` is empty as for such a Nova server), 2.82 (`accelerator-request-bound`",
        "events, tag required; with no accelerator service nothing waits for them), 2.83 (more list",
        "filters for non-admins), 2.84 (action event details), 2.86 (the extra specs Nova knows are",
        "validated on create and update), 2.87 (stable rescue: a rescue image's `hw_rescue_device` and",
        "`hw_rescue_bus` keep the guest's disks where they were and add the rescue disk on that bus;",
        "rescue and unrescue themselves work at every version, on the fake and libvirt drivers, the",
        "libvirt guest booting the rescue image from `vda` with its own disk as `vdb`, as Nova's; Nefos",
        "servers are never volume-backed, so 2.87's volume-backed rescue does not arise), 2.88",
        "(hypervisor views without resource fields, `uptime` in detail, no statistics or uptime",
        "routes), 2.80 (the os-migrations list's user and project), 2.81 (aggregates' image caches:",
        "accepted; the fake driver has nothing to pre-cache). The others change APIs Nefos does not",
        "have: volume attachments 2.79/2.85/2.89.",
        "",
        "Past 2.89 it honours: 2.90 (`hostname` on create, update and rebuild, one server only on",
        "create; `OS-EXT-SRV-ATTR:hostname` shown to every user; a rename keeps the hostname, as Nova),",
        "2.91 (unshelve to a host, admin only, and a null zone that unpins), 2.92 (key pairs imported",
        "only, `@` and `.` allowed in their names), 2.94 (FQDN hostnames), 2.95 (an evacuated server ends",
        "stopped), 2.96",
        "(`pinned_availability_zone` in show, the detailed list, update and rebuild), 2.98 (the image's",
        "properties Nova knows, copied into the server's system metadata on create and rebuild, shown",
        "as `image.properties`), 2.100 (`scheduler_hints` as given on create, each value in a list as",
        "Nova's request spec keeps them; so a `group` or `cidr` hint is shown as a list, which Tempest's",
        "2.100 schema, the create request's, does not allow, as for Nova). The others change APIs Nefos",
        "does not have: volume-backed rebuild 2.93 (Nefos has no volumes), share attachments 2.97 (no",
        "shared file systems service), the `spice-direct`",
        "console type 2.99 (noVNC consoles through `nefos up`'s console proxy: SPICE ones answer 400,",
        "as a Nova whose SPICE consoles are disabled; `os-console-auth-tokens` is served).",
        "",
        "Past 2.100 it honours: 2.102 (a `name` filter, a regular expression as Nova's, on the flavor",
        "lists; no `rxtx_factor` or `OS-FLV-DISABLED:disabled` in flavor views, on flavor create or as a",
        "sort key; the APIs that read no query parameter refuse unknown ones with 400 where Nova's do:",
        "aggregates, availability zones, flavors and their extra specs and access lists, server show,",
        "addresses, metadata, interfaces, topology, an instance action, a server group, a quota class) and 2.104",
        "(`PUT /servers/{id}` sets `pinned_availability_zone`: null unpins; a zone re-pins an unpinned",
        "server only to the zone it is in, and a pinned server must be unpinned before another zone, else",
        "409). The others change APIs Nefos does not have, so they change nothing: volume attachments",
        "answering 202 2.101 (Nefos has no volumes); 2.103 removes `/os-volumes_boot`, the servers",
        "collection's old name, which Nefos serves up to 2.102.",
        "",
        "## Result",
        "",
        f"- compute tests: **{summary['total']}**",
        f"- passed: **{passed}**, failed: **{failed}**, skipped: **{skipped}**"
        + (f", not run: {counts['missing']}" if counts.get("missing") else ""),
        f"- pass rate of all: **{100 * passed / summary['total']:.1f} %** ({passed}/{summary['total']});"
        f" of the tests that ran: {100 * passed / ran:.1f} %",
        f"- duration of the Tempest run: {summary.get('seconds', '?')} s "
        f"({summary.get('concurrency', 1)} worker{'s' if summary.get('concurrency', 1) > 1 else ''})",
    ]
    if summary.get("validation"):
        v = summary["validation"]
        lines.append(f"- of these, run with SSH validation on real guests: {v['total']} tests, "
                     f"{v['counts'].get('success', 0)} passed, {v['counts'].get('fail', 0)} failed, "
                     f"{v['counts'].get('skip', 0)} skipped, in {v.get('seconds', '?')} s (one worker)")
    lines += [
        "",
        "Reproduce by hand against a running cloud:",
        "",
        "```sh",
        "nefos up --state-dir /tmp/nefos --driver fake --fake-hosts 2 &",
        "python tests/tempest/harness.py --clouds /tmp/nefos/clouds.yaml --work /tmp/tempest --concurrency 2 --json /tmp/r.json",
        "nefos up --state-dir /tmp/nefos-libvirt --driver libvirt &  # real guests, the external network public",
        "python tests/tempest/harness.py --clouds /tmp/nefos-libvirt/clouds.yaml --work /tmp/tempest-v --validation \\",
        "    --json /tmp/v.json",
        "python tests/tempest/report.py /tmp/r.json /tmp/v.json > docs/compatibility.md",
        "```",
        "",
        "Fixes Tempest led to in Nefos: `GET /servers/{id}/ips` and `/ips/{network}`; `os-resetState`",
        "and `injectNetworkInfo` (admin); `restore`/`forceDelete` answer 409 (nothing is soft-deleted) and",
        "the Nova actions Nefos lacks look the server up first (404) and then answer 501 instead of 400;",
        "`tenant_id` on a server list counts only with `all_tenants` (and `all_tenants` from a",
        "non-admin is 403); access IPs are stored in canonical form; the `ip`/`ip6` list filters work;",
        "rebuild, createImage, createBackup (with rotation), shelve / shelveOffload / unshelve,",
        "changePassword, addSecurityGroup / removeSecurityGroup, `PUT /os-quota-class-sets/default`;",
        "os-services shows Nova's binary names (`nova-compute`, ...); external events are recorded",
        "within the server's current instance action (Nova records no action for them); the Image API",
        "lists an image's tasks (none); the fake hypervisor's console log has more than three lines;",
        "addFixedIp / removeFixedIp (up to 2.43) add an address to the server's port on a network and",
        "take one off.",
        "",
        "Policy, tenancy and identity hardening are described in [policy.md](policy.md); the isolation",
        "suite is `tests/isolation/`, the openstack CLI acceptance flow",
        "`tests/tempest/test_cli_acceptance.py`.",
        "",
        "## Failures",
        "",
    ]
    fails = [t for t, e in tests.items() if e["status"] == "fail"]
    if not fails:
        lines.append("None.")
    for t in fails:
        lines.append(f"- `{t}`: {KNOWN_FAILURES.get(t, 'not yet analysed: ' + tests[t]['details'][-300:])}")
    reasons: dict[str, int] = {}
    for t, e in tests.items():
        if e["status"] == "skip":
            found = classify_skip(e["details"])
            key = found[0] if found else "not explained"
            reasons[key] = reasons.get(key, 0) + 1
    lines += ["", "## Skipped, by reason", "", "| reason | tests |", "|---|---|"]
    lines += [f"| {r} | {n} |" for r, n in sorted(reasons.items(), key=lambda kv: -kv[1])]
    lines += ["", "## Every test", "",
              "Skips give the reason Nefos does not run them, then Tempest's own message.", ""]
    for title, ids in groups(tests):
        lines += [f"### {title}", "", "| test | result | reason |", "|---|---|---|"]
        for t in ids:
            e = tests.get(t, {"status": "missing", "details": ""})
            reason = ""
            if e["status"] == "skip":
                reason = skip_reason(e["details"])
            elif e["status"] == "fail":
                reason = KNOWN_FAILURES.get(t, "")
            short = t.replace("tempest.api.compute.", "")
            lines.append(f"| `{short}` | {RESULT.get(e['status'], e['status'])} | {reason.replace('|', '/')} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    summary = json.loads(Path(args[0]).read_text())
    validation = json.loads(Path(args[1]).read_text()) if len(args) > 1 else None
    sys.stdout.write(render(summary, validation))
    return 0


if __name__ == "__main__":
    sys.exit(main())
