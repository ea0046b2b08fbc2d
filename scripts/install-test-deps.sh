#!/usr/bin/env bash
# Make this Debian 12 machine ready for the test suite (run as root); idempotent.
#
#  * installs PostgreSQL, MariaDB, RabbitMQ and the Python build tools when missing
#    (one `apt-get update`, only when something is missing);
#  * starts each server whose port does not answer (no systemd needed) and lets the
#    tests in: PostgreSQL `postgres` and MariaDB `root` over 127.0.0.1 without a
#    password, RabbitMQ guest/guest;
#  * creates the virtualenv ${NEFOS_VENV:-/opt/nefos-venv} when missing and installs
#    this checkout into it (`pip install -e '.[test]'`) when pyproject.toml changed;
#  * libvirt + QEMU for the real-guest tests (scripts/setup-libvirt.sh, block 6);
#  * Debian's cloud-init code, unpacked but not installed (block 7).
#
# When everything is already there it only checks, in about a second.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${NEFOS_VENV:-/opt/nefos-venv}"
PYTHON="${NEFOS_PYTHON:-/usr/bin/python3}"
LOG_DIR="${NEFOS_TEST_LOG_DIR:-/var/log/nefos-test}"
PG_PORT=5432
MYSQL_PORT=3306
AMQP_PORT=5672
PACKAGES=(
  postgresql mariadb-server mariadb-client rabbitmq-server
  python3 python3-venv python3-dev build-essential libpq-dev ca-certificates
  # cloud-init's own Python dependencies: its datasources judge what guests are told (block 7)
  python3-configobj python3-jinja2 python3-jsonpatch python3-jsonschema python3-netifaces
  python3-oauthlib python3-requests python3-serial python3-yaml
  xorriso  # reads config drives as a guest would (tests/metadata)
  chromium  # the web console's browser tests (Playwright drives it, tests/dashboard)
  prometheus  # scrapes the services' /metrics as an operator's would (tests/metrics)
)
CLOUD_INIT_DIR="${NEFOS_CLOUD_INIT_DIR:-/opt/nefos-cloud-init}"

log() { echo "install-test-deps: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

port_open() { timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

wait_port() {  # wait_port PORT NAME SECONDS
  local deadline=$((SECONDS + $3))
  until port_open "$1"; do
    ((SECONDS < deadline)) || die "$2 did not answer on 127.0.0.1:$1 within $3 s (logs: $LOG_DIR)"
    sleep 0.5
  done
}

need_root() {
  [ "$(id -u)" -eq 0 ] || die "$1 needs root (run this script as root)"
}

# 1. Debian packages -----------------------------------------------------------
missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  need_root "installing ${missing[*]}"
  log "installing ${missing[*]}"
  # Keep package scripts from starting services (there may be no init system); we
  # start what we need below. Only a policy-rc.d we created is removed again.
  created_policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    created_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
  [ -z "$created_policy" ] || rm -f /usr/sbin/policy-rc.d
fi
mkdir -p "$LOG_DIR" 2>/dev/null || LOG_DIR="$(mktemp -d)"

# 2. PostgreSQL ------------------------------------------------------------------
pg_version="$(ls /usr/lib/postgresql | sort -V | tail -n1)"
[ -n "$pg_version" ] || die "no PostgreSQL server installed under /usr/lib/postgresql"
if ! port_open "$PG_PORT"; then
  need_root "starting PostgreSQL"
  cluster_version="$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n1)"
  if [ -z "$cluster_version" ] || [ ! -d "/etc/postgresql/$cluster_version/main" ]; then
    log "creating the PostgreSQL $pg_version cluster"
    pg_createcluster "$pg_version" main >/dev/null
    cluster_version="$pg_version"
  fi
  log "starting PostgreSQL $cluster_version"
  pg_ctlcluster --skip-systemctl-redirect "$cluster_version" main start
  wait_port "$PG_PORT" PostgreSQL 60
fi
if ! psql -w -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -Atqc 'SELECT 1' >/dev/null 2>&1; then
  need_root "letting the tests into PostgreSQL"
  cluster_version="$(ls /etc/postgresql | sort -V | tail -n1)"
  hba="/etc/postgresql/$cluster_version/main/pg_hba.conf"
  log "allowing postgres@127.0.0.1 without a password (test machine) in $hba"
  { printf '# nefos tests: local TCP without a password\n'
    printf 'host all postgres 127.0.0.1/32 trust\nhost all postgres ::1/128 trust\n'
    cat "$hba"; } > "$hba.nefos" && mv "$hba.nefos" "$hba"
  chown postgres:postgres "$hba"
  pg_ctlcluster --skip-systemctl-redirect "$cluster_version" main reload
  sleep 1
  psql -w -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -Atqc 'SELECT 1' >/dev/null \
    || die "cannot connect to PostgreSQL as postgres@127.0.0.1"
fi

# 3. MariaDB ---------------------------------------------------------------------
MYSQL_CLIENT="$(command -v mariadb || command -v mysql)"
if ! port_open "$MYSQL_PORT"; then
  need_root "starting MariaDB"
  install -d -o mysql -g mysql -m 755 /run/mysqld
  if [ ! -d /var/lib/mysql/mysql ]; then
    log "initialising the MariaDB data directory"
    install -d -o mysql -g mysql /var/lib/mysql
    mysql_install_db --user=mysql --datadir=/var/lib/mysql --skip-test-db >"$LOG_DIR/mysql_install_db.log" 2>&1 \
      || die "mysql_install_db failed (see $LOG_DIR/mysql_install_db.log)"
  fi
  log "starting MariaDB"
  start-stop-daemon --start --oknodo --background --output "$LOG_DIR/mariadbd.log" \
    --exec /usr/sbin/mariadbd -- --user=mysql --bind-address=127.0.0.1 --port="$MYSQL_PORT"
  wait_port "$MYSQL_PORT" MariaDB 60
fi
if ! "$MYSQL_CLIENT" --protocol=TCP -h 127.0.0.1 -P "$MYSQL_PORT" -uroot -e 'SELECT 1' >/dev/null 2>&1; then
  need_root "letting the tests into MariaDB"
  log "allowing root@127.0.0.1 without a password (test machine)"
  # As the OS root user over the socket (unix_socket authentication).
  "$MYSQL_CLIENT" -uroot <<'SQL' || die "cannot configure MariaDB's root user"
CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';
ALTER USER 'root'@'127.0.0.1' IDENTIFIED VIA mysql_native_password USING PASSWORD('');
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
ALTER USER 'root'@'localhost' IDENTIFIED VIA unix_socket OR mysql_native_password USING PASSWORD('');
FLUSH PRIVILEGES;
SQL
  "$MYSQL_CLIENT" --protocol=TCP -h 127.0.0.1 -P "$MYSQL_PORT" -uroot -e 'SELECT 1' >/dev/null \
    || die "cannot connect to MariaDB as root@127.0.0.1"
fi

# 4. RabbitMQ --------------------------------------------------------------------
if ! port_open "$AMQP_PORT"; then
  need_root "starting RabbitMQ"
  short_host="$(hostname -s)"
  if ! getent hosts "$short_host" >/dev/null; then
    log "adding $short_host to /etc/hosts (RabbitMQ's node name must resolve)"
    echo "127.0.0.1 $short_host" >> /etc/hosts
  fi
  log "starting RabbitMQ"
  rabbitmq-server -detached >"$LOG_DIR/rabbitmq-start.log" 2>&1 \
    || die "rabbitmq-server failed to start (see $LOG_DIR/rabbitmq-start.log)"
  wait_port "$AMQP_PORT" RabbitMQ 120
  rabbitmqctl -q await_startup >/dev/null 2>&1 || true
fi

# 5. The virtualenv (scripts/install-venv.sh: made with $PYTHON, this checkout installed) ---------
NEFOS_PYTHON="$PYTHON" bash scripts/install-venv.sh "$VENV"
# 6. libvirt + QEMU (real guests: tests/libvirt) ---------------------------------------------
#    A block of its own: scripts/setup-libvirt.sh installs the Debian packages (libvirt,
#    QEMU, libvirt-dev, the guest's cloud kernel, busybox-static and dropbear-bin, and the
#    openssh-client the tests log into guests with), makes /dev/kvm access
#    consistent, starts virtlogd and libvirtd when qemu:///system does not answer, and
#    installs the `libvirt` extra (libvirt-python) into the venv. Idempotent; about a
#    second when everything is there.
need_root "setting up libvirt and QEMU"
bash scripts/setup-libvirt.sh "$VENV"

# 7. cloud-init (tests/metadata: its own datasources read Nefos's metadata service and config
#    drives). Debian's package unpacked into $CLOUD_INIT_DIR, never installed: its services must
#    not run on this machine. Run with Debian's python3, which has its dependencies (block 1).
if [ ! -d "$CLOUD_INIT_DIR/usr/lib/python3/dist-packages/cloudinit" ]; then
  log "unpacking Debian's cloud-init into $CLOUD_INIT_DIR"
  download="$(mktemp -d)"
  chmod 755 "$download"  # apt's download user writes here
  (cd "$download" && apt-get download -q cloud-init)
  dpkg -x "$download"/cloud-init_*.deb "$CLOUD_INIT_DIR"
  rm -rf "$download"
fi

log "ready: PostgreSQL :$PG_PORT, MariaDB :$MYSQL_PORT, RabbitMQ :$AMQP_PORT, libvirt qemu:///system, venv $VENV"
