"""The web console in a real browser: Playwright driving Debian's Chromium (headless) against a cloud
with Keystone sign-in, as a user clicks through it, and a page that is refused its live stream
asking again later. Screenshots of each step are kept in
``test-output/dashboard/`` (``NEFOS_TEST_ARTIFACTS`` moves it), the CI run's artifacts."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import time
from pathlib import Path

import httpx
import pytest
from playwright.async_api import async_playwright, expect

from nefos.config import Config
from nefos.control.identity.bootstrap import bootstrap
from nefos.http_client import verified_tls
from tests.dashboard.console import stream_once_there_is_room
from tests.clouds import start_cloud, stop_cloud

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(os.environ.get("NEFOS_TEST_ARTIFACTS") or Path(__file__).resolve().parents[2] / "test-output")
PHONE = {"width": 390, "height": 844}


@pytest.fixture
async def cloud(tmp_path):
    # A fake hypervisor takes a second to spawn, as a real one takes some: the list shows BUILD
    # before ACTIVE. Everything else is the shipped configuration, Keystone sign-in included.
    harness = await start_cloud(tmp_path, fake_hosts=2, auth_strategy="keystone", fake_spawn_delay=1.0)
    harness.accounts = await bootstrap(harness.rt)
    yield harness
    await stop_cloud(harness)


@pytest.fixture
async def browser():
    assert Path(CHROMIUM).exists(), "Debian's chromium package is not installed (scripts/install-test-deps.sh)"
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield browser
        await browser.close()


def shots(name: str) -> Path:
    folder = ARTIFACTS / "dashboard" / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


async def _member_network(cloud) -> None:
    """The demo project's network, made through the Networking API with the member's own token."""
    demo = cloud.accounts["demo"]
    identity = f"http://127.0.0.1:{cloud.rt.cfg.identity_api_port}/v3/auth/tokens"
    async with httpx.AsyncClient(verify=verified_tls(), timeout=30) as client:
        r = await client.post(identity, json={"auth": {"identity": {"methods": ["password"], "password": {"user": {
            "name": demo["username"], "password": demo["password"], "domain": {"name": "Default"}}}},
            "scope": {"project": {"name": demo["project_name"], "domain": {"name": "Default"}}}}})
        headers = {"X-Auth-Token": r.headers["x-subject-token"]}
        base = f"http://127.0.0.1:{cloud.rt.cfg.network_api_port}/v2.0"
        r = await client.post(f"{base}/networks", headers=headers, json={"network": {"name": "demo-net"}})
        assert r.status_code == 201, r.text
        r = await client.post(f"{base}/subnets", headers=headers, json={"subnet": {
            "network_id": r.json()["network"]["id"], "cidr": "10.42.0.0/24", "ip_version": 4}})
        assert r.status_code == 201, r.text


async def sign_in(page, cloud, who: str) -> None:
    account = cloud.accounts[who]
    await page.goto(f"http://127.0.0.1:{cloud.rt.cfg.dashboard_port}/servers")
    await expect(page).to_have_url(re.compile(r"/login\?next=/servers$"))
    await page.get_by_label("User name").fill(account["username"])
    await page.get_by_label("Password").fill(account["password"])
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_role("heading", name="Servers")).to_be_visible()


async def test_a_member_boots_watches_and_stops_a_server(cloud, browser):
    await _member_network(cloud)
    out = shots("member")
    page = await browser.new_page()
    await sign_in(page, cloud, "demo")
    await page.screenshot(path=out / "1-servers.png", full_page=True)
    # A marker in the page: still there at the end, so nothing below reloaded it.
    await page.evaluate("window.__notReloaded = true")
    await page.get_by_label("Name").fill("from-the-console")
    await page.get_by_label("Network").select_option(label="demo-net")
    await page.get_by_role("button", name="Create").click()
    row = page.locator("#servers tr", has_text="from-the-console")
    await expect(row.locator(".status")).to_have_text("BUILD", timeout=10000)
    await page.screenshot(path=out / "2-building.png", full_page=True)
    await expect(row.locator(".status")).to_have_text("ACTIVE", timeout=20000)
    await expect(row).to_contain_text("10.42.0.")
    assert await page.evaluate("window.__notReloaded === true")
    await page.screenshot(path=out / "3-active.png", full_page=True)

    # Its page: the boot's timeline, each step with its duration.
    await row.get_by_role("link", name="from-the-console").click()
    steps = page.locator("#timeline li.step")
    for step in ("schedule", "network allocation", "block devices", "spawn", "vif wait"):
        line = steps.filter(has_text=step).first
        await expect(line.locator(".seconds")).to_have_text(re.compile(r"^[0-9]+\.[0-9]{3} s$"))
    spawn = await steps.filter(has_text="spawn").first.locator(".seconds").inner_text()
    assert float(spawn.split()[0]) >= 1.0  # the fake hypervisor's second shows where it went
    width = await steps.filter(has_text="spawn").first.locator(".bar").evaluate("e => e.getBoundingClientRect().width")
    assert width > 0
    await page.screenshot(path=out / "4-timeline.png", full_page=True)

    # Stopped from the page: SHUTOFF appears without a reload.
    await page.evaluate("window.__notReloaded = true")
    await page.get_by_role("button", name="Stop").click()
    await expect(page.locator("#status")).to_have_text("SHUTOFF", timeout=20000)
    assert await page.evaluate("window.__notReloaded === true")
    await page.screenshot(path=out / "5-stopped.png", full_page=True)

    # On a phone's screen the same page reads without sideways scrolling of the page itself.
    phone = await browser.new_page(viewport=PHONE)
    await phone.context.add_cookies(await page.context.cookies())
    await phone.goto(page.url)
    await expect(phone.locator("#status")).to_have_text("SHUTOFF")
    assert await phone.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    await phone.screenshot(path=out / "6-phone.png", full_page=True)

    # The member sees no hosts.
    await page.get_by_role("link", name="Hosts").click()
    await expect(page.get_by_text("Only an administrator sees the compute hosts.")).to_be_visible()


async def test_the_admin_sees_a_host_auto_disabled_and_back(cloud, browser):
    out = shots("admin")
    page = await browser.new_page()
    await sign_in(page, cloud, "admin")
    await page.get_by_role("link", name="Hosts").click()
    row = page.locator("#host-host-1")
    await expect(row).to_have_attribute("data-status", "enabled")
    await page.evaluate("window.__notReloaded = true")
    await page.screenshot(path=out / "1-hosts.png", full_page=True)
    cloud.driver("host-1").simulate_connection_loss("Connection to the hypervisor is broken")
    await expect(row).to_have_attribute("data-status", "disabled", timeout=15000)
    await expect(row.locator(".badge")).to_have_text("AUTO-disabled")
    await expect(row).to_contain_text("AUTO: Connection to the hypervisor is broken")
    await page.screenshot(path=out / "2-auto-disabled.png", full_page=True)
    cloud.driver("host-1").simulate_connection_restored()
    await expect(row).to_have_attribute("data-status", "enabled", timeout=15000)
    await expect(row.locator(".badge")).to_have_count(0)
    assert await page.evaluate("window.__notReloaded === true")
    await page.screenshot(path=out / "3-enabled-again.png", full_page=True)


async def test_a_page_refused_its_live_stream_asks_again_later_and_follows_once_there_is_room(cloud, browser):
    page = await browser.new_page()
    await sign_in(page, cloud, "demo")
    await page.get_by_role("link", name="Networks").click()  # a page without a live stream
    # The session's other live pages (here: streams opened with its cookie) take its whole budget,
    # once the servers' page has given its stream back.
    [session] = [c for c in await page.context.cookies() if c["name"] == "nefos_session"]
    held = httpx.AsyncClient(verify=verified_tls(),
                             base_url=f"http://127.0.0.1:{cloud.rt.cfg.dashboard_port}", timeout=30,
                             cookies={"nefos_session": session["value"]})
    streams = [await stream_once_there_is_room(held)
               for _ in range(Config.model_fields["dashboard_max_streams_per_session"].default)]
    asked: list[tuple[float, int]] = []
    page.on("response", lambda r: asked.append((time.monotonic(), r.status)) if "/events" in r.url else None)
    await page.get_by_role("link", name="Servers").click()
    await expect(page.get_by_role("heading", name="Servers")).to_be_visible()
    deadline = time.monotonic() + 15
    while len(asked) < 2:
        assert time.monotonic() < deadline, asked
        await asyncio.sleep(0.1)
    # Refused, and asked again seconds later, not at once (an EventSource left to itself would not
    # ask again at all after a 429).
    assert [status for _t, status in asked[:2]] == [429, 429]
    assert asked[1][0] - asked[0][0] >= 2.4
    assert await page.locator("#main").get_attribute("data-connected") != "true"
    for stream in streams:
        await stream.aclose()
    await expect(page.locator("#main")).to_have_attribute("data-connected", "true", timeout=30000)
    await held.aclose()
