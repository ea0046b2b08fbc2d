"""Periodic tasks and heartbeats of services started together are spread over their interval
(``periodic_fuzzy_delay``, Nova's option), never first run later than one interval."""

from __future__ import annotations

import statistics

from nefos.config import Config
from nefos.service import Service, first_run_delay


class _Runtime:
    def __init__(self, **options):
        self.cfg = Config(**options)


def test_first_runs_spread_over_the_interval():
    delays = [first_run_delay(10.0, 60.0) for _ in range(2000)]
    assert all(0 <= d <= 10.0 for d in delays)
    assert min(delays) < 1.0 and max(delays) > 9.0
    assert 4.0 < statistics.mean(delays) < 6.0


def test_fuzzy_delay_caps_a_long_interval():
    assert all(0 <= first_run_delay(600.0, 60.0) <= 60.0 for _ in range(200))


def test_without_fuzzy_delay_the_first_run_is_after_one_interval():
    assert first_run_delay(10.0, 0) == 10.0


def test_services_spread_by_default_explicit_delays_kept():
    service = Service(_Runtime(), "nova-compute", "compute", "h1")
    for i in range(50):
        service.add_periodic(f"t{i}", 10.0, lambda: None)
    service.add_periodic("now", 10.0, lambda: None, initial_delay=0)
    delays = [t.initial_delay for t in service.periodic]
    assert delays[-1] == 0
    assert len(set(delays[:-1])) > 40 and all(0 <= d <= 10.0 for d in delays[:-1])
    quiet = Service(_Runtime(periodic_fuzzy_delay=0), "nova-compute", "compute", "h1")
    quiet.add_periodic("t", 10.0, lambda: None)
    assert quiet.periodic[0].initial_delay == 10.0
