"""The log trail of a VIF wait under one request id: one grep follows a boot from the L2 agent to the
compute host.

The hops: the agent sees the device and reports it (``q-plugin``
``get_device_details`` / ``update_device_up``), the network service marks the port ACTIVE, its
notifier queues and posts ``network-vif-plugged`` (``X-OpenStack-Request-ID``: the agent's
request id), the Compute API creates the event, the compute host's waiter is unblocked. Each of
them logs under the agent's request id — as the request id in the agent and network service, as
the global request id in the Compute API and on the compute host — so grepping the formatted
log (the format ``nefos`` uses) for that one id finds every hop, in order.
"""

from __future__ import annotations

import logging

from nefos.logs import TEXT_FORMAT, RequestContextFilter
from tests.events.conftest import boot, port_of

HOPS = [  # (logger, what its line says), in the order they happen
    ("nefos.agents.fake_agent", "plugged: reporting it"),
    ("nefos.control.network.agent_rpc", "details requested by agent"),
    ("nefos.control.network.agent_rpc", "reported up by agent"),
    ("nefos.control.network.notifier", "event network-vif-plugged for server"),  # in the ACTIVE transaction
    ("nefos.control.network.provisioning", "-> ACTIVE"),  # once it committed
    ("nefos.control.network.notifier", "sending events"),
    ("nefos.control.compute.external_events", "creating event network-vif-plugged"),
    ("nefos.host.compute.instance_events", "the waiting operation is unblocked"),
    ("nefos.control.network.notifier", "Nova event response"),
]


async def test_one_request_id_from_the_agent_to_the_compute(cloud, caplog):
    caplog.set_level(logging.INFO, logger="nefos")
    caplog.handler.addFilter(RequestContextFilter())  # what `nefos up` puts on its handler
    fmt = logging.Formatter(TEXT_FORMAT)
    server_id = await boot(cloud, name="trail")
    await cloud.wait_status(server_id, "ACTIVE")
    port = await port_of(cloud, server_id)
    assert port["status"] == "ACTIVE"

    (first,) = [r for r in caplog.records if r.name == "nefos.agents.fake_agent"
                and f"{port['id']} plugged" in r.getMessage()]
    trail_id = first.request_id
    assert trail_id.startswith("req-")
    lines = [(r.name, fmt.format(r)) for r in caplog.records]
    grep = [(name, line) for name, line in lines if trail_id in line]  # `grep req-...`
    found = []
    for logger, text in HOPS:
        hits = [i for i, (name, line) in enumerate(grep) if name == logger and text in line]
        assert hits, f"no {logger} line saying {text!r} under {trail_id}; the grep gives:\n" + "\n".join(
            line for _n, line in grep)
        found.append(hits[0])
    # The hops happen in this order (the notifier's response line comes after the compute's
    # wake-up: the Compute API answers once it cast the event). The "-> ACTIVE" line is written
    # once the commit returned, which may be after the notifier (woken by the commit) sent.
    chain = [i for (logger, _t), i in zip(HOPS, found) if logger != "nefos.control.network.provisioning"]
    assert chain[:7] == sorted(chain[:7]), "\n".join(line for _n, line in grep)
    assert found[4] > found[3], "\n".join(line for _n, line in grep)
    # Where the API and the compute host log it, it is the global request id: their own differs.
    api = next(line for name, line in grep if name == "nefos.control.compute.external_events")
    assert f"[{trail_id} req-" in api and f"[{trail_id} {trail_id} " not in api
    # The server is in the lines of the hops that name it, and nothing else of the boot is
    # mixed in under this id (the API's boot request has its own).
    assert sum(server_id in line for _n, line in grep) >= 4
    assert not any("nefos.control.compute.rest" in name for name, _l in grep)
