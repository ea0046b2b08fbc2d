"""A guest on one host pings a guest on another over their tenant network: the frames cross from
one host's namespace to the other's only through the L2 agents' VXLAN tunnels between their
underlay addresses (each agent's ``local_ip``), as Neutron's Linux bridge agent carries a VXLAN
network.
"""

from __future__ import annotations

import base64

import pytest

from tests.multihost.conftest import REAL_HOSTS

pytestmark = [pytest.mark.libvirt, pytest.mark.postgres, pytest.mark.rabbit]

PING_SCRIPT = """#!/bin/sh
for i in $(seq 1 60); do
    if ping -c 1 -W 1 {ip} >/dev/null 2>&1; then echo "NEFOS-PING: {ip} answered"; exit 0; fi
    sleep 1
done
echo "NEFOS-PING: {ip} did not answer"
"""


def test_guest_pings_a_guest_on_another_host_over_vxlan(multihost):
    net = multihost.make_network("mh-vxlan", "10.63.0.0/24")
    target = multihost.boot("mh-target", net["id"], host=REAL_HOSTS[1])
    pinger = None
    try:
        server = multihost.wait_server(target, "ACTIVE")
        ip = server["addresses"]["mh-vxlan"][0]["addr"]
        multihost.wait_console(target, f"NEFOS-IP: {ip}/24 on eth0")
        port = multihost.network.get("/v2.0/ports", params={"device_id": target}).json()["ports"][0]
        for group in port["security_groups"]:
            r = multihost.network.post("/v2.0/security-group-rules", json={"security_group_rule": {
                "security_group_id": group, "direction": "ingress", "ethertype": "IPv4", "protocol": "icmp",
                "remote_ip_prefix": "0.0.0.0/0"}})
            assert r.status_code == 201, r.text
        script = base64.b64encode(PING_SCRIPT.format(ip=ip).encode()).decode()
        pinger = multihost.boot("mh-pinger", net["id"], host=REAL_HOSTS[0], user_data=script, config_drive=True)
        multihost.wait_server(pinger, "ACTIVE")
        out = multihost.wait_console(pinger, "NEFOS-PING: ", timeout=210)
        assert f"NEFOS-PING: {ip} answered" in out, out[-2000:]
    finally:
        for sid in (target, pinger):
            if sid:
                multihost.compute.delete(f"/v2.1/servers/{sid}")
        for sid in (target, pinger):
            if sid:
                multihost.wait_server(sid, None)
