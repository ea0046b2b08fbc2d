"""The process's Prometheus metrics, and the operator endpoints that show them.

Every Nefos process keeps its metrics in prometheus-client's default registry: ``nefos up``
(every service in one process) has one set, a service of its own has its own. They are served
at ``/metrics`` by the operator listener (``metrics_port``, on ``metrics_bind``: loopback by
default, since the figures name hosts and routes a tenant has no business seeing), beside
``/healthcheck``, which every API also answers on its own port (oslo.middleware's healthcheck:
200 ``OK``; 503 ``DISABLED BY FILE`` while ``healthcheck_disable_by_file_path`` exists, so a
load balancer stops sending requests before a planned stop).

Labels are bounded: an API route is its template (``/v2.1/servers/{server_id}``), never the
path a client sent; a method is one of HTTP's (RFC 9110's and PATCH), any other one ``OTHER``;
a status is a three-digit code; a step is one of the code's own event names. A scrape renders
the page in a worker thread, one scrape at a time per listener, so the event loop that serves
every API of the process goes on answering meanwhile.

This module imports nothing of the database: a compute host uses it.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Awaitable, Callable

from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from nefos.component import Component

LOG = logging.getLogger(__name__)

# Seconds: from a request's few milliseconds to a real guest's minutes-long step.
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)

API_REQUESTS = Counter("nefos_api_requests_total", "API requests answered, by route and status",
                       ["service", "method", "route", "status"])
API_LATENCY = Histogram("nefos_api_request_duration_seconds", "Time to answer an API request, by route",
                        ["service", "method", "route"], buckets=_BUCKETS)
BUILDS = Counter("nefos_builds_total", "Server builds a compute host ended, by result "
                 "(success, rescheduled, failed, aborted)", ["result"])
STEP_DURATION = Histogram("nefos_instance_step_duration_seconds", "Duration of an instance action's step "
                          "(compute_allocate_network, compute_prep_block_device, ...) on a compute host, by result",
                          ["step", "result"], buckets=_BUCKETS)
VIF_WAIT = Histogram("nefos_vif_wait_duration_seconds", "Time a compute host waited for network-vif-plugged, "
                     "by outcome (ok, timeout, failed)", ["outcome"], buckets=_BUCKETS)
EXTERNAL_EVENT_DELIVERY = Histogram("nefos_external_event_delivery_seconds",
                                    "From an external event's arrival at the Compute API to its delivery to "
                                    "the waiting compute host", ["name"], buckets=_BUCKETS)
SCHEDULER_DECISIONS = Counter("nefos_scheduler_decisions_total", "Scheduling requests answered, by result "
                              "(placed, no_valid_host, error)", ["result"])
SCHEDULER_DECISION_TIME = Histogram("nefos_scheduler_decision_duration_seconds",
                                    "Time to choose hosts for one scheduling request", buckets=_BUCKETS)
BUS_MESSAGES = Counter("nefos_bus_messages_total", "Bus messages sent and received, by topic and kind",
                       ["direction", "topic", "kind"])
DB_TRANSACTION_TIME = Histogram("nefos_db_transaction_duration_seconds",
                                "Time a database transaction was open, to its commit or rollback",
                                buckets=_BUCKETS)
SERVICE_UP = Gauge("nefos_service_up", "Whether a service reports (1), or is down or forced down (0), as "
                   "os-services says (Nova's servicegroup rules)", ["binary", "host"])
SERVICE_DISABLED = Gauge("nefos_service_disabled", "Whether a service is disabled (1); auto: disabled by "
                         "itself (its hypervisor connection lost), as the AUTO: reason says",
                         ["binary", "host", "auto"])
HYPERVISOR_USAGE = Gauge("nefos_hypervisor_usage", "A compute node's resources, as its host last reported "
                         "them (vcpus, vcpus_used, memory_mb, memory_mb_used, local_gb, local_gb_used, "
                         "running_vms)", ["host", "node", "resource"])


# Figures read at scrape time (from the database), by the processes that own them.
_SCRAPE_HOOKS: list[Callable[[], Awaitable[None]]] = []
SCRAPE_HOOK_TIMEOUT = 5.0  # seconds: a slow database must not hold every other figure back


def on_scrape(hook: Callable[[], Awaitable[None]]) -> Callable[[], None]:
    """Run ``await hook()`` before each ``/metrics`` answer; returns what removes it again."""
    _SCRAPE_HOOKS.append(hook)
    return lambda: _SCRAPE_HOOKS.remove(hook) if hook in _SCRAPE_HOOKS else None


def set_services(services: list[dict]) -> None:
    """The service gauges from os-services' view of each service (binary, host, state, status,
    disabled_reason); services gone since the last scrape disappear."""
    SERVICE_UP.clear()
    SERVICE_DISABLED.clear()
    for service in services:
        SERVICE_UP.labels(service["binary"], service["host"]).set(1 if service["state"] == "up" else 0)
        auto = (service.get("disabled_reason") or "").startswith("AUTO:")
        SERVICE_DISABLED.labels(service["binary"], service["host"], "true" if auto else "false").set(
            1 if service["status"] == "disabled" else 0)


# Any other method a client makes up counts as OTHER: the server accepts any token as a method,
# and one series per made-up method would grow the registry (and every scrape) without end.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"})


def method_of(scope) -> str:
    method = scope["method"]
    return method if method in METHODS else "OTHER"


def route_of(scope) -> str:
    """The matched route's template, or ``unmatched`` (a 404 never adds a label per path)."""
    route = scope.get("route")
    return getattr(route, "path", None) or "unmatched"


def observe_request(service: str, scope, status: int, seconds: float) -> None:
    """One API request answered: counted by route and status, timed by route."""
    route, method = route_of(scope), method_of(scope)
    API_REQUESTS.labels(service, method, route, str(status)).inc()
    API_LATENCY.labels(service, method, route).observe(seconds)


def healthcheck_response(method: str, disable_by_file: str) -> Response:
    """oslo.middleware's plain healthcheck: 200 ``OK``, or 503 ``DISABLED BY FILE``."""
    if disable_by_file and os.path.exists(disable_by_file):
        status, text = 503, "DISABLED BY FILE"
    else:
        status, text = 200, "OK"
    return PlainTextResponse("" if method == "HEAD" else text, status_code=status)


def operator_app(cfg) -> Starlette:
    """The operator listener's app: ``/metrics`` (Prometheus text format) and ``/healthcheck``."""
    one_scrape_at_a_time = asyncio.Lock()  # scrapers waiting their turn hold no thread, and no page

    async def metrics(_request: Request) -> Response:
        async with one_scrape_at_a_time:
            for hook in list(_SCRAPE_HOOKS):
                try:
                    await asyncio.wait_for(hook(), SCRAPE_HOOK_TIMEOUT)
                except Exception as exc:  # the database away, say: the process's own figures still answer
                    LOG.warning("a figure of /metrics could not be read: %s", exc)
            # Rendering walks every series: in a thread, the loop serving the APIs goes on meanwhile.
            page = await asyncio.to_thread(generate_latest)
        return Response(page, media_type=CONTENT_TYPE_LATEST)

    async def healthcheck(request: Request) -> Response:
        return healthcheck_response(request.method, cfg.healthcheck_disable_by_file_path)

    return Starlette(routes=[Route("/metrics", metrics, methods=["GET"]),
                             Route("/healthcheck", healthcheck, methods=["GET", "HEAD"])])


def operator_component(cfg) -> Component:
    """The operator listener as a component a process serves beside its own (no bus, no start)."""
    listener = Component()
    listener.name = "metrics"
    listener.app = operator_app(cfg)
    listener.port = cfg.metrics_port
    listener.bind = cfg.metrics_bind
    return listener
