"""A compute host's code never loads the database: every module of ``nefos.host.compute`` and
``nefos.host.virt`` imports, in a fresh interpreter, without ``nefos.db`` or SQLAlchemy (what a host
reads and writes goes through the conductor, ``nefos.clients.conductor``). And the imports follow
the calls: of the control plane a host loads only the conductor's and the compute hosts' clients."""

from __future__ import annotations

import json
import subprocess
import sys

_PROBE = r"""
import importlib, json, pkgutil, sys
import nefos.host.compute, nefos.host.virt
imported = []
for package in (nefos.host.compute, nefos.host.virt):
    imported.append(package.__name__)
    for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        importlib.import_module(module.name)
        imported.append(module.name)
loaded = sorted(m for m in sys.modules if m == "nefos.db" or m.startswith("nefos.db.")
                or m.split(".")[0] == "sqlalchemy")
control_plane = sorted(m for m in sys.modules if m.startswith(("nefos.control.conductor.", "nefos.control.scheduler", "nefos.control.compute.rest",
                                                               "nefos.control.compute."))
                       and not m.startswith("nefos.host.compute")
                       and m not in ("nefos.clients.conductor", "nefos.clients.compute"))
print(json.dumps({"imported": imported, "database_modules": loaded, "control_plane_modules": control_plane}))
"""


def test_host_side_modules_import_no_database():
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    # The walk found the host's modules (not an empty package that proves nothing).
    assert {"nefos.host.compute.manager", "nefos.host.compute.service", "nefos.host.compute.resize",
            "nefos.host.virt.fake"} <= set(found["imported"])
    assert found["database_modules"] == []
    assert found["control_plane_modules"] == []
