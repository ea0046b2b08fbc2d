"""A whole cloud in the test's event loop: every service, real HTTP, the in-process bus, SQLite.

``start_cloud`` starts one (fake compute hosts, or hosts of other drivers) and answers its
``CloudHarness``, the cloud plus helpers that speak to it only through its APIs; ``stop_cloud``
stops it. The ``cloud`` fixture of ``tests/conftest.py`` is one with two fake hosts (a folder or a
module that needs another defines its own). Every Compute API response the harness's client gets is
checked against the API's contract (``tests/contract.py``).
"""

from __future__ import annotations

import asyncio
import time

import httpx

from nefos.cmd.allinone import Cloud, all_in_one_components, free_port
from nefos.config import Config, load_config
from nefos.http_client import verified_tls

from tests.noauth import ADMIN  # noqa: E402  (the default clients send it)
from tests.schema import open_runtime
DEMO_PROJECT = "d" * 32


def member(project: str = DEMO_PROJECT, user: str = "u" * 32) -> dict:
    return {"X-Project-Id": project, "X-User-Id": user, "X-Roles": "member,reader"}


_LOOK_EVERY = 0.05


class CloudHarness:
    """The running cloud plus helpers that speak to it only through its APIs."""

    def __init__(self, cloud: Cloud, compute: httpx.AsyncClient, network: httpx.AsyncClient):
        self.cloud = cloud
        self.rt = cloud.rt
        self.compute = compute
        self.network = network
        self.notifications: list[dict] = []
        self._waiters: set[asyncio.Event] = set()

    def notified(self, notification: dict) -> None:
        self.notifications.append(notification)
        for waiter in self._waiters:
            waiter.set()

    async def _next_look(self) -> None:
        """Until the cloud sends its next notification (an operation started or ended), at most
        ``_LOOK_EVERY`` seconds: what a wait looks at changes mostly then, and a wait that polled
        at a fixed short interval spent much of a test's CPU asking."""
        waiter = asyncio.Event()
        self._waiters.add(waiter)
        try:
            await asyncio.wait_for(waiter.wait(), _LOOK_EVERY)
        except TimeoutError:
            pass
        finally:
            self._waiters.discard(waiter)

    def driver(self, host: str):
        for c in self.cloud.components:
            if getattr(c, "host", None) == host and hasattr(c, "driver"):
                return c.driver
        raise KeyError(host)

    def compute_manager(self, host: str):
        for c in self.cloud.components:
            if getattr(c, "host", None) == host and hasattr(c, "manager"):
                return c.manager
        raise KeyError(host)

    @property
    def hosts(self) -> list[str]:
        return [c.host for c in self.cloud.components if hasattr(c, "driver")]

    async def make_network(self, name="private", cidr="10.0.0.0/24", headers=None, shared=False) -> dict:
        headers = headers if headers is not None else ADMIN
        body = {"network": {"name": name}}
        if shared:
            body["network"]["shared"] = True
        r = await self.network.post("/v2.0/networks", json=body, headers=headers)
        assert r.status_code == 201, r.text
        net = r.json()["network"]
        r = await self.network.post("/v2.0/subnets", json={"subnet": {
            "network_id": net["id"], "cidr": cidr, "ip_version": 4, "name": f"{name}-subnet"}}, headers=headers)
        assert r.status_code == 201, r.text
        return net

    async def default_image(self) -> str:
        from nefos.control.image.bootstrap import ensure_default_image
        return await ensure_default_image(self.rt)

    async def boot(self, name="vm", flavor="1", networks=None, headers=None, expect=202, **extra) -> dict:
        headers = headers if headers is not None else ADMIN
        server = {"name": name, "imageRef": await self.default_image(), "flavorRef": flavor}
        if networks is not None:
            server["networks"] = networks
        server.update(extra)
        r = await self.compute.post("/v2.1/servers", json={"server": server}, headers=headers)
        assert r.status_code == expect, r.text
        return r.json()

    async def server(self, server_id: str, headers=None) -> dict:
        r = await self.compute.get(f"/v2.1/servers/{server_id}", headers=headers if headers is not None else ADMIN)
        assert r.status_code == 200, r.text
        return r.json()["server"]

    async def wait_status(self, server_id: str, status: str | set, timeout: float = 15, headers=None) -> dict:
        wanted = {status} if isinstance(status, str) else status
        deadline = time.monotonic() + timeout
        while True:
            server = await self.server(server_id, headers)
            if server["status"] in wanted and server["OS-EXT-STS:task_state"] is None:
                return server
            if time.monotonic() > deadline:
                raise AssertionError(f"server {server_id} is {server['status']}/"
                                     f"{server['OS-EXT-STS:task_state']}, not {wanted}")
            await self._next_look()

    async def wait_gone(self, server_id: str, timeout: float = 15, headers=None) -> None:
        deadline = time.monotonic() + timeout
        while True:
            r = await self.compute.get(f"/v2.1/servers/{server_id}", headers=headers if headers is not None else ADMIN)
            if r.status_code == 404:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"server {server_id} still exists: {r.json()['server']['status']}")
            await self._next_look()

    async def action(self, server_id: str, body: dict, expect=202, headers=None) -> httpx.Response:
        r = await self.compute.post(f"/v2.1/servers/{server_id}/action", json=body,
                                    headers=headers if headers is not None else ADMIN)
        assert r.status_code == expect, r.text
        return r

    async def ports(self, **params) -> list[dict]:
        r = await self.network.get("/v2.0/ports", params=params)
        assert r.status_code == 200, r.text
        return r.json()["ports"]

    async def hypervisor_usage(self) -> dict:
        from sqlalchemy import func, select

        from nefos.db.models import Allocation, ComputeNode
        async with self.rt.db.reader(snapshot=True) as s:
            vcpus, ram, vms = (await s.execute(select(func.sum(ComputeNode.vcpus_used),
                                                      func.sum(ComputeNode.memory_mb_used),
                                                      func.sum(ComputeNode.running_vms)))).one()
            claims = (await s.execute(select(func.count(Allocation.id)))).scalar_one()
        return {"vcpus_used": vcpus, "memory_mb_used": ram, "running_vms": vms, "allocations": claims}

    async def quota_usage(self, project_id: str) -> dict:
        from nefos.objects import quotas
        async with self.rt.db.reader() as s:
            return await quotas.usages(s, project_id)


async def start_cloud(tmp_path, *, fake_hosts: int = 1, drivers: dict[str, str] | None = None,
                      **overrides) -> CloudHarness:
    """The cloud with ``fake_hosts`` fake compute hosts plus, from ``drivers`` (host -> compute
    driver name, e.g. ``{"kvm-1": "libvirt"}``), compute hosts with other drivers."""
    overrides.setdefault("report_interval", 1.0)
    # These clouds are noauth: the identity bootstrap hashes its accounts' passwords but nothing ever
    # logs in with them. The shipped scrypt cost (2^15, six KDF runs in low-priority threads) makes
    # each start take seconds, tens of them on a busy machine; the cheapest allowed cost keeps it
    # short. The shipped cost is what tests/identity, the `nefos up` tests and
    # test_shipped_password_cost.py start with.
    overrides.setdefault("password_hash_rounds", 10)
    overrides.setdefault("auth_strategy", "noauth")
    cfg = load_config(state_dir=tmp_path, compute_api_port=free_port(),
                      network_api_port=free_port(), image_api_port=free_port(),
                      identity_api_port=free_port(), metadata_listen_port=free_port(),
                      novncproxy_port=free_port(), dashboard_port=free_port(), **overrides)
    rt = await open_runtime(cfg)
    # A test shortens rpc_response_timeout for the age after which a host takes a request for lost;
    # each bus call still gets the shipped time to answer, which the start-up calls of a loaded
    # machine may need (they can outlast 1, 2 or 3 s).
    rt.bus.default_timeout = max(cfg.rpc_response_timeout, Config.model_fields["rpc_response_timeout"].default)
    hosts = [f"host-{i + 1}" for i in range(fake_hosts)]
    cfg.host = "controller"
    components = all_in_one_components(rt, fake_hosts=0)
    from nefos.host.compute.service import component as compute_component
    api = components.pop()  # the compute API starts last
    components += [compute_component(rt, h) for h in hosts]
    if drivers:
        from nefos.host.virt import load_driver
        components += [compute_component(rt, h, driver=load_driver(name, cfg, h)) for h, name in drivers.items()]
    components += [api]
    cloud = Cloud(rt, components)
    try:
        await cloud.start()
    except BaseException:
        await rt.close()
        raise
    # Every Compute API response the suite gets is checked against the published contract.
    from tests.contract import response_hook
    compute = httpx.AsyncClient(base_url=f"http://127.0.0.1:{cfg.compute_api_port}", timeout=30,
                                headers=ADMIN, event_hooks={"response": [response_hook]}, verify=verified_tls())
    network = httpx.AsyncClient(base_url=f"http://127.0.0.1:{cfg.network_api_port}", timeout=30,
                                headers=ADMIN, verify=verified_tls())
    harness = CloudHarness(cloud, compute, network)

    async def collect(notification):
        harness.notified(notification)
    await rt.bus.listen_notifications(collect)
    return harness


async def stop_cloud(harness: CloudHarness) -> None:
    await harness.compute.aclose()
    await harness.network.aclose()
    await harness.cloud.stop()
    await harness.rt.close()

