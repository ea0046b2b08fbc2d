#!/usr/bin/env bash
# The one place the virtualenv is made (scripts/up.sh and scripts/install-test-deps.sh both call it).
#
#  * creates ${1:-${NEFOS_VENV:-/opt/nefos-venv}} with Debian's python3 (NEFOS_PYTHON, default
#    /usr/bin/python3) when it is missing or its interpreter no longer starts with the standard
#    library it was made with (an existing venv is never re-created by whatever `python3` is first
#    on the PATH: a pyenv python3 once rewrote pyvenv.cfg under Debian's binary and broken `ssl`);
#  * installs this checkout into it (editable, with the `test` extra) when it is not installed from
#    here yet, pyproject.toml changed since, or the test tools are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-${NEFOS_VENV:-/opt/nefos-venv}}"
PYTHON="${NEFOS_PYTHON:-/usr/bin/python3}"

log() { echo "install-venv: $*" >&2; }

if ! [ -x "$PYTHON" ] || ! "$PYTHON" -c 'import venv, ensurepip' 2>/dev/null; then
  [ "$(id -u)" -eq 0 ] || { log "ERROR: $PYTHON with venv is missing; installing it needs root"; exit 1; }
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3 python3-venv python3-dev
fi
if ! "$VENV/bin/python" -c 'import ssl, venv' 2>/dev/null; then
  log "creating the virtualenv $VENV with $PYTHON"
  "$PYTHON" -m venv --clear "$VENV"
fi

stamp="$VENV/.nefos-installed"
here="$(pwd -P)"
installed_from() {
  "$VENV/bin/python" -c 'import pathlib, nefos; print(pathlib.Path(nefos.__file__).resolve().parents[2])' 2>/dev/null
}
if [ ! -e "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ "$(installed_from)" != "$here" ] \
    || ! "$VENV/bin/python" -c 'import pytest, pytest_asyncio' 2>/dev/null; then
  log "installing this checkout into $VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -e '.[test]'
  touch "$stamp"
fi
