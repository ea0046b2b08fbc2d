"""Security groups on the taps of one host, with iptables (Neutron's iptables firewall driver, reduced).

Bridged traffic goes through the ``FORWARD`` chain (``br_netfilter``), where
``physdev`` tells the tap it leaves by (to the guest: ingress) or arrives
from (from the guest: egress). Each agent owns a set of chains whose names
start with its own prefix (two clouds on one machine never touch each other's):

* ``<P>-FWD``, jumped to from ``FORWARD``: for each protected port, traffic
  out of its tap -> ``<P>-I<port>`` and traffic in from its tap ->
  ``<P>-O<port>``; both return when allowed (a packet between two guests
  passes the sender's egress and the receiver's ingress); then it is accepted.
* ``<P>-I<port>`` (ingress): established/related, DHCP replies, one rule per
  ingress security group rule (remote prefix, or the addresses of the remote
  group's ports), then DROP.
* ``<P>-O<port>`` (egress): DHCP requests, anti-spoofing (``<P>-S<port>``: the
  port's MAC and fixed IPs only), established/related, the egress rules, DROP.

Ports with ``port_security_enabled = False`` are not filtered. IPv4 only.
The whole set is rewritten atomically with ``iptables-restore --noflush``.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import logging
from dataclasses import dataclass, field

from sqlalchemy import select

from nefos.db.models import IPAllocation, Port, PortSecurityGroup, SecurityGroupRule

LOG = logging.getLogger(__name__)

PROTOCOL_NUMBERS = {"tcp": "tcp", "6": "tcp", "udp": "udp", "17": "udp", "icmp": "icmp", "1": "icmp"}


@dataclass
class PortFilter:
    port_id: str
    tap: str
    mac: str
    ips: list[str]
    rules: list[dict] = field(default_factory=list)  # security group rules, remote groups expanded


def chain_prefix(key: str) -> str:
    return "NF" + hashlib.sha1(key.encode()).hexdigest()[:6]


async def load_filters(db, host: str) -> list[PortFilter]:
    """The protected compute ports bound to ``host``, with their rules (remote groups as addresses)."""
    async with db.reader() as s:
        ports = (await s.execute(select(Port).where(
            Port.binding_host_id == host, Port.device_owner.like("compute:%"),
            Port.port_security_enabled.is_(True)))).scalars().all()
        if not ports:
            return []
        ids = [p.id for p in ports]
        ips: dict[str, list[str]] = {}
        for port_id, ip in (await s.execute(select(IPAllocation.port_id, IPAllocation.ip_address).where(
                IPAllocation.port_id.in_(ids)))).all():
            ips.setdefault(port_id, []).append(ip)
        groups: dict[str, list[str]] = {}
        for port_id, sg in (await s.execute(select(PortSecurityGroup.port_id, PortSecurityGroup.security_group_id)
                                            .where(PortSecurityGroup.port_id.in_(ids)))).all():
            groups.setdefault(port_id, []).append(sg)
        all_groups = {g for gs in groups.values() for g in gs}
        rules: dict[str, list[SecurityGroupRule]] = {}
        if all_groups:
            for rule in (await s.execute(select(SecurityGroupRule).where(
                    SecurityGroupRule.security_group_id.in_(all_groups)))).scalars():
                rules.setdefault(rule.security_group_id, []).append(rule)
        remote_ids = {r.remote_group_id for rs in rules.values() for r in rs if r.remote_group_id}
        members: dict[str, set[str]] = {}
        if remote_ids:
            for sg, ip in (await s.execute(select(PortSecurityGroup.security_group_id, IPAllocation.ip_address)
                                           .join(IPAllocation, IPAllocation.port_id == PortSecurityGroup.port_id)
                                           .where(PortSecurityGroup.security_group_id.in_(remote_ids)))).all():
                members.setdefault(sg, set()).add(ip)
    out = []
    for p in sorted(ports, key=lambda p: p.id):
        v4 = sorted(ip for ip in ips.get(p.id, []) if ipaddress.ip_address(ip).version == 4)
        pf = PortFilter(p.id, "tap" + p.id[:11], p.mac_address.lower(), v4)
        for sg in sorted(groups.get(p.id, [])):
            for r in sorted(rules.get(sg, []), key=lambda r: r.id):
                if r.ethertype != "IPv4":
                    continue
                if r.remote_group_id:
                    remotes = sorted(ip for ip in members.get(r.remote_group_id, ())
                                     if ipaddress.ip_address(ip).version == 4)
                    if not remotes:
                        continue
                else:
                    remotes = [r.remote_ip_prefix] if r.remote_ip_prefix else [None]
                pf.rules.append({"direction": r.direction, "protocol": r.protocol,
                                 "min": r.port_range_min, "max": r.port_range_max, "remotes": remotes})
        out.append(pf)
    return out


def _match(rule: dict) -> list[str] | None:
    """iptables match arguments for a rule's protocol and ports (None: a protocol we cannot express)."""
    proto = rule["protocol"]
    if proto in (None, "", "any"):
        return []
    name = PROTOCOL_NUMBERS.get(str(proto).lower())
    if name is None:
        if str(proto).isdigit():
            return ["-p", str(proto)]
        return None
    args = ["-p", name]
    lo, hi = rule["min"], rule["max"]
    if name in ("tcp", "udp") and lo is not None:
        args += ["--dport", str(lo) if hi in (None, lo) else f"{lo}:{hi}"]
    elif name == "icmp" and lo is not None:
        args += ["--icmp-type", str(lo) if hi is None else f"{lo}/{hi}"]
    return args


def ruleset(prefix: str, filters: list[PortFilter]) -> tuple[list[str], list[str]]:
    """(chain names, iptables-restore lines for the filter table) of the whole set."""
    fwd = f"{prefix}-FWD"
    chains = [fwd]
    lines: list[str] = []
    jumps: list[str] = []
    accepts: list[str] = []
    for pf in filters:
        short = pf.port_id.replace("-", "")[:16]
        ing, egr, spoof = f"{prefix}-I{short}", f"{prefix}-O{short}", f"{prefix}-S{short}"
        chains += [ing, egr, spoof]
        out_tap = f"-m physdev --physdev-out {pf.tap} --physdev-is-bridged"
        in_tap = f"-m physdev --physdev-in {pf.tap} --physdev-is-bridged"
        jumps += [f"-A {fwd} {out_tap} -j {ing}", f"-A {fwd} {in_tap} -j {egr}"]
        accepts += [f"-A {fwd} {out_tap} -j ACCEPT", f"-A {fwd} {in_tap} -j ACCEPT"]
        # ingress
        lines += [f"-A {ing} -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN",
                  f"-A {ing} -p udp --sport 67 --dport 68 -j RETURN"]
        for rule in pf.rules:
            if rule["direction"] != "ingress":
                continue
            match = _match(rule)
            if match is None:
                continue
            for remote in rule["remotes"]:
                src = ["-s", remote] if remote else []
                lines.append(" ".join([f"-A {ing}", *src, *match, "-j RETURN"]))
        lines += [f"-A {ing} -m conntrack --ctstate INVALID -j DROP", f"-A {ing} -j DROP"]
        # anti-spoofing
        for ip in pf.ips:
            lines.append(f"-A {spoof} -s {ip}/32 -m mac --mac-source {pf.mac} -j RETURN")
        lines.append(f"-A {spoof} -j DROP")
        # egress
        lines += [f"-A {egr} -s 0.0.0.0/32 -d 255.255.255.255/32 -p udp --sport 68 --dport 67 -j RETURN",
                  f"-A {egr} -m mac --mac-source {pf.mac} -p udp --sport 68 --dport 67 -j RETURN",
                  f"-A {egr} -j {spoof}",
                  f"-A {egr} -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN"]
        for rule in pf.rules:
            if rule["direction"] != "egress":
                continue
            match = _match(rule)
            if match is None:
                continue
            for remote in rule["remotes"]:
                dst = ["-d", remote] if remote else []
                lines.append(" ".join([f"-A {egr}", *dst, *match, "-j RETURN"]))
        lines += [f"-A {egr} -m conntrack --ctstate INVALID -j DROP", f"-A {egr} -j DROP"]
    return chains, jumps + accepts + lines


async def _run(*argv: str, stdin: str | None = None, check: bool = True) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE if stdin is not None else None,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate(stdin.encode() if stdin is not None else None)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {err.decode(errors='replace').strip()}")
    return proc.returncode, out.decode(errors="replace")


class Firewall:
    """The host's security-group chains of one agent (``key`` makes its chain names its own)."""

    def __init__(self, key: str):
        self.prefix = chain_prefix(key)
        self._chains: set[str] = set()
        self._applied: str | None = None

    async def existing_chains(self) -> set[str]:
        _, out = await _run("iptables-save", "-t", "filter")
        return {line[1:].split()[0] for line in out.splitlines()
                if line.startswith(":") and line[1:].startswith(self.prefix + "-")}

    async def apply(self, filters: list[PortFilter]) -> bool:
        """Make the chains say ``filters``; False when nothing changed."""
        chains, lines = ruleset(self.prefix, filters)
        text = "\n".join(lines)
        if text == self._applied:
            return False
        stale = (self._chains or await self.existing_chains()) - set(chains)
        restore = ["*filter"] + [f":{c} - [0:0]" for c in chains + sorted(stale)] + lines
        restore += [f"-X {c}" for c in sorted(stale)] + ["COMMIT", ""]
        await _run("iptables-restore", "--noflush", stdin="\n".join(restore))
        fwd = f"{self.prefix}-FWD"
        if (await _run("iptables", "-C", "FORWARD", "-j", fwd, check=False))[0] != 0:
            await _run("iptables", "-I", "FORWARD", "1", "-j", fwd)
        self._chains = set(chains)
        self._applied = text
        LOG.info("security groups: %d port(s) filtered (%d rules, chains %s-*)", len(filters), len(lines),
                 self.prefix)
        return True

    async def remove(self) -> None:
        """Take every chain of this agent away (the agent stops)."""
        fwd = f"{self.prefix}-FWD"
        while (await _run("iptables", "-D", "FORWARD", "-j", fwd, check=False))[0] == 0:
            pass
        chains = self._chains | await self.existing_chains()
        if chains:
            restore = ["*filter"] + [f":{c} - [0:0]" for c in sorted(chains)]
            restore += [f"-X {c}" for c in sorted(chains)] + ["COMMIT", ""]
            await _run("iptables-restore", "--noflush", stdin="\n".join(restore), check=False)
        self._chains = set()
        self._applied = None
