"""The tiny guest's init: the shell scripts ``nefos.guest.build`` puts into its initramfs.

* ``RCS`` (``/etc/init.d/rcS``, run by busybox ``init``): mounts, modules, the ``NEFOS-BOOT`` /
  ``NEFOS-DISK`` / ``NEFOS-MAC`` lines, ``acpid``, busybox ``uevent`` running ``NIC_SCRIPT`` for
  every kernel uevent, ``NIC_SCRIPT add`` for each NIC present, then ``nefos_config`` in the
  background;
* ``NIC_SCRIPT`` (``/sbin/nefos-nic``): an ``ethN`` added (at boot or hot-plugged) is brought up
  with a ``udhcpc`` of its own in the background (``NEFOS-NET: ethN added (<mac>)`` for all but
  eth0); one removed loses its udhcpc (``NEFOS-NET: ethN removed``);
* ``UDHCPC_SCRIPT``: configures a lease (address; from eth0's lease also the default route,
  classless static routes and DNS), prints ``NEFOS-IP: <addr>/<prefix> on <ethN> (router ...)``
  and marks ``/run/nefos/lease``;
* ``LSBLK`` (``/usr/bin/lsblk``): the guest's block devices as util-linux's ``lsblk -l`` lists
  them (Tempest counts a guest's disks with ``lsblk -lb --nodeps``);
* ``CONFIG_SCRIPT`` (``/etc/nefos-config``, functions only: sourced by rcS, and by tests on the
  host under busybox ``sh``): finds the config drive (label ``config-2``) or, once the guest has a
  lease, asks the metadata service (``http://169.254.169.254/openstack/latest/``); sets the
  hostname, installs ``public_keys`` into ``/root/.ssh/authorized_keys``, sets root's password from
  ``admin_pass`` (the create answer's ``adminPass``) in ``/etc/shadow``, starts dropbear on port 22
  (keys only), runs the user data when it is a script, and prints ``NEFOS-CONFIG: ...``.
"""

from __future__ import annotations

INITTAB = """\
::sysinit:/etc/init.d/rcS
::ctrlaltdel:/sbin/poweroff
::shutdown:/bin/echo NEFOS-SHUTDOWN: powering off
"""

RCS = r"""#!/bin/sh
export PATH=/sbin:/bin:/usr/sbin:/usr/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/pts /run /tmp /var/run /var/log
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /run
mkdir -p /run/nefos
for m in $(cat /etc/modules.order); do insmod "/lib/modules/$m.ko" 2>/dev/null; done
hostname nefos-guest
echo "NEFOS-BOOT: $(uname -r) up after $(cut -d' ' -f1 /proc/uptime) s"
for i in 1 2 3 4 5 6 7 8 9 10; do [ -e /sys/block/vda ] && break; usleep 200000; done
if [ -e /sys/block/vda ]; then
    # What the guest sees of its root disk: its size and the SHA-256 of its first two 4 MiB blocks.
    first=$(dd if=/dev/vda bs=1048576 count=4 2>/dev/null | sha256sum | cut -d' ' -f1)
    second=$(dd if=/dev/vda bs=1048576 skip=4 count=4 2>/dev/null | sha256sum | cut -d' ' -f1)
    echo "NEFOS-DISK: vda $(cat /sys/block/vda/size) sectors $first $second"
fi
acpid -c /etc/acpi -l /dev/null
ip link set lo up
# NICs hot-plugged later: busybox uevent runs /sbin/nefos-nic for every kernel uevent (listening
# before the NICs present now are brought up; nefos-nic starts one udhcpc an interface).
uevent /sbin/nefos-nic </dev/null >/dev/null 2>&1 &
if [ -e /sys/class/net/eth0 ]; then
    echo "NEFOS-MAC: $(cat /sys/class/net/eth0/address)"
else
    echo "NEFOS-NET: no eth0"
fi
for nic in /sys/class/net/eth*; do [ -e "$nic" ] && /sbin/nefos-nic add "${nic##*/}"; done
# Config drive or metadata service, SSH server, user data (in the background: see /etc/nefos-config).
. /etc/nefos-config
nefos_config </dev/null >/dev/console 2>&1 &
# A variant built with extra files (tests of what a guest can do on its network) runs its own step.
[ -x /etc/nefos-after-boot ] && /etc/nefos-after-boot &
"""

NIC_SCRIPT = r"""#!/bin/sh
# /sbin/nefos-nic add|remove IFACE, or (no arguments) busybox uevent's program for a kernel uevent
# ($ACTION, $SUBSYSTEM, $INTERFACE in its environment): an ethN added gets its udhcpc, one removed
# loses it. /run/nefos/nic.IFACE (made atomically) holds that udhcpc's pid file.
export PATH=/sbin:/bin:/usr/sbin:/usr/bin
if [ $# -eq 0 ]; then
    [ "$SUBSYSTEM" = net ] || exit 0
    set -- "$ACTION" "$INTERFACE"
fi
case "$2" in eth[0-9]*) ;; *) exit 0 ;; esac
state=/run/nefos/nic.$2
case "$1" in
    add)
        mkdir "$state" 2>/dev/null || exit 0
        [ "$2" = eth0 ] || echo "NEFOS-NET: $2 added ($(cat "/sys/class/net/$2/address"))" > /dev/console
        ip link set "$2" up
        # A DISCOVER a second; after 3 unanswered, "no lease" on the console and again after a 1 s
        # pause, for ever (in the background): a NIC wired late still gets its address within ~2 s.
        udhcpc -i "$2" -p "$state/udhcpc.pid" -s /etc/udhcpc.script -b -t 3 -T 1 -A 1 -S \
            -O staticroutes </dev/null >/dev/null 2>&1
        ;;
    remove)
        [ -d "$state" ] || exit 0
        [ -s "$state/udhcpc.pid" ] && kill "$(cat "$state/udhcpc.pid")" 2>/dev/null
        rm -rf "$state"
        echo "NEFOS-NET: $2 removed" > /dev/console
        ;;
esac
exit 0
"""

UDHCPC_SCRIPT = r"""#!/bin/sh
case "$1" in
    deconfig)
        ip addr flush dev "$interface"
        ip link set "$interface" up
        ;;
    leasefail|nak)
        echo "NEFOS-DHCP: no lease on $interface" > /dev/console
        ;;
    bound|renew)
        ip addr flush dev "$interface"
        ip addr add "$ip/${mask:-24}" dev "$interface"
        # The default route, static routes and DNS come from eth0's lease; another NIC only gets
        # its address (and the route to its subnet).
        if [ "$interface" = eth0 ]; then
            if [ -n "$router" ]; then
                for r in $router; do ip route add default via "$r" dev "$interface" 2>/dev/null; break; done
            fi
            # Classless static routes (option 121: "<dest>/<prefix> <gateway>" pairs), e.g. the route
            # to the metadata address 169.254.169.254 a network without a router hands out.
            set -- $staticroutes
            while [ $# -ge 2 ]; do ip route add "$1" via "$2" dev "$interface" 2>/dev/null; shift 2; done
            : > /etc/resolv.conf
            for d in $dns; do echo "nameserver $d" >> /etc/resolv.conf; done
        fi
        echo "NEFOS-IP: $ip/${mask:-24} on $interface (router ${router:-none})" > /dev/console
        : > /run/nefos/lease
        ;;
esac
exit 0
"""

POWER_BUTTON = """#!/bin/sh
echo "NEFOS-ACPI: power button, powering off" > /dev/console
sync
poweroff -f
"""

LSBLK = r"""#!/bin/sh
# lsblk (busybox has none): the block devices of /sys/block, one line each, as util-linux's
# `lsblk -l` prints them (no partitions: --nodeps is what it always does); -b: sizes in bytes.
bytes=
for a in "$@"; do
    case "$a" in --bytes) bytes=1 ;; --*) ;; -*b*) bytes=1 ;; esac
done
fmt='%-7s %-7s %2s %12s %2s %-4s %s\n'
printf "$fmt" NAME MAJ:MIN RM SIZE RO TYPE MOUNTPOINT
for d in /sys/block/*; do
    name=${d##*/}
    case "$name" in loop*|ram*) continue ;; esac
    size=$(( $(cat "$d/size") * 512 ))
    if [ -z "$bytes" ]; then
        size=$(awk -v b="$size" 'BEGIN { split("B K M G T", u); i = 1
            while (b >= 1024 && i < 5) { b /= 1024; i++ }
            printf (i == 1 ? "%d%s" : "%.1f%s"), b, u[i] }')
    fi
    type=disk
    case "$name" in sr*) type=rom ;; esac
    mnt=$(awk -v dev="/dev/$name" '$1 == dev { print $2; exit }' /proc/mounts)
    printf "$fmt" "$name" "$(cat "$d/dev")" "$(cat "$d/removable")" "$size" "$(cat "$d/ro")" "$type" "$mnt"
done
"""

# meta_data.json (one JSON document) -> one line per scalar: "<path>\t<value>", the path's keys
# (or array indexes) joined by "/" (e.g. "hostname", "public_keys/<name>", "keys/0/data").
# A tokenizer, not pattern matching: a "hostname" inside a string (a metadata value) is a string.
# Escapes are decoded (\n, \r, \t, \b, \f become spaces, \uXXXX beyond ASCII becomes "?").
JSON_FLATTEN_AWK = r"""
function hexval(h,   i, v) {
    v = 0
    for (i = 1; i <= length(h); i++) v = v * 16 + index("0123456789abcdef", tolower(substr(h, i, 1))) - 1
    return v
}
function uchar(h,   v) {
    v = hexval(h)
    if (v < 32) return " "
    if (v > 126) return "?"
    return sprintf("%c", v)
}
function emit(v,   p, d) {
    p = ""
    for (d = 1; d <= depth; d++) p = p (d > 1 ? "/" : "") key[d]
    print p "\t" v
}
{ s = s $0 "\n" }
END {
    n = length(s); i = 1; depth = 0
    while (i <= n) {
        c = substr(s, i, 1)
        if (c == "{" || c == "[") {
            depth++; type[depth] = c; key[depth] = (c == "[") ? 0 : ""; want[depth] = (c == "{"); i++
        } else if (c == "}" || c == "]") {
            depth--; i++
        } else if (c == ",") {
            if (type[depth] == "[") key[depth]++; else want[depth] = 1
            i++
        } else if (c == ":") {
            want[depth] = 0; i++
        } else if (c == "\"") {
            i++; v = ""
            while (i <= n) {
                if (match(substr(s, i), /^[^"\\]+/)) { v = v substr(s, i, RLENGTH); i += RLENGTH; continue }
                c = substr(s, i, 1)
                if (c == "\"") { i++; break }
                e = substr(s, i + 1, 1); i += 2
                if (e == "u") { v = v uchar(substr(s, i, 4)); i += 4 }
                else if (e == "n" || e == "r" || e == "t" || e == "b" || e == "f") v = v " "
                else v = v e
            }
            if (depth > 0 && type[depth] == "{" && want[depth]) key[depth] = v
            else emit(v)
        } else if (c ~ /[-0-9a-z]/) {
            v = ""
            while (i <= n && substr(s, i, 1) ~ /[-+.0-9a-zA-Z]/) { v = v substr(s, i, 1); i++ }
            emit(v)
        } else {
            i++
        }
    }
}
"""

CONFIG_SCRIPT = r"""# /etc/nefos-config: what the guest learns from its config drive or the metadata service.
# Only functions: rcS sources it and runs nefos_config in the background (output on the console).
NEFOS_METADATA_URL=http://169.254.169.254/openstack/latest

# json_flatten < FILE: "<path>TAB<value>" a scalar (see nefos.guest.init.JSON_FLATTEN_AWK).
json_flatten() {
    awk '__JSON_FLATTEN_AWK__'
}

# md_value FILE PATH: the value at PATH ("hostname", "uuid", "meta/<key>", ...) of a JSON file.
md_value() {
    json_flatten < "$1" | awk -F '\t' -v p="$2" '$1 == p { print substr($0, length($1) + 2); exit }'
}

# md_public_keys FILE: the values of public_keys, one a line (surrounding blanks stripped).
md_public_keys() {
    json_flatten < "$1" | awk -F '\t' 'index($1, "public_keys/") == 1 {
        v = substr($0, length($1) + 2); gsub(/^[ ]+|[ ]+$/, "", v); if (v != "") print v }'
}

# md_hostname FILE: the host name to set (the first label of "hostname"), empty when not a valid one.
md_hostname() {
    h=$(md_value "$1" hostname)
    h=${h%%.*}
    case "$h" in
        ""|-*|*[!A-Za-z0-9-]*) ;;
        *) echo "$h" | cut -c1-63 ;;
    esac
}

# set_root_password PASSWORD: root's entry in $NEFOS_SHADOW (default /etc/shadow) gets PASSWORD's
# SHA-512 crypt(3) hash (busybox mkpasswd, the password read from standard input, never an argument).
set_root_password() {
    shadow=${NEFOS_SHADOW:-/etc/shadow}
    h=$(printf '%s' "$1" | mkpasswd -m sha512 -P 0) || return 1
    case "$h" in '$6$'*) ;; *) return 1 ;; esac
    awk -F: -v OFS=: -v h="$h" '$1 == "root" { $2 = h } { print }' "$shadow" > "$shadow.new" || return 1
    chmod 600 "$shadow.new" && mv "$shadow.new" "$shadow"
}

# apply_metadata DIR: hostname, root's authorized_keys and (from admin_pass) root's password from
# DIR/meta_data.json; sets uuid, keys, password.
apply_metadata() {
    f="$1/meta_data.json"
    [ -r "$f" ] || return 1
    uuid=$(md_value "$f" uuid)
    h=$(md_hostname "$f")
    if [ -n "$h" ]; then
        hostname "$h"
        echo "$h" > /etc/hostname
    fi
    mkdir -p /root/.ssh
    chmod 700 /root /root/.ssh
    md_public_keys "$f" > /root/.ssh/authorized_keys
    chmod 600 /root/.ssh/authorized_keys
    keys=$(grep -c . /root/.ssh/authorized_keys)
    pw=$(md_value "$f" admin_pass)
    if [ -n "$pw" ]; then
        if set_root_password "$pw"; then password=set; else password=failed; fi
    fi
    pw=
}

# fetch_metadata DIR: meta_data.json (and user_data, when there is one) from the metadata service.
# (busybox 1.35's wget crashes with -T: timeout bounds it instead.)
fetch_metadata() {
    mkdir -p "$1"
    for try in 1 2 3 4 5; do
        if timeout 10 wget -q -O "$1/meta_data.json.part" "$NEFOS_METADATA_URL/meta_data.json" 2>/dev/null; then
            mv "$1/meta_data.json.part" "$1/meta_data.json"
            timeout 10 wget -q -O "$1/user_data" "$NEFOS_METADATA_URL/user_data" 2>/dev/null || rm -f "$1/user_data"
            return 0
        fi
        rm -f "$1/meta_data.json.part"
        sleep 2
    done
    return 1
}

# start_ssh: dropbear on port 22, public keys only (-s), host keys made at the first connection (-R).
start_ssh() {
    [ -x /usr/sbin/dropbear ] || { echo "NEFOS-SSH: no dropbear"; return 1; }
    mkdir -p /etc/dropbear
    /usr/sbin/dropbear -R -s -p 22 -F -E 2>>/var/log/dropbear.log &
    for i in $(seq 50); do
        grep -q ':0016 0*:0000 0A' /proc/net/tcp /proc/net/tcp6 2>/dev/null && break
        usleep 200000
    done
    if grep -q ':0016 0*:0000 0A' /proc/net/tcp /proc/net/tcp6 2>/dev/null; then
        echo "NEFOS-SSH: dropbear listening on 22"
    else
        echo "NEFOS-SSH: dropbear did not start: $(tail -n 3 /var/log/dropbear.log)"
    fi
}

nefos_config() {
    src=none dir= uuid= keys=0 userdata=none password=unchanged
    dev=$(findfs LABEL=config-2 2>/dev/null)
    if [ -n "$dev" ] && mkdir -p /mnt/config && mount -o ro "$dev" /mnt/config 2>/dev/null; then
        src=config-drive dir=/mnt/config/openstack/latest
        apply_metadata "$dir"
    fi
    # The network: a lease (udhcpc's script marks it), for at most a minute.
    for i in $(seq 300); do [ -e /run/nefos/lease ] && break; usleep 200000; done
    start_ssh
    if [ -z "$dir" ] && [ -e /run/nefos/lease ] && fetch_metadata /run/nefos/control/metadata; then
        src=metadata dir=/run/nefos/control/metadata
        apply_metadata "$dir"
    fi
    if [ -n "$dir" ] && [ -s "$dir/user_data" ]; then
        if [ "$(head -c 2 "$dir/user_data")" = '#!' ]; then
            cp "$dir/user_data" /run/nefos/user-data
            chmod 700 /run/nefos/user-data
            (cd /root && HOME=/root /run/nefos/user-data)
            userdata=ran
        else
            userdata=skipped
        fi
    fi
    echo "NEFOS-CONFIG: source=$src uuid=${uuid:-none} hostname=$(hostname) keys=$keys user-data=$userdata root-password=$password"
}
""".replace("__JSON_FLATTEN_AWK__", JSON_FLATTEN_AWK.strip())
assert "'" not in JSON_FLATTEN_AWK  # it sits between single quotes in CONFIG_SCRIPT
