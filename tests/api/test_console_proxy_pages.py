"""The console proxy's HTTP side answers every path with a status of its own, never a 500: a file
that is not there (or a whole noVNC directory, ``novncproxy_web``, that is not installed) is 404,
the console pages fall back to the proxy's own page, and ``/healthcheck`` answers without noVNC."""

from __future__ import annotations

import httpx
import pytest

from nefos.control.console.proxy import NoVNCProxy

MISSING = ("/core/rfb.js", "/app/ui.js", "/no/such/file.html", "/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd")


def _client(rt) -> httpx.AsyncClient:
    # Errors the app does not answer itself become the 500 a server would send.
    transport = httpx.ASGITransport(app=NoVNCProxy(rt), raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://console.test")


@pytest.mark.parametrize("installed", [False, True], ids=["without-novnc", "with-novnc"])
async def test_files_that_are_not_there_are_404_and_the_healthcheck_answers(rt, tmp_path, installed):
    web = tmp_path / "novnc"
    if installed:
        (web / "core").mkdir(parents=True)
        (web / "core" / "util.js").write_text("// noVNC\n")
    rt.cfg.novncproxy_web = str(web)
    async with _client(rt) as client:
        for path in MISSING:
            r = await client.get(path)
            assert r.status_code == 404, (path, r.status_code, r.text[:200])
            assert "Traceback" not in r.text and str(web) not in r.text
        r = await client.get("/healthcheck")
        assert (r.status_code, r.text) == (200, "OK")
        assert (await client.head("/healthcheck")).status_code == 200
        r = await client.get("/vnc_lite.html")
        assert r.status_code == 200 and "noVNC" in r.text
        if installed:
            r = await client.get("/core/util.js")
            assert r.status_code == 200 and r.text == "// noVNC\n"


async def test_the_healthcheck_follows_healthcheck_disable_by_file_path(rt, tmp_path):
    flag = tmp_path / "disabled"
    rt.cfg.healthcheck_disable_by_file_path = str(flag)
    async with _client(rt) as client:
        assert (await client.get("/healthcheck")).status_code == 200
        flag.write_text("")
        r = await client.get("/healthcheck")
        assert (r.status_code, r.text) == (503, "DISABLED BY FILE")


async def test_the_shipped_novncproxy_web_answers_404_not_500_where_novnc_is_absent(rt):
    """With the shipped ``novncproxy_web`` (/usr/share/novnc): where Debian's novnc package is not
    installed (as on the project's machines), a noVNC file is 404."""
    from nefos.config import Config
    assert rt.cfg.novncproxy_web == Config().novncproxy_web
    async with _client(rt) as client:
        r = await client.get("/core/rfb.js")
        assert r.status_code in (200, 404), r.status_code
        assert (await client.get("/healthcheck")).status_code == 200
