"""Uploads are inspected before an image turns active (Glance's upload-time format inspection).

Content that is not its declared ``disk_format``, or that would make QEMU open
another file (a qcow2 backing file or external data file, a VMDK descriptor's
extents), is refused with 400; the image stays ``queued`` and no data is kept.
"""

import pytest
from image_helpers import make_image, member, upload

from nefos.control.image.images import store_for
from tests import crafted_images

HOSTILE = {
    "qcow2 backed by /etc/passwd": (crafted_images.qcow2_backed_by, "qcow2", "backing_file"),
    "qcow2 with an external data file": (crafted_images.qcow2_with_data_file, "qcow2", "data_file"),
    "qcow2 declared raw": (crafted_images.qcow2, "raw", "does not match disk_format"),
    "VMDK descriptor with a flat extent": (crafted_images.vmdk_descriptor, "vmdk", "safety check"),
    "VMDK descriptor declared raw": (crafted_images.vmdk_descriptor, "raw", "does not match disk_format"),
    "raw declared qcow2": (lambda d: crafted_images.raw_disk(), "qcow2", "does not match disk_format"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
async def test_hostile_upload_is_refused_and_discarded(api, rt, tmp_path, case):
    build, disk_format, reason = HOSTILE[case]
    data = build(tmp_path)
    image = await make_image(api, disk_format=disk_format)
    r = await upload(api, image["id"], data)
    assert r.status_code == 400, r.text
    assert reason in r.json()["message"], r.json()
    shown = (await api.get(f"/v2/images/{image['id']}", headers=member())).json()
    assert shown["status"] == "queued" and shown["size"] is None
    assert not store_for(rt).exists(image["id"])
    r = await api.get(f"/v2/images/{image['id']}/file", headers=member())
    assert r.status_code == 204  # no data to download


async def test_honest_qcow2_and_raw_are_accepted_with_their_virtual_size(api, tmp_path):
    qcow2 = await make_image(api, disk_format="qcow2")
    assert (await upload(api, qcow2["id"], crafted_images.qcow2(tmp_path, "64M"))).status_code == 204
    shown = (await api.get(f"/v2/images/{qcow2['id']}", headers=member())).json()
    assert shown["status"] == "active" and shown["virtual_size"] == 64 * 1024 ** 2

    raw = await make_image(api, disk_format="raw")
    data = crafted_images.raw_disk(2 * 1024 * 1024)
    assert (await upload(api, raw["id"], data)).status_code == 204
    shown = (await api.get(f"/v2/images/{raw['id']}", headers=member())).json()
    assert shown["status"] == "active" and shown["virtual_size"] == len(data)


async def test_a_huge_sparse_claim_is_stored_with_its_claimed_virtual_size(api, tmp_path):
    """Glance accepts a qcow2 claiming 1 TiB (it is a few hundred KiB); the boot refuses it
    against the flavor's root disk (tests/compute/test_boot_image_inspection.py)."""
    image = await make_image(api, disk_format="qcow2")
    assert (await upload(api, image["id"], crafted_images.qcow2(tmp_path, "1T"))).status_code == 204
    shown = (await api.get(f"/v2/images/{image['id']}", headers=member())).json()
    assert shown["virtual_size"] == 1024 ** 4 and shown["size"] < 1024 ** 2


async def test_a_refused_upload_can_be_retried_with_honest_data(api, tmp_path):
    image = await make_image(api, disk_format="qcow2")
    assert (await upload(api, image["id"], crafted_images.qcow2_backed_by(tmp_path))).status_code == 400
    assert (await upload(api, image["id"], crafted_images.qcow2(tmp_path))).status_code == 204
    shown = (await api.get(f"/v2/images/{image['id']}", headers=member())).json()
    assert shown["status"] == "active"
