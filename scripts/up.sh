#!/usr/bin/env bash
# Start the all-in-one Nefos cloud on a fresh Debian machine (as root):
# installs what it needs into a virtualenv once, then runs `nefos up`.
# Extra arguments go to `nefos up` (e.g. --fake-hosts 3 --state-dir /var/lib/nefos,
# --driver fake|libvirt|auto). With libvirt usable (scripts/setup-libvirt.sh sets it up)
# the compute host boots real guests; otherwise it is a fake hypervisor.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${NEFOS_VENV:-/opt/nefos-venv}"
bash scripts/install-venv.sh "$VENV"  # the one place the virtualenv is made
# The README's `openstack` and `nefos` commands work in any new shell: put them on the PATH.
for cmd in openstack nefos; do
  link="/usr/local/bin/$cmd"
  if [ "$(id -u)" -ne 0 ]; then
    command -v "$cmd" >/dev/null || echo "up.sh: add $VENV/bin to your PATH for the $cmd command" >&2
  elif [ ! -e "$link" ] && [ ! -L "$link" ] || [ "$(readlink "$link")" = "$VENV/bin/$cmd" ]; then
    ln -sfn "$VENV/bin/$cmd" "$link"
  else
    echo "up.sh: $link is not this virtualenv's $cmd; left as it is" >&2
  fi
done
# Real guests: libvirt + QEMU + the tiny guest's packages (skipped for fake hosts).
case " $* " in
  *" --driver fake "*|*" --driver=fake "*|*" --fake-hosts "*|*" --fake-hosts="*) ;;
  *) if [ "$(id -u)" -eq 0 ]; then
       bash scripts/setup-libvirt.sh "$VENV" || echo "up.sh: libvirt set-up failed; nefos up will use the fake driver" >&2
     fi ;;
esac
exec "$VENV/bin/nefos" up "$@"
