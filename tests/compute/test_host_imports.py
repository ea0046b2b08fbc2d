"""A compute host's code never loads the database: every module of ``nefos.compute.host`` and
``nefos.virt`` imports, in a fresh interpreter, without ``nefos.db`` or SQLAlchemy (what a host
reads and writes goes through the conductor, ``nefos.conductor.rpcapi``). And the imports follow
the calls: of the control plane a host loads only the conductor's and the compute hosts' clients."""

from __future__ import annotations

import json
import subprocess
import sys

_PROBE = r"""
import importlib, json, pkgutil, sys
import nefos.compute.host, nefos.virt
imported = []
for package in (nefos.compute.host, nefos.virt):
    imported.append(package.__name__)
    for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        importlib.import_module(module.name)
        imported.append(module.name)
loaded = sorted(m for m in sys.modules if m == "nefos.db" or m.startswith("nefos.db.")
                or m.split(".")[0] == "sqlalchemy")
control_plane = sorted(m for m in sys.modules if m.startswith(("nefos.conductor.", "nefos.scheduler", "nefos.api",
                                                               "nefos.compute."))
                       and not m.startswith("nefos.compute.host")
                       and m not in ("nefos.conductor.rpcapi", "nefos.compute.rpcapi"))
print(json.dumps({"imported": imported, "database_modules": loaded, "control_plane_modules": control_plane}))
"""


def test_host_side_modules_import_no_database():
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    # The walk found the host's modules (not an empty package that proves nothing).
    assert {"nefos.compute.host.manager", "nefos.compute.host.service", "nefos.compute.host.resize",
            "nefos.virt.fake"} <= set(found["imported"])
    assert found["database_modules"] == []
    assert found["control_plane_modules"] == []
