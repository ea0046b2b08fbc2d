"""The database connection budget: pool sizes derived from a deployment's shape."""

from __future__ import annotations

import pytest

from nefos.config import Config
from nefos.db.connection_budget import deployment_budget


def test_three_host_deployment_fits_postgresql_defaults():
    # Controller: identity, image, network, 2 api, 2 conductor, 2 scheduler, metadata, novncproxy.
    budget = deployment_budget(max_connections=100, processes=11)
    assert budget["available"] == 90 and budget["max_overflow"] == 0
    assert budget["max_pool_size"] == 8 and budget["budget"] <= 90


def test_shipped_defaults_fit_eighteen_processes():
    cfg = Config()
    per_process = cfg.max_pool_size + cfg.max_overflow
    assert cfg.max_overflow == 0
    assert 18 * per_process <= deployment_budget(100, 18)["available"]
    assert deployment_budget(100, 18)["max_pool_size"] >= cfg.max_pool_size


def test_too_many_processes_are_refused():
    with pytest.raises(ValueError, match="PgBouncer"):
        deployment_budget(max_connections=100, processes=91)
    with pytest.raises(ValueError):
        deployment_budget(max_connections=100, processes=0)
