"""Run Tempest's compute API tests (every test of ``tempest.api.compute``) against a running Nefos.

Used by ``tests/tempest/test_tempest.py`` (CI) and by hand::

    python tests/tempest/harness.py --clouds .nefos/clouds.yaml --work /tmp/tempest-run

Steps: prepare the cloud as admin (on fake hosts, an external network ``public`` in a documentation
range; with real guests, `nefos up` made it, with a bridge behind it), write ``tempest.conf`` from the
clouds.yaml (admin credentials for Tempest's dynamic credentials, which give each project its own
network, subnet and router to ``public``; identity v3 URI, image/flavor references, feature flags off
for what Nefos does not have), run ``tempest run --include-list <tests> --concurrency N`` and read
the subunit stream back into per-test results.

With ``validation`` (``tests/tempest/test_tempest_validation.py``, `nefos up` with real guests)
Tempest logs into its guests over SSH (key pair, floating IP on ``public``) before it tests them.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import yaml
from nefos.http_client import verified_tls

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
MAX_MICROVERSION = "2.104"
ALT_IMAGE = "tempest-alt"
PUBLIC_NETWORK = "public"  # the external network `nefos up` creates with real guests
FAKE_PUBLIC_CIDR = "203.0.113.0/24"  # the one prepare_cloud makes on fake hosts (TEST-NET-3)
# The tests that log into their guests (SSH validation): skipped on fake hosts, run with
# ``validation`` on real guests (test_tempest_validation.py).
VALIDATION_TESTS = re.compile(
    r"[.]test_attach_interfaces[.]|[.]test_device_tagging[.]|[.]test_create_server[.]Servers\w*[.]test_(host_name_is_same_as_server_name|"
    r"verify_created_server_vcpus|create_server_with_fqdn_name|verify_hostname_allows_fqdn|"
    r"verify_created_server_ephemeral_disk)$")


# Cloud preparation -------------------------------------------------------------------------

class Admin:
    """A tiny admin client over the catalog of a token (no SDK: quick to start, explicit)."""

    def __init__(self, cloud: dict):
        auth = cloud["auth"]
        self.auth_url = auth["auth_url"].rstrip("/")
        body = {"auth": {"identity": {"methods": ["password"], "password": {"user": {
            "name": auth["username"], "password": auth["password"],
            "domain": {"name": auth["user_domain_name"]}}}},
            "scope": {"project": {"name": auth["project_name"],
                                  "domain": {"name": auth["project_domain_name"]}}}}}
        self.http = httpx.Client(verify=verified_tls(), timeout=60)
        r = self.http.post(f"{self.auth_url}/auth/tokens", json=body)
        r.raise_for_status()
        self.token = r.headers["x-subject-token"]
        self.catalog = {svc["type"]: next(e["url"] for e in svc["endpoints"] if e["interface"] == "public")
                        for svc in r.json()["token"]["catalog"]}
        self.http.headers["X-Auth-Token"] = self.token

    def get(self, service: str, path: str, **kw) -> dict:
        r = self.http.get(self.catalog[service].rstrip("/") + path, **kw)
        r.raise_for_status()
        return r.json()

    def post(self, service: str, path: str, body: dict) -> dict:
        r = self.http.post(self.catalog[service].rstrip("/") + path, json=body)
        r.raise_for_status()
        return r.json()

    def put(self, service: str, path: str, body: dict) -> dict:
        r = self.http.put(self.catalog[service].rstrip("/") + path, json=body)
        r.raise_for_status()
        return r.json()


def mark_default_external(admin: "Admin") -> None:
    """The external network ``public``, when there is one, is the default external network that
    auto-allocated topologies (Nova's ``networks: auto``) are uplinked to (idempotent)."""
    for net in admin.get("network", "/v2.0/networks", params={"name": PUBLIC_NETWORK})["networks"]:
        if net.get("router:external") and not net.get("is_default"):
            admin.put("network", f"/v2.0/networks/{net['id']}", {"network": {"is_default": True}})


def prepare_cloud(cloud: dict, validation: bool = False) -> dict:
    """The shared network (or, with ``validation``, the external network's id) and the image/flavor
    references Tempest needs (idempotent)."""
    admin = Admin(cloud)
    # Each project gets its own network, subnet and router to the external network public from
    # Tempest's dynamic credentials (a shared network too would make a NIC attached without a network
    # ambiguous, and would keep Tempest from testing auto-allocated topologies).
    if validation:
        public = admin.get("network", "/v2.0/networks", params={"name": PUBLIC_NETWORK})["networks"]
        if not public:
            raise RuntimeError(f"the external network {PUBLIC_NETWORK} is missing (nefos up with real guests)")
        public_id = public[0]["id"]
        subnets = admin.get("network", "/v2.0/subnets", params={"network_id": public_id})["subnets"]
        public_cidr = subnets[0]["cidr"] if subnets else None
    else:
        public_id = _fake_public_network(admin)
    mark_default_external(admin)
    images = admin.get("image", "/v2/images", params={"name": "nefos-tiny"})["images"]
    if not images:
        raise RuntimeError("the default image nefos-tiny is missing")
    # A second image, so the tests that need two distinct ones (filter by image) run.
    alt = admin.get("image", "/v2/images", params={"name": ALT_IMAGE})["images"]
    if alt:
        alt_id = alt[0]["id"]
    else:
        alt_id = admin.post("image", "/v2/images", {
            "name": ALT_IMAGE, "disk_format": "raw", "container_format": "bare",
            "visibility": "public"})["id"]
        r = admin.http.put(admin.catalog["image"].rstrip("/") + f"/v2/images/{alt_id}/file",
                           content=b"\0" * 4096, headers={"Content-Type": "application/octet-stream"})
        r.raise_for_status()
    flavors = {f["id"] for f in admin.get("compute", "/flavors")["flavors"]}
    for wanted in ("42", "84"):
        if wanted not in flavors:
            raise RuntimeError(f"flavor {wanted} is missing (have {sorted(flavors)})")
    return {"public_network_id": public_id, "image_id": images[0]["id"],
            "image_alt_id": alt_id, "flavor_ref": "42",
            "flavor_ref_alt": "84", "identity_uri": admin.auth_url,
            "region": cloud.get("region_name", "RegionOne"),
            **({"public_cidr": public_cidr} if validation and public_cidr else {})}


def _fake_public_network(admin: Admin) -> str:
    """On fake hosts: the external network ``public`` (a documentation range, no bridge behind it), so
    Tempest's projects get routers to it and its floating IP tests allocate from it (idempotent)."""
    if public := admin.get("network", "/v2.0/networks", params={"name": PUBLIC_NETWORK})["networks"]:
        return public[0]["id"]
    public_id = admin.post("network", "/v2.0/networks", {"network": {
        "name": PUBLIC_NETWORK, "router:external": True}})["network"]["id"]
    admin.post("network", "/v2.0/subnets", {"subnet": {
        "network_id": public_id, "cidr": FAKE_PUBLIC_CIDR, "ip_version": 4, "enable_dhcp": False,
        "name": PUBLIC_NETWORK}})
    return public_id


# tempest.conf ------------------------------------------------------------------------------

def tempest_conf(cloud: dict, prep: dict, work: Path, validation: bool = False) -> str:
    a = cloud["auth"]
    on = "true" if validation else "false"
    return textwrap.dedent(f"""\
        [DEFAULT]
        log_dir = {work / "logs"}
        log_file = tempest.log
        use_stderr = false

        [oslo_concurrency]
        lock_path = {work / "lock"}

        [auth]
        use_dynamic_credentials = true
        create_isolated_networks = true
        admin_username = {a["username"]}
        admin_password = {a["password"]}
        admin_project_name = {a["project_name"]}
        admin_domain_name = {a["user_domain_name"]}
        default_credentials_domain_name = {a["user_domain_name"]}
        tempest_roles =

        [identity]
        uri_v3 = {prep["identity_uri"]}
        auth_version = v3
        region = {prep["region"]}
        catalog_type = identity
        v3_endpoint_type = public
        disable_ssl_certificate_validation = true

        [identity-feature-enabled]
        security_compliance = false
        trust = false
        access_rules = false
        application_credentials = false
        project_tags = false

        [compute]
        region = {prep["region"]}
        catalog_type = compute
        endpoint_type = publicURL
        image_ref = {prep["image_id"]}
        image_ref_alt = {prep["image_alt_id"]}
        flavor_ref = {prep["flavor_ref"]}
        flavor_ref_alt = {prep["flavor_ref_alt"]}
        min_microversion = 2.1
        max_microversion = {MAX_MICROVERSION}
        build_timeout = {180 if validation else 60}
        build_interval = 1
        ready_wait = 0
        min_compute_nodes = {1 if validation else 2}
        fixed_network_name =
        shared_physical_network = false

        [compute-feature-enabled]
        disk_config = true
        change_password = true
        console_output = true
        resize = true
        pause = true
        suspend = true
        shelve = true
        shelve_migrate = false
        cold_migration = true
        live_migration = true
        live_migrate_back_and_forth = true
        block_migration_for_live_migration = true
        metadata_service = true
        vnc_console = true
        spice_console = true
        serial_console = false
        rescue = true
        stable_rescue = true
        enable_instance_password = true
        interface_attach = true
        snapshot = true
        personality = true
        attach_encrypted_volume = false
        config_drive = true
        swap_volume = false
        volume_backed_live_migration = false
        volume_multiattach = false
        ide_bus = true
        unified_limits = false
        hostname_fqdn_sanitization = true
        # Nova's default filters plus the ones Nefos also runs (src/nefos/control/scheduler/filters.py).
        scheduler_enabled_filters = ComputeFilter,ComputeCapabilitiesFilter,ImagePropertiesFilter,ServerGroupAntiAffinityFilter,ServerGroupAffinityFilter,AvailabilityZoneFilter,AggregateInstanceExtraSpecsFilter,AggregateMultiTenancyIsolation,SameHostFilter,DifferentHostFilter

        [service_available]
        nova = true
        neutron = true
        glance = true
        cinder = false
        swift = false
        horizon = false

        [network]
        catalog_type = network
        region = {prep["region"]}
        endpoint_type = publicURL
        project_network_cidr = 10.240.0.0/16
        project_network_mask_bits = 24
        public_network_id = {prep["public_network_id"]}
        floating_network_name = {PUBLIC_NETWORK}
        shared_physical_network = false

        [network-feature-enabled]
        floating_ips = true
        port_security = true
        ipv6 = false
        api_extensions = binding,security-group,quotas,quota_details,port-security,external-net,net-mtu,standard-attr-description,project-id,pagination,sorting,auto-allocated-topology

        [image]
        catalog_type = image
        region = {prep["region"]}
        endpoint_type = publicURL

        [image-feature-enabled]
        api_v1 = false
        api_v2 = true

        [validation]
        run_validation = {on}
        connect_method = floating
        auth_method = keypair
        image_ssh_user = root
        ssh_key_type = rsa
        network_for_ssh = {PUBLIC_NETWORK}
        floating_ip_range = {prep.get("public_cidr", "172.24.4.0/24")}

        [volume-feature-enabled]
        backup = false
        snapshot = false

        [enforce_scope]
        nova = false
        neutron = false
        glance = false
        keystone = false
        """)


def write_workspace(work: Path, conf: str) -> Path:
    """A Tempest workspace (no registration in ~/.tempest): etc/tempest.conf and .stestr.conf."""
    import tempest
    top = Path(tempest.__file__).resolve().parent.parent
    (work / "etc").mkdir(parents=True, exist_ok=True)
    (work / "logs").mkdir(exist_ok=True)
    (work / "lock").mkdir(exist_ok=True)
    (work / "etc" / "tempest.conf").write_text(conf)
    (work / ".stestr.conf").write_text(
        f"[DEFAULT]\ntest_path={top / 'tempest' / 'test_discover'}\ntop_dir={top}\n"
        "group_regex=([^\\.]*\\.)*\n")
    return work / "etc" / "tempest.conf"


# Selection and run --------------------------------------------------------------------------

def all_compute_tests(work: Path) -> list[str]:
    """Every test id of Tempest's ``tempest.api.compute`` package, as ``stestr list`` discovers them."""
    env = dict(os.environ, TEMPEST_CONFIG_DIR=str(work / "etc"), TEMPEST_CONFIG="tempest.conf")
    if not (work / ".stestr").exists():
        subprocess.run([str(BIN / "stestr"), "init"], cwd=work, env=env, capture_output=True, check=True)
    out = subprocess.run([str(BIN / "stestr"), "list", r"^tempest[.]api[.]compute[.]"], cwd=work, env=env,
                         capture_output=True, text=True, check=True).stdout
    return sorted({line.split("[", 1)[0] for line in out.splitlines() if line.startswith("tempest.api.compute.")})


def validation_tests(work: Path) -> list[str]:
    """The compute tests that need SSH validation into their guests."""
    return [t for t in all_compute_tests(work) if VALIDATION_TESTS.search(t)]


def run_tempest(work: Path, tests: list[str], timeout: float = 1200,
                concurrency: int = 1) -> subprocess.CompletedProcess:
    include = work / "include-list.txt"
    # stestr's include list holds regexes: anchor each id (tempest appends [attrs] to ids).
    include.write_text("".join(f"^{t.replace('.', '[.]')}(\\[|$)\n" for t in tests))
    env = dict(os.environ, TEMPEST_CONFIG_DIR=str(work / "etc"), TEMPEST_CONFIG="tempest.conf",
               OS_TEST_TIMEOUT="300", PYTHONUNBUFFERED="1")
    env.pop("OS_CLOUD", None)
    env.pop("OS_CLIENT_CONFIG_FILE", None)
    cmd = [str(BIN / "tempest"), "run", "--include-list", str(include), "--concurrency", str(concurrency),
           "--config-file", str(work / "etc" / "tempest.conf")]
    with open(work / "tempest-run.log", "w") as log:
        return subprocess.run(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
                              timeout=timeout)


def results(work: Path) -> dict[str, dict]:
    """``{test id: {"status": success|fail|skip, "reason": ..., "seconds": ...}}`` of the last run."""
    import subunit
    import testtools

    stream = subprocess.run([str(BIN / "stestr"), "last", "--subunit"], cwd=work, capture_output=True,
                            check=True).stdout
    out: dict[str, dict] = {}

    class Collect(testtools.StreamResult):
        def status(self, test_id=None, test_status=None, file_name=None, file_bytes=None,
                   timestamp=None, **kw):
            if not test_id:
                return
            tid = test_id.split("[", 1)[0]
            entry = out.setdefault(tid, {"status": None, "details": "", "start": None, "seconds": 0.0})
            if test_status == "inprogress" and timestamp:
                entry["start"] = timestamp
            if file_bytes and file_name in ("reason", "traceback"):
                entry["details"] += bytes(file_bytes).decode("utf-8", "replace")
            if test_status in ("success", "fail", "skip", "xfail", "uxsuccess"):
                entry["status"] = test_status
                if timestamp and entry["start"]:
                    entry["seconds"] = (timestamp - entry["start"]).total_seconds()

    case = subunit.ByteStreamToStreamResult(io.BytesIO(stream), non_subunit_name="stdout")
    result = Collect()
    result.startTestRun()
    case.run(result)
    result.stopTestRun()
    for entry in out.values():
        entry.pop("start", None)
    # Class-level fixtures that failed show up as setUpClass (ClassName) ids.
    return out


def summarize(res: dict[str, dict], selected: list[str]) -> dict:
    # Class fixtures report as "setUpClass (module.Class)": their skip or failure is every test's.
    fixtures = {}
    for key, value in res.items():
        m = re.match(r"(setUpClass|tearDownClass) \((.+)\)$", key)
        if m and value["status"] in ("skip", "fail"):
            fixtures.setdefault(m.group(2), (m.group(1), value))
    by_id = {}
    for tid in selected:
        entry = res.get(tid)
        fixture = fixtures.get(tid.rsplit(".", 1)[0])
        if entry is None and fixture is not None:
            kind, value = fixture
            entry = {"status": value["status"], "seconds": 0.0,
                     "details": (f"{kind} failed: " if value["status"] == "fail" else "") + value["details"]}
        elif entry is None:
            entry = {"status": "missing", "details": "not reported by the run", "seconds": 0.0}
        by_id[tid] = entry
    counts: dict[str, int] = {}
    for e in by_id.values():
        counts[e["status"]] = counts.get(e["status"], 0) + 1
    return {"tests": by_id, "counts": counts, "total": len(selected)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--clouds", required=True, help="clouds.yaml written by nefos up")
    p.add_argument("--work", required=True, help="a directory for the Tempest workspace")
    p.add_argument("--regex", help="only the tests matching this (a Python regex)")
    p.add_argument("--json", help="write the summary here")
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--validation", action="store_true",
                   help="only the tests that SSH into their guests, with validation on (nefos up with real "
                        "guests and its external network public)")
    args = p.parse_args(argv)
    work = Path(args.work).resolve()
    cloud = yaml.safe_load(Path(args.clouds).read_text())["clouds"]["nefos-admin"]
    prep = prepare_cloud(cloud, args.validation)
    write_workspace(work, tempest_conf(cloud, prep, work, args.validation))
    tests = validation_tests(work) if args.validation else all_compute_tests(work)
    if args.regex:
        tests = [t for t in tests if re.search(args.regex, t)]
    started = time.monotonic()
    run_tempest(work, tests, timeout=3600, concurrency=args.concurrency)
    summary = summarize(results(work), tests)
    summary["seconds"] = round(time.monotonic() - started, 1)
    summary["concurrency"] = args.concurrency
    text = json.dumps(summary, indent=1)
    if args.json:
        Path(args.json).write_text(text)
    print(json.dumps({"counts": summary["counts"], "total": summary["total"], "seconds": summary["seconds"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
