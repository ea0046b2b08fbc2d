"""Security groups and anti-spoofing on the taps of one host (Neutron's iptables firewall driver
and the Linux-bridge agent's ARP protection, reduced).

Bridged traffic goes through the ``FORWARD`` chains of iptables and ip6tables
(``br_netfilter``), where ``physdev`` tells the tap it leaves by (to the guest:
ingress) or arrives from (from the guest: egress). Each agent owns a set of
chains whose names start with its own prefix (two clouds on one machine never
touch each other's), the same in both families:

* ``<P>-FWD``, jumped to from ``FORWARD``: for each protected port, traffic
  out of its tap -> ``<P>-I<port>`` and traffic in from its tap ->
  ``<P>-O<port>``; both return when allowed (a packet between two guests
  passes the sender's egress and the receiver's ingress); then it is accepted.
* ``<P>-I<port>`` (ingress): established/related, DHCP replies (IPv6: also the
  ICMPv6 that IPv6 needs: router advertisements, neighbour discovery, MLD), one
  rule per ingress security group rule of that ethertype (remote prefix, or the
  addresses of the remote group's ports), then DROP.
* ``<P>-O<port>`` (egress): DHCP requests, anti-spoofing (``<P>-S<port>``: the
  port's MAC and fixed IPs only; IPv6 also its link-local address, and ``::``
  for duplicate address detection), no DHCP server replies and (IPv6) no router
  advertisements or redirects from the guest, nor neighbour advertisements for
  an address that is not its own (the IPv6 form of a forged ARP reply; Neutron's
  Open vSwitch agent checks their target the same way), established/related,
  the egress rules, DROP.

Below IP, ebtables (``<P>-FWD`` and ``<P>-E<port>`` in its ``filter`` table)
drops every frame from a protected tap whose source MAC is not the port's, every
ARP packet whose sender MAC or IPv4 address is not the port's (an ARP probe, a
request from 0.0.0.0, excepted), and every frame that is neither IPv4, IPv6 nor
ARP.

Ports with ``port_security_enabled = False`` are not filtered. A tap whose port
is gone (the server was deleted while its host was down, and its address may
be handed out again) is fenced: nothing goes in or out of it. Every rewrite is
one transaction per table (``iptables-restore``, ``ip6tables-restore`` and
``ebtables-restore``, each ``--noflush``): no frame passes unchecked while the
rules change. A rule that goes away also ends the tracked connections it let in
(``conntrack -D``), as Neutron's firewall does: established traffic passes before
any rule is read.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import ipaddress
import logging
from dataclasses import dataclass, field

LOG = logging.getLogger(__name__)

PROTOCOL_NUMBERS = {"tcp": "tcp", "6": "tcp", "udp": "udp", "17": "udp", "icmp": "icmp", "1": "icmp",
                    "icmpv6": "icmpv6", "ipv6-icmp": "icmpv6", "58": "icmpv6"}
# ICMPv6 a guest must send and receive for IPv6 to work (Neutron's firewall allows these).
ICMPV6_NEEDED = {"egress": (130, 131, 132, 133, 135, 136, 143),  # MLD, router solicitation, NS, NA
                 "ingress": (130, 131, 132, 134, 135, 136, 143)}  # MLD, router advertisement, NS, NA
ICMPV6_FORBIDDEN_FROM_GUEST = (134, 137)  # router advertisements and redirects
NEIGHBOUR_ADVERTISEMENT = 136
# Where a neighbour advertisement's target address lies, from the IPv6 header: the 40-byte header,
# then type, code, checksum and flags (8 bytes). An extension header moves it: such an advertisement
# matches no allowed target and is dropped.
NA_TARGET_OFFSET = 48


@dataclass
class PortFilter:
    port_id: str
    tap: str
    mac: str
    ips: list[str]  # fixed IPs (and allowed address pairs), both versions
    rules: list[dict] = field(default_factory=list)  # security group rules, remote groups expanded

    @classmethod
    def from_dict(cls, d: dict) -> "PortFilter":
        """From the network service's ``security_group_info_for_host``."""
        return cls(d["port_id"], d["tap"], d["mac"], list(d["ips"]), [dict(r) for r in d["rules"]])

    def addresses(self, version: int) -> list[str]:
        return [ip for ip in self.ips if ipaddress.ip_address(ip).version == version]

    @property
    def link_local(self) -> str:
        """The IPv6 link-local address the guest derives from its MAC (modified EUI-64)."""
        octets = [int(x, 16) for x in self.mac.split(":")]
        octets[0] ^= 0x02
        eui = octets[:3] + [0xFF, 0xFE] + octets[3:]
        return str(ipaddress.IPv6Address(bytes([0xFE, 0x80] + [0] * 6 + eui)))


def chain_prefix(key: str) -> str:
    return "NF" + hashlib.sha1(key.encode()).hexdigest()[:6]


def _match(rule: dict, version: int) -> list[str] | None:
    """ip(6)tables match arguments for a rule's protocol and ports (None: not of this family, or a
    protocol we cannot express)."""
    proto = rule["protocol"]
    if proto in (None, "", "any"):
        return []
    name = PROTOCOL_NUMBERS.get(str(proto).lower())
    if name is None:
        if str(proto).isdigit():
            return ["-p", str(proto)]
        return None
    if (name == "icmp" and version == 6) or (name == "icmpv6" and version == 4):
        name = "icmpv6" if version == 6 else "icmp"  # Neutron: "icmp" means the family's ICMP
    args = ["-p", "ipv6-icmp" if name == "icmpv6" else name]
    lo, hi = rule["min"], rule["max"]
    if name in ("tcp", "udp") and lo is not None:
        args += ["--dport", str(lo) if hi in (None, lo) else f"{lo}:{hi}"]
    elif name == "icmp" and lo is not None:
        args += ["--icmp-type", str(lo) if hi is None else f"{lo}/{hi}"]
    elif name == "icmpv6" and lo is not None:
        args += ["--icmpv6-type", str(lo) if hi is None else f"{lo}/{hi}"]
    return args


def _na_target_is(ip: str) -> str:
    """A ``u32`` test: the neighbour advertisement's target is ``ip``."""
    words = ipaddress.IPv6Address(ip).packed
    return '"' + "&&".join(f"{NA_TARGET_OFFSET + 4 * i}=0x{words[4 * i:4 * i + 4].hex()}" for i in range(4)) + '"'


def ruleset(prefix: str, filters: list[PortFilter], version: int = 4) -> tuple[list[str], list[str]]:
    """(chain names, ip(6)tables-restore lines for the filter table) of the whole set of one family."""
    fwd = f"{prefix}-FWD"
    chains = [fwd]
    lines: list[str] = []
    jumps: list[str] = []
    accepts: list[str] = []
    host = "128" if version == 6 else "32"
    dhcp_client, dhcp_server = ("546", "547") if version == 6 else ("68", "67")
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
                  f"-A {ing} -p udp --sport {dhcp_server} --dport {dhcp_client} -j RETURN"]
        if version == 6:
            lines += [f"-A {ing} -p ipv6-icmp --icmpv6-type {t} -j RETURN" for t in ICMPV6_NEEDED["ingress"]]
        for rule in pf.rules:
            if rule["direction"] != "ingress" or rule["version"] != version:
                continue
            match = _match(rule, version)
            if match is None:
                continue
            for remote in rule["remotes"]:
                src = ["-s", remote] if remote else []
                lines.append(" ".join([f"-A {ing}", *src, *match, "-j RETURN"]))
        lines += [f"-A {ing} -m conntrack --ctstate INVALID -j DROP", f"-A {ing} -j DROP"]
        # anti-spoofing
        sources = pf.addresses(version) + ([pf.link_local] if version == 6 else [])
        for ip in sources:
            lines.append(f"-A {spoof} -s {ip}/{host} -m mac --mac-source {pf.mac} -j RETURN")
        lines.append(f"-A {spoof} -j DROP")
        # egress
        if version == 4:
            lines += [f"-A {egr} -s 0.0.0.0/32 -d 255.255.255.255/32 -p udp --sport 68 --dport 67 -j RETURN",
                      f"-A {egr} -m mac --mac-source {pf.mac} -p udp --sport 68 --dport 67 -j RETURN"]
        else:
            # Duplicate address detection and MLD reports come from "::" before an address is set.
            lines += [f"-A {egr} -s ::/128 -m mac --mac-source {pf.mac} -p ipv6-icmp --icmpv6-type {t} -j RETURN"
                      for t in (131, 135, 143)]
        lines += [f"-A {egr} -j {spoof}",
                  f"-A {egr} -p udp --sport {dhcp_server} -j DROP"]  # no DHCP server in a guest
        if version == 6:
            lines += [f"-A {egr} -p ipv6-icmp --icmpv6-type {t} -j DROP" for t in ICMPV6_FORBIDDEN_FROM_GUEST]
            lines += [f"-A {egr} -p ipv6-icmp --icmpv6-type {NEIGHBOUR_ADVERTISEMENT} -m u32 --u32 "
                      f"{_na_target_is(ip)} -j RETURN" for ip in sources]
            lines.append(f"-A {egr} -p ipv6-icmp --icmpv6-type {NEIGHBOUR_ADVERTISEMENT} -j DROP")
            lines += [f"-A {egr} -p ipv6-icmp --icmpv6-type {t} -j RETURN" for t in ICMPV6_NEEDED["egress"]]
        lines += [f"-A {egr} -p udp --sport {dhcp_client} --dport {dhcp_server} -j RETURN",
                  f"-A {egr} -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN"]
        for rule in pf.rules:
            if rule["direction"] != "egress" or rule["version"] != version:
                continue
            match = _match(rule, version)
            if match is None:
                continue
            for remote in rule["remotes"]:
                dst = ["-d", remote] if remote else []
                lines.append(" ".join([f"-A {egr}", *dst, *match, "-j RETURN"]))
        lines += [f"-A {egr} -m conntrack --ctstate INVALID -j DROP", f"-A {egr} -j DROP"]
    return chains, jumps + accepts + lines


def l2_ruleset(prefix: str, filters: list[PortFilter],
               fenced: tuple[str, ...] = ()) -> tuple[list[str], list[list[str]]]:
    """(chain names, ebtables rules as argument lists) of the link-layer anti-spoofing; the
    ``fenced`` taps (a guest's whose port is gone) send and receive nothing."""
    fwd = f"{prefix}-FWD"
    chains, rules = [fwd], []
    for tap in sorted(fenced):
        rules += [["-A", fwd, "-i", tap, "-j", "DROP"], ["-A", fwd, "-o", tap, "-j", "DROP"]]
    for pf in filters:
        chain = f"{prefix}-E{pf.port_id.replace('-', '')[:16]}"
        chains.append(chain)
        rules.append(["-A", fwd, "-i", pf.tap, "-j", chain])
        rules.append(["-A", chain, "-s", "!", pf.mac, "-j", "DROP"])
        rules.append(["-A", chain, "-p", "ARP", "--arp-mac-src", "!", pf.mac, "-j", "DROP"])
        rules += [["-A", chain, "-p", "ARP", "--arp-ip-src", ip, "-j", "RETURN"] for ip in pf.addresses(4)]
        # An ARP probe (RFC 5227, sent from 0.0.0.0 before an address is taken) claims nothing.
        rules.append(["-A", chain, "-p", "ARP", "--arp-op", "Request", "--arp-ip-src", "0.0.0.0", "-j", "RETURN"])
        rules.append(["-A", chain, "-p", "ARP", "-j", "DROP"])
        rules += [["-A", chain, "-p", proto, "-j", "RETURN"] for proto in ("IPv4", "IPv6")]
        rules.append(["-A", chain, "-j", "DROP"])
    return chains, rules


def _rule_keys(pf: PortFilter) -> set[tuple]:
    return {(r["direction"], r["version"], r["protocol"], r["min"], r["max"], remote)
            for r in pf.rules for remote in r["remotes"]}


def revoked_flows(before: list[PortFilter], after: list[PortFilter]) -> list[list[str]]:
    """``conntrack -D`` arguments for the tracked flows a rule that went away had let in.

    Established and related traffic passes before any rule is read, so without this a connection
    a removed rule allowed would live on (Neutron's firewall deletes these entries the same way).
    Deleting a flow a remaining rule allows costs nothing: its next packet is tracked anew and
    passes that rule. Port ranges and protocols ``conntrack`` cannot select by are widened to the
    whole protocol, or to every flow of the address.
    """
    old = {pf.port_id: pf for pf in before}
    argv: list[list[str]] = []
    for pf in after:
        if pf.port_id not in old:
            continue
        for direction, version, proto, lo, hi, remote in sorted(
                _rule_keys(old[pf.port_id]) - _rule_keys(pf), key=repr):
            name = PROTOCOL_NUMBERS.get(str(proto).lower()) if proto not in (None, "", "any") else None
            if name in ("icmp", "icmpv6"):
                name = "icmpv6" if version == 6 else "icmp"
            select = ["-p", name] if name else []
            if name in ("tcp", "udp") and lo is not None and hi in (None, lo):
                select += ["--dport", str(lo)]
            mine, theirs = ("-d", "-s") if direction == "ingress" else ("-s", "-d")
            for ip in pf.addresses(version):
                argv.append(["-D", "-f", "ipv6" if version == 6 else "ipv4", mine, ip,
                             *([theirs, remote] if remote else []), *select])
    return argv


async def _run(*argv: str, stdin: str | None = None, check: bool = True) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE if stdin is not None else None,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate(stdin.encode() if stdin is not None else None)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {err.decode(errors='replace').strip()}")
    return proc.returncode, out.decode(errors="replace")


FAMILIES = {4: ("iptables", "iptables-save", "iptables-restore"),
            6: ("ip6tables", "ip6tables-save", "ip6tables-restore")}


class Firewall:
    """The host's security-group and anti-spoofing chains of one agent (``key`` makes its chain
    names its own)."""

    def __init__(self, key: str):
        self.prefix = chain_prefix(key)
        self._chains: dict[int, set[str]] = {4: set(), 6: set()}
        self._applied: str | None = None
        self._filters: list[PortFilter] = []
        self._warned_no_conntrack = False

    async def existing_chains(self, version: int = 4) -> set[str]:
        _, out = await _run(FAMILIES[version][1], "-t", "filter")
        return {line[1:].split()[0] for line in out.splitlines()
                if line.startswith(":") and line[1:].startswith(self.prefix + "-")}

    async def _existing_l2_chains(self) -> set[str]:
        _, out = await _run("ebtables", "-t", "filter", "-L", check=False)
        return {line.split()[2].rstrip(",") for line in out.splitlines()
                if line.startswith("Bridge chain: ") and line.split()[2].startswith(self.prefix + "-")}

    async def apply(self, filters: list[PortFilter], fenced: tuple[str, ...] = ()) -> bool:
        """Make the chains say ``filters`` (and cut the ``fenced`` taps off); False when nothing
        changed."""
        sets = {v: ruleset(self.prefix, filters, v) for v in (4, 6)}
        l2_chains, l2_rules = l2_ruleset(self.prefix, filters, fenced)
        text = "\n".join(["\n".join(sets[4][1]), "\n".join(sets[6][1]), repr(l2_rules)])
        if text == self._applied:
            return False
        # Link layer first: a tap is never on the bridge with its frames unchecked.
        await self._apply_l2(l2_chains, l2_rules)
        for version, (chains, lines) in sets.items():
            tool, _save, restore_tool = FAMILIES[version]
            stale = (self._chains[version] or await self.existing_chains(version)) - set(chains)
            restore = ["*filter"] + [f":{c} - [0:0]" for c in chains + sorted(stale)] + lines
            restore += [f"-X {c}" for c in sorted(stale)] + ["COMMIT", ""]
            await _run(restore_tool, "--noflush", stdin="\n".join(restore))
            fwd = f"{self.prefix}-FWD"
            if (await _run(tool, "-C", "FORWARD", "-j", fwd, check=False))[0] != 0:
                await _run(tool, "-I", "FORWARD", "1", "-j", fwd)
            self._chains[version] = set(chains)
        self._applied = text
        await self._forget_revoked_flows(self._filters, filters)
        self._filters = copy.deepcopy(filters)
        LOG.info("security groups: %d port(s) filtered (%d IPv4, %d IPv6, %d link-layer rules, chains %s-*)",
                 len(filters), len(sets[4][1]), len(sets[6][1]), len(l2_rules), self.prefix)
        return True

    async def _forget_revoked_flows(self, before: list[PortFilter], after: list[PortFilter]) -> None:
        for argv in revoked_flows(before, after):
            try:
                code, _ = await _run("conntrack", *argv, check=False)
            except FileNotFoundError:
                if not self._warned_no_conntrack:
                    LOG.error("conntrack is not installed: connections a removed security group rule "
                              "allowed stay open until they end (install the conntrack package)")
                    self._warned_no_conntrack = True
                return
            if code not in (0, 1):
                LOG.warning("conntrack %s exited with %d", " ".join(argv), code)

    async def _apply_l2(self, chains: list[str], rules: list[list[str]]) -> None:
        # One ebtables-restore transaction: declaring a chain flushes it, so rewriting every
        # chain in place never leaves a moment in which a port's frames pass unchecked.
        stale = sorted(await self._existing_l2_chains() - set(chains))
        restore = ["*filter"] + [f":{c} RETURN" for c in chains] + [" ".join(r) for r in rules]
        restore += [line for c in stale for line in (f"-F {c}", f"-X {c}")]
        await _run("ebtables-restore", "--noflush", stdin="\n".join(restore) + "\n")
        fwd = f"{self.prefix}-FWD"
        # Once in FORWARD (ebtables has no working -C: read the chain instead).
        _, listing = await _run("ebtables", "-t", "filter", "-L", "FORWARD")
        jumps = sum(1 for line in listing.splitlines() if line.split() == ["-j", fwd])
        if jumps == 0:
            await _run("ebtables", "-t", "filter", "-I", "FORWARD", "1", "-j", fwd)
        for _ in range(jumps - 1):
            await _run("ebtables", "-t", "filter", "-D", "FORWARD", "-j", fwd)

    async def remove(self) -> None:
        """Take every chain of this agent away (the agent stops)."""
        fwd = f"{self.prefix}-FWD"
        for version, (tool, _save, restore_tool) in FAMILIES.items():
            while (await _run(tool, "-D", "FORWARD", "-j", fwd, check=False))[0] == 0:
                pass
            chains = self._chains[version] | await self.existing_chains(version)
            if chains:
                restore = ["*filter"] + [f":{c} - [0:0]" for c in sorted(chains)]
                restore += [f"-X {c}" for c in sorted(chains)] + ["COMMIT", ""]
                await _run(restore_tool, "--noflush", stdin="\n".join(restore), check=False)
            self._chains[version] = set()
        while (await _run("ebtables", "-t", "filter", "-D", "FORWARD", "-j", fwd, check=False))[0] == 0:
            pass
        chains = await self._existing_l2_chains()
        if chains:
            restore = ["*filter"] + [f"-F {c}" for c in sorted(chains)] + [f"-X {c}" for c in sorted(chains)]
            await _run("ebtables-restore", "--noflush", stdin="\n".join(restore) + "\n", check=False)
        self._applied = None
        self._filters = []
