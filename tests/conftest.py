"""Every test's cloud serves its metadata service, its console proxy and its web console on ports
of its own.

Tests and their helpers pick free ports for the four APIs explicitly; the metadata service, the
console proxy and the web console of an all-in-one cloud get theirs here, through the environment
(``NEFOS_METADATA_LISTEN_PORT``, ``NEFOS_NOVNCPROXY_PORT``, ``NEFOS_DASHBOARD_PORT``), so a cloud
started in the test's process or in a ``nefos up`` it spawns never binds the fixed 8775, 6080 or
8800 another test's cloud may be using.

The suite runs in several processes (pytest-xdist; ``scripts/run-tests.sh``). Each test module is
one unit of work, so its module- and package-scoped fixtures are set up once, except for three units
that hold several modules run one after another:

* ``libvirt-host``: what uses what the machine has only one of: libvirt's QEMU guests and their
  CPU, the ``br-ex-nefos`` external bridge and its address range, the default ports and the
  ``./.nefos`` of a README-literal ``nefos up``, root network namespaces, the firewall of real
  bridges (a module, a folder, or one test of a module whose other tests run apart: the real-guest
  benchmark's run in ``tests/test_bench_scripts.py``);
* ``tempest``: the Tempest runs, whose pass rate counts both runs (its real-guest run has an
  external bridge and range of its own);
* ``tempest-cli``: the ``openstack`` CLI flows of ``tests/tempest``, on a cloud of their own (the
  folder's package fixture, set up once in the process that runs them).

Everything else a test starts (in-process clouds on fake hosts, databases with fresh names, the
broker's exchanges under a control exchange of the cloud's own, the chaos run's own PostgreSQL and
RabbitMQ) is its own.

The fixtures every folder gets: ``cloud``, the in-process cloud of ``tests/clouds.py`` with two fake
hosts (``tests/compute``, ``tests/events`` and ``tests/tempest`` have clouds of their own, as do
the modules that define a ``cloud`` fixture), and ``pg_url``, a PostgreSQL database of the test's
own.
"""

from __future__ import annotations

import collections

import pytest

from nefos.cmd.allinone import free_port
from tests.clouds import start_cloud, stop_cloud

LIBVIRT_HOST = (
    "tests/libvirt/", "tests/multihost/", "tests/deployment/test_readme.py",
    "tests/network/test_antispoofing.py", "tests/network/test_fencing.py", "tests/network/test_l3_agent.py",
    "tests/network/test_metadata_proxy.py", "tests/network/test_rule_revocation.py",
    "tests/network/test_vxlan.py", "tests/network/test_dnsmasq_user.py",
    "tests/network/test_external_bridge_host.py", "tests/network/test_router_uplink.py",
    "tests/network/test_port_admin_state.py",
    "tests/test_bench_scripts.py::test_the_real_guest_bench_",
)


def unit_of_work(nodeid: str) -> str:
    module = nodeid.split("::", 1)[0]
    if nodeid.startswith(LIBVIRT_HOST):  # a module or folder, or a test of a module whose others run apart
        return "libvirt-host"
    if module.startswith("tests/tempest/test_cli_"):
        return "tempest-cli"
    if module.startswith("tests/tempest/"):
        return "tempest"
    return module


LONGEST_FIRST = ("libvirt-host", "tempest", "tempest-cli")  # started first, so that neither is the last to finish


class _LongestFirst(collections.OrderedDict):
    def popitem(self, last=True):
        for unit in LONGEST_FIRST:
            if unit in self:
                return unit, self.pop(unit)
        return super().popitem(last)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ByUnitOfWork(LoadScopeScheduling):
        """pytest-xdist's scheduling by scope, the scope being ``unit_of_work``."""

        def __init__(self, config, log=None):
            super().__init__(config, log)
            self.workqueue = _LongestFirst()

        def _split_scope(self, nodeid: str) -> str:
            return unit_of_work(nodeid)

    return ByUnitOfWork(config, log)


@pytest.fixture(autouse=True)
def _metadata_port(monkeypatch):
    monkeypatch.setenv("NEFOS_METADATA_LISTEN_PORT", str(free_port()))
    monkeypatch.setenv("NEFOS_NOVNCPROXY_PORT", str(free_port()))
    monkeypatch.setenv("NEFOS_DASHBOARD_PORT", str(free_port()))


@pytest.fixture
async def cloud(tmp_path):
    harness = await start_cloud(tmp_path, fake_hosts=2)
    yield harness
    await stop_cloud(harness)


@pytest.fixture
def pg_url():
    """A new PostgreSQL database of the test's own (a process under test migrates it)."""
    from tests.backends import fresh_database
    with fresh_database("postgresql") as url:
        yield url
