"""Configuration: one typed object, loaded from an INI file and the environment.

Option names follow Nova's where Nova has one, so operators recognise them
(``vif_plugging_timeout``, ``network_allocate_retries``, ...). The INI file may
use sections (``[DEFAULT]``, ``[compute]``, ...); section names are ignored and
every key must be a field below, except in ``[upgrade_levels]`` (Nova's group of RPC version
pins), whose keys are bus topics (``compute = 1.0``; environment: ``NEFOS_UPGRADE_LEVELS_COMPUTE``).
"""

from __future__ import annotations

import configparser
import ipaddress
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from nefos.exceptions import ConfigError

# The APIs `nefos up` may serve besides identity, image and network (Nova's ``enabled_apis`` names).
KNOWN_APIS = ("osapi_compute", "metadata")


def parse_vni_ranges(value: str) -> list[tuple[int, int]]:
    """``vni_ranges`` ("min:max,min:max"): the VXLAN VNI ranges, each within 1..2**24-1."""
    ranges = []
    for part in (p.strip() for p in value.split(",")):
        if not part:
            continue
        lo, sep, hi = part.partition(":")
        if not sep or not lo.strip().isdigit() or not hi.strip().isdigit():
            raise ValueError(f"{part!r} is not min:max")
        lo_i, hi_i = int(lo), int(hi)
        if not 1 <= lo_i <= hi_i <= 2 ** 24 - 1:
            raise ValueError(f"{part!r}: VNIs are 1 to {2 ** 24 - 1}, min <= max")
        ranges.append((lo_i, hi_i))
    if not ranges:
        raise ValueError("no VNI range")
    return sorted(ranges)


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    # Where state lives (SQLite database, image files, clouds.yaml).
    state_dir: Path = Path(".nefos")
    database_url: str = ""  # default: sqlite in state_dir
    # Database connections per process (oslo.db's names): at most max_pool_size + max_overflow,
    # all processes of a deployment sharing the server's limit (PostgreSQL's default: 100); the
    # formula is nefos.db.connection_budget's (`nefos db connection-budget`). No overflow: an
    # overflow connection is closed once returned, so a busy process would open and close
    # connections over and over. A busy process queues for a connection (30 s at most).
    max_pool_size: int = 5
    max_overflow: int = 0
    bus_url: str = "local://"  # local:// (in-process) or amqp://user:pw@host:port/vhost
    control_exchange: str = "nefos"  # names this cloud's queues on a shared broker (oslo.messaging's name)
    host: str = "localhost"  # this service's host name (compute hosts must differ)
    bind_host: str = "127.0.0.1"
    # Every HTTP listener (the four APIs, the metadata service, the web console, the console proxy,
    # /metrics) bounds the connections one client may hold (haproxy's names, as the metadata proxy's):
    # the seconds a client has to send a whole request head, from its connection (or, between
    # keep-alive requests, from the head's first byte) to the head's end (timeout http-request;
    # 408 after it, or a silent close when nothing came); the connections a listener holds at once
    # (maxconn; more are answered 503 at once, and each listener's is lowered to fit the process's
    # open-file limit); and of them from one client address (more: 429 at once).
    http_request_timeout: float = Field(default=10.0, gt=0)
    http_maxconn: int = Field(default=2048, ge=1)
    http_maxconn_per_source: int = Field(default=512, ge=1)
    compute_api_port: int = 8774
    network_api_port: int = 9696
    image_api_port: int = 9292
    identity_api_port: int = 5000
    # Nova's enabled_apis: what `nefos up` serves of the compute service's APIs, a comma-separated
    # list of osapi_compute (the Compute API) and metadata (the metadata service). Without
    # metadata, guests learn who they are only from config drives.
    enabled_apis: list[str] = Field(default_factory=lambda: list(KNOWN_APIS))
    # Log lines (nefos.logs): text or json (one object a line), on standard error or appended to
    # log_file (oslo.log's log_file; created readable by its owner only).
    log_format: Literal["text", "json"] = "text"
    log_file: str = ""
    # The operator listener of this process: Prometheus metrics at /metrics and /healthcheck
    # (nefos.metrics). 0: none. Loopback by default: the figures name hosts and routes.
    metrics_port: int = Field(default=0, ge=0, le=65535)
    metrics_bind: str = "127.0.0.1"
    # oslo.middleware's disable_by_file_path: while this file exists, every /healthcheck of this
    # process answers 503 "DISABLED BY FILE" (take a process out of a load balancer first).
    healthcheck_disable_by_file_path: str = ""
    # The event stream (GET /v2.1/nefos-events): its log keeps event_log_retention seconds (a
    # client resumes with Last-Event-ID within that window); each API process reads new entries
    # every event_stream_poll_interval seconds for its streaming clients. An id still missing after
    # event_stream_gap_timeout seconds belongs to a transaction that rolled back: it is passed.
    # Compute hosts turning up or down are noticed every event_host_watch_interval seconds.
    event_log_retention: float = Field(default=86400.0, gt=0)
    event_stream_poll_interval: float = Field(default=0.25, gt=0)
    event_stream_gap_timeout: float = Field(default=5.0, ge=0)
    event_host_watch_interval: float = Field(default=10.0, gt=0)
    # An open stream checks its caller again (token validity and revocation, the stream's policy)
    # every event_stream_reauth_interval seconds and when its token expires, and ends with
    # stream.closed when the caller lost it. Each API process serves at most
    # event_stream_max_clients streams, event_stream_max_per_user of them to one user; more are
    # refused with 429 (each stream holds a socket, a file descriptor, and a queue).
    event_stream_reauth_interval: float = Field(default=60.0, gt=0)
    event_stream_max_per_user: int = Field(default=20, ge=1)
    event_stream_max_clients: int = Field(default=250, ge=1)

    # Service liveness.
    report_interval: float = 10.0
    service_down_time: float = 60.0
    # Nova's periodic_fuzzy_delay: each periodic task (and the heartbeat) first runs at a random
    # point of its first min(interval, periodic_fuzzy_delay) seconds, so services started
    # together do not all write at once; 0: first run after one interval.
    periodic_fuzzy_delay: float = 60.0

    # Bus.
    rpc_response_timeout: float = 60.0
    # Nova's [upgrade_levels]: bus topic -> the RPC version its clients send at most, during a
    # rolling upgrade (a version "1.0", a release name "0.9", or "auto": the oldest version the
    # running services of that topic report). No pin by default: the current version.
    upgrade_levels: dict[str, str] = Field(default_factory=dict)

    # Builds: the API records each build in the database before telling the conductor, so none is
    # lost when the conductor or the bus is down. A conductor takes a build for a lease of
    # 3 x rpc_response_timeout; one not taken within build_hand_off_timeout (or whose lease ran out:
    # its conductor died) is taken again by any conductor, checked every build_redrive_interval
    # seconds and when a conductor starts.
    build_hand_off_timeout: float = 60.0
    build_redrive_interval: float = 10.0

    # Scheduler.
    max_attempts: int = 3
    # Resize: may the scheduler pick the server's own host (Nova's option; a cold migration never does).
    allow_resize_to_same_host: bool = False
    ram_allocation_ratio: float = 1.5
    cpu_allocation_ratio: float = 16.0
    disk_allocation_ratio: float = 1.0
    ram_weight_multiplier: float = 1.0
    build_failure_weight_multiplier: float = 1000000.0
    # Soft (anti-)affinity: above ram_weight_multiplier, so a group's preference wins over the
    # RAM spread when the two disagree (Nova's default of 1.0 makes that a tie).
    soft_affinity_weight_multiplier: float = 2.0
    soft_anti_affinity_weight_multiplier: float = 2.0
    default_availability_zone: str = "nova"

    # Compute.
    compute_driver: str = "fake"
    network_allocate_retries: int = 0
    network_allocate_backoff_max: float = 30.0
    vif_plugging_timeout: float = 300.0
    vif_plugging_is_fatal: bool = True
    sync_power_state_interval: float = 600.0  # seconds between power-state sync passes; <= 0 disables
    sync_power_state_pool_size: int = 1000
    handle_virt_lifecycle_events: bool = True  # act on the driver's lifecycle events (else: periodic sync only)
    lifecycle_stopped_delay: float = 15.0  # seconds a "stopped" event is held (a later event drops it)
    shutdown_timeout: float = 60.0
    instance_build_timeout: float = 3600.0  # builds still BUILDING after this go to ERROR (0 = never; Nova: 0)
    task_state_timeout: float = 3600.0  # any other task state unchanged this long: ERROR (0 = never)
    resume_guests_state_on_host_boot: bool = False
    # The file holding this compute host's node UUID (Nova's <state_path>/compute_id): default
    # <state_dir>/compute_id (an all-in-one's extra fake hosts: compute_id.<host>). Compute
    # processes sharing one state directory each need their own (NEFOS_COMPUTE_ID_PATH).
    compute_id_path: str = ""
    # Seconds a shelved server keeps its host before it is offloaded: 0 at once (Nova's default),
    # -1 never (only shelveOffload does it). Other values: only shelveOffload, for now.
    shelved_offload_time: int = 0

    # External events: the network service tells the Compute API about ports.
    notify_nova_on_port_status_changes: bool = True  # network-vif-plugged / -unplugged
    notify_nova_on_port_data_changes: bool = True  # network-changed (fixed IPs, MAC) / network-vif-deleted
    send_events_interval: float = 2.0  # at most one batch per interval (the first at once); 0: no batching

    # libvirt driver (compute_driver = "libvirt"; nefos.host.virt.libvirt).
    virt_type: str = "auto"  # qemu (TCG), kvm, or auto: kvm only when a KVM guest really boots here
    connection_uri: str = "qemu:///system"
    instances_path: str = ""  # guests' disks and console logs; default: <state_dir>/instances
    # The network namespace libvirtd makes guests' taps in (a path such as /proc/<libvirtd pid>/ns/net),
    # when this compute host runs in a network namespace of its own: each tap is moved from there into
    # the compute host's namespace, where its L2 agent wires it, as soon as libvirt made it (the guest
    # still paused on a spawn). Empty: the compute host shares libvirtd's namespace (the usual case).
    libvirtd_netns: str = ""
    dhcp_agent_sync_interval: float = 5.0  # seconds between the DHCP agent's full resyncs (the backstop:
    # it syncs a network at once when the network service notifies a port/subnet/network change)
    # Where the DHCP agent keeps each network's dnsmasq files (Neutron's option); default:
    # <state_dir>/dhcp. dnsmasq runs as its own user, which must be able to reach it (else the agent
    # uses a directory under /run/nefos/dhcp).
    dhcp_confs: str = ""
    # The DHCP agent serves the metadata service at 169.254.169.254 on each of its networks (a proxy
    # in the network's DHCP namespace; the route to it given over DHCP, options 121/249). Neutron's
    # option; on by default, for routed networks too (their routers serve no metadata).
    enable_isolated_metadata: bool = True
    # The L3 agent (``nefos l3-agent``): routers in namespaces qrouter-<id>. Their gateways are plugged
    # into l3_external_bridge, a Linux bridge of Nefos's own that never holds a physical interface;
    # `nefos up` (with real guests) gives it the host address external_network_gateway on
    # external_network_cidr and creates the external network "public" there (DevStack's range).
    l3_agent_sync_interval: float = 5.0  # seconds between the L3 agent's full resyncs (the backstop)
    # Tenant networks across hosts (Neutron's ML2 options, docs/networking.md). The network service
    # gives each new tenant network a segment of the first of tenant_network_types: "vxlan" (a VNI
    # from vni_ranges, "min:max[,min:max...]") or "local" (one host). A network's MTU is the
    # underlay's (global_physnet_mtu) less the VXLAN overhead (50 bytes).
    tenant_network_types: str = "vxlan"
    vni_ranges: str = "1:16777215"
    global_physnet_mtu: int = Field(default=1500, ge=68, le=9216)
    # The L2 agent's underlay address ([vxlan] local_ip): its VXLAN tunnels start here. Unset: no
    # tunnels, the host's networks reach no other host (a single-host cloud).
    local_ip: str = ""
    l3_external_bridge: str = "br-ex-nefos"
    external_network_cidr: str = "172.24.4.0/24"
    external_network_gateway: str = "172.24.4.1"
    # The auto-allocated topology (GET /v2.0/auto-allocated-topology/{project_id}, Nova's
    # networks "auto"): Nefos has no subnet pools, so the project's subnet is the first
    # /auto_allocated_subnet_prefixlen of auto_allocated_subnet_pool overlapping none of the
    # project's subnets, the external networks' or another auto-allocated topology's (Neutron
    # takes it from the default subnet pool; DevStack's is 10.0.0.0/22-ish with /26 prefixes).
    auto_allocated_subnet_pool: str = "10.128.0.0/16"
    auto_allocated_subnet_prefixlen: int = 26

    # Metadata service (``nefos metadata``; Nova's nova-api-metadata) and config drives.
    metadata_listen: str = ""  # the address it binds; empty: bind_host
    metadata_listen_port: int = 8775
    # The key of the X-Instance-ID-Signature a metadata proxy sends (HMAC-SHA256 of the instance id);
    # empty: generated once into <state_dir>/metadata_proxy_shared_secret (0600).
    metadata_proxy_shared_secret: str = ""
    # Where the metadata proxies reach the service (Neutron's nova_metadata_host), on
    # metadata_listen_port; empty: metadata_listen, or loopback when the service binds every address.
    metadata_host: str = ""
    # Each network's metadata proxy (in the DHCP agent) bounds what one guest may hold, so that it
    # cannot delay another guest's metadata (haproxy's names, as in Neutron's proxy): the seconds a
    # client has to send its whole request head (timeout http-request; 408 after it, before the
    # request takes a slot toward the service), the connections open at once on the network
    # (maxconn; more are answered 503 at once) and from one source address (more: 429 at once).
    metadata_proxy_http_request_timeout: float = Field(default=10.0, gt=0)
    metadata_proxy_maxconn: int = Field(default=256, ge=1)
    metadata_proxy_maxconn_per_source: int = Field(default=10, ge=1)
    dhcp_domain: str = "novalocal"  # appended to an instance's hostname in its metadata (Nova's)
    force_config_drive: bool = False  # every guest gets a config drive, asked for or not (Nova's)
    # Nova's [api] enable_instance_password: a create, rebuild, rescue or evacuation (before 2.14)
    # answers adminPass (given, else generated), which the guest gets as meta_data.json's admin_pass.
    # False: none is answered, and only a password given in the request reaches the guest.
    enable_instance_password: bool = True

    # The web console (nefos.control.dashboard; Horizon's place): part of `nefos up` when dashboard_enabled,
    # `nefos dashboard` alone. It binds dashboard_host (empty: bind_host) on dashboard_port and signs
    # users in with the identity service; a session lasts as long as its token.
    dashboard_enabled: bool = True
    dashboard_host: str = ""
    dashboard_port: int = Field(default=8800, ge=1, le=65535)
    # Its sessions (in the process's memory): a user's sign-in beyond dashboard_max_sessions_per_user
    # ends that user's oldest session; a store of dashboard_max_sessions live sessions refuses a new
    # user's sign-in (503) rather than end someone else's.
    dashboard_max_sessions: int = Field(default=10000, ge=1)
    dashboard_max_sessions_per_user: int = Field(default=10, ge=1)
    # Its live pages' event streams (GET /events, each relayed to the Compute API's stream over a
    # connection pool of their own, apart from the pages' API calls): at most this many per
    # session (a browser opens at most six connections to a site: four streams leave two for
    # pages), per user and in all; beyond them 429.
    dashboard_max_streams_per_session: int = Field(default=4, ge=1)
    dashboard_max_streams_per_user: int = Field(default=8, ge=1)
    dashboard_max_streams: int = Field(default=200, ge=1)

    # Remote consoles (Nova's [vnc] and [consoleauth] options). The websocket proxy is Nova's
    # nova-novncproxy: `nefos novncproxy`, and part of `nefos up` when vnc_enabled.
    vnc_enabled: bool = True
    vnc_server_listen: str = "127.0.0.1"  # where guests' VNC servers listen (on their compute host)
    vnc_server_proxyclient_address: str = "127.0.0.1"  # where the proxy reaches them
    novncproxy_host: str = ""  # the address the proxy binds; empty: bind_host
    novncproxy_port: int = 6080
    # The URL handed to users, without the token; empty: http://<endpoint host>:<port>/vnc_auto.html
    novncproxy_base_url: str = ""
    novncproxy_web: str = "/usr/share/novnc"  # the noVNC client files the proxy serves (Nova's `web`)
    token_ttl: int = 600  # seconds a console token is valid (Nova's [consoleauth] token_ttl)
    # SPICE consoles (Nova's [spice] options; off by default, as Nova's: each guest would carry a
    # second display). Only spice-direct consoles are served (a SPICE-native proxy in front turns
    # the token into host and port); there is no HTML5 proxy.
    spice_enabled: bool = False
    spice_server_listen: str = "127.0.0.1"  # where guests' SPICE servers listen
    spice_server_proxyclient_address: str = "127.0.0.1"  # where a proxy reaches them
    spice_direct_proxy_base_url: str = "http://127.0.0.1:13002/nova"  # Nova's default

    # Fake driver.
    fake_spawn_delay: float = 0.0
    fake_power_delay: float = 0.0
    fake_vcpus: int = 32
    fake_memory_mb: int = 131072
    fake_local_gb: int = 2048
    fake_l2_agent: bool = True  # a fake L2 agent beside each fake compute host (reports plugged VIFs up)
    fake_l2_agent_delay: float = 0.05  # seconds from a VIF plug/unplug to the agent's report
    # A directory where each fake host keeps its guests and VIFs (<dir>/<host>.json), so they outlive
    # the compute process as a real hypervisor's do (a compute killed and restarted finds them).
    # Empty: in memory only.
    fake_hypervisor_dir: str = ""

    # Quotas (defaults per project; -1 is unlimited).
    quota_instances: int = 10
    quota_cores: int = 20
    quota_ram: int = 51200
    quota_key_pairs: int = 100
    quota_server_groups: int = 10
    quota_server_group_members: int = 10
    quota_metadata_items: int = 128
    quota_networks: int = 100
    quota_subnets: int = 100
    quota_ports: int = 500
    quota_security_groups: int = 10
    quota_security_group_rules: int = 100
    quota_routers: int = 10  # Neutron's defaults
    quota_floatingips: int = 50

    # Identity (Keystone v3 subset) and API authentication.
    # "keystone": every request but the version documents and getting a token needs a valid token.
    # "noauth": no tokens; X-Project-Id / X-User-Id / X-Roles are trusted as given (Nova's noauth2,
    # for development only): a request without them is refused, and a caller is admin only when its
    # X-Roles says so. Any other value refuses to start.
    auth_strategy: Literal["keystone", "noauth"] = "keystone"
    # noauth serves on loopback addresses only, unless the operator also sets this.
    noauth_allow_remote: bool = False
    # Request bodies larger than this (bytes) are refused with 413 by every API before being
    # read whole (Nova's and Keystone's option and default); image data uploads have image_size_cap.
    max_request_body_size: int = 114688
    token_expiration: int = 3600  # seconds
    fernet_key: str = ""  # comma-separated Fernet keys (first one signs); default: <state_dir>/fernet.key
    revocation_cache_time: float = 5.0  # seconds a "not revoked" answer is reused per token
    endpoint_host: str = ""  # host in catalog URLs; default: bind_host (or `host` when binding a wildcard)
    region_name: str = "RegionOne"
    password_hash_rounds: int = 15  # scrypt cost, log2(N)
    # Failed logins in a row (within lockout_duration) after which a user is locked out for
    # lockout_duration seconds (Keystone's options; 6 as its PCI-DSS guidance); 0 disables lockout.
    # A user with Keystone's option ignore_lockout_failure_attempts (the services' account) is exempt.
    lockout_failure_attempts: int = 6
    lockout_duration: float = 1800.0
    admin_password: str = ""  # bootstrap passwords; empty: generated once into <state_dir>/passwords.yaml
    demo_password: str = ""
    service_password: str = ""
    # Nova's [glance] api_servers: the Image API URLs a compute host uses (the first one; e.g.
    # http://controller:9292); empty: the catalog's image endpoint.
    api_servers: str = ""
    # Policy overrides (YAML: rule name -> oslo.policy check string); empty: <state_dir>/policy.yaml if it exists.
    policy_file: str = ""

    extra: dict[str, str] = Field(default_factory=dict, exclude=True)

    @field_validator("tenant_network_types")
    @classmethod
    def _network_types(cls, value: str) -> str:
        types = [t.strip() for t in value.split(",") if t.strip()]
        if not types or any(t not in ("vxlan", "local") for t in types):
            raise ValueError("a comma-separated list of vxlan and local")
        return ",".join(types)

    @field_validator("vni_ranges")
    @classmethod
    def _vni_ranges(cls, value: str) -> str:
        parse_vni_ranges(value)
        return value

    @field_validator("local_ip")
    @classmethod
    def _local_ip(cls, value: str) -> str:
        if value:
            ipaddress.ip_address(value)
        return value

    @field_validator("enabled_apis", mode="before")
    @classmethod
    def _api_names(cls, value):
        names = [n.strip() for n in value.split(",")] if isinstance(value, str) else list(value)
        names = [n for n in names if n]
        unknown = sorted(set(names) - set(KNOWN_APIS))
        if unknown:
            raise ValueError(f"unknown API {', '.join(unknown)}; known: {', '.join(KNOWN_APIS)}")
        return list(dict.fromkeys(names))

    @field_validator("upgrade_levels")
    @classmethod
    def _upgrade_levels(cls, value: dict[str, str]) -> dict[str, str]:
        from nefos.bus.interfaces import BY_TOPIC, RELEASES
        from nefos.bus.versioning import AUTO, parse
        levels = {}
        for topic, level in value.items():
            level = str(level).strip()
            if topic not in BY_TOPIC:
                raise ValueError(f"[upgrade_levels] {topic}: no such topic; known: {', '.join(BY_TOPIC)}")
            if level and level != AUTO and level not in RELEASES:
                try:
                    parse(level)
                except ValueError:
                    raise ValueError(f"[upgrade_levels] {topic} = {level}: a version (1.0), a release "
                                     f"({', '.join(RELEASES)}) or auto") from None
            if level:
                levels[topic] = level
        return levels

    @property
    def sqlite_path(self) -> Path:
        """The default database's file (used when database_url is empty)."""
        return Path(self.state_dir).resolve() / "nefos.sqlite"

    @property
    def effective_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite+aiosqlite:///{self.sqlite_path}"


ENV_PREFIX = "NEFOS_"
UPGRADE_LEVELS = "upgrade_levels"


def _describe(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        name = ".".join(str(p) for p in item["loc"]) or "configuration"
        got = item.get("input")
        shown = f" (got {got!r})" if not isinstance(got, dict) else ""
        lines.append(f"{name}: {item['msg']}{shown}")
    return "invalid configuration: " + "; ".join(lines)


def load_config(path: str | os.PathLike | None = None, **overrides) -> Config:
    """Build the configuration: defaults < INI file < NEFOS_* environment < overrides."""
    values: dict[str, object] = {}
    if path:
        parser = configparser.ConfigParser(interpolation=None)
        if not parser.read(path):
            raise FileNotFoundError(f"config file {path} not found")
        for section in [parser.defaults(), *[parser[s] for s in parser.sections() if s != UPGRADE_LEVELS]]:
            for key, value in section.items():
                values[key] = value
        if parser.has_section(UPGRADE_LEVELS):
            values[UPGRADE_LEVELS] = {key: value for key, value in parser.items(UPGRADE_LEVELS)
                                      if key not in parser.defaults()}
    fields = Config.model_fields
    levels_prefix = f"{ENV_PREFIX}{UPGRADE_LEVELS.upper()}_"
    for key, value in os.environ.items():
        if key.startswith(levels_prefix):
            from nefos.bus.interfaces import BY_TOPIC
            name = key[len(levels_prefix):].lower()
            topic = next((t for t in BY_TOPIC if t.replace("-", "_") == name), name)
            values[UPGRADE_LEVELS] = {**values.get(UPGRADE_LEVELS, {}), topic: value}
        elif key.startswith(ENV_PREFIX):
            name = key[len(ENV_PREFIX):].lower()
            if name in fields:
                values[name] = value
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return Config(**values)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_serving(cfg: Config) -> None:
    """Refuse to serve an API without authentication beyond this machine unless asked twice."""
    if cfg.auth_strategy == "noauth" and not cfg.noauth_allow_remote and not is_loopback(cfg.bind_host):
        raise ConfigError(
            f"auth_strategy = noauth trusts whatever identity a request claims, so it serves on "
            f"loopback addresses only; bind_host = {cfg.bind_host} is not one. Use bind_host = "
            f"127.0.0.1, or auth_strategy = keystone, or set noauth_allow_remote = true as well "
            f"if anyone who can reach this address may act as admin.")
