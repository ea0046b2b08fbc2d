"""The multi-host cloud (``tests.multihost.cloud``): three compute hosts, each in a network namespace
of its own on a test-made underlay bridge, two of them with real libvirt/QEMU (TCG) guests, the
third with the fake driver, and a network node (DHCP and L3 agents) in a fourth namespace.

Needs root, PostgreSQL, RabbitMQ (``rabbitmqctl`` for the run's vhost) and what tests/libvirt
needs (``scripts/install-test-deps.sh``); it fails, saying what is missing, rather than skipping.
"""

from __future__ import annotations

import pytest

from tests.libvirt.conftest import ensure_libvirtd, qemu_reachable_dir
from tests.multihost.cloud import MultiHostCloud

# Liveness tuned short so a partition shows within seconds: a host is down once its last report
# is older than SERVICE_DOWN_TIME (the shipped defaults, 10 s and 60 s, are covered by
# test_partition.py's sibling on a cloud of its own).
REPORT_INTERVAL = 2
SERVICE_DOWN_TIME = 8
REAL_HOSTS = ("mhost1", "mhost2")
FAKE_HOST = "mhost3"


# One cloud for the directory, stopped once its tests are done (its dozen processes would
# otherwise keep running through the rest of the suite).
@pytest.fixture(scope="package")
def multihost():
    ensure_libvirtd()
    cloud = MultiHostCloud(qemu_reachable_dir("nefos-mh-"),
                           [(REAL_HOSTS[0], "libvirt"), (REAL_HOSTS[1], "libvirt"), (FAKE_HOST, "fake")],
                           report_interval=REPORT_INTERVAL, service_down_time=SERVICE_DOWN_TIME)
    cloud.start()
    try:
        yield cloud
    finally:
        cloud.stop()
