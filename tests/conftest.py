"""Every test's cloud serves its metadata service and its console proxy on ports of its own.

Tests and their helpers pick free ports for the four APIs explicitly; the metadata service and
the console proxy of an all-in-one cloud get theirs here, through the environment
(``NEFOS_METADATA_LISTEN_PORT``, ``NEFOS_NOVNCPROXY_PORT``), so a cloud started in the test's
process or in a ``nefos up`` it spawns never binds the fixed 8775 or 6080 another test's cloud
may be using."""

from __future__ import annotations

import pytest

from nefos.allinone import free_port


@pytest.fixture(autouse=True)
def _metadata_port(monkeypatch):
    monkeypatch.setenv("NEFOS_METADATA_LISTEN_PORT", str(free_port()))
    monkeypatch.setenv("NEFOS_NOVNCPROXY_PORT", str(free_port()))
