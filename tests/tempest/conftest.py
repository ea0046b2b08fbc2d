"""One `nefos up` (two fake compute hosts, keystone auth) for the conformance tests: the openstack CLI
acceptance flow and the Tempest run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))
from tests.isolation.helpers import start_nefos, stop_nefos  # noqa: E402


@pytest.fixture(scope="package")
def cloud(tmp_path_factory):
    state = tmp_path_factory.mktemp("nefos-conformance")
    proc, clouds = start_nefos(state, {"NEFOS_PASSWORD_HASH_ROUNDS": "12"}, fake_hosts=2)
    yield {"state": state, "clouds": clouds, "clouds_file": state / "clouds.yaml"}
    stop_nefos(proc, state)


@pytest.fixture(scope="package")
def tempest_runs() -> dict:
    """The summaries of this session's Tempest runs ("fake", "validation"), for the pass rate of both."""
    return {}
