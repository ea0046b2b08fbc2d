#!/usr/bin/env bash
# Build the tiny guest image from Debian packages only: Debian's cloud kernel
# (linux-image-cloud-amd64) + a busybox-static initramfs whose init brings eth0
# up with udhcpc, prints "NEFOS-IP: <addr>" on the serial console, reads its config
# drive or the metadata service, runs dropbear (dropbear-bin) on port 22 and powers
# off on the ACPI power button. Output (kernel, initrd, manifest) goes to $1
# (default .nefos/guest-image); `nefos up` builds and registers it by itself.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
for pkg in linux-image-cloud-amd64 busybox-static dropbear-bin; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  [ "$(id -u)" -eq 0 ] || { echo "build-guest-image: install ${missing[*]} (as root)" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
PY="${NEFOS_VENV:-/opt/nefos-venv}/bin/python"
[ -x "$PY" ] || PY=python3
exec "$PY" -m nefos.guest "${1:-.nefos/guest-image}"
