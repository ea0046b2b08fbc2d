"""List benchmark: the Image and Networking lists over a database of many rows.

One runtime on SQLite (no HTTP, no bus: the list functions the APIs call), filled with
``--rows`` images and ``--rows`` ports over ``--projects`` projects (rows written directly, one
transaction each). Each list is timed ``--repeats`` times; the figures are the median (p50) and
the fastest run, in ms:

  images_admin_page        an admin's first page of 1000 images (Glance's largest), by name
  images_member_page       a member's first page of 25 (the default) of its own and public images
  images_member_marker     the same member's page after a marker in the middle of its list
  ports_admin_page         an admin's first page of 1000 ports, by name
  ports_member_page        a member's first page of 100 of its ports
  ports_by_device          the ports of one device (what the compute side asks for each server)

  python bench/lists.py                      # 10 000 rows of each
  python bench/lists.py --rows 500 --repeats 3
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from sqlalchemy import insert  # noqa: E402

from nefos.config import load_config  # noqa: E402
from nefos.context import RequestContext  # noqa: E402
from nefos.db.models import Image, Network, Port  # noqa: E402
from nefos.control.image import images  # noqa: E402
from nefos.control.network.manager import NetworkManager  # noqa: E402
from nefos.service import Runtime  # noqa: E402


def project(i: int) -> str:
    return f"{i:032x}"


async def fill(rt, rows: int, projects: int) -> tuple[str, str]:
    """``rows`` images and ports; the id of the middle image of project 0 and one device id."""
    now = dt.datetime(2026, 1, 1)
    image_rows, port_rows = [], []
    for i in range(rows):
        owner = project(i % projects)
        image_rows.append(dict(
            id=str(uuid.UUID(int=i + 1)), name=f"image-{i % 997:04d}", status="active",
            visibility="public" if i % 50 == 0 else "private", owner=owner, container_format="bare",
            disk_format="raw", size=i, min_disk=0, min_ram=0, protected=False, os_hidden=False,
            properties={"os_distro": "cirros"}, tags=[], created_at=now + dt.timedelta(seconds=i)))
        port_rows.append(dict(
            id=str(uuid.UUID(int=rows + i + 1)), network_id="net", project_id=owner, name=f"port-{i % 991:04d}",
            mac_address=f"fa:16:3e:{i >> 16 & 255:02x}:{i >> 8 & 255:02x}:{i & 255:02x}",
            device_id=f"device-{i // 2}", device_owner="compute:nova", created_at=now))
    async with rt.db.transaction() as s:
        await s.execute(insert(Network).values(id="net", name="shared", shared=True, project_id="operator",
                                               created_at=now))
        await s.execute(insert(Image), image_rows)
        await s.execute(insert(Port), port_rows)
    own = [r["id"] for r in image_rows if r["owner"] == project(0)]
    return own[len(own) // 2], "device-7"


async def timed(repeats: int, call) -> dict:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        await call()
        times.append((time.perf_counter() - start) * 1000)
    return {"p50_ms": round(statistics.median(times), 1), "min_ms": round(min(times), 1)}


async def run(args) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        rt = await Runtime.open(load_config(state_dir=Path(tmp), auth_strategy="noauth"), migrate=True)
        try:
            marker, device = await fill(rt, args.rows, args.projects)
            manager = NetworkManager(rt)
            admin = RequestContext(is_admin=True, project_id=project(999), roles=["admin"])
            member = RequestContext(project_id=project(0), roles=["member", "reader"])
            checks = {
                "images_admin_page": lambda: images.list_images(
                    rt, admin, [("limit", "1000"), ("sort_key", "name"), ("sort_dir", "asc")]),
                "images_member_page": lambda: images.list_images(rt, member, []),
                "images_member_marker": lambda: images.list_images(rt, member, [("marker", marker)]),
                "ports_admin_page": lambda: manager.list_ports(admin, sort_key=["name"], sort_dir=["asc"],
                                                               limit=1000),
                "ports_member_page": lambda: manager.list_ports(member, limit=100),
                "ports_by_device": lambda: manager.list_ports(member, filters={"device_id": [device]}),
            }
            sizes = {
                "images_admin_page": len((await checks["images_admin_page"]())["images"]),
                "images_member_page": len((await checks["images_member_page"]())["images"]),
                "ports_member_page": len(await checks["ports_member_page"]()),
                "ports_by_device": len(await checks["ports_by_device"]()),
            }
            figures = {name: await timed(args.repeats, call) for name, call in checks.items()}
        finally:
            await rt.close()
    return {"rows": args.rows, "projects": args.projects, "page_sizes": sizes, "lists": figures}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10000)
    parser.add_argument("--projects", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    report = asyncio.run(run(args))
    print(json.dumps(report, indent=2))
    sizes = report["page_sizes"]
    # A list that answers nothing measured nothing.
    return 0 if all(sizes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
