"""A real `nefos up` process (auth_strategy=keystone), real tokens from its identity API, and two
projects (A: a member and a reader; B: a member), all made through the identity API as admin."""

from __future__ import annotations

import pytest

from .helpers import Tenancy, make_tenancy, start_nefos, stop_nefos


@pytest.fixture(scope="package")
def nefos(tmp_path_factory):
    """One `nefos up` for the whole isolation package."""
    state = tmp_path_factory.mktemp("nefos-isolation")
    # A cheaper scrypt cost (2^12 instead of 2^15) keeps the 1000-failed-logins burst short; the KDF
    # threads saturate the same CPU share either way, which is what the latency test is about.
    proc, clouds = start_nefos(state, {"NEFOS_PASSWORD_HASH_ROUNDS": "12"})
    yield {"proc": proc, "clouds": clouds, "state": state}
    stop_nefos(proc, state)


@pytest.fixture(scope="package")
def tenancy(nefos) -> Tenancy:
    return make_tenancy(nefos["clouds"], nefos["state"])
