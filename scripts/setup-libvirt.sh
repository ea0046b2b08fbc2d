#!/usr/bin/env bash
# Make this Debian 12 machine ready to run real guests; as root, idempotent.
#
#  * installs libvirt + QEMU and what the guest image is built from, when missing:
#    libvirt-daemon-system qemu-system-x86 qemu-utils (the hypervisor), libvirt-dev
#    pkg-config gcc (to build libvirt-python), linux-image-cloud-amd64 busybox-static
#    dropbear-bin (the tiny guest and its SSH server: nothing is downloaded from elsewhere),
#    openssh-client (the real-guest tests log into it), dnsmasq-base iproute2 (DHCP
#    for the guests' networks: nefos.agents.dhcp_agent), iptables (iptables, ip6tables and
#    ebtables: the L2 agent's security groups and anti-spoofing, nefos.agents.firewall),
#    conntrack (a removed security group rule also ends the connections it let in),
#    libc6-dev (static libc: the real-guest anti-spoofing test compiles a raw-frame sender),
#    nftables (nft: NAT inside the routers' namespaces, nefos.agents.l3_agent);
#  * makes /dev/kvm access consistent (0666) BEFORE libvirtd starts: when root can
#    open it but the qemu user cannot, libvirt re-probes QEMU on every domain start
#    (~44 s each, see shared/notes/hypervisor-on-these-machines.md);
#  * keeps QEMU off root: comments out `user`/`group = "root"`, `dynamic_ownership = 0` and
#    `security_driver = "none"` in /etc/libvirt/qemu.conf (restarting libvirtd when it changed
#    anything), so guests run as libvirt's own user (Debian: libvirt-qemu) with its DAC
#    relabelling; the compute driver refuses to start otherwise;
#  * starts virtlogd and libvirtd (no systemd needed) when qemu:///system does not answer;
#  * installs libvirt-python into the virtualenv $1 (the `libvirt` extra) when missing.
#
# KVM is not forced: the driver (virt_type = auto) uses it only when a KVM guest
# really boots here, and TCG otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-${NEFOS_VENV:-/opt/nefos-venv}}"
URI="qemu:///system"
PACKAGES=(libvirt-daemon-system libvirt-clients qemu-system-x86 qemu-utils libvirt-dev pkg-config gcc
          linux-image-cloud-amd64 busybox-static dropbear-bin openssh-client dnsmasq-base iproute2 iptables conntrack libc6-dev nftables)

log() { echo "setup-libvirt: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
[ "$(id -u)" -eq 0 ] || die "needs root"

missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  log "installing ${missing[*]}"
  created_policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then  # keep package scripts from starting services
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    created_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
  [ -z "$created_policy" ] || rm -f /usr/sbin/policy-rc.d
fi

if [ -e /dev/kvm ] && [ "$(stat -c %a /dev/kvm)" != "666" ]; then
  log "making /dev/kvm usable by every user (consistent KVM capabilities for libvirt)"
  chmod 0666 /dev/kvm
fi

QEMU_CONF=/etc/libvirt/qemu.conf
ROOT_QEMU='^[[:space:]]*((user|group)[[:space:]]*=[[:space:]]*"(root|\+0)"|dynamic_ownership[[:space:]]*=[[:space:]]*0|security_driver[[:space:]]*=[[:space:]]*"none")'
if [ -f "$QEMU_CONF" ] && grep -Eq "$ROOT_QEMU" "$QEMU_CONF"; then
  log "QEMU must not run as root: commenting out in $QEMU_CONF: $(grep -E "$ROOT_QEMU" "$QEMU_CONF" | tr '\n' ' ')"
  sed -i -E "s/$ROOT_QEMU/# &  (nefos: QEMU runs as libvirt's user)/" "$QEMU_CONF"
  if pid=$(pidof libvirtd); then
    log "restarting libvirtd (pid $pid) to apply it"
    kill "$pid"
    deadline=$((SECONDS + 30))
    while kill -0 "$pid" 2>/dev/null; do
      ((SECONDS < deadline)) || die "libvirtd (pid $pid) did not stop within 30 s"
      sleep 0.5
    done
  fi
fi

if ! virsh -c "$URI" version >/dev/null 2>&1; then
  log "starting virtlogd and libvirtd"
  pgrep -x virtlogd >/dev/null || virtlogd -d
  pgrep -x libvirtd >/dev/null || libvirtd -d
  deadline=$((SECONDS + 30))
  until virsh -c "$URI" version >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "libvirtd does not answer at $URI within 30 s"
    sleep 0.5
  done
fi

if [ -x "$VENV/bin/python" ] && ! "$VENV/bin/python" -c 'import libvirt, libvirtaio' 2>/dev/null; then
  log "installing libvirt-python into $VENV (the 'libvirt' extra)"
  "$VENV/bin/python" -m pip install -q -e '.[libvirt]'
fi
log "ready: $(virsh -c "$URI" version 2>/dev/null | grep -i 'running hypervisor' || echo libvirt)"
