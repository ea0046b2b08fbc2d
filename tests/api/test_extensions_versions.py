"""/v2.1/extensions (Nova's fixed alias list) and the version documents (v2.0 listed first)."""

from __future__ import annotations

import jsonschema

from nefos.control.compute.rest import response_schemas as responses
from tests.api.conftest import client, member  # noqa: F401 (fixtures)


async def test_extensions(client):
    r = await client.get("/v2.1/extensions", headers=member())
    assert r.status_code == 200, r.text
    jsonschema.validate(r.json(), responses.EXTENSIONS)
    aliases = [e["alias"] for e in r.json()["extensions"]]
    assert aliases == sorted(aliases) and len(aliases) == len(set(aliases))
    assert {"OS-DCF", "os-hosts", "os-server-diagnostics", "os-server-password", "os-volumes"} <= set(aliases)
    r = await client.get("/v2.1/extensions/OS-DCF", headers=member())
    assert r.status_code == 200 and r.json()["extension"]["name"] == "DiskConfig", r.text
    jsonschema.validate(r.json(), responses.EXTENSION)
    r = await client.get("/v2.1/extensions/no-such-thing", headers=member())
    assert r.status_code == 404 and r.json()["itemNotFound"]["code"] == 404, r.text


async def test_versions_list_v20_first_and_each_self_link_answers(client):
    r = await client.get("/")
    assert r.status_code == 200, r.text
    jsonschema.validate(r.json(), responses.VERSIONS)
    versions = r.json()["versions"]
    assert [v["id"] for v in versions] == ["v2.0", "v2.1"]
    assert versions[0]["version"] == "" and versions[1]["version"]
    for v in versions:
        (self_link,) = [link["href"] for link in v["links"] if link["rel"] == "self"]
        r = await client.get(self_link)
        assert r.status_code == 200, (self_link, r.text)
        jsonschema.validate(r.json(), responses.VERSION)
        assert r.json()["version"]["id"] == v["id"]
        assert [link for link in r.json()["version"]["links"] if link["rel"] == "self"] == \
            [{"rel": "self", "href": self_link}]
